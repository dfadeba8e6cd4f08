// The tensor-core sketch: float16 and bfloat16 products (matmul, dense,
// batch_matmul and convolutions as implicit GEMMs, with their epilogues) on
// sm_80 and newer, computed by warps with mma.sync m16n8k16 (16-bit
// operands, float32 accumulators); tf32 products (ComputeDAG::tf32) with
// mma.sync m16n8k8 on float32 tiles, each factor rounded to TF32 as the
// fragments are loaded.
//
// A block of warps_m x warps_n warps owns a BlockM x BlockN tile of the
// output; each warp owns frags_m x frags_n 16x8 accumulator tiles of it,
// in its registers. The K loop steps BlockK at a time: the whole block
// stages the A and B tiles in shared memory (in the operands' format, rows
// padded by `pad` elements against bank conflicts, zero past the matrix
// edges); per k step each warp loads its frags_m fragments of A and
// frags_n of B into registers once (by ldmatrix from 16-bit tiles, or
// element by element) and runs frags_m x frags_n mma.sync on them.
// With two stages the next tiles are loaded into registers before the
// products and stored into the other buffer after them (one barrier per
// tile). With async_copy and S stages (2 to 4), cp.async keeps S-1 tiles
// in flight straight into their shared buffers while the products of the
// oldest run (one barrier per tile; every tile row must move 16 bytes at a
// time: 8 16-bit elements or 4 floats). The write-back applies the
// epilogue to each accumulator where it lies in the output.
//
// The schedule is its decisions (sketch_id kGpuTensorCoreSketchId, no
// steps): ScheduleState::Replay adds the shared tiles and the accumulators
// to the DAG (TensorCoreDag), Lower builds the program (LowerTensorCore).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/schedule_hash.h"
#include "compiler/ir/stmt.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/trace.h"

namespace tunefarm::schedule {

struct TensorCoreTiling {
  int64_t warps_m = 2, warps_n = 2;  // warps of a block along M and N
  int64_t frags_m = 2, frags_n = 4;  // 16x8 accumulator tiles of a warp along M and N
  int64_t k_steps = 2;               // mma-deep steps (16, or 8 for tf32) per staged tile
  int64_t pad = 8;                   // elements after each shared row
  int64_t stages = 2;                // shared buffers of each tile
  int64_t ldmatrix = 1;              // fragments loaded with ldmatrix (else element by element)
  int64_t async_copy = 1;            // tiles staged by cp.async (2 stages or more), not registers
  // sm_90 (sm_90a code): each warpgroup (4 warps, warps_m 4) computes
  // frags_m products of 64 x 8 frags_n by wgmma.mma_async from tiles in
  // shared memory laid out as 16-byte core matrices (no pad, no ldmatrix),
  // 16-bit factors only; 1 waits for a tile's products before the next
  // tile, 2 leaves them in flight until the next tile's are issued (one
  // stage more held, 3 stages or more). On the wire only when set (a 10th
  // value).
  int64_t wgmma = 0;
  // 1: 16-bit tiles stored without pad, the 16-byte chunks of each row
  // rotated (SwizzledElement), so that ldmatrix's 8 rows and each quarter
  // warp's 8 16-byte copies fall in 8 distinct bank groups; needs pad 0,
  // ldmatrix 1, no wgmma and power-of-two tile sides. On the wire only when
  // set (an 11th value, after wgmma).
  int64_t swizzle = 0;
  // The operands' format, not on the wire: the DAG's (ComputeDAG::tf32);
  // every function here that takes the DAG sets it.
  bool tf32 = false;

  int64_t KDepth() const { return tf32 ? 8 : 16; }       // of one mma.sync
  int64_t ElementBytes() const { return tf32 ? 4 : 2; }  // of a shared tile's element
  int64_t BlockM() const { return 16 * frags_m * warps_m; }
  int64_t BlockN() const { return 8 * frags_n * warps_n; }
  int64_t BlockK() const { return KDepth() * k_steps; }
  int64_t Threads() const { return 32 * warps_m * warps_n; }
  int64_t Accumulators() const { return 4 * frags_m * frags_n; }  // per thread
  // An upper bound over both layouts of each tile.
  int64_t SharedBytes() const {
    const int64_t a = std::max(BlockM() * (BlockK() + pad), BlockK() * (BlockM() + pad));
    const int64_t b = std::max(BlockN() * (BlockK() + pad), BlockK() * (BlockN() + pad));
    return ElementBytes() * stages * (a + b);
  }

  bool operator==(const TensorCoreTiling& o) const { return Encode() == o.Encode(); }
  // The wire form (Schedule.decisions): warps_m, warps_n, frags_m, frags_n,
  // k_steps, pad, stages, ldmatrix, async_copy, then wgmma where it or
  // swizzle is set, then swizzle where it is set.
  // nullopt for another length; the result's tf32 is `tf32`.
  std::vector<int64_t> Encode() const;
  static std::optional<TensorCoreTiling> Decode(absl::Span<const int64_t> wire, bool tf32);
};

// At most this many accumulators per thread (registers).
constexpr int64_t kMaxTensorCoreAccumulators = 128;
// At most this many shared buffers per tile (cp.async pipeline depth + 1).
constexpr int64_t kMaxTensorCoreStages = 4;

// Whether `dag` is a 16-bit or tf32 matrix product a tensor-core schedule
// computes on `target`; FailedPrecondition saying why not (float32 without
// tf32, not a product of two loads, an arch before sm_80, ...).
absl::Status CheckTensorCoreSketch(const ir::ComputeDAG& dag, const ir::Target& target);
inline bool HasTensorCoreSketch(const ir::ComputeDAG& dag, const ir::Target& target) {
  return CheckTensorCoreSketch(dag, target).ok();
}

// The implicit GEMM's M, N and K (output positions, output channels and
// reduction extent for a convolution). Requires HasTensorCoreSketch.
std::array<int64_t, 3> TensorCoreProductShape(const ir::ComputeDAG& dag);

// Each field within its range (warps 1-4 each, 8 at most; frags 1-8, frags_n
// up to 32 with wgmma;
// k_steps 1-4; pad 0 or 8, or 4 for tf32 (16 bytes); stages 1 to 4;
// ldmatrix and async_copy 0 or 1, ldmatrix 0 for tf32, async_copy with 2
// stages or more and needed past 2; wgmma 0, 1 or 2, set only on sm_90 with 4
// warps along M, 16-bit factors, pad 0, ldmatrix 0 and async_copy; swizzle
// 0 or 1, set only with 16-bit factors, pad 0, ldmatrix 1, no wgmma and
// power-of-two tile sides), within
// the target's threads and shared memory and kMaxTensorCoreAccumulators;
// InvalidArgument naming the limit.
absl::Status CheckTensorCoreTiling(const TensorCoreTiling& tiling, const ir::Target& target);

// Moderate decisions that fit the product's shape: 4 warps where the tile
// has rows and columns for them, 2x4 fragments shrunk for small matrices,
// cp.async with 3 stages where both tiles' rows move 16 bytes at a time and
// K holds 3 tiles or more.
TensorCoreTiling DefaultTensorCoreTiling(const ir::ComputeDAG& dag, const ir::Target& target);

// The schedule of `tiling` (no steps; its tf32 taken from the DAG),
// checked against dag and target (async_copy needs both tiles' rows to move
// 16 bytes at a time).
absl::StatusOr<Trace> TensorCoreSchedule(const ir::ComputeDAG& dag, const ir::Target& target,
                                         TensorCoreTiling tiling);

// `dag` with the buffers of a tensor-core schedule appended: the A and B
// tiles (shared, the operands' format, one per stage), the accumulators
// (registers, float32), each thread's share of the next tiles (registers,
// the operands' format) and each warp's fragments of one k step (A's, then
// B's: registers, TensorDecl::mma_fragment).
absl::StatusOr<ir::ComputeDAG> TensorCoreDag(const ir::ComputeDAG& dag, const ir::Target& target,
                                         absl::Span<const int64_t> decisions);
// The one-kernel program of a tensor-core schedule over TensorCoreDag's DAG.
ir::Stmt LowerTensorCore(const ir::ComputeDAG& scheduled, absl::Span<const int64_t> decisions);

}  // namespace tunefarm::schedule
