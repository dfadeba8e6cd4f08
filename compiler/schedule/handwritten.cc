#include "compiler/schedule/handwritten.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "compiler/ir/simplify.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/schedule_builder.h"
#include "compiler/schedule/tile_math.h"
#include "compiler/schedule/tiling.h"

namespace tunefarm::schedule {

using ir::ComputeDAG;
using ir::Expr;
using ir::ExprNode;
using ir::IterVar;
using ir::Linearize;
using ir::Mentions;
using ir::ReduceKind;
using ir::Stage;
using ir::StageInputs;
using ir::Target;
using ir::VisitLoads;
namespace {

namespace v1 = ::tunefarm::v1;

// The convolution stage: the first reduction whose body reads a constant.
int ConvStage(const ComputeDAG& dag) {
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& s = dag.stages[i];
    if (s.reduce != ReduceKind::kSum || s.axes.size() != 4 || s.reduce_axes.size() != 3) continue;
    // NCHW: the weight's first dimension is the output channel axis.
    bool weight = false;
    VisitLoads(s.body, [&](const ExprNode& n) {
      weight |= dag.tensors[n.tensor].is_constant && n.args.size() == 4 &&
                n.args[0].same_as(s.axes[1].var);
    });
    // The input must not depend on the output channel (grouped and depthwise
    // convolutions do): the schedule broadcasts one input element to a
    // vector of output channels.
    bool input_per_channel = false;
    VisitLoads(s.body, [&](const ExprNode& n) {
      if (dag.tensors[n.tensor].is_constant) return;
      for (const Expr& a : n.args) input_per_channel |= Mentions(a, s.axes[1].var.get());
    });
    if (weight && !input_per_channel) return int(i);
  }
  return -1;
}

// The dense stage: a sum over one reduction axis with two spatial axes that
// reads a constant matrix as weight[j, k] (j the second output axis).
int DenseStage(const ComputeDAG& dag) {
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& s = dag.stages[i];
    if (s.reduce != ReduceKind::kSum || s.axes.size() != 2 || s.reduce_axes.size() != 1) continue;
    bool weight = false;
    VisitLoads(s.body, [&](const ExprNode& n) {
      weight |= dag.tensors[n.tensor].is_constant && n.args.size() == 2 &&
                n.args[0].same_as(s.axes[1].var) && n.args[1].same_as(s.reduce_axes[0].var);
    });
    if (weight) return int(i);
  }
  return -1;
}

// A convolution register tile's sizes: channels a positive multiple of
// `lanes`, rows and cols positive.
absl::Status CheckConvTile(const ConvTile& tile, int64_t lanes) {
  if (tile.channels <= 0 || tile.channels % lanes != 0 || tile.rows <= 0 || tile.cols <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("tile channels must be a positive multiple of ",
                                                   lanes, ", rows and cols positive"));
  }
  return absl::OkStatus();
}

// The register-tiled reduction `stage` accumulates into a local tile whose
// write-back is the stage after it: a cache_write stage when `stage` writes
// the output, else its fused epilogue, which must be the last stage.
absl::Status TileWriteBack(ScheduleBuilder& b, const ComputeDAG& dag, int stage,
                           absl::string_view what) {
  const int out = stage + 1;
  if (dag.stages[stage].output == dag.output) {
    return b.Add(CacheWriteStep{stage, v1::MEMORY_SCOPE_LOCAL});
  }
  if (out >= int(dag.stages.size()) || dag.stages[out].output != dag.output) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, "'s epilogue is not the last stage"));
  }
  return absl::OkStatus();
}

// layout_pack of `stage`'s constant operand (the weight) with `block`.
absl::Status PackWeight(ScheduleBuilder& b, int stage, const std::vector<int64_t>& block) {
  LayoutPackStep lp{stage};
  std::vector<int> inputs = StageInputs(b.state().dag().stages[stage]);
  int operand = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (b.state().dag().tensors[inputs[i]].is_constant) operand = int(i);
  }
  lp.input = operand;
  lp.block = block;
  return b.Add(std::move(lp));
}

// How much of an output row one register tile takes: the whole row when it
// fits `max_vectors` vectors, else the longest multiple of the lanes that
// divides it and fits, else its largest divisor that fits.
int64_t RowTile(int64_t w, int64_t lanes, int64_t max_vectors) {
  const int64_t cap = max_vectors * lanes;
  if (w <= cap) return w;
  for (int64_t c = cap; c >= lanes; c -= lanes) {
    if (w % c == 0) return c;
  }
  return DivisorAtMost(w, cap);
}

// An NHWC tile's output-channel vector: the target's, or the widest narrower
// one of at least 4 lanes that divides k; an error naming k where none does.
absl::StatusOr<int64_t> ChannelLanes(int64_t k, const Target& target) {
  const int64_t lanes = WidestDividingLanes(k, target.float_lanes());
  if (lanes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(k, " output channels are not whole vectors of 4 or more lanes"));
  }
  return lanes;
}

// The vector registers the code generator's loop over `n` elements takes:
// n / v for the widest dividing v, else the full vectors and one for the
// rest (LLVM widens a narrower vector to a whole register).
int64_t VectorRegisters(int64_t n, int64_t lanes) {
  if (const int64_t v = WidestDividingLanes(n, lanes); v > 0) return n / v;
  return n / lanes + (n % lanes != 0);
}

// The part of an output row a channel tile takes, up to `max_vectors`
// vectors: the whole row or a divisor of it, the one that fills its
// registers best (most lanes per register, then the longest). AVX-512 and a
// 40-wide row: 8 columns in one 8-lane register, not 20 in five 4-lane ones.
int64_t ChannelTileRow(int64_t w, int64_t lanes, int64_t max_vectors) {
  int64_t best = 1;
  double best_fill = 0;
  for (int64_t c = std::min(w, max_vectors * lanes); c >= 1; --c) {
    if (w % c != 0) continue;
    const double fill = double(c) / double(VectorRegisters(c, lanes));
    if (fill > best_fill + 1e-9) best = c, best_fill = fill;
  }
  return best;
}

// The NHWC register tile of the tiling sketch: rows x cols output pixels x
// `channels` output channels (the vectorized axis 3), unrolled, the weight
// [R][S][C][K] packed by the channel tile.
CpuTiling NhwcRegisterTile(int64_t rows, int64_t cols, int64_t channels) {
  CpuTiling t;
  t.vector_axis = 3;
  t.unroll_tile = true;
  t.pragma = 1;
  t.pack = true;
  t.spatial.resize(4);
  t.spatial[1].s3 = rows;
  t.spatial[1].unroll = true;
  t.spatial[2].s3 = cols;
  t.spatial[2].unroll = true;
  t.spatial[3].s3 = channels;
  return t;
}

// Independent accumulators that keep two FMA pipes of 4 cycles' latency
// busy.
constexpr int64_t kFmaChains = 8;

struct RowsTile {
  int64_t channels = 1, rows = 1;
};

// A register tile of `channels` (dividing k) x `rows` (dividing h) x
// `vectors` output row vectors, for channel counts whose divisors leave
// too few accumulators: the most accumulators up to 12 (8 with AVX2's 16
// registers, which also hold the 4 input vectors and a broadcast), with at
// most 4 input vectors live per reduction step (more spill once LLVM
// pipelines the reduction loop), then the fewest loads per FMA
// (docs/tuning-guide.md).
RowsTile StarvedChannelTile(int64_t k, int64_t h, int64_t vectors, int64_t lanes) {
  const int64_t cap = lanes == 8 ? 8 : 12;
  RowsTile best;
  int64_t best_acc = 0;
  double best_loads = 0;
  for (int64_t c = 1; c <= std::min<int64_t>(k, cap); ++c) {
    if (k % c != 0) continue;
    for (int64_t r = 1; r * vectors <= 4 && r <= h; ++r) {
      const int64_t acc = c * r * vectors;
      if (h % r != 0 || acc > cap) continue;
      const double loads = double(r * vectors + c) / double(acc);
      if (acc > best_acc || (acc == best_acc && loads < best_loads - 1e-9)) {
        best = {c, r};
        best_acc = acc;
        best_loads = loads;
      }
    }
  }
  return best;
}

// The tiling sketch's decisions for a convolution vectorized along the
// output row, the reduction inside the register tile and (batch, channel)
// as the parallel loop. With `channels` (dense convolutions): padding as a
// pass of its own, up to 2 vectors of a row and a tile of output channels
// sharing each input vector. Without (grouped, depthwise): padding read
// inline, whole rows as the accumulators allow, several where rows are
// short.
absl::StatusOr<Trace> RowTiledConv(const ComputeDAG& dag, const Target& target, bool channels) {
  const TilingNest nest = TilingNest::Of(dag);
  if (nest.ns() != 4 || nest.nr() != 3) return absl::InvalidArgumentError("not a convolution");
  const int64_t lanes = target.float_lanes(), k = nest.spatial[1], h = nest.spatial[2],
                w = nest.spatial[3];
  CpuTiling t;
  t.vector_axis = 3;
  t.unroll_tile = true;
  t.pragma = 1;
  t.spatial.resize(4);
  t.spatial[3].unroll = true;
  if (channels) {
    // Accumulators: channels x vectors, the input vectors and a broadcast
    // weight beside them in the register file (16 with AVX2, 32 otherwise)
    // (docs/tuning-guide.md).
    const int64_t budget = AccumulatorBudget(lanes);
    const int64_t cols = ChannelTileRow(w, lanes, 2), vectors = VectorRegisters(cols, lanes);
    t.pad_pass = true;
    t.spatial[3].s3 = cols;
    t.spatial[1].s3 = DivisorAtMost(k, std::max<int64_t>(1, budget / vectors));
    t.spatial[1].unroll = true;
    if (t.spatial[1].s3 * vectors < kFmaChains) {
      // The channel count's divisors starve the FMA pipes (58 = 2 x 29):
      // the tile grows along output rows, and the channel tiles loop inside
      // the pixel tile, so its input rows stay in L1 for all of them.
      const RowsTile rt = StarvedChannelTile(k, h, vectors, lanes);
      t.spatial[1].s3 = rt.channels;
      t.spatial[1].s1 = k / rt.channels;
      t.spatial[2].s3 = rt.rows;
      t.spatial[2].unroll = true;
      t.compute_at = kComputeAtS1;
      t.parallel = CpuTiling::DefaultParallel(nest);
    }
  } else {
    // The input streams through once, row after row, with no padded copy to
    // write and read; inside a model a layer's input is not in cache
    // (docs/tuning-guide.md).
    const int64_t budget = lanes == 8 ? 8 : 16;
    const int64_t row = RowTile(w, lanes, budget), vectors = VectorRegisters(row, lanes);
    t.pad_pass = false;
    t.spatial[3].s3 = row;
    t.spatial[2].s3 =
        h * vectors <= budget ? h : DivisorAtMost(h, std::max<int64_t>(1, budget / vectors));
    t.spatial[2].unroll = true;
    t.pack = true;
  }
  t.reduce_steps.assign(3, 1);
  if (t.compute_at == kComputeAtS0) t.parallel = 2;  // batch x channels
  return BuildDefaultTiledSchedule(dag, target, t);
}

}  // namespace

ConvTile PickConvTile(const ComputeDAG& dag, const Target& target) {
  ConvTile tile;
  int conv = ConvStage(dag);
  if (conv < 0) return tile;
  const Stage& s = dag.stages[conv];
  int64_t lanes = target.float_lanes();
  int64_t k_blocks = std::max<int64_t>(1, s.axes[1].extent / lanes), w = s.axes[3].extent;
  // Accumulators (cols x channel blocks vectors) plus the weight vectors and
  // a broadcast must fit the register file with room for LLVM's scheduling:
  // 32 vector registers with AVX-512 and NEON, 16 with AVX2.
  int64_t budget = AccumulatorBudget(lanes);
  // Few input channels (an RGB stem): at most 2 channel vectors; only
  // there, as layers with many input channels lose by it
  // (docs/tuning-guide.md).
  const bool shallow = s.reduce_axes[0].extent < lanes;
  int64_t best_acc = 0, best_loads = 0;
  for (int64_t cols = 1; cols <= std::min<int64_t>(w, 16); ++cols) {
    if (w % cols != 0 && cols != std::min<int64_t>(w, 16)) continue;
    for (int64_t blocks = 1; blocks <= std::min<int64_t>(k_blocks, 4); ++blocks) {
      if (k_blocks % blocks != 0) continue;
      if (shallow && blocks > 2 && w >= 8) continue;
      int64_t acc = cols * blocks;
      if (acc > budget) continue;
      // More accumulators first; then fewer loads per FMA.
      int64_t loads = (cols + blocks) * 1000 / acc;
      if (acc > best_acc || (acc == best_acc && loads < best_loads)) {
        best_acc = acc, best_loads = loads;
        tile.cols = cols, tile.channels = blocks * lanes;
      }
    }
  }
  tile.rows = 1;
  return tile;
}

absl::StatusOr<Trace> HandwrittenConv2dSchedule(const ComputeDAG& dag, const Target& target,
                                                const ConvTile& tile) {
  int conv = ConvStage(dag);
  if (conv < 0) {
    return absl::InvalidArgumentError(
        "not a dense NCHW convolution (grouped and depthwise ones are not covered)");
  }
  int64_t lanes = target.float_lanes();
  TF_RETURN_IF_ERROR(CheckConvTile(tile, lanes));
  ScheduleBuilder b(dag, target);
  // Padding is a stage of its own (computed once, no clamps in the hot loop).
  // The convolution's only reader is the output tile's stage: the fused
  // epilogue, or a write-back stage made by cache_write.
  const int local = conv, out = conv + 1;
  TF_RETURN_IF_ERROR(TileWriteBack(b, dag, conv, "convolution"));
  // Stages before the convolution (padding): one parallel pass, vectorized rows.
  for (int i = 0; i < conv; ++i) {
    const auto& iters = b.state().stages()[i].iters;
    if (b.state().stages()[i].location != StageState::Location::kRoot || iters.size() < 2) continue;
    std::vector<int> outer;
    for (int k = 0; k + 1 < int(iters.size()); ++k) outer.push_back(k);
    if (outer.size() >= 2) TF_RETURN_IF_ERROR(b.Fuse(i, outer));
    TF_RETURN_IF_ERROR(b.Annotate(i, 0, v1::ANNOTATION_PARALLEL));
    TF_RETURN_IF_ERROR(b.Annotate(i, 1, v1::ANNOTATION_VECTORIZE));
  }
  // Weights -> [O/v][I][H][W][v].
  TF_RETURN_IF_ERROR(PackWeight(b, local, {lanes, 0, 0, 0}));
  // Output tile stage: n, k, y, x -> (n k.o y.o x.o) fused parallel, then
  // k.a y.i x.i k.v: the tile's write-back, vectorized over channels.
  const int64_t blocks = tile.channels / lanes;
  TF_RETURN_IF_ERROR(b.Split(out, 1, {blocks, lanes}));          // n k.o k.a k.v y x
  TF_RETURN_IF_ERROR(b.Split(out, 4, {tile.rows}));              // n k.o k.a k.v y.o y.i x
  TF_RETURN_IF_ERROR(b.Split(out, 6, {tile.cols}));              // n k.o k.a k.v y.o y.i x.o x.i
  TF_RETURN_IF_ERROR(b.Reorder(out, {0, 1, 4, 6, 5, 7, 2, 3}));  // n k.o y.o x.o y.i x.i k.a k.v
  TF_RETURN_IF_ERROR(b.Fuse(out, {0, 1, 2, 3}));                 // f y.i x.i k.a k.v
  TF_RETURN_IF_ERROR(b.Annotate(out, 0, v1::ANNOTATION_PARALLEL));
  TF_RETURN_IF_ERROR(b.Annotate(out, 4, v1::ANNOTATION_VECTORIZE));
  for (int i : {1, 2, 3}) TF_RETURN_IF_ERROR(b.Annotate(out, i, v1::ANNOTATION_UNROLL));
  // Local stage: n k y x rc ry rx -> n k.o y.o x.o rc ry rx y.i x.i k.a k.v.
  TF_RETURN_IF_ERROR(b.Split(local, 1, {blocks, lanes}));  // n k.o k.a k.v y x rc ry rx
  TF_RETURN_IF_ERROR(b.Split(local, 4, {tile.rows}));      // n k.o k.a k.v y.o y.i x rc ry rx
  TF_RETURN_IF_ERROR(b.Split(local, 6, {tile.cols}));      // n k.o k.a k.v y.o y.i x.o x.i rc ry rx
  TF_RETURN_IF_ERROR(b.Reorder(local, {0, 1, 4, 6, 8, 9, 10, 5, 7, 2, 3}));
  TF_RETURN_IF_ERROR(b.Annotate(local, 10, v1::ANNOTATION_VECTORIZE));
  for (int i : {7, 8, 9}) TF_RETURN_IF_ERROR(b.Annotate(local, i, v1::ANNOTATION_UNROLL));
  // The local tile computed at the write-back's outermost (parallel) loop.
  TF_RETURN_IF_ERROR(b.ComputeAt(local, out, 0));
  return b.Take();
}

absl::StatusOr<Trace> HandwrittenDenseSchedule(const ComputeDAG& dag, const Target& target) {
  int dense = DenseStage(dag);
  if (dense < 0) return absl::InvalidArgumentError("not a dense with a constant [N,K] weight");
  const Stage& s = dag.stages[dense];
  const int64_t m = s.axes[0].extent, n = s.axes[1].extent;
  // Output columns in whole vectors; where no vector of 4 or more divides N
  // (classifier heads of 66 or 37 classes), pairs or single columns: the
  // packed weight keeps every k loop a contiguous stream, where the generic
  // schedule would gather one weight per column and k.
  int64_t lanes = WidestDividingLanes(n, target.float_lanes());
  if (lanes == 0) lanes = n % 2 == 0 ? 2 : 1;
  // Register tile: up to 4 data rows, and channel blocks so that
  // rows * blocks accumulators stay well inside the register file.
  const int64_t budget = AccumulatorBudget(target.float_lanes());
  const int64_t rows = DivisorAtMost(m, 4);
  const int64_t blocks = DivisorAtMost(n / lanes, std::min<int64_t>(6, budget / rows));
  ScheduleBuilder b(dag, target);
  const int local = dense, out = dense + 1;
  TF_RETURN_IF_ERROR(TileWriteBack(b, dag, dense, "dense"));
  for (int i = 0; i < dense; ++i) {
    if (b.state().stages()[i].location == StageState::Location::kRoot) {
      return absl::InvalidArgumentError("the dense's inputs are computed in the kernel");
    }
  }
  // Weight [N,K] -> [N/v][K][v].
  TF_RETURN_IF_ERROR(PackWeight(b, local, {lanes, 0}));
  // Output tile stage: i j -> (i.o j.o) parallel, i.i j.a j.v.
  TF_RETURN_IF_ERROR(b.Split(out, 1, {blocks, lanes}));  // i j.o j.a j.v
  TF_RETURN_IF_ERROR(b.Split(out, 0, {rows}));           // i.o i.i j.o j.a j.v
  TF_RETURN_IF_ERROR(b.Reorder(out, {0, 2, 1, 3, 4}));   // i.o j.o i.i j.a j.v
  TF_RETURN_IF_ERROR(b.Fuse(out, {0, 1}));               // f i.i j.a j.v
  TF_RETURN_IF_ERROR(b.Annotate(out, 0, v1::ANNOTATION_PARALLEL));
  if (lanes > 1) TF_RETURN_IF_ERROR(b.Annotate(out, 3, v1::ANNOTATION_VECTORIZE));
  for (int i : {1, 2}) TF_RETURN_IF_ERROR(b.Annotate(out, i, v1::ANNOTATION_UNROLL));
  // Local stage: i j k -> i.o j.o k i.i j.a j.v.
  TF_RETURN_IF_ERROR(b.Split(local, 1, {blocks, lanes}));   // i j.o j.a j.v k
  TF_RETURN_IF_ERROR(b.Split(local, 0, {rows}));            // i.o i.i j.o j.a j.v k
  TF_RETURN_IF_ERROR(b.Reorder(local, {0, 2, 5, 1, 3, 4}));  // i.o j.o k i.i j.a j.v
  if (lanes > 1) TF_RETURN_IF_ERROR(b.Annotate(local, 5, v1::ANNOTATION_VECTORIZE));
  for (int i : {3, 4}) TF_RETURN_IF_ERROR(b.Annotate(local, i, v1::ANNOTATION_UNROLL));
  // The local tile computed at the write-back's outermost (parallel) loop.
  TF_RETURN_IF_ERROR(b.ComputeAt(local, out, 0));
  return b.Take();
}

absl::StatusOr<Trace> GroupedConv2dSchedule(const ComputeDAG& dag, const Target& target) {
  const int main = TilingMainStage(dag);
  if (main < 0 || ConvStage(dag) >= 0) {
    return absl::InvalidArgumentError("not a grouped or depthwise convolution");
  }
  return RowTiledConv(dag, target, /*channels=*/false);
}

bool PrefersRowConv(const ComputeDAG& dag, const Target& target) {
  const int conv = ConvStage(dag);
  if (conv < 0) return false;
  const Stage& s = dag.stages[conv];
  const int64_t lanes = target.float_lanes(), k = s.axes[1].extent, w = s.axes[3].extent;
  // The input's step along a row of the output: 1 unless strided.
  int64_t step = 1;
  VisitLoads(s.body, [&](const ExprNode& n) {
    if (dag.tensors[n.tensor].is_constant || n.args.empty()) return;
    const int64_t c = Linearize(n.args.back(), {}).CoeffOf(s.axes[3].var.get());
    if (c != 1) step = std::max<int64_t>(step, std::abs(c));
  });
  // Output channels in whole vectors, or the channel-vector schedule runs
  // every block guarded; unless a row fills under half a vector
  // (docs/tuning-guide.md). A row whose pixels lie more than 2 apart in
  // the input (a spectrogram's hop of 160) gathers every load: the guarded
  // channel vectors win there (docs/tuning-guide.md).
  if (k % lanes != 0) return k < lanes || (step <= 2 && 2 * w >= lanes);
  int64_t depth = 1;
  for (const IterVar& r : s.reduce_axes) depth *= r.extent;
  const int64_t channels = s.reduce_axes[0].extent;
  // A shallow reduction leaves the channel-vector tile little work per
  // write-back, and a stride makes the row loads strided
  // (docs/tuning-guide.md).
  return step == 1 && (depth <= 96 || channels <= 32);
}

namespace {

// The tiling of deep layers with little spatial extent (h x w pixels, k
// output and c input channels, r kernel rows, `lanes` per channel vector):
// the reduction blocked by 16 input channels outside a local tile of whole
// rows x a few channel vectors (about 32 KB), so each block of the weight
// is reused by every pixel while it sits in L1; a register tile of up to 8
// rows x 1 vector: the decisions a 128-trial tune found on C512 H7 3x3,
// generalized. 1x1 layers take their own local tile.
CpuTiling DeepLayerTiling(const ComputeDAG& dag, int64_t h, int64_t w, int64_t k, int64_t c,
                          int64_t r, int64_t lanes, bool pointwise) {
  CpuTiling t;
  t.pad_pass = true;
  t.vector_axis = 3;
  t.pragma = 3;
  t.pack = true;
  t.spatial.resize(4);
  const int64_t rows8 = DivisorAtMost(h, 8);
  t.spatial[1].s3 = rows8;
  t.spatial[1].unroll = true;
  if (pointwise) {
    // 1x1 (a ragged fit above): a local tile of one channel vector over
    // the rows x whole row width, the columns outside the reduction (64
    // input channels a step), as a 128-trial tune of C320 K1280 H7 found:
    // each column streams the vector's weights once at 7 FMAs per load
    // and the next columns find them in L1. Every channel vector is a
    // parallel iteration (the tile below made K160 one iteration)
    // (docs/tuning-guide.md).
    t.spatial[2].s1 = w;
    t.spatial[3] = {1, 1, lanes, true};
    t.reduce_steps = {DivisorAtMost(c, 64), 1, 1};
  } else {
    t.spatial[2].s2 = w;
    const int64_t kv = k / lanes, s2 = DivisorAtMost(kv, 4);
    int64_t s1 = 1;
    for (int64_t d = 1; d <= kv / s2; ++d) {
      if ((kv / s2) % d == 0 && rows8 * w * d * s2 * lanes * 4 <= 32 * 1024) s1 = d;
    }
    t.spatial[3] = {s1, s2, lanes, true};
    t.reduce_steps = {DivisorAtMost(c, 16), r, 1};
  }
  t.compute_at = kComputeAtS0;
  t.parallel = CpuTiling::DefaultParallel(TilingNest::Of(dag));
  return t;
}

}  // namespace

absl::StatusOr<Trace> NhwcConv2dSchedule(const ComputeDAG& dag, const Target& target) {
  const int main = TilingMainStage(dag);
  if (main < 0) return absl::InvalidArgumentError("not an NHWC convolution");
  const Stage& s = dag.stages[size_t(main)];
  if (s.axes.size() != 4 || s.reduce_axes.size() != 3)
    return absl::InvalidArgumentError("not an NHWC convolution");
  // NHWC: the output channel is the last axis and the weight's last index;
  // the input does not depend on it (not grouped, not depthwise).
  bool weight = false, input_per_channel = false, strided = false;
  VisitLoads(s.body, [&](const ExprNode& n) {
    if (dag.tensors[n.tensor].is_constant) {
      weight |= n.args.size() == 4 && n.args[3].same_as(s.axes[3].var);
    } else {
      for (const Expr& a : n.args) input_per_channel |= Mentions(a, s.axes[3].var.get());
      if (n.args.size() == 4) strided |= Linearize(n.args[2], {}).CoeffOf(s.axes[2].var.get()) != 1;
    }
  });
  if (!weight || input_per_channel)
    return absl::InvalidArgumentError("not a dense NHWC convolution");
  const int64_t h = s.axes[1].extent, w = s.axes[2].extent, k = s.axes[3].extent;
  // The channel vector (AVX-512 and K = 24, 40, 200: 8 lanes). Each takes
  // one register whatever its width.
  TF_ASSIGN_OR_RETURN(const int64_t lanes, ChannelLanes(k, target));
  // Register tile: 2 channel vectors x 2 columns x as many rows as the
  // accumulators allow (12 of AVX2's 16 registers, 24 of 32 otherwise),
  // the input channels innermost in the reduction so both the packed
  // weight and the input row stream contiguously (docs/tuning-guide.md).
  const int64_t budget = AccumulatorBudget(target.float_lanes());
  // Up to two vectors of channels; narrower vectors up to three of the
  // target's width (AVX-512: K = 24 three 8-lane vectors, K = 200 five).
  // Three vectors where they are all the channels (AVX2 K = 24: each
  // input load feeds every output channel).
  int64_t vectors = lanes == target.float_lanes()
                        ? (k / lanes == 3 ? 3 : DivisorAtMost(k / lanes, 2))
                        : DivisorAtMost(k / lanes, 3 * target.float_lanes() / lanes);
  int64_t cols = std::min<int64_t>(w, 2);
  int64_t rows = std::clamp<int64_t>(budget / (vectors * cols), 1, h);
  // Under AVX-512, two or more whole vectors of channels: a GEMM's tile of
  // up to 4 vectors x consecutive pixels of one row. Unstrided 1x1 layers
  // reduce in steps of 2 over the unpacked weight; others take the whole
  // window inside the tile. (Deep layers of little spatial extent take the
  // blocked tile further below.)
  const bool pointwise = s.reduce_axes[1].extent * s.reduce_axes[2].extent == 1 && !strided;
  bool gemm_tile = false;
  if (target.float_lanes() == 16 && lanes == 16 && k / lanes >= 2) {
    const int64_t v = DivisorAtMost(k / lanes, 4), c = DivisorAtMost(w, budget / v),
                  r = DivisorAtMost(h, budget / (v * c));
    if (v * c * r >= budget / 2) {
      gemm_tile = true;
      vectors = v, cols = c, rows = r;
    }
  }
  // Short images (a text line's 2 or 3 rows) widen the tile along the row
  // instead.
  if (vectors * cols * rows < budget / 2) {
    cols = std::clamp<int64_t>(budget / (vectors * rows), 1, w);
  }
  CpuTiling t = NhwcRegisterTile(rows, cols, vectors * lanes);
  t.pad_pass = true;
  if (gemm_tile && pointwise) {
    t.reduce_steps = {DivisorAtMost(s.reduce_axes[0].extent, 2), 1, 1};
    t.pack = false;
  } else if (gemm_tile) {
    // The whole window inside the tile, input channels in blocks of 64,
    // over the packed weight.
    t.reduce_steps = {DivisorAtMost(s.reduce_axes[0].extent, 64), s.reduce_axes[1].extent,
                      s.reduce_axes[2].extent};
  } else {
    t.reduce_steps = {s.reduce_axes[0].extent, 1, 1};
  }
  const int64_t c = s.reduce_axes[0].extent, r = s.reduce_axes[1].extent;
  // (Under AVX-512 the GEMM tile, where its row holds 16 or more
  // accumulators.) 1x1 layers keep the register tile above unless its rows
  // and columns fit the image badly (7x7: 72 pixels computed for 49).
  const int64_t computed = (h + rows - 1) / rows * rows * ((w + cols - 1) / cols * cols);
  const bool ragged = computed * 4 > h * w * 5;
  if (h * w <= 28 * 28 && c >= 128 && !strided && !(gemm_tile && vectors * cols >= 16) &&
      (!pointwise || ragged)) {
    // Deep layers with little spatial extent: a blocked reduction.
    t = DeepLayerTiling(dag, h, w, k, c, r, lanes, pointwise);
    return BuildDefaultTiledSchedule(dag, target, t);
  }
  // Channel blocks outermost: each block's packed weight is read from
  // memory once and reused by every pixel tile (rows and columns at level
  // S1, the tile computed there, all loops parallel); pixel tiles
  // outermost would stream the whole weight per tile.
  t.spatial[1].s1 = (h + rows - 1) / rows;
  t.spatial[2].s1 = (w + cols - 1) / cols;
  t.compute_at = kComputeAtS1;
  t.parallel = 8;
  return BuildDefaultTiledSchedule(dag, target, t);
}

absl::StatusOr<Trace> NhwcConvTransposeSchedule(const ComputeDAG& dag, const Target& target) {
  const int main = TilingMainStage(dag);
  if (main < 0 || dag.stages[size_t(main)].name != "conv_transpose")
    return absl::InvalidArgumentError("not a transposed convolution");
  const Stage& s = dag.stages[size_t(main)];
  // The NHWC form: [n, y, x, k] over one reduction axis, the RSCK weight
  // indexed by k last.
  bool weight = false;
  VisitLoads(s.body, [&](const ExprNode& n) {
    weight |=
        dag.tensors[n.tensor].is_constant && n.args.size() == 4 && n.args[3].same_as(s.axes[3].var);
  });
  if (s.axes.size() != 4 || s.reduce_axes.size() != 1 || !weight)
    return absl::InvalidArgumentError("not an NHWC transposed convolution");
  const int64_t h = s.axes[1].extent, w = s.axes[2].extent, k = s.axes[3].extent;
  TF_ASSIGN_OR_RETURN(const int64_t lanes, ChannelLanes(k, target));
  const int64_t budget = AccumulatorBudget(target.float_lanes());
  // At most a quarter of the accumulators per pixel, so a 2 x 2 tile fits.
  const int64_t vectors = DivisorAtMost(
      k / lanes, std::min<int64_t>(budget / 4, lanes == target.float_lanes() ? 4 : 3));
  // Rows and columns in pairs: the output is whole kernel phases of a
  // stride-2 kernel (the usual one) in every tile.
  const int64_t rows = h % 2 == 0 ? 2 : 1;
  int64_t cols = 1;
  for (int64_t c = std::max<int64_t>(1, budget / (vectors * rows)); c >= 1; --c) {
    if (w % c == 0 && (c % 2 == 0 || c == 1)) {
      cols = c;
      break;
    }
  }
  CpuTiling t = NhwcRegisterTile(rows, cols, vectors * lanes);
  t.reduce_steps = {s.reduce_axes[0].extent};
  t.compute_at = kComputeAtS0;
  t.parallel = CpuTiling::DefaultParallel(TilingNest::Of(dag));
  return BuildDefaultTiledSchedule(dag, target, t);
}

absl::StatusOr<Trace> RowConv2dSchedule(const ComputeDAG& dag, const Target& target) {
  if (ConvStage(dag) < 0) return absl::InvalidArgumentError("not a dense NCHW convolution");
  return RowTiledConv(dag, target, /*channels=*/true);
}

absl::StatusOr<Trace> ChannelVectorConv2dSchedule(const ComputeDAG& dag, const Target& target,
                                                  const ConvTile& tile) {
  if (ConvStage(dag) < 0) return absl::InvalidArgumentError("not a dense NCHW convolution");
  const int64_t lanes = target.float_lanes();
  TF_RETURN_IF_ERROR(CheckConvTile(tile, lanes));
  CpuTiling t;
  t.pad_pass = true;
  t.vector_axis = 1;
  t.unroll_tile = true;
  t.pack = true;
  t.spatial = {{1, 1, 1, false},
               {1, 1, tile.channels, false},
               {1, 1, tile.rows, true},
               {1, 1, tile.cols, true}};
  t.reduce_steps.assign(3, 1);
  t.compute_at = kComputeAtS0;
  t.parallel = CpuTiling::DefaultParallel(TilingNest::Of(dag));
  return BuildDefaultTiledSchedule(dag, target, t);
}

absl::StatusOr<Trace> WinogradConv2dSchedule(const ComputeDAG& dag, const Target& target) {
  // Images of at most this many output tiles take the whole-image form.
  constexpr int64_t kWinogradWholeImageTiles = 64;
  // Every default schedule asks here first: the stages by name, no state.
  auto stage = [&](const char* name) {
    for (size_t i = 0; i < dag.stages.size(); ++i)
      if (dag.stages[i].name == name) return int(i);
    return -1;
  };
  const int in = stage("winograd_in"), gemm = stage("winograd_gemm"), out = stage("winograd_out");
  if (in < 0 || gemm != in + 1 || out != gemm + 1) {
    return absl::InvalidArgumentError("not a Winograd convolution");
  }
  const int last = int(dag.stages.size()) - 1;
  const Stage& m = dag.stages[size_t(gemm)];
  const int64_t c = m.reduce_axes[0].extent, k = m.axes[5].extent, tw = m.axes[4].extent;
  const int64_t cl = WidestDividingLanes(c, target.float_lanes());
  const int64_t kl = WidestDividingLanes(k, target.float_lanes());
  if (cl == 0 || kl == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(c, " input or ", k, " output channels are not whole vectors"));
  }
  // Register tile: output tiles x channel vectors, as many accumulators as
  // the budget allows: AVX2 12 of 16 registers; AVX-512 28 of 32 (the
  // transformed input is a broadcast memory operand of each FMA, so the
  // weight vectors take the other 4); 24 of 32 otherwise.
  const int64_t budget = target.float_lanes() == 8 ? 12 : target.float_lanes() == 16 ? 28 : 24;
  int64_t best_t = 1, best_kt = 1;
  for (int64_t kt = 1; kt <= std::min<int64_t>(k / kl, 4); ++kt) {  // ties: more vectors
    if ((k / kl) % kt != 0) continue;
    const int64_t t = DivisorAtMost(tw, budget / kt);
    if (t * kt >= best_t * best_kt) best_t = t, best_kt = kt;
  }
  ScheduleBuilder b(dag, target);
  if (last != out) TF_RETURN_IF_ERROR(b.Add(ComputeInlineStep{out}));
  // The padding pass (data_pad, before the input transform), parallel over
  // (n, row) and vectorized over the channels.
  if (in == 1) {
    TF_RETURN_IF_ERROR(b.Fuse(0, {0, 1}));  // f w c
    TF_RETURN_IF_ERROR(b.Annotate(0, 0, v1::ANNOTATION_PARALLEL));
    TF_RETURN_IF_ERROR(b.Annotate(0, 2, v1::ANNOTATION_VECTORIZE));
  }
  // Few tiles, many channels (14x14 layers): the transformed weight
  // outweighs the tiles, so the whole image takes one pass of the input
  // transform, and the output is parallel over blocks of channels, each
  // computing the GEMMs of its channels for every tile first (U read once).
  // Otherwise by rows of tiles: the output parallel over (n, tile row), the
  // GEMMs of that row computed there, the input transform inside them.
  const bool whole = m.axes[3].extent * tw <= kWinogradWholeImageTiles;
  // The output: n y x k -> the parallel loop, tile column, channel block,
  // then the tile's 2 x 2 outputs unrolled and the channels vectorized.
  TF_RETURN_IF_ERROR(b.Split(last, 1, {2}));                          // n yo yi x k
  TF_RETURN_IF_ERROR(b.Split(last, 3, {2}));                          // n yo yi xo xi k
  TF_RETURN_IF_ERROR(b.Split(last, 5, {whole ? best_kt * kl : kl}));  // n yo yi xo xi ko ki
  if (whole) {
    TF_RETURN_IF_ERROR(b.Reorder(last, {5, 0, 1, 3, 2, 4, 6}));  // ko n yo xo yi xi ki
  } else {
    TF_RETURN_IF_ERROR(b.Reorder(last, {0, 1, 3, 5, 2, 4, 6}));  // n yo xo ko yi xi ki
    TF_RETURN_IF_ERROR(b.Fuse(last, {0, 1}));                    // f xo ko yi xi ki
  }
  const int o = whole ? 1 : 0;  // loops before the tile column
  TF_RETURN_IF_ERROR(b.Annotate(last, 0, v1::ANNOTATION_PARALLEL));
  for (int i : {3, 4}) TF_RETURN_IF_ERROR(b.Annotate(last, o + i, v1::ANNOTATION_UNROLL));
  TF_RETURN_IF_ERROR(b.Annotate(last, o + 5, v1::ANNOTATION_VECTORIZE));
  // The GEMMs: eps nu n ty tx k rc -> n (ty) eps nu (ty) txo ko rc txi kt ki.
  TF_RETURN_IF_ERROR(b.Split(gemm, 4, {best_t}));       // eps nu n ty txo txi k rc
  TF_RETURN_IF_ERROR(b.Split(gemm, 6, {best_kt, kl}));  // ... txi ko kt ki rc
  TF_RETURN_IF_ERROR(b.Reorder(gemm, whole ? std::vector<int>{2, 0, 1, 3, 4, 6, 9, 5, 7, 8}
                                           : std::vector<int>{2, 3, 0, 1, 4, 6, 9, 5, 7, 8}));
  for (int i : {7, 8}) TF_RETURN_IF_ERROR(b.Annotate(gemm, i, v1::ANNOTATION_UNROLL));
  TF_RETURN_IF_ERROR(b.Annotate(gemm, 9, v1::ANNOTATION_VECTORIZE));
  // U [eps][nu][c][k] packed [eps][nu][1][k / block][c][block]: a channel
  // block's weights for one (eps, nu) contiguous, not one cache line per
  // page-sized stride.
  TF_RETURN_IF_ERROR(PackWeight(b, gemm, {0, 0, c, whole ? best_kt * kl : kl}));
  TF_RETURN_IF_ERROR(b.ComputeAt(gemm, last, 0));
  // The input transform: eps nu n ty tx c -> n ty tx eps nu c, so that its
  // buffer holds each tile's channels contiguously per (eps, nu).
  TF_RETURN_IF_ERROR(b.Reorder(in, {2, 3, 4, 0, 1, 5}));
  if (whole) {
    TF_RETURN_IF_ERROR(b.Fuse(in, {0, 1}));  // f tx eps nu c
    TF_RETURN_IF_ERROR(b.Annotate(in, 0, v1::ANNOTATION_PARALLEL));
  }
  for (int i : {3, 4}) TF_RETURN_IF_ERROR(b.Annotate(in, i - o, v1::ANNOTATION_UNROLL));
  TF_RETURN_IF_ERROR(b.Annotate(in, 5 - o, v1::ANNOTATION_VECTORIZE));
  if (!whole) TF_RETURN_IF_ERROR(b.ComputeAt(in, gemm, 1));
  Trace t = b.Take();
  t.is_default = true;
  return t;
}

}  // namespace tunefarm::schedule
