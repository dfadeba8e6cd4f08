#include "compiler/schedule/schedule.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/overload.h"
#include "common/status_macros.h"
#include "compiler/ir/simplify.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/handwritten.h"

namespace tunefarm::schedule {

using ir::BindingName;
using ir::ComputeDAG;
using ir::Expr;
using ir::ExprNode;
using ir::FloorDiv;
using ir::FloorMod;
using ir::ForKind;
using ir::IntImm;
using ir::IterVar;
using ir::LinearForm;
using ir::Linearize;
using ir::Load;
using ir::MapLoads;
using ir::PackedIndex;
using ir::ReduceKind;
using ir::Stage;
using ir::StageInputs;
using ir::Substitute;
using ir::Target;
using ir::TensorDecl;
using ir::Var;
using ir::VarMapEntry;
using ir::VisitLoads;
using ir::kGpuTensorCoreSketchId;
namespace {

namespace v1 = ::tunefarm::v1;
using absl::InvalidArgumentError;
using absl::StrCat;

// A stage's loops before any step: its axes, then its reduction axes.
StageState InitialStageState(const Stage& s) {
  StageState ss;
  for (const IterVar& a : s.axes) {
    ss.iters.push_back({a.var, a.extent, false, ForKind::kSerial});
    ss.axis_values.push_back(a.var);
  }
  for (const IterVar& a : s.reduce_axes) {
    ss.iters.push_back({a.var, a.extent, true, ForKind::kSerial});
    ss.axis_values.push_back(a.var);
  }
  return ss;
}

absl::Status CheckScope(v1::MemoryScope scope, const Target& target) {
  if (scope == v1::MEMORY_SCOPE_SHARED && !target.is_gpu()) {
    return InvalidArgumentError("shared memory is for GPU targets");
  }
  return absl::OkStatus();
}

}  // namespace

ScheduleState ScheduleState::Initial(const ComputeDAG& dag) {
  ScheduleState st(dag);
  for (const Stage& s : dag.stages) st.stages_.push_back(InitialStageState(s));
  return st;
}

absl::StatusOr<ScheduleState> ScheduleState::Replay(const ComputeDAG& dag, const Trace& trace,
                                                    const Target& target) {
  if (trace.sketch_id == kGpuTensorCoreSketchId) {
    if (!trace.steps.empty()) {
      return InvalidArgumentError(StrCat("a tensor-core schedule is its decisions; this one has ",
                                         trace.steps.size(), " steps"));
    }
    TF_ASSIGN_OR_RETURN(ComputeDAG with_buffers, TensorCoreDag(dag, target, trace.decisions));
    ScheduleState st = Initial(with_buffers);
    st.gpu_ = true;
    st.tensor_core_ = trace.decisions;
    return st;
  }
  ScheduleState st = Initial(dag);
  st.gpu_ = target.is_gpu();
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    TF_RETURN_IF_ERROR(st.Apply(trace.steps[i], int(i), target));
  }
  return st;
}

absl::Status ScheduleState::CheckStage(int stage) const {
  if (stage < 0 || stage >= int(stages_.size())) {
    return InvalidArgumentError(
        StrCat("stage ", stage, " does not exist (the program has ", stages_.size(), " stages)"));
  }
  if (stages_[stage].location == StageState::Location::kInline) {
    return InvalidArgumentError(
        StrCat("stage ", stage, " (", dag_.stages[stage].name, ") is inlined and has no loops"));
  }
  return absl::OkStatus();
}

absl::Status ScheduleState::CheckIter(int stage, int iter) const {
  TF_RETURN_IF_ERROR(CheckStage(stage));
  if (iter < 0 || iter >= int(stages_[stage].iters.size())) {
    return InvalidArgumentError(StrCat("loop ", iter, " of stage ", stage,
                                       " does not exist (it has ", stages_[stage].iters.size(),
                                       " loops)"));
  }
  return absl::OkStatus();
}

absl::Status ScheduleState::Pragma(const PragmaStep& p) {
  TF_RETURN_IF_ERROR(CheckStage(p.stage));
  if (p.kind == v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP) {
    if (p.value < 0 || p.value > 4096) {
      return InvalidArgumentError(StrCat("auto_unroll_max_step ", p.value, " not in [0, 4096]"));
    }
    stages_[p.stage].auto_unroll_max_step = p.value;
    return absl::OkStatus();
  }
  if (p.kind != v1::PRAGMA_KIND_UNROLL_EXPLICIT) return InvalidArgumentError("unknown pragma");
  return absl::OkStatus();
}

absl::Status ScheduleState::ComputeRoot(int stage) {
  TF_RETURN_IF_ERROR(CheckStage(stage));
  if (stages_[stage].location == StageState::Location::kAt) {
    stages_[stage].location = StageState::Location::kRoot;
    stages_[stage].attach_stage = -1;
    stages_[stage].attach_var = Expr();
  }
  return absl::OkStatus();
}

absl::Status ScheduleState::Apply(const Step& step, int index, const Target& target) {
  gpu_ = gpu_ || target.is_gpu();
  if (std::holds_alternative<FollowSplitStep>(step)) {
    return absl::UnimplementedError(
        StrCat("step ", index, " (", StepName(step), "): this primitive is not built yet"));
  }
  absl::Status s =
      std::visit(Overload{
                     [&](const SplitStep& x) { return Split(x); },
                     [&](const ReorderStep& x) { return Reorder(x); },
                     [&](const FuseStep& x) { return Fuse(x); },
                     [&](const AnnotateStep& x) { return Annotate(x, target); },
                     [&](const PragmaStep& x) { return Pragma(x); },
                     [&](const ComputeAtStep& x) { return ComputeAt(x); },
                     [&](const ComputeInlineStep& x) { return Inline(x.stage); },
                     [&](const ComputeRootStep& x) { return ComputeRoot(x.stage); },
                     [&](const CacheReadStep& x) { return CacheRead(x, target); },
                     [&](const CacheWriteStep& x) { return CacheWrite(x, target); },
                     [&](const StorageAlignStep& x) { return StorageAlign(x, target); },
                     [&](const LayoutPackStep& x) { return LayoutPack(x); },
                     [&](const FollowSplitStep&) { return absl::OkStatus(); },
                 },
                 step);
  if (s.ok()) return s;
  return absl::Status(s.code(), StrCat("step ", index, " (", StepName(step), "): ", s.message()));
}

void ScheduleState::SubstituteLeaf(StageState& st, const ExprNode* var, const Expr& value) {
  std::vector<VarMapEntry> map = {{var, value}};
  for (Expr& e : st.axis_values) e = Substitute(e, map);
  for (StageState::Guard& g : st.guards) g.cond = Substitute(g.cond, map);
}

absl::Status ScheduleState::Split(const SplitStep& s) {
  TF_RETURN_IF_ERROR(CheckIter(s.stage, s.iter));
  if (s.lengths.empty()) return InvalidArgumentError("no split lengths");
  StageState& st = stages_[s.stage];
  LoopIter it = st.iters[s.iter];
  if (it.kind != ForKind::kSerial) return InvalidArgumentError("cannot split an annotated loop");
  std::vector<int64_t> lengths(s.lengths.begin(), s.lengths.end());
  if (s.inner_to_outer) std::reverse(lengths.begin(), lengths.end());
  int64_t inner = 1;
  for (int64_t l : lengths) {
    if (l <= 0) return InvalidArgumentError(StrCat("split length ", l, " (must be positive)"));
    if (l > it.extent) {
      return InvalidArgumentError(
          StrCat("split length ", l, " exceeds the loop extent ", it.extent));
    }
    inner *= l;
    if (inner > it.extent * 64)
      return InvalidArgumentError("split lengths multiply past the extent");
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
  st.iters.erase(st.iters.begin() + s.iter);
  st.iters.insert(st.iters.begin() + s.iter, fresh.begin(), fresh.end());
  // Stages computed inside the split loop move into its innermost part.
  MoveAttachments(it.var.get(), fresh.back().var);
  return absl::OkStatus();
}

absl::Status ScheduleState::Reorder(const ReorderStep& s) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage));
  StageState& st = stages_[s.stage];
  if (int(s.order.size()) != int(st.iters.size())) {
    return InvalidArgumentError(
        StrCat("order has ", int(s.order.size()), " loops, the stage has ", st.iters.size()));
  }
  std::vector<bool> seen(st.iters.size(), false);
  std::vector<LoopIter> next;
  for (int i : s.order) {
    if (i < 0 || i >= int(st.iters.size()) || seen[i]) {
      return InvalidArgumentError(StrCat("order is not a permutation (", i, ")"));
    }
    seen[i] = true;
    next.push_back(st.iters[i]);
  }
  st.iters = std::move(next);
  return absl::OkStatus();
}

absl::Status ScheduleState::Fuse(const FuseStep& s) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage));
  StageState& st = stages_[s.stage];
  if (int(s.iters.size()) < 2) return InvalidArgumentError("fuse needs at least two loops");
  for (int k = 0; k < int(s.iters.size()); ++k) {
    TF_RETURN_IF_ERROR(CheckIter(s.stage, s.iters[k]));
    if (k > 0 && s.iters[k] != s.iters[k - 1] + 1) {
      return InvalidArgumentError("fused loops must be consecutive");
    }
  }
  int first = s.iters[0], n = int(s.iters.size());
  bool reduce = st.iters[first].reduce;
  int64_t extent = 1;
  std::string name;
  for (int k = 0; k < n; ++k) {
    const LoopIter& it = st.iters[first + k];
    if (it.reduce != reduce)
      return InvalidArgumentError("cannot fuse a reduction loop with a spatial loop");
    if (it.kind != ForKind::kSerial) return InvalidArgumentError("cannot fuse an annotated loop");
    if (st.location == StageState::Location::kAt && !it.reduce) {
      return InvalidArgumentError("cannot fuse the spatial loops of a stage computed at another");
    }
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
    MoveAttachments(it.var.get(), fused.var);
    inner *= it.extent;
  }
  st.iters.erase(st.iters.begin() + first, st.iters.begin() + first + n);
  st.iters.insert(st.iters.begin() + first, fused);
  return absl::OkStatus();
}

absl::Status ScheduleState::Annotate(const AnnotateStep& s, const Target& target) {
  TF_RETURN_IF_ERROR(CheckIter(s.stage, s.iter));
  StageState& st = stages_[s.stage];
  LoopIter& it = st.iters[s.iter];
  if (it.kind != ForKind::kSerial) return InvalidArgumentError("loop is already annotated");
  switch (s.annotation) {
    case v1::ANNOTATION_DOUBLE_BUFFER:
      if (!target.is_gpu()) {
        return InvalidArgumentError("double buffering stages GPU shared memory; the target is " +
                                    target.ToString());
      }
      if (it.double_buffer) return InvalidArgumentError("loop is already double-buffered");
      it.double_buffer = true;
      return absl::OkStatus();
    case v1::ANNOTATION_PARALLEL:
    case v1::ANNOTATION_VECTORIZE:
      if (target.is_gpu()) {
        return InvalidArgumentError(StrCat(v1::Annotation_Name(s.annotation),
                                           " is for CPU targets; on cuda, bind the loop to "
                                           "blockIdx/threadIdx or unroll it"));
      }
      if (it.reduce) {
        return InvalidArgumentError(s.annotation == v1::ANNOTATION_PARALLEL
                                        ? "cannot parallelize a reduction loop"
                                        : "cannot vectorize a reduction loop");
      }
      it.kind = s.annotation == v1::ANNOTATION_PARALLEL ? ForKind::kParallel : ForKind::kVectorized;
      return absl::OkStatus();
    case v1::ANNOTATION_UNROLL:
      if (it.extent > kMaxUnrolledCopies) {
        return InvalidArgumentError(StrCat("cannot unroll a loop of ", it.extent,
                                           " iterations (at most ", kMaxUnrolledCopies, ")"));
      }
      it.kind = ForKind::kUnrolled;
      return absl::OkStatus();
    case v1::ANNOTATION_BLOCK_X:
    case v1::ANNOTATION_BLOCK_Y:
    case v1::ANNOTATION_BLOCK_Z:
    case v1::ANNOTATION_THREAD_X:
    case v1::ANNOTATION_THREAD_Y:
    case v1::ANNOTATION_THREAD_Z:
    case v1::ANNOTATION_VTHREAD: {
      if (!target.is_gpu()) {
        return InvalidArgumentError(StrCat("binding to ", v1::Annotation_Name(s.annotation),
                                           " is for GPU targets, not ", target.ToString()));
      }
      static const ForKind kKinds[] = {ForKind::kBlockX,  ForKind::kBlockY,  ForKind::kBlockZ,
                                       ForKind::kThreadX, ForKind::kThreadY, ForKind::kThreadZ,
                                       ForKind::kVThread};
      ForKind kind = kKinds[s.annotation - v1::ANNOTATION_BLOCK_X];
      if (it.reduce) {
        return InvalidArgumentError(StrCat("cannot bind reduction loop ", it.var->name, " to ",
                                           BindingName(kind),
                                           " (cross-thread reductions are not built)"));
      }
      if (st.location != StageState::Location::kRoot) {
        return InvalidArgumentError(StrCat("stage ", s.stage, " (", dag_.stages[s.stage].name,
                                           ") is computed at another stage; only root stages "
                                           "bind loops to the grid"));
      }
      for (const LoopIter& other : st.iters) {
        if (other.kind == kind) {
          return InvalidArgumentError(StrCat("stage ", s.stage, " already binds ", other.var->name,
                                             " to ", BindingName(kind)));
        }
      }
      it.kind = kind;
      return absl::OkStatus();
    }
    default:
      return InvalidArgumentError("unknown annotation");
  }
}

absl::Status ScheduleState::StorageAlign(const StorageAlignStep& s, const Target& target) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage));
  if (!target.is_gpu()) {
    return InvalidArgumentError("storage_align pads GPU shared memory; the target is " +
                                target.ToString());
  }
  const TensorDecl& t = dag_.tensors[dag_.stages[s.stage].output];
  if (!t.shared) {
    return InvalidArgumentError(StrCat("stage ", s.stage, " (", t.name,
                                       ") is not a shared-memory copy (cache_read into shared)"));
  }
  if (s.iter < 0 || s.iter + 1 >= int(t.shape.size())) {
    return InvalidArgumentError(StrCat("dimension ", s.iter, " of ", t.name,
                                       " has no inner dimension to pad (it has ", t.shape.size(),
                                       ")"));
  }
  if (s.factor < 1 || s.factor > 1024 || s.offset < 0 || s.offset >= s.factor) {
    return InvalidArgumentError(
        StrCat("factor ", s.factor, " / offset ", s.offset, ": need 0 <= offset < factor"));
  }
  StageState& st = stages_[s.stage];
  st.align_dim = s.iter;
  st.align_factor = s.factor;
  st.align_offset = s.offset;
  return absl::OkStatus();
}

absl::Status ScheduleState::Inline(int stage) {
  TF_RETURN_IF_ERROR(CheckStage(stage));
  const Stage& s = dag_.stages[stage];
  if (s.reduce != ReduceKind::kNone) return InvalidArgumentError("cannot inline a reduction");
  if (s.output == dag_.output) return InvalidArgumentError("cannot inline the output stage");
  StageState& st = stages_[stage];
  for (const LoopIter& it : st.iters) {
    if (it.kind != ForKind::kSerial || st.iters.size() != s.axes.size()) {
      return InvalidArgumentError("cannot inline a stage whose loops were transformed");
    }
  }
  for (const StageState& other : stages_) {
    if (other.location == StageState::Location::kAt) {
      return InvalidArgumentError("compute_inline must come before compute_at steps");
    }
  }
  st.location = StageState::Location::kInline;
  return absl::OkStatus();
}

void ScheduleState::MoveAttachments(const ExprNode* from, const Expr& to) {
  for (StageState& other : stages_) {
    if (other.location == StageState::Location::kAt && other.attach_var.get() == from) {
      other.attach_var = to;
    }
  }
}

bool ScheduleState::ReadsTensor(int stage, int tensor) const {
  bool reads = false;
  VisitLoads(dag_.stages[stage].body, [&](const ExprNode& n) {
    if (n.tensor == tensor) {
      reads = true;
      return;
    }
    int p = dag_.ProducerOf(n.tensor);
    if (p >= 0 && stages_[p].location == StageState::Location::kInline && ReadsTensor(p, tensor)) {
      reads = true;
    }
  });
  return reads;
}

absl::Status ScheduleState::ComputeAt(const ComputeAtStep& s) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage));
  TF_RETURN_IF_ERROR(CheckIter(s.target_stage, s.target_iter));
  const Stage& producer = dag_.stages[s.stage];
  if (producer.output == dag_.output)
    return InvalidArgumentError("the output stage stays at the root");
  if (s.target_stage <= s.stage) {
    return InvalidArgumentError(
        StrCat("stage ", s.target_stage, " does not come after stage ", s.stage));
  }
  // Two levels of nesting at most: a stage may sit inside one that is
  // computed at a root stage (a register tile computed at a thread loop or
  // a CPU tile, staging its inputs per reduction step; a Winograd input
  // transform inside its GEMM inside a row of output tiles). A cache_read
  // copy may sit deeper.
  const bool copy = dag_.tensors[producer.output].cache_copy;
  const StageState& target = stages_[s.target_stage];
  if (target.location == StageState::Location::kAt && !copy &&
      stages_[target.attach_stage].location != StageState::Location::kRoot) {
    return InvalidArgumentError(StrCat(
        "stage ", s.target_stage, " is computed at a stage that is itself computed at another"));
  }
  if (target.location == StageState::Location::kInline) {
    return InvalidArgumentError(StrCat("stage ", s.target_stage, " is inlined"));
  }
  for (size_t j = 0; j < stages_.size(); ++j) {
    if (stages_[j].location == StageState::Location::kAt && stages_[j].attach_stage == s.stage &&
        !dag_.tensors[dag_.stages[j].output].cache_copy) {
      return InvalidArgumentError(StrCat("stage ", j, " is computed at stage ", s.stage));
    }
    if (int(j) == s.stage || stages_[j].location == StageState::Location::kInline) continue;
    bool reads = ReadsTensor(int(j), producer.output);
    if (int(j) == s.target_stage && !reads) {
      return InvalidArgumentError(
          StrCat("stage ", j, " (", dag_.stages[j].name, ") does not read ", producer.name));
    }
    if (int(j) != s.target_stage && reads) {
      return InvalidArgumentError(
          StrCat(producer.name, " is also read by stage ", j, " (", dag_.stages[j].name, ")"));
    }
  }
  // The region computed in each iteration is a box of the output; the
  // stage's spatial loops must cover each output axis as plain (split, not
  // fused) loops for the box to shrink them.
  StageState& st = stages_[s.stage];
  std::set<const ExprNode*> used;
  for (size_t d = 0; d < producer.axes.size(); ++d) {
    LinearForm f = Linearize(st.axis_values[d], {});
    for (const auto& [atom, coef] : f.terms) {
      bool leaf = false;
      for (const LoopIter& it : st.iters) leaf |= it.var.same_as(atom) && !it.reduce;
      if (!leaf || coef <= 0 || !used.insert(atom.get()).second) {
        return InvalidArgumentError(StrCat("axis ", d, " of ", producer.name,
                                           " is not a plain split of its loops (fused?)"));
      }
    }
  }
  st.location = StageState::Location::kAt;
  st.attach_stage = s.target_stage;
  st.attach_var = stages_[s.target_stage].iters[s.target_iter].var;
  return absl::OkStatus();
}

absl::StatusOr<int> ScheduleState::Operand(int stage, int input) const {
  std::vector<int> inputs = StageInputs(dag_.stages[stage]);
  if (input < 0 || input >= int(inputs.size())) {
    return InvalidArgumentError(
        StrCat("stage ", stage, " has no operand ", input, " (it reads ", inputs.size(), ")"));
  }
  return inputs[input];
}

void ScheduleState::InsertStage(int at, Stage stage) {
  StageState st = InitialStageState(stage);
  dag_.stages.insert(dag_.stages.begin() + at, std::move(stage));
  for (StageState& other : stages_) {
    if (other.attach_stage >= at) ++other.attach_stage;
  }
  stages_.insert(stages_.begin() + at, std::move(st));
}

absl::Status ScheduleState::CacheWrite(const CacheWriteStep& s, const Target& target) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage));
  TF_RETURN_IF_ERROR(CheckScope(s.scope, target));
  if (s.scope == v1::MEMORY_SCOPE_SHARED) {
    return absl::UnimplementedError(
        "cache_write into shared memory is not built; accumulate in local (registers)");
  }
  const int stage = s.stage;
  const Stage orig = dag_.stages[stage];
  StageState& st = stages_[stage];
  if (st.location != StageState::Location::kRoot || !st.guards.empty() ||
      st.iters.size() != orig.axes.size() + orig.reduce_axes.size()) {
    return InvalidArgumentError("cache_write must come before the stage's loops are transformed");
  }
  for (const LoopIter& it : st.iters) {
    if (it.kind != ForKind::kSerial) {
      return InvalidArgumentError("cache_write must come before the stage's loops are annotated");
    }
  }
  for (const StageState& other : stages_) {
    if (other.location == StageState::Location::kAt && other.attach_stage == stage) {
      return InvalidArgumentError("cache_write of a stage that others are computed at");
    }
  }
  // The new stage computes into `name.local`; the old one becomes a copy.
  TensorDecl local = dag_.tensors[orig.output];
  local.name += ".local";
  local.role = TensorDecl::Role::kIntermediate;
  local.is_constant = false;
  local.float16 = false;  // the accumulator stays float32
  dag_.tensors.push_back(local);
  int local_id = int(dag_.tensors.size()) - 1;
  Stage compute = orig;
  compute.name += ".local";
  compute.output = local_id;
  compute.inlinable = false;
  Stage copy;
  copy.name = orig.name;
  copy.output = orig.output;
  std::vector<Expr> idx;
  for (const IterVar& a : orig.axes) {
    copy.axes.push_back({Var(a.var->name + ".c"), a.extent});
    idx.push_back(copy.axes.back().var);
  }
  copy.body = Load(local_id, dag_.tensors[orig.output].type, idx);
  copy.inlinable = true;
  // The stage's loop state stays with the computing stage (same variables);
  // nothing is attached to it (checked above).
  dag_.stages[stage] = compute;
  InsertStage(stage + 1, std::move(copy));
  return absl::OkStatus();
}

absl::Status ScheduleState::CacheRead(const CacheReadStep& s, const Target& target) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage));
  TF_RETURN_IF_ERROR(CheckScope(s.scope, target));
  TF_ASSIGN_OR_RETURN(const int tensor, Operand(s.stage, s.input));
  std::vector<int> readers(s.reader_stages.begin(), s.reader_stages.end());
  if (readers.empty()) readers.push_back(s.stage);
  for (int r : readers) {
    TF_RETURN_IF_ERROR(CheckStage(r));
    if (!ReadsTensor(r, tensor) || stages_[r].location == StageState::Location::kInline) {
      return InvalidArgumentError(
          StrCat("reader stage ", r, " does not read ", dag_.tensors[tensor].name));
    }
  }
  for (const StageState& st : stages_) {
    if (st.location == StageState::Location::kAt) {
      return InvalidArgumentError("cache_read must come before compute_at steps");
    }
  }
  // The copy stage: right after the tensor's producer (first, for an input).
  TensorDecl copy_t = dag_.tensors[tensor];
  copy_t.name += s.scope == v1::MEMORY_SCOPE_SHARED ? ".shared" : ".local";
  copy_t.shared = s.scope == v1::MEMORY_SCOPE_SHARED;
  copy_t.cache_copy = true;
  copy_t.float16 = copy_t.float16 && copy_t.shared;  // registers hold float32
  copy_t.role = TensorDecl::Role::kIntermediate;
  copy_t.is_constant = false;
  copy_t.packed_from = -1;
  copy_t.pack_block.clear();
  copy_t.pack_inner.clear();
  dag_.tensors.push_back(copy_t);
  const int copy_id = int(dag_.tensors.size()) - 1;
  Stage copy;
  copy.name = copy_t.name;
  copy.output = copy_id;
  std::vector<Expr> idx;
  for (size_t d = 0; d < copy_t.shape.size(); ++d) {
    copy.axes.push_back({Var(StrCat("c", d)), copy_t.shape[d]});
    idx.push_back(copy.axes.back().var);
  }
  copy.body = Load(tensor, copy_t.type, idx);
  copy.inlinable = true;
  // Readers load the copy.
  for (int r : readers) {
    dag_.stages[r].body =
        MapLoads(dag_.stages[r].body, [&](const ExprNode& load, const std::vector<Expr>& args) {
          return load.tensor == tensor ? Load(copy_id, load.type, args) : Expr();
        });
  }
  InsertStage(dag_.ProducerOf(tensor) + 1, std::move(copy));
  return absl::OkStatus();
}

absl::Status ScheduleState::LayoutPack(const LayoutPackStep& s) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage));
  TF_ASSIGN_OR_RETURN(const int tensor, Operand(s.stage, s.input));
  const TensorDecl orig = dag_.tensors[tensor];
  auto arg = std::find(dag_.args.begin(), dag_.args.end(), tensor);
  if (!orig.is_constant || arg == dag_.args.end()) {
    return InvalidArgumentError(StrCat("operand ", s.input, " (", orig.name,
                                       ") is not a constant input; only weights can be repacked"));
  }
  if (int(s.block.size()) != int(orig.shape.size())) {
    return InvalidArgumentError(StrCat(orig.name, " has ", orig.shape.size(),
                                       " dimensions, block has ", int(s.block.size())));
  }
  TensorDecl packed = orig;
  packed.name += ".packed";
  packed.packed_from = tensor;
  packed.shape.clear();
  std::vector<int> blocked;
  for (int d = 0; d < int(s.block.size()); ++d) {
    int64_t b = s.block[d];
    if (b < 0 || b > orig.shape[d]) {
      return InvalidArgumentError(
          StrCat("block ", b, " for dimension ", d, " of extent ", orig.shape[d]));
    }
    packed.pack_block.push_back(b);
    packed.shape.push_back(b == 0 ? orig.shape[d] : (orig.shape[d] + b - 1) / b);
    if (b > 0) blocked.push_back(d);
  }
  if (blocked.empty()) return InvalidArgumentError("no dimension is blocked");
  if (int(s.inner_dims.size()) == 0) {
    packed.pack_inner = blocked;
  } else {
    packed.pack_inner.assign(s.inner_dims.begin(), s.inner_dims.end());
    std::vector<int> sorted = packed.pack_inner;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != blocked) {
      return InvalidArgumentError("inner_dims must list each blocked dimension once");
    }
  }
  for (int d : packed.pack_inner) packed.shape.push_back(packed.pack_block[d]);
  dag_.tensors.push_back(packed);
  int packed_id = int(dag_.tensors.size()) - 1;
  *arg = packed_id;
  // Every reader of the constant now reads the packed copy.
  for (Stage& stage : dag_.stages) {
    stage.body = MapLoads(stage.body, [&](const ExprNode& load, const std::vector<Expr>& args) {
      return load.tensor == tensor
                 ? Load(packed_id, load.type, PackedIndex(dag_.tensors[packed_id], args))
                 : Expr();
    });
  }
  return absl::OkStatus();
}

}  // namespace tunefarm::schedule
