// The CPU multi-level tiling sketch (Ansor's "SSRSRS" rule) as a program:
// its decisions as a struct, their one wire form, and the schedule they
// build. How decisions are drawn, mutated and fitted is the search's
// business (search/space/cpu_sketch.h).
//
// The reduction computes into a local tile (cache_write, or the fused
// epilogue stage as the write-back via compute_at) computed inside a tile
// loop of its consumer; its loops are S0 S1 R0 S2 R1 S3, the consumer is
// split the same way, one spatial axis is vectorized at S3, the other S3
// loops unrolled, and constant operands indexed by the vector axis packed so
// the vector is contiguous.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/trace.h"

namespace tunefarm::schedule {

constexpr int kTilingSketchId = 1;

// Whether the DAG has a reduction the tiling sketches (CPU and GPU) apply to.
bool HasTilingSketch(const ir::ComputeDAG& dag);
// The stage of that reduction (the last sum with reduction axes), or -1.
int TilingMainStage(const ir::ComputeDAG& dag);

// The loops a tiling sketch splits: the extents of the main stage's spatial
// and reduction axes. Of() requires HasTilingSketch(dag).
struct TilingNest {
  std::vector<int64_t> spatial, reduce;
  int ns() const { return int(spatial.size()); }
  int nr() const { return int(reduce.size()); }
  static TilingNest Of(const ir::ComputeDAG& dag);
};

// Compute locations of the local tile: the innermost consumer loop of level
// S0, S1 or S2 (the tile then holds s1*s2*s3, s2*s3 or s3 per axis).
constexpr int64_t kComputeAtS0 = 0, kComputeAtS1 = 1, kComputeAtS2 = 2;

struct CpuTiling {
  struct Axis {
    int64_t s1 = 1, s2 = 1, s3 = 1;  // tile sizes of levels S1, S2, S3 (the register tile)
    bool unroll = false;             // the consumer's S3 loop unrolled
    // Tile level 0, 1 or 2: s1, s2, s3.
    int64_t& tile(int level) { return level == 0 ? s1 : level == 1 ? s2 : s3; }
    int64_t tile(int level) const { return level == 0 ? s1 : level == 1 ? s2 : s3; }
    bool operator==(const Axis& o) const {
      return s1 == o.s1 && s2 == o.s2 && s3 == o.s3 && unroll == o.unroll;
    }
  };
  bool pad_pass = false;     // padding read by the reduction stays a pass of its own
  int64_t vector_axis = 0;   // the spatial axis vectorized at S3
  bool unroll_tile = false;  // the local stage's S3 loops (off the vector axis) unrolled
  int64_t pragma = -1;       // auto-unroll max step index into {0, 16, 64, 512}; -1: none
  bool pack = false;         // operands indexed by the vector axis packed by its tile
  std::vector<Axis> spatial;
  std::vector<int64_t> reduce_steps;  // the inner split of each reduction axis
  // The placement: where the local tile is computed, and how many of the
  // consumer's outer loops (S0 of every axis, then S1 of every axis) are
  // fused into the one parallel loop (1 to ns at location S0, to 2*ns deeper).
  int64_t compute_at = kComputeAtS0;
  int64_t parallel = 0;

  bool operator==(const CpuTiling& o) const;
  bool operator!=(const CpuTiling& o) const { return !(*this == o); }

  // The default placement for `nest`: the tile at S0, every S0 loop parallel.
  static int64_t DefaultParallel(const TilingNest& nest) { return nest.ns(); }

  // The wire form (Schedule.decisions): pad_pass, vector_axis, unroll_tile,
  // pragma, pack; per spatial axis s1, s2, s3, unroll; per reduction axis
  // its step; compute_at, parallel. Decode reads a vector without the last
  // two (the length records had before the placement existed) with the
  // default placement, which builds the schedule those records measured;
  // nullopt when the length fits neither form of `nest`.
  static std::optional<CpuTiling> Decode(const TilingNest& nest, absl::Span<const int64_t> wire);
  std::vector<int64_t> Encode() const;

  // Whether the placement is in range for `nest`.
  bool PlacementValid(const TilingNest& nest) const;
  // The most outer loops that may be parallel with the tile at `level`.
  static int64_t MaxParallel(const TilingNest& nest, int64_t level);
  // The extent of the consumer's outer loop `j` (S0 of every axis, then S1).
  int64_t OuterExtent(const TilingNest& nest, int j) const;
  // Whether every loop of tile level `level` (1: S1, 2: S2) is one iteration long.
  bool LevelTrivial(int level) const;
  struct Placement {
    int64_t level;
    int64_t parallel;
  };
  // The placement the build uses (valid placement required): the same
  // program with no needless difference from the default. A compute
  // location whose loops out to the next level are all one iteration long
  // is that level; parallel loops fused with outer loops of one iteration
  // are fewer loops, or all the S0 loops (the default) when the S0 loops
  // they leave out are all one iteration long. So equal programs build
  // equal steps (one schedule hash).
  Placement EffectivePlacement(const TilingNest& nest) const;
  // Elements of the local (accumulator) tile: s1*s2*s3 over the axes.
  int64_t LocalElements() const;
  // Vector registers of `lanes` lanes the accumulator (register) tile takes.
  int64_t Accumulators(int64_t lanes) const;
};

// The schedule of `tiling` (sketch_id kTilingSketchId, decisions its wire
// form), or an error if it does not fit the DAG. A placement that builds
// the program of another builds that one's steps: one program, one hash.
absl::StatusOr<Trace> BuildTiledSchedule(const ir::ComputeDAG& dag, const ir::Target& target,
                                         const CpuTiling& tiling);
// The same from the wire form (either length).
absl::StatusOr<Trace> BuildTiledSchedule(const ir::ComputeDAG& dag, const ir::Target& target,
                                         absl::Span<const int64_t> wire);
// BuildTiledSchedule's schedule marked as the workload's default (the
// hand-picked decisions of a default schedule).
absl::StatusOr<Trace> BuildDefaultTiledSchedule(const ir::ComputeDAG& dag,
                                                const ir::Target& target, const CpuTiling& tiling);

}  // namespace tunefarm::schedule
