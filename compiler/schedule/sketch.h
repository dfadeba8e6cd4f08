// The multi-level tiling sketch (Ansor's CPU "SSRSRS" rule) as explicit
// decisions: a flat vector of integers that, with the DAG and target, builds
// one schedule. Sampling draws decisions at random; the evolutionary search
// mutates them. The decisions travel in Schedule.decisions, so a measured
// record can be mutated later.
//
// The reduction computes into a local tile (cache_write, or the fused
// epilogue stage as the write-back via compute_at) computed inside a tile
// loop of its consumer; its loops are S0 S1 R0 S2 R1 S3, the consumer is
// split the same way, one spatial axis is vectorized at S3, the other S3
// loops unrolled, and constant operands indexed by the vector axis packed so
// the vector is contiguous.
//
// Layout: padding pass, vector axis, unroll tile, auto-unroll pragma, pack;
// per spatial axis S1, S2 and S3 tile and consumer unroll; per reduction
// axis its step; then the placement, appended later: the compute location
// (0: the local tile at the consumer's innermost S0 loop, 1: its innermost
// S1 loop, 2: its innermost S2 loop, the tile then holding m*t2*t3, t2*t3 or
// t3 per axis) and the parallel loops (how many of the consumer's outer
// loops, S0 of every axis then S1 of every axis, are fused into the one
// parallel loop: 1 to the S0 loops at location 0, to the S1 loops deeper).
// Defaults: location 0, every S0 loop parallel. Every function here takes a
// vector without the placement (the legacy length, as older records store
// it) as one with the defaults: it builds the same steps, so the same
// schedule hash, as before the placement existed. What they return has the
// placement.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "tunefarm/v1/schedule.pb.h"

namespace tunefarm::ir {

constexpr int kTilingSketchId = 1;

// Whether the DAG has a reduction the sketch applies to.
bool HasTilingSketch(const ComputeDAG& dag);
// The stage of that reduction (the last sum with reduction axes), or -1.
int TilingMainStage(const ComputeDAG& dag);

// Random decisions: a tile shape, a third of the samples each, then its
// tiles, with the default placement. The search reaches the other
// placements by mutation: drawn at random as below, they took a third of
// its fresh samples and GEMM 1024 ended 9% lower after 256 trials
// (docs/benchmarks.md).
std::vector<int64_t> SampleTilingDecisions(const ComputeDAG& dag, const Target& target,
                                           std::mt19937_64& rng);
// The same with a random placement (random schedules, the kernel tests):
// the compute location stays at S0 half the time (else a deeper level that
// keeps the shape and builds another program: S1 for narrow and blocked
// tiles, S2 for a register tile with S1 and S2 tiles drawn around it), the
// parallel loops stay every S0 loop three times in four (else another count
// that builds another program). Where no other value does, the default.
std::vector<int64_t> SampleTilingDecisionsAnyPlacement(const ComputeDAG& dag, const Target& target,
                                                       std::mt19937_64& rng);

// The schedule of `decisions` (sketch_id kTilingSketchId, decisions set,
// with the placement), or an error if they do not fit the DAG. A placement
// that builds the program of another (a compute location whose loops out to
// the next level are all one iteration long; parallel loops fused with
// loops of one iteration) builds that one's steps: one program, one hash.
absl::StatusOr<::tunefarm::v1::Schedule> BuildTiledSchedule(const ComputeDAG& dag,
                                                            const Target& target,
                                                            const std::vector<int64_t>& decisions);

// The tile shapes the sampler draws from (register, narrow, blocked; see
// sketch.cc) and the one `decisions` has, of its local tile (the S1 and S2
// tiles below the compute location): register when none of them is above
// 1, blocked when an S2 tile off the vector axis is wider than the narrow
// shape's, else narrow. The search keeps each shape in its batches.
constexpr int kTilingShapes = 3;
int TilingShape(const ComputeDAG& dag, const std::vector<int64_t>& decisions);

// The stratum the search keeps in its batches: the tile shape, and whether
// packing is on with a vector tile (shape + kTilingShapes when it is). It
// packs nothing when no operand has the vector axis where the build packs
// it (GEMM's a along m): that builds the unpacked program. The two choices
// decide most of a kernel's speed, and the cost model extrapolates badly
// across them: trained on convolutions, it scored unpacked register tiles
// best for GEMM 1024, where packed blocked tiles run at twice their speed.
constexpr int kTilingStrata = 2 * kTilingShapes;
int TilingStratum(const ComputeDAG& dag, const std::vector<int64_t>& decisions);

// The tiling decisions of `decisions` (vector axis, packing, every tile
// size, reduction steps, the placement as the build uses it), with those
// that only change how the same tiles are unrolled or padded (padding,
// unroll flags, the auto-unroll pragma) set to 0. Two candidates with equal
// structures compute the same tiles in the same order. Empty when
// `decisions` do not fit the DAG.
std::vector<int64_t> TilingStructure(const ComputeDAG& dag, const std::vector<int64_t>& decisions);

// `decisions` moved into `stratum`: the register tile, vector axis,
// unrolling, padding and placement kept (the compute location moved out
// where the new shape would not show in the local tile); the packing set by
// the stratum; when the shape changes, the S1/S2 tiles and reduction steps
// drawn for the new shape. A paired trial of the best schedule in another
// stratum.
std::vector<int64_t> MoveTilingDecisions(const ComputeDAG& dag, const Target& target,
                                         const std::vector<int64_t>& decisions, int stratum,
                                         std::mt19937_64& rng);

// A neighbour: one decision changed (a tile size, the vector axis or length,
// a reduction split, unrolling, the auto-unroll pragma, packing, padding,
// the compute location, the parallel loops; each of the last two a twelfth
// of the time, to another value that builds another program).
std::vector<int64_t> MutateTilingDecisions(const ComputeDAG& dag, const Target& target,
                                           const std::vector<int64_t>& decisions,
                                           std::mt19937_64& rng);

// `decisions` of another workload's tiling sketch with the same layout (as
// many spatial and reduction axes), fitted to this DAG: every tile clamped
// to its axis, and moved to a divisor of it where one lies within half of
// its size (the vector tile is only clamped: it keeps its lanes); the local
// tile within bounds, reduction steps likewise; an out-of-range placement
// reset to the default; the cores kept busy. Empty when the vector's length
// fits no layout of this DAG; the caller checks that the axes correspond
// (the same operator, layout and grouping).
// A new task's search opens with the best schedules of similar workloads so
// fitted (EvolutionOptions::transferred).
std::vector<int64_t> FitTilingDecisions(const ComputeDAG& dag, const Target& target,
                                        const std::vector<int64_t>& decisions);

}  // namespace tunefarm::ir
