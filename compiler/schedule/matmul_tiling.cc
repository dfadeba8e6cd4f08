#include <algorithm>

#include "absl/strings/str_cat.h"
#include "compiler/schedule/handwritten.h"
#include "compiler/schedule/tile_math.h"
#include "compiler/schedule/tiling.h"

namespace tunefarm::schedule {

using ir::ComputeDAG;
using ir::ExprNode;
using ir::Mentions;
using ir::ReduceKind;
using ir::Stage;
using ir::Target;
using ir::TensorDecl;
using ir::VisitLoads;

namespace {

// Rows of a register tile at most: 8 rows x 2 vectors was the fastest
// shape of the tile on AVX-512 (docs/tuning-guide.md).
constexpr int64_t kMaxTileRows = 8;
// The rows of A one pass over a reduction block keeps in L2 (with the
// 128-deep block, 64 KB).
constexpr int64_t kBlockRows = 128;
// The reduction block: the packed block of B (128 x 2 vectors x 2 tiles,
// 32 KB with AVX-512) stays in L1 while a block of rows streams past it.
constexpr int64_t kReduceBlock = 128;
// The fewest rows a tile of 1-3 rows packs B for.
constexpr int64_t kMinNarrowRows = 2;

}  // namespace

absl::StatusOr<CpuTiling> MatmulTiling(const ComputeDAG& dag, const Target& target) {
  const int main = TilingMainStage(dag);
  if (main < 0 || target.is_gpu()) return absl::InvalidArgumentError("not a CPU matrix product");
  const Stage& s = dag.stages[main];
  const int ns = int(s.axes.size());
  if ((ns != 2 && ns != 3) || s.reduce_axes.size() != 1 || s.reduce != ReduceKind::kSum) {
    return absl::InvalidArgumentError("not a matrix product");
  }
  const ExprNode* i = s.axes[ns - 2].var.get();
  const ExprNode* j = s.axes[ns - 1].var.get();
  const ExprNode* k = s.reduce_axes[0].var.get();
  // Two operands, each an input of the kernel: A indexed by the rows and
  // the reduction, B by the reduction and the columns, each B row
  // contiguous along the columns unless B is a constant (packed ahead of
  // time).
  int loads = 0;
  bool a_ok = false, b_ok = false;
  VisitLoads(s.body, [&](const ExprNode& n) {
    ++loads;
    const TensorDecl& td = dag.tensors[n.tensor];
    if (td.role != TensorDecl::Role::kInput || td.type != ir::ScalarType::kFloat32) return;
    bool mi = false, mj = false, mk = false;
    for (const ir::Expr& a : n.args) {
      mi |= Mentions(a, i), mj |= Mentions(a, j), mk |= Mentions(a, k);
    }
    if (mi && mk && !mj) a_ok = true;
    if (mj && mk && !mi && (td.is_constant || n.args.back().get() == j)) b_ok = true;
  });
  if (loads != 2 || !a_ok || !b_ok) {
    return absl::InvalidArgumentError(
        "not a product of A [M, K] and B [K, N] (B's rows contiguous or constant)");
  }
  const int64_t m = s.axes[ns - 2].extent, n = s.axes[ns - 1].extent,
                depth = s.reduce_axes[0].extent;
  const int64_t lanes = WidestDividingLanes(n, target.float_lanes());
  if (lanes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(n, " columns are not whole vectors"));
  }
  // Register tile: rows x 2 vectors or rows x 1, as many rows as divide M
  // up to 8 within the accumulator budget (6 x 2 with AVX2, as BLIS's 6x16
  // kernel); the most accumulators, then the fewest loads per FMA.
  int64_t vectors = 0, rows = 0;
  for (int64_t v : {2, 1}) {
    if ((n / lanes) % v != 0) continue;
    const int64_t r = DivisorAtMost(
        m, std::min(kMaxTileRows, AccumulatorBudget(target.float_lanes()) / v));
    if (r < 4) continue;
    const bool more = r * v > rows * vectors;
    const bool fewer_loads = r * v == rows * vectors && (r + v) < (rows + vectors);
    if (more || fewer_loads) vectors = v, rows = r;
  }
  // M without such a divisor (a ViT's 197 tokens): rows of 1-3 x up to 8
  // vectors, every row in one block over a 64-deep packed block of B (32 KB
  // for 8 AVX-512 vectors), so B is packed once per column block; 8 or more
  // accumulators, or the generic schedule. One row (a GEMV) reads each
  // packed element once: the generic schedule streams B once instead
  // (docs/tuning-guide.md).
  const bool narrow = rows == 0;
  if (narrow && m < kMinNarrowRows) {
    return absl::InvalidArgumentError(absl::StrCat(m, " rows: too few to pack B for"));
  }
  if (narrow) {
    rows = DivisorAtMost(m, 3);
    vectors = DivisorAtMost(
        n / lanes, std::min(kMaxTileRows, AccumulatorBudget(target.float_lanes()) / rows));
    if (rows * vectors < 8) {
      return absl::InvalidArgumentError(absl::StrCat(m, " rows have no register tile"));
    }
  }
  const int64_t cols = vectors * lanes;
  int64_t row_tiles =
      narrow ? m / rows : DivisorAtMost(m / rows, std::max<int64_t>(1, kBlockRows / rows));
  int64_t col_tiles = !narrow && (n / cols) % 2 == 0 ? 2 : 1;
  // Two parallel blocks per core at least (a device of unknown cores counts
  // as 4): smaller row blocks first, then narrower ones. Each block packs
  // its own B, so no more blocks than that.
  const int64_t batch = ns == 3 ? s.axes[0].extent : 1;
  const int64_t want = 2 * (target.num_cores > 0 ? target.num_cores : 4);
  auto blocks = [&] { return batch * (m / (rows * row_tiles)) * (n / (cols * col_tiles)); };
  while (!narrow && blocks() < want && row_tiles > 1)
    row_tiles = DivisorAtMost(m / rows, row_tiles - 1);
  if (blocks() < want) col_tiles = 1;
  // The reduction in blocks of 128 (64 for the narrow tile) or the largest
  // divisor of 32 up to that; whole where none divides (a guarded tail
  // would run in every step).
  int64_t step = DivisorAtMost(depth, narrow ? kReduceBlock / 2 : kReduceBlock);
  if (step < 32) step = depth;

  CpuTiling t;
  t.vector_axis = ns - 1;
  t.unroll_tile = true;
  t.pack = true;
  t.spatial.resize(size_t(ns));
  t.spatial[size_t(ns - 2)] = {1, row_tiles, rows, true};
  t.spatial[size_t(ns - 1)] = {1, col_tiles, cols, true};
  t.reduce_steps = {step};
  t.compute_at = kComputeAtS0;
  t.parallel = CpuTiling::DefaultParallel(TilingNest::Of(dag));
  return t;
}

absl::StatusOr<Trace> MatmulTiledSchedule(const ComputeDAG& dag, const Target& target) {
  absl::StatusOr<CpuTiling> t = MatmulTiling(dag, target);
  if (!t.ok()) return t.status();
  return BuildDefaultTiledSchedule(dag, target, *t);
}

}  // namespace tunefarm::schedule
