// How the search moves through the CPU tiling sketch (schedule::CpuTiling):
// sampling, mutation, moves between strata, and fitting another workload's
// decisions. The program the decisions build is compiler/schedule/tiling.h.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/tiling.h"
#include "search/space/sketch.h"

namespace tunefarm::search::space {

// The tile shapes the sampler draws from (register, narrow, blocked; see
// cpu_sketch.cc), of the local tile (the S1 and S2 tiles below the compute
// location): register when none of them is above 1, blocked when an S2
// tile off the vector axis is wider than the narrow shape's, else narrow.
// The search keeps each shape in its batches.
constexpr int kTilingShapes = 3;
// The stratum the search keeps in its batches: the tile shape, and whether
// packing is on with a vector tile (shape + kTilingShapes when it is). It
// packs nothing when no operand has the vector axis where the build packs
// it (GEMM's a along m): that builds the unpacked program. The two choices
// decide most of a kernel's speed, and the cost model extrapolates badly
// across them: trained on convolutions, it scored unpacked register tiles
// best for GEMM 1024, where packed blocked tiles run at twice their speed.
constexpr int kTilingStrata = 2 * kTilingShapes;

// Bound to a DAG with a tiling sketch (schedule::HasTilingSketch) and a CPU
// target; the DAG must outlive it.
class CpuSketch final : public Sketch {
 public:
  CpuSketch(const ir::ComputeDAG& dag, const ir::Target& target);

  const schedule::TilingNest& nest() const { return nest_; }

  // Random decisions: a tile shape, a third of the samples each, then its
  // tiles, with the default placement. The search reaches the other
  // placements by mutation: drawn at random as below, they took a third of
  // its fresh samples and GEMM 1024 ended 9% lower after 256 trials.
  // With `any_placement` (random schedules, the kernel tests) the compute
  // location stays at S0 half the time (else a deeper level that keeps the
  // shape and builds another program: S1 for narrow and blocked tiles, S2
  // for a register tile with S1 and S2 tiles drawn around it), the parallel
  // loops stay every S0 loop three times in four (else another count that
  // builds another program). Where no other value does, the default.
  schedule::CpuTiling SampleTiling(std::mt19937_64& rng, bool any_placement = false) const;
  // A neighbour: one decision changed (a tile size, the vector axis or
  // length, a reduction split, unrolling, the auto-unroll pragma, packing,
  // padding, the compute location, the parallel loops; each of the last two
  // a twelfth of the time, to another value that builds another program).
  schedule::CpuTiling MutateTiling(const schedule::CpuTiling& t, std::mt19937_64& rng) const;
  // `t` moved into `stratum`: the register tile, vector axis, unrolling,
  // padding and placement kept (the compute location moved out where the
  // new shape would not show in the local tile); the packing set by the
  // stratum; when the shape changes, the S1/S2 tiles and reduction steps
  // drawn for the new shape. A paired trial of the best schedule in another
  // stratum.
  schedule::CpuTiling MoveTiling(const schedule::CpuTiling& t, int stratum, std::mt19937_64& rng) const;
  // Decisions of another workload's tiling sketch with the same layout (as
  // many spatial and reduction axes), in wire form, fitted to this DAG:
  // every tile clamped to its axis, and moved to a divisor of it where one
  // lies within half of its size (the vector tile is only clamped: it keeps
  // its lanes); the local tile within bounds, reduction steps likewise; an
  // out-of-range placement reset to the default; the cores kept busy.
  // nullopt when the length or vector axis fits no layout of this DAG; the
  // caller checks that the axes correspond (the same operator, layout and
  // grouping). A new task's search opens with the best schedules of similar
  // workloads so fitted (EvolutionOptions::transferred).
  std::optional<schedule::CpuTiling> Fit(absl::Span<const int64_t> other) const;

  // The tile shape of `t` (0 to kTilingShapes - 1) and its stratum.
  int TileShape(const schedule::CpuTiling& t) const;
  int TilingStratum(const schedule::CpuTiling& t) const;
  // The tiling decisions of `t` (vector axis, packing, every tile size,
  // reduction steps, the placement as the build uses it), with those that
  // only change how the same tiles are unrolled or padded (padding, unroll
  // flags, the auto-unroll pragma) set to 0.
  schedule::CpuTiling TilingStructure(const schedule::CpuTiling& t) const;

  // Sketch.
  int id() const override { return schedule::kTilingSketchId; }
  int strata() const override { return kTilingStrata; }
  std::optional<Decisions> Decode(absl::Span<const int64_t> wire) const override;
  Decisions Sample(std::mt19937_64& rng) const override { return SampleTiling(rng); }
  Decisions Mutate(const Decisions& d, std::mt19937_64& rng) const override;
  Decisions Move(const Decisions& d, int stratum, std::mt19937_64& rng) const override;
  int Stratum(const Decisions& d) const override;
  std::vector<int64_t> Structure(const Decisions& d) const override;
  absl::StatusOr<schedule::Trace> Build(const Decisions& d) const override;

 private:
  // A change of tiles can leave a reduced count of parallel loops fewer
  // iterations than the target's cores: then every S0 loop is parallel again.
  schedule::CpuTiling KeepCoresBusy(schedule::CpuTiling t) const;

  const ir::ComputeDAG& dag_;
  ir::Target target_;
  schedule::TilingNest nest_;
};

}  // namespace tunefarm::search::space
