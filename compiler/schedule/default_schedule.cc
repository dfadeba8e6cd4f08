#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/handwritten.h"
#include "compiler/schedule/schedule.h"

namespace tunefarm::schedule {

using ir::ComputeDAG;
using ir::Expr;
using ir::ExprKind;
using ir::ForKind;
using ir::Mentions;
using ir::Stage;
using ir::Target;

namespace v1 = ::tunefarm::v1;

namespace {

// For a stage that only copies (no reduction, its value one load of an
// input, possibly selected): the output axis the load's innermost index
// follows, where that is one axis and not the innermost; else -1.
int TransposedAxis(const Stage& s) {
  if (!s.reduce_axes.empty() || s.axes.size() < 2) return -1;
  Expr body = s.body;
  while (body->kind == ExprKind::kSelect) body = body->args[1];
  if (body->kind != ExprKind::kLoad || body->args.empty()) return -1;
  int axis = -1;
  for (size_t k = 0; k < s.axes.size(); ++k) {
    if (!Mentions(body->args.back(), s.axes[k].var.get())) continue;
    if (axis >= 0) return -1;
    axis = int(k);
  }
  return axis == int(s.axes.size()) - 1 ? -1 : axis;
}

}  // namespace

Trace DefaultSchedule(const ComputeDAG& dag, const Target& target) {
  if (target.is_gpu()) return DefaultGpuSchedule(dag, target);
  // Convolutions get a hand-written register-tiled schedule where one applies.
  absl::StatusOr<Trace> winograd = WinogradConv2dSchedule(dag, target);
  if (winograd.ok()) return *std::move(winograd);
  absl::StatusOr<Trace> nhwc = NhwcConv2dSchedule(dag, target);
  if (nhwc.ok()) return *std::move(nhwc);
  absl::StatusOr<Trace> upsample = NhwcConvTransposeSchedule(dag, target);
  if (upsample.ok()) return *std::move(upsample);
  if (PrefersRowConv(dag, target)) {
    absl::StatusOr<Trace> row = RowConv2dSchedule(dag, target);
    if (row.ok()) return *std::move(row);
  }
  absl::StatusOr<Trace> conv = ChannelVectorConv2dSchedule(dag, target, PickConvTile(dag, target));
  if (conv.ok()) return *std::move(conv);
  absl::StatusOr<Trace> grouped = GroupedConv2dSchedule(dag, target);
  if (grouped.ok()) return *std::move(grouped);
  absl::StatusOr<Trace> product = MatmulTiledSchedule(dag, target);
  if (product.ok()) return *std::move(product);
  absl::StatusOr<Trace> dense = HandwrittenDenseSchedule(dag, target);
  if (dense.ok()) {
    dense->is_default = true;
    return *std::move(dense);
  }
  Trace sched;
  sched.is_default = true;
  ScheduleState st = ScheduleState::Initial(dag);
  auto apply = [&](Step step) {
    absl::Status s = st.Apply(step, int(sched.steps.size()), target);
    TF_CHECK(s.ok());
    sched.steps.push_back(std::move(step));
  };
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& s = dag.stages[i];
    // Padding is inlined into its readers too: the codegen reads a padded
    // row as one masked load (no gather, no extra pass), 1.5-4x a pass of
    // its own on depthwise and pooling layers (docs/tuning-guide.md).
    if (s.inlinable && s.output != dag.output) {
      apply(ComputeInlineStep{int(i)});
    }
  }
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    if (st.stages()[i].location == StageState::Location::kInline) continue;
    const Stage& s = dag.stages[i];
    int ns = int(s.axes.size()), nr = int(s.reduce_axes.size());
    // (No fusing of a short innermost axis with the one before it: the
    // fused index turns the input loads into gathers.)
    int inner_axes = 1;
    int last = ns - inner_axes;
    if (int gather = TransposedAxis(s); gather >= 0) {
      // A transpose: the output axis the input's rows run along goes just
      // outside the innermost, so the input rows one outer iteration
      // gathers from stay in cache while every output row they feed is
      // written (docs/tuning-guide.md).
      ReorderStep ro{int(i)};
      for (int k = 0; k < ns - 1; ++k)
        if (k != gather) ro.order.push_back(k);
      ro.order.push_back(gather);
      ro.order.push_back(ns - 1);
      int64_t outer = 1;  // the iterations outside the gathering axis
      for (int k = 0; k < ns - 2; ++k) outer *= s.axes[size_t(ro.order[size_t(k)])].extent;
      apply(std::move(ro));
      // The axes outside the gathering one are the parallel loop; with
      // fewer than 16 iterations there ([1, 85, 8400] -> [1, 8400, 85]),
      // the gathering axis joins it (its fastest part, so chunks keep
      // neighbouring rows together). A 2-D transpose parallelizes the
      // gathering axis.
      if (outer >= 16) last = ns - 2;
    }
    // Loops: spatial[0..last), reductions, then the whole innermost spatial
    // loop, vectorized. Each reduction step then updates a contiguous row of
    // the output whose elements do not depend on each other (an axpy), so
    // the vector loop runs at load/store throughput rather than at the
    // latency of one accumulator; no split, so no guarded tail.
    if (nr > 0) {
      ReorderStep ro{int(i)};
      for (int k = 0; k < last; ++k) ro.order.push_back(k);
      for (int k = 0; k < nr; ++k) ro.order.push_back(ns + k);
      for (int k = last; k < ns; ++k) ro.order.push_back(k);
      apply(std::move(ro));
      if (inner_axes == 2) apply(FuseStep{int(i), {last + nr, last + nr + 1}});
    }
    int outer = last;
    if (outer >= 2) {
      FuseStep f{int(i)};
      for (int k = 0; k < outer; ++k) f.iters.push_back(k);
      apply(std::move(f));
      outer = 1;
    }
    const auto& iters = st.stages()[i].iters;
    if (outer == 1 && iters[0].extent > 1) {
      apply(AnnotateStep{int(i), 0, v1::ANNOTATION_PARALLEL});
    }
    int innermost = int(st.stages()[i].iters.size()) - 1;
    if (st.stages()[i].iters[innermost].kind == ForKind::kSerial &&
        st.stages()[i].iters[innermost].extent > 1) {
      apply(AnnotateStep{int(i), innermost, v1::ANNOTATION_VECTORIZE});
    }
  }
  return sched;
}

}  // namespace tunefarm::schedule
