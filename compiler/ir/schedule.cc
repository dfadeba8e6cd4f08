#include "compiler/ir/schedule.h"

#include <algorithm>
#include <numeric>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;
using absl::InvalidArgumentError;
using absl::StrCat;

const char* StepName(const v1::Step& s) {
  switch (s.kind_case()) {
    case v1::Step::kSplit: return "split";
    case v1::Step::kReorder: return "reorder";
    case v1::Step::kFuse: return "fuse";
    case v1::Step::kAnnotate: return "annotate";
    case v1::Step::kPragma: return "pragma";
    case v1::Step::kComputeAt: return "compute_at";
    case v1::Step::kComputeInline: return "compute_inline";
    case v1::Step::kComputeRoot: return "compute_root";
    case v1::Step::kCacheRead: return "cache_read";
    case v1::Step::kCacheWrite: return "cache_write";
    case v1::Step::kStorageAlign: return "storage_align";
    case v1::Step::kLayoutPack: return "layout_pack";
    case v1::Step::kFollowSplit: return "follow_split";
    default: return "empty";
  }
}

// Replaces loads of `tensor` in `e` by `stage`'s body at the loaded indices.
Expr InlineInto(const Expr& e, int tensor, const Stage& stage) {
  if (!e.defined() || e->args.empty()) return e;
  if (e->kind == ExprKind::kLoad && e->tensor == tensor) {
    std::vector<VarMapEntry> map;
    for (size_t d = 0; d < stage.axes.size(); ++d) {
      map.push_back({stage.axes[d].var.get(), InlineInto(e->args[d], tensor, stage)});
    }
    return Substitute(stage.body, map);
  }
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr& a : e->args) {
    args.push_back(InlineInto(a, tensor, stage));
    changed |= !args.back().same_as(a);
  }
  if (!changed) return e;
  return WithArgs(e, std::move(args));
}

constexpr int64_t kMaxUnrolledCopies = 512;

}  // namespace

ScheduleState ScheduleState::Initial(const ComputeDAG& dag) {
  ScheduleState st(dag);
  for (const Stage& s : dag.stages) {
    StageState ss;
    for (const IterVar& a : s.axes) {
      ss.iters.push_back({a.var, a.extent, false, ForKind::kSerial});
      ss.axis_values.push_back(a.var);
    }
    for (const IterVar& a : s.reduce_axes) {
      ss.iters.push_back({a.var, a.extent, true, ForKind::kSerial});
      ss.axis_values.push_back(a.var);
    }
    st.stages_.push_back(std::move(ss));
  }
  return st;
}

absl::StatusOr<ScheduleState> ScheduleState::Replay(const ComputeDAG& dag,
                                                    const v1::Schedule& schedule,
                                                    const Target& target) {
  ScheduleState st = Initial(dag);
  for (int i = 0; i < schedule.steps_size(); ++i) {
    TF_RETURN_IF_ERROR(st.Apply(schedule.steps(i), i, target));
  }
  return st;
}

absl::Status ScheduleState::CheckStage(int stage) const {
  if (stage < 0 || stage >= int(stages_.size())) {
    return InvalidArgumentError(
        StrCat("stage ", stage, " does not exist (the program has ", stages_.size(), " stages)"));
  }
  if (stages_[stage].location == StageState::Location::kInline) {
    return InvalidArgumentError(StrCat("stage ", stage, " (", dag_->stages[stage].name,
                                       ") is inlined and has no loops"));
  }
  return absl::OkStatus();
}

absl::Status ScheduleState::CheckIter(int stage, int iter) const {
  TF_RETURN_IF_ERROR(CheckStage(stage));
  if (iter < 0 || iter >= int(stages_[stage].iters.size())) {
    return InvalidArgumentError(StrCat("loop ", iter, " of stage ", stage, " does not exist (it has ",
                                       stages_[stage].iters.size(), " loops)"));
  }
  return absl::OkStatus();
}

absl::Status ScheduleState::Apply(const v1::Step& step, int index, const Target& target) {
  absl::Status s;
  switch (step.kind_case()) {
    case v1::Step::kSplit: s = Split(step.split()); break;
    case v1::Step::kReorder: s = Reorder(step.reorder()); break;
    case v1::Step::kFuse: s = Fuse(step.fuse()); break;
    case v1::Step::kAnnotate: s = Annotate(step.annotate(), target); break;
    case v1::Step::kPragma: {
      const v1::PragmaStep& p = step.pragma();
      s = CheckStage(p.stage());
      if (s.ok() && p.kind() == v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP) {
        if (p.value() < 0 || p.value() > 4096) {
          s = InvalidArgumentError(StrCat("auto_unroll_max_step ", p.value(), " not in [0, 4096]"));
        } else {
          stages_[p.stage()].auto_unroll_max_step = p.value();
        }
      } else if (s.ok() && p.kind() != v1::PRAGMA_KIND_UNROLL_EXPLICIT) {
        s = InvalidArgumentError("unknown pragma");
      }
      break;
    }
    case v1::Step::kComputeInline: s = Inline(step.compute_inline().stage()); break;
    case v1::Step::kComputeRoot: s = CheckStage(step.compute_root().stage()); break;
    case v1::Step::kComputeAt:
    case v1::Step::kCacheRead:
    case v1::Step::kCacheWrite:
    case v1::Step::kStorageAlign:
    case v1::Step::kLayoutPack:
    case v1::Step::kFollowSplit:
      return absl::UnimplementedError(
          StrCat("step ", index, " (", StepName(step), "): this primitive is not built yet"));
    default: s = InvalidArgumentError("empty step");
  }
  if (s.ok()) return s;
  return absl::Status(s.code(), StrCat("step ", index, " (", StepName(step), "): ", s.message()));
}

void ScheduleState::SubstituteLeaf(StageState& st, const ExprNode* var, const Expr& value) {
  std::vector<VarMapEntry> map = {{var, value}};
  for (Expr& e : st.axis_values) e = Substitute(e, map);
  for (StageState::Guard& g : st.guards) g.cond = Substitute(g.cond, map);
}

absl::Status ScheduleState::Split(const v1::SplitStep& s) {
  TF_RETURN_IF_ERROR(CheckIter(s.stage(), s.iter()));
  if (s.lengths().empty()) return InvalidArgumentError("no split lengths");
  StageState& st = stages_[s.stage()];
  LoopIter it = st.iters[s.iter()];
  if (it.kind != ForKind::kSerial) return InvalidArgumentError("cannot split an annotated loop");
  std::vector<int64_t> lengths(s.lengths().begin(), s.lengths().end());
  if (s.inner_to_outer()) std::reverse(lengths.begin(), lengths.end());
  int64_t inner = 1;
  for (int64_t l : lengths) {
    if (l <= 0) return InvalidArgumentError(StrCat("split length ", l, " (must be positive)"));
    if (l > it.extent) {
      return InvalidArgumentError(StrCat("split length ", l, " exceeds the loop extent ", it.extent));
    }
    inner *= l;
    if (inner > it.extent * 64) return InvalidArgumentError("split lengths multiply past the extent");
  }
  int64_t outer = (it.extent + inner - 1) / inner;
  std::string base = it.var->name;
  std::vector<LoopIter> fresh;
  fresh.push_back({Var(base + ".o"), outer, it.reduce, ForKind::kSerial});
  for (size_t i = 0; i < lengths.size(); ++i) {
    fresh.push_back({Var(StrCat(base, ".i", i)), lengths[i], it.reduce, ForKind::kSerial});
  }
  Expr value = fresh[0].var;
  for (size_t i = 1; i < fresh.size(); ++i) value = value * IntImm(fresh[i].extent) + fresh[i].var;
  if (outer * inner != it.extent) {
    st.guards.push_back({value < IntImm(it.extent), it.reduce});
  }
  SubstituteLeaf(st, it.var.get(), value);
  st.iters.erase(st.iters.begin() + s.iter());
  st.iters.insert(st.iters.begin() + s.iter(), fresh.begin(), fresh.end());
  return absl::OkStatus();
}

absl::Status ScheduleState::Reorder(const v1::ReorderStep& s) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage()));
  StageState& st = stages_[s.stage()];
  if (s.order_size() != int(st.iters.size())) {
    return InvalidArgumentError(StrCat("order has ", s.order_size(), " loops, the stage has ",
                                       st.iters.size()));
  }
  std::vector<bool> seen(st.iters.size(), false);
  std::vector<LoopIter> next;
  for (int i : s.order()) {
    if (i < 0 || i >= int(st.iters.size()) || seen[i]) {
      return InvalidArgumentError(StrCat("order is not a permutation (", i, ")"));
    }
    seen[i] = true;
    next.push_back(st.iters[i]);
  }
  st.iters = std::move(next);
  return absl::OkStatus();
}

absl::Status ScheduleState::Fuse(const v1::FuseStep& s) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage()));
  StageState& st = stages_[s.stage()];
  if (s.iters_size() < 2) return InvalidArgumentError("fuse needs at least two loops");
  for (int k = 0; k < s.iters_size(); ++k) {
    TF_RETURN_IF_ERROR(CheckIter(s.stage(), s.iters(k)));
    if (k > 0 && s.iters(k) != s.iters(k - 1) + 1) {
      return InvalidArgumentError("fused loops must be consecutive");
    }
  }
  int first = s.iters(0), n = s.iters_size();
  bool reduce = st.iters[first].reduce;
  int64_t extent = 1;
  std::string name;
  for (int k = 0; k < n; ++k) {
    const LoopIter& it = st.iters[first + k];
    if (it.reduce != reduce) return InvalidArgumentError("cannot fuse a reduction loop with a spatial loop");
    if (it.kind != ForKind::kSerial) return InvalidArgumentError("cannot fuse an annotated loop");
    extent *= it.extent;
    if (extent > (int64_t{1} << 40)) return InvalidArgumentError("fused extent too large");
    name += (k ? "." : "") + it.var->name;
  }
  LoopIter fused{Var(name + ".f"), extent, reduce, ForKind::kSerial};
  int64_t inner = 1;
  for (int k = n - 1; k >= 0; --k) {
    const LoopIter& it = st.iters[first + k];
    Expr v = FloorMod(FloorDiv(fused.var, IntImm(inner)), IntImm(it.extent));
    if (k == 0) v = FloorDiv(fused.var, IntImm(inner));
    SubstituteLeaf(st, it.var.get(), v);
    inner *= it.extent;
  }
  st.iters.erase(st.iters.begin() + first, st.iters.begin() + first + n);
  st.iters.insert(st.iters.begin() + first, fused);
  return absl::OkStatus();
}

absl::Status ScheduleState::Annotate(const v1::AnnotateStep& s, const Target& target) {
  TF_RETURN_IF_ERROR(CheckIter(s.stage(), s.iter()));
  LoopIter& it = stages_[s.stage()].iters[s.iter()];
  if (it.kind != ForKind::kSerial) return InvalidArgumentError("loop is already annotated");
  switch (s.annotation()) {
    case v1::ANNOTATION_PARALLEL:
      if (it.reduce) return InvalidArgumentError("cannot parallelize a reduction loop");
      it.kind = ForKind::kParallel;
      return absl::OkStatus();
    case v1::ANNOTATION_VECTORIZE:
      if (it.reduce) return InvalidArgumentError("cannot vectorize a reduction loop");
      it.kind = ForKind::kVectorized;
      return absl::OkStatus();
    case v1::ANNOTATION_UNROLL:
      if (it.extent > kMaxUnrolledCopies) {
        return InvalidArgumentError(StrCat("cannot unroll a loop of ", it.extent, " iterations (at most ",
                                           kMaxUnrolledCopies, ")"));
      }
      it.kind = ForKind::kUnrolled;
      return absl::OkStatus();
    default:
      if (!target.is_gpu()) {
        return InvalidArgumentError(StrCat("binding to ", v1::Annotation_Name(s.annotation()),
                                           " is for GPU targets, not ", target.ToString()));
      }
      return absl::UnimplementedError("GPU thread binding is not built yet");
  }
}

absl::Status ScheduleState::Inline(int stage) {
  TF_RETURN_IF_ERROR(CheckStage(stage));
  const Stage& s = dag_->stages[stage];
  if (s.reduce != ReduceKind::kNone) return InvalidArgumentError("cannot inline a reduction");
  if (s.output == dag_->output) return InvalidArgumentError("cannot inline the output stage");
  StageState& st = stages_[stage];
  for (const LoopIter& it : st.iters) {
    if (it.kind != ForKind::kSerial || st.iters.size() != s.axes.size()) {
      return InvalidArgumentError("cannot inline a stage whose loops were transformed");
    }
  }
  st.location = StageState::Location::kInline;
  return absl::OkStatus();
}

v1::Schedule DefaultSchedule(const ComputeDAG& dag, const Target& target) {
  v1::Schedule sched;
  sched.set_is_default(true);
  ScheduleState st = ScheduleState::Initial(dag);
  auto apply = [&](v1::Step step) {
    absl::Status s = st.Apply(step, sched.steps_size(), target);
    TF_CHECK(s.ok());
    *sched.add_steps() = std::move(step);
  };
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& s = dag.stages[i];
    // Padding feeding a reduction stays a stage of its own: one cheap pass
    // that keeps a select and two clamps out of the innermost loop.
    bool pads_a_reduction = false;
    for (const Stage& reader : dag.stages) {
      if (reader.reduce == ReduceKind::kNone) continue;
      VisitLoads(reader.body, [&](const ExprNode& n) { pads_a_reduction |= n.tensor == s.output; });
    }
    if (s.inlinable && s.output != dag.output && !pads_a_reduction) {
      v1::Step step;
      step.mutable_compute_inline()->set_stage(int(i));
      apply(step);
    }
  }
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    if (st.stages()[i].location == StageState::Location::kInline) continue;
    const Stage& s = dag.stages[i];
    int ns = int(s.axes.size()), nr = int(s.reduce_axes.size());
    // (Fusing a short innermost axis with the one before it was measured
    // slower: the fused index turns the input loads into gathers.)
    int inner_axes = 1;
    int last = ns - inner_axes;
    // Loops: spatial[0..last), reductions, then the whole innermost spatial
    // loop, vectorized. Each reduction step then updates a contiguous row of
    // the output whose elements do not depend on each other (an axpy), so
    // the vector loop runs at load/store throughput rather than at the
    // latency of one accumulator; no split, so no guarded tail.
    if (nr > 0) {
      v1::Step step;
      auto* ro = step.mutable_reorder();
      ro->set_stage(int(i));
      for (int k = 0; k < last; ++k) ro->add_order(k);
      for (int k = 0; k < nr; ++k) ro->add_order(ns + k);
      for (int k = last; k < ns; ++k) ro->add_order(k);
      apply(step);
      if (inner_axes == 2) {
        v1::Step fuse;
        auto* f = fuse.mutable_fuse();
        f->set_stage(int(i));
        f->add_iters(last + nr);
        f->add_iters(last + nr + 1);
        apply(fuse);
      }
    }
    int outer = last;
    if (outer >= 2) {
      v1::Step step;
      auto* f = step.mutable_fuse();
      f->set_stage(int(i));
      for (int k = 0; k < outer; ++k) f->add_iters(k);
      apply(step);
      outer = 1;
    }
    const auto& iters = st.stages()[i].iters;
    if (outer == 1 && iters[0].extent > 1) {
      v1::Step step;
      auto* a = step.mutable_annotate();
      a->set_stage(int(i));
      a->set_iter(0);
      a->set_annotation(v1::ANNOTATION_PARALLEL);
      apply(step);
    }
    int innermost = int(st.stages()[i].iters.size()) - 1;
    if (st.stages()[i].iters[innermost].kind == ForKind::kSerial &&
        st.stages()[i].iters[innermost].extent > 1) {
      v1::Step step;
      auto* a = step.mutable_annotate();
      a->set_stage(int(i));
      a->set_iter(innermost);
      a->set_annotation(v1::ANNOTATION_VECTORIZE);
      apply(step);
    }
  }
  return sched;
}

Stmt Lower(const ScheduleState& state) {
  const ComputeDAG& dag = state.dag();
  // Bodies with inlined producers substituted, in stage order.
  std::vector<Expr> bodies;
  for (const Stage& s : dag.stages) bodies.push_back(s.body);
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    if (state.stages()[i].location != StageState::Location::kInline) continue;
    Stage inlined = dag.stages[i];
    inlined.body = bodies[i];
    for (size_t j = i + 1; j < dag.stages.size(); ++j) {
      bodies[j] = InlineInto(bodies[j], inlined.output, inlined);
    }
  }

  std::vector<Stmt> nests;
  std::vector<int> allocs;
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const StageState& st = state.stages()[i];
    if (st.location == StageState::Location::kInline) continue;
    const Stage& s = dag.stages[i];
    if (s.output != dag.output) allocs.push_back(s.output);
    size_t ns = s.axes.size();
    std::vector<VarMapEntry> map;
    std::vector<Expr> out_idx;
    for (size_t d = 0; d < st.axis_values.size(); ++d) {
      const IterVar& a = d < ns ? s.axes[d] : s.reduce_axes[d - ns];
      map.push_back({a.var.get(), st.axis_values[d]});
      if (d < ns) out_idx.push_back(st.axis_values[d]);
    }
    Expr value = Substitute(bodies[i], map);
    Expr all_guards = BoolImm(true), spatial_guards = BoolImm(true);
    for (const StageState::Guard& g : st.guards) {
      all_guards = And(all_guards, g.cond);
      if (!g.reduce) spatial_guards = And(spatial_guards, g.cond);
    }
    Stmt inner;
    Stmt init;
    int first_reduce = -1;
    if (s.reduce == ReduceKind::kNone) {
      inner = IfThen(all_guards, Store(s.output, out_idx, value));
    } else {
      Expr cur = Load(s.output, ScalarType::kFloat32, out_idx);
      Expr next = s.reduce == ReduceKind::kSum ? cur + value : Max(cur, value);
      inner = IfThen(all_guards, Store(s.output, out_idx, next));
      Expr init_value = s.reduce == ReduceKind::kSum
                            ? FloatImm(0)
                            : FloatImm(-std::numeric_limits<double>::infinity());
      // The initialisation can sit just outside the reduction loops when every
      // reduction loop is inside every spatial loop; otherwise it gets its own nest.
      int last_spatial = -1;
      for (size_t k = 0; k < st.iters.size(); ++k) {
        if (st.iters[k].reduce && first_reduce < 0) first_reduce = int(k);
        if (!st.iters[k].reduce) last_spatial = int(k);
      }
      if (first_reduce > last_spatial) {
        init = IfThen(spatial_guards, Store(s.output, out_idx, init_value));
      } else {
        std::vector<IterVar> fresh;
        std::vector<Expr> idx;
        for (size_t d = 0; d < ns; ++d) {
          fresh.push_back({Var(s.axes[d].var->name + ".init"), s.axes[d].extent});
          idx.push_back(fresh.back().var);
        }
        Stmt init_nest = Store(s.output, idx, init_value);
        for (int d = int(ns) - 1; d >= 0; --d) {
          init_nest = For(fresh[d].var, fresh[d].extent, d == 0 ? ForKind::kParallel : ForKind::kSerial,
                          init_nest);
        }
        nests.push_back(init_nest);
        first_reduce = -1;
      }
    }
    // Auto-unroll: innermost serial loops whose extents multiply to at most the limit.
    std::vector<ForKind> kinds;
    for (const LoopIter& it : st.iters) kinds.push_back(it.kind);
    if (st.auto_unroll_max_step > 0) {
      int64_t product = 1;
      for (int k = int(st.iters.size()) - 1; k >= 0; --k) {
        product *= st.iters[k].extent;
        if (product > st.auto_unroll_max_step) break;
        if (kinds[k] == ForKind::kSerial) kinds[k] = ForKind::kUnrolled;
      }
    }
    // Unrolling is a hint, honoured only for a chain of innermost loops (all
    // unrolled or vectorized inside it) and never beyond kMaxUnrolledCopies
    // copies of the body: unrolling a loop that holds a loop nest multiplies
    // code size (and LLVM's compile time) without helping the inner loops.
    int64_t copies = 1;
    bool innermost_chain = true;
    for (int k = int(st.iters.size()) - 1; k >= 0; --k) {
      if (kinds[k] == ForKind::kUnrolled) {
        if (!innermost_chain || copies * st.iters[k].extent > kMaxUnrolledCopies) {
          kinds[k] = ForKind::kSerial;
        } else {
          copies *= st.iters[k].extent;
        }
      }
      innermost_chain = innermost_chain &&
                        (kinds[k] == ForKind::kUnrolled || kinds[k] == ForKind::kVectorized);
    }
    for (int k = int(st.iters.size()) - 1; k >= 0; --k) {
      inner = For(st.iters[k].var, st.iters[k].extent, kinds[k], inner);
      if (k == first_reduce) inner = Seq({init, inner});
    }
    nests.push_back(inner);
  }
  Stmt program = Seq(nests);
  for (auto it = allocs.rbegin(); it != allocs.rend(); ++it) program = Allocate(*it, program);
  return program;
}

}  // namespace tunefarm::ir
