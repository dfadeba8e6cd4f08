// How the search moves through the GPU tiling sketch (schedule::GpuTiling):
// sampling and mutation within the target's thread limit and at most
// schedule::kMaxGpuAccumulators per thread. The program the decisions build is
// compiler/schedule/gpu_tiling.h.
#pragma once

#include <optional>
#include <random>
#include <vector>

#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/gpu_tiling.h"
#include "search/space/sketch.h"

namespace tunefarm::search::space {

// Bound to a DAG with a tiling sketch (schedule::HasTilingSketch) and a cuda
// target; the DAG must outlive it.
class GpuSketch final : public Sketch {
 public:
  GpuSketch(const ir::ComputeDAG& dag, const ir::Target& target);

  // A quarter of the draws is one of KnownTilings where any fits; the rest
  // are uniform.
  schedule::GpuTiling SampleTiling(std::mt19937_64& rng) const;
  // GEMM-library-like tilings for a product with one reduction and two
  // inner spatial axes of 64 or more (batch axes untiled): 128x128,
  // 128x64, 64x128 and 64x64 block tiles of 8x8 results a thread (and one
  // of 4 vthread passes of 64x64 at 4x4), K tiles 8 or 16 deep,
  // double-buffered, unrolled; those that fit.
  std::vector<schedule::GpuTiling> KnownTilings() const;
  schedule::GpuTiling MutateTiling(const schedule::GpuTiling& t, std::mt19937_64& rng) const;

  // Sketch.
  int id() const override { return schedule::kGpuTilingSketchId; }
  std::optional<Decisions> Decode(absl::Span<const int64_t> wire) const override;
  Decisions Sample(std::mt19937_64& rng) const override { return SampleTiling(rng); }
  Decisions Mutate(const Decisions& d, std::mt19937_64& rng) const override;
  absl::StatusOr<schedule::Trace> Build(const Decisions& d) const override;

 private:
  const ir::ComputeDAG& dag_;
  ir::Target target_;
  schedule::TilingNest nest_;
};

// A random GPU schedule: tensor-core samples (half, where the sketch
// applies), tiling-sketch samples and fused schedules with a random block
// size. Every one replays and launches within the
// target's limits.
schedule::Trace RandomGpuSchedule(const ir::ComputeDAG& dag, const ir::Target& target,
                            std::mt19937_64& rng);

}  // namespace tunefarm::search::space
