// GPU schedules: the multi-level tiling sketch (Ansor's "SSSRRSRS") as
// explicit decisions, and the fused thread-bound schedule for everything else.
//
// Tiling: the reduction accumulates in registers (cache_write local, or the
// fused epilogue stage as the write-back) computed at its consumer's thread
// loop. Each spatial axis splits into block, vthread, thread and two inner
// levels; each reduction axis into three. The consumer's block tiles are
// fused onto blockIdx.x, its vthread tiles onto a vthread loop, its thread
// tiles onto threadIdx.x; the register tile's loops run S0 S1 S2 R0 R1 S3 R2
// S4 (the first three of extent one inside the thread). Every operand of the
// reduction (the padded input and the weights of a convolution, both matrices
// of a GEMM) is staged in shared memory at the innermost R0 loop, fetched by
// the whole block; the epilogue runs in the write-back.
//
// Fused: cheap stages inlined, each remaining stage's spatial loops fused and
// split into blockIdx.x x threadIdx.x, reductions serial inside each thread.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "tunefarm/v1/schedule.pb.h"

namespace tunefarm::ir {

constexpr int kGpuTilingSketchId = 2;
constexpr int kGpuFusedSketchId = 3;

// Decisions of the GPU tiling sketch: a flat vector (per spatial axis
// vthread, thread, S3, S4; per reduction axis R1, R2; then the auto-unroll
// step index and the storage_align switch). Sampled within the target's
// thread limit and at most 64 accumulators per thread.
std::vector<int64_t> SampleGpuTilingDecisions(const ComputeDAG& dag, const Target& target,
                                              std::mt19937_64& rng);
std::vector<int64_t> MutateGpuTilingDecisions(const ComputeDAG& dag, const Target& target,
                                              const std::vector<int64_t>& decisions,
                                              std::mt19937_64& rng);
// Moderate fixed decisions (about 64-256 threads, 4x4 register tiles where
// the shape allows): the default schedule of convolutions and matrix products.
std::vector<int64_t> DefaultGpuTilingDecisions(const ComputeDAG& dag, const Target& target);

absl::StatusOr<::tunefarm::v1::Schedule> BuildGpuTiledSchedule(
    const ComputeDAG& dag, const Target& target, const std::vector<int64_t>& decisions);

// The fused thread-bound schedule with `threads` threads per block.
absl::StatusOr<::tunefarm::v1::Schedule> GpuFusedSchedule(const ComputeDAG& dag,
                                                          const Target& target, int64_t threads);

// The default on a GPU target: the tiling sketch with the default decisions
// where it applies and fits the target, else the fused schedule.
::tunefarm::v1::Schedule DefaultGpuSchedule(const ComputeDAG& dag, const Target& target);

// Whether `schedule` replays, lowers and launches within the target's
// limits (threads per block, block and grid dimensions, shared memory); the
// reason when not. Register use is only known after the build (the CUDA
// back end checks it).
absl::Status CheckGpuLaunch(const ComputeDAG& dag, const Target& target,
                            const ::tunefarm::v1::Schedule& schedule);

// A random GPU schedule: tiling-sketch samples (most) and fused schedules
// with a random block size. Every one replays; the launch limits are checked
// when the program is emitted (EmitCuda).
::tunefarm::v1::Schedule RandomGpuSchedule(const ComputeDAG& dag, const Target& target,
                                           std::mt19937_64& rng);

}  // namespace tunefarm::ir
