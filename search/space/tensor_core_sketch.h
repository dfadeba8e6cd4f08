// How the search moves through the tensor-core sketch
// (schedule::TensorCoreTiling): warps, fragments per warp, k steps, padding,
// stages, how fragments are loaded and how tiles are staged,
// drawn and mutated within the target's limits and never far past the
// product's own extents. The program the decisions build is
// compiler/schedule/gpu_tensor_core.h.
#pragma once

#include <optional>
#include <random>
#include <vector>

#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "search/space/sketch.h"

namespace tunefarm::search::space {

// Bound to a DAG with a tensor-core sketch (schedule::HasTensorCoreSketch) and its
// target; the DAG must outlive it.
class TensorCoreSketch final : public Sketch {
 public:
  TensorCoreSketch(const ir::ComputeDAG& dag, const ir::Target& target);

  // A quarter of the draws is one of the tilings GEMM libraries ship for
  // large products (KnownTilings) that fits; the rest are uniform.
  schedule::TensorCoreTiling SampleTiling(std::mt19937_64& rng) const;
  // The library-like tilings that fit this product and target: 128x128,
  // 128x256, 256x128 and 64x64 block tiles of 64x64 warp tiles, 3-4
  // cp.async stages, each padded and swizzled; on sm_90 also wgmma 128x256,
  // 128x128 and 64x256 tiles 64 deep.
  std::vector<schedule::TensorCoreTiling> KnownTilings() const;
  schedule::TensorCoreTiling MutateTiling(const schedule::TensorCoreTiling& t, std::mt19937_64& rng) const;

  // Sketch.
  int id() const override { return ir::kGpuTensorCoreSketchId; }
  std::optional<Decisions> Decode(absl::Span<const int64_t> wire) const override;
  Decisions Sample(std::mt19937_64& rng) const override { return SampleTiling(rng); }
  Decisions Mutate(const Decisions& d, std::mt19937_64& rng) const override;
  std::vector<int64_t> Structure(const Decisions& d) const override;
  absl::StatusOr<schedule::Trace> Build(const Decisions& d) const override;

 private:
  // Within the target's limits, and no block tile past twice the product's
  // extent (rounded up to a fragment) along M, N or K.
  bool Fits(const schedule::TensorCoreTiling& t) const;

  const ir::ComputeDAG& dag_;
  ir::Target target_;
  int64_t m_ = 1, n_ = 1, k_ = 1;  // the product's extents
};

}  // namespace tunefarm::search::space
