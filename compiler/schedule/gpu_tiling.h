// GPU schedules as programs: the multi-level tiling sketch (Ansor's
// "SSSRRSRS") with its decisions as a struct and their wire form, the fused
// thread-bound schedule for everything else, and the GPU default. How
// decisions are drawn and mutated is the search's business
// (search/space/gpu_sketch.h).
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
// split into blockIdx.x x threadIdx.x, reductions serial inside each thread
// (one into a 16-bit tensor accumulating in a float32 register).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/tiling.h"
#include "compiler/schedule/trace.h"

namespace tunefarm::schedule {

constexpr int kGpuTilingSketchId = 2;
constexpr int kGpuFusedSketchId = 3;

struct GpuTiling {
  // Tile sizes of a spatial axis, levels 0-3: vthread, thread, S3, S4 (the
  // block tile is what is left of the extent).
  struct Axis {
    int64_t vthread = 1, thread = 1, s3 = 1, s4 = 1;
    int64_t& tile(int level) {
      return level == 0 ? vthread : level == 1 ? thread : level == 2 ? s3 : s4;
    }
    int64_t tile(int level) const {
      return level == 0 ? vthread : level == 1 ? thread : level == 2 ? s3 : s4;
    }
    bool operator==(const Axis& o) const {
      return vthread == o.vthread && thread == o.thread && s3 == o.s3 && s4 == o.s4;
    }
  };
  // The two inner splits of a reduction axis (R1, R2; R0 is what is left).
  struct Reduce {
    int64_t r1 = 1, r2 = 1;
    bool operator==(const Reduce& o) const { return r1 == o.r1 && r2 == o.r2; }
  };
  std::vector<Axis> spatial;
  std::vector<Reduce> reduce;
  int64_t unroll = 0;          // auto-unroll max step index into {0, 16, 64, 512}
  bool storage_align = false;  // shared copies padded against bank conflicts
  // The shared copies double-buffered at the innermost R0 loop that runs
  // twice or more (those inside it running once): the next K tiles fetched
  // while this one's products run, one barrier per tile.
  bool double_buffer = false;

  bool operator==(const GpuTiling& o) const {
    return spatial == o.spatial && reduce == o.reduce && unroll == o.unroll &&
           storage_align == o.storage_align && double_buffer == o.double_buffer;
  }
  bool operator!=(const GpuTiling& o) const { return !(*this == o); }

  // Every tile 1, shaped for `nest`.
  static GpuTiling Shaped(const TilingNest& nest);
  // The wire form (Schedule.decisions): per spatial axis vthread, thread,
  // S3, S4; per reduction axis R1, R2; then unroll and storage_align, and
  // double_buffer (1) only when set (so earlier decisions keep their form).
  // nullopt when the length does not fit `nest`.
  static std::optional<GpuTiling> Decode(const TilingNest& nest, absl::Span<const int64_t> wire);
  std::vector<int64_t> Encode() const;

  int64_t Threads() const;       // per block
  int64_t Accumulators() const;  // registers of the register tile, per thread
  // The innermost reduction axis whose R0 loop runs twice or more in
  // `nest` (ceil(extent / (R1 R2)) >= 2), where a double-buffered
  // tiling's copies sit; -1 when none does.
  int PipelinedReduce(const TilingNest& nest) const;
  // Every tile at least 1 and within its axis (twice the extent at most,
  // so a ragged last tile is allowed), the block within the target's thread
  // limit, at most kMaxGpuAccumulators per thread.
  bool Fits(const TilingNest& nest, const ir::Target& target) const;
};

constexpr int64_t kMaxGpuAccumulators = 64;

// Moderate fixed decisions (about 64-256 threads, 4x4 register tiles where
// the shape allows): the default schedule of convolutions and matrix
// products. Requires HasTilingSketch(dag).
GpuTiling DefaultGpuTiling(const ir::ComputeDAG& dag, const ir::Target& target);

absl::StatusOr<Trace> BuildGpuTiledSchedule(const ir::ComputeDAG& dag, const ir::Target& target,
                                            const GpuTiling& tiling);
// The same from the wire form.
absl::StatusOr<Trace> BuildGpuTiledSchedule(const ir::ComputeDAG& dag, const ir::Target& target,
                                            absl::Span<const int64_t> wire);

// The fused thread-bound schedule with `threads` threads per block.
absl::StatusOr<Trace> GpuFusedSchedule(const ir::ComputeDAG& dag, const ir::Target& target,
                                       int64_t threads);

// The default on a GPU target: the tiling sketch with the default decisions
// where it applies and fits the target, else the fused schedule.
Trace DefaultGpuSchedule(const ir::ComputeDAG& dag, const ir::Target& target);

// Whether `schedule` replays, lowers and launches within the target's
// limits (threads per block, block and grid dimensions, shared memory); the
// reason when not. Register use is only known after the build (the CUDA
// back end checks it).
absl::Status CheckGpuLaunch(const ir::ComputeDAG& dag, const ir::Target& target, const Trace& schedule);

}  // namespace tunefarm::schedule
