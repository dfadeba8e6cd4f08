#include "compiler/schedule/schedule.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/handwritten.h"
#include "compiler/ir/simplify.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;
using absl::InvalidArgumentError;
using absl::StrCat;

const char* StepName(const v1::Step& s) {
  switch (s.kind_case()) {
    case v1::Step::kSplit:
      return "split";
    case v1::Step::kReorder:
      return "reorder";
    case v1::Step::kFuse:
      return "fuse";
    case v1::Step::kAnnotate:
      return "annotate";
    case v1::Step::kPragma:
      return "pragma";
    case v1::Step::kComputeAt:
      return "compute_at";
    case v1::Step::kComputeInline:
      return "compute_inline";
    case v1::Step::kComputeRoot:
      return "compute_root";
    case v1::Step::kCacheRead:
      return "cache_read";
    case v1::Step::kCacheWrite:
      return "cache_write";
    case v1::Step::kStorageAlign:
      return "storage_align";
    case v1::Step::kLayoutPack:
      return "layout_pack";
    case v1::Step::kFollowSplit:
      return "follow_split";
    default:
      return "empty";
  }
}

// Replaces loads of `tensor` in `e` by `stage`'s body at the loaded indices.
Expr InlineInto(const Expr& e, int tensor, const Stage& stage) {
  return MapLoads(e, [&](const ExprNode& load, const std::vector<Expr>& args) {
    if (load.tensor != tensor) return Expr();
    std::vector<VarMapEntry> map;
    for (size_t d = 0; d < stage.axes.size(); ++d)
      map.push_back({stage.axes[d].var.get(), args[d]});
    return Substitute(stage.body, map);
  });
}

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

constexpr int64_t kMaxUnrolledCopies = 512;

}  // namespace

ScheduleState ScheduleState::Initial(const ComputeDAG& dag) {
  ScheduleState st(dag);
  for (const Stage& s : dag.stages) st.stages_.push_back(InitialStageState(s));
  return st;
}

absl::StatusOr<ScheduleState> ScheduleState::Replay(const ComputeDAG& dag,
                                                    const v1::Schedule& schedule,
                                                    const Target& target) {
  ScheduleState st = Initial(dag);
  st.gpu_ = target.is_gpu();
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

absl::Status ScheduleState::Apply(const v1::Step& step, int index, const Target& target) {
  gpu_ = gpu_ || target.is_gpu();
  absl::Status s;
  switch (step.kind_case()) {
    case v1::Step::kSplit:
      s = Split(step.split());
      break;
    case v1::Step::kReorder:
      s = Reorder(step.reorder());
      break;
    case v1::Step::kFuse:
      s = Fuse(step.fuse());
      break;
    case v1::Step::kAnnotate:
      s = Annotate(step.annotate(), target);
      break;
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
    case v1::Step::kComputeInline:
      s = Inline(step.compute_inline().stage());
      break;
    case v1::Step::kComputeRoot: {
      int stage = step.compute_root().stage();
      s = CheckStage(stage);
      if (s.ok() && stages_[stage].location == StageState::Location::kAt) {
        stages_[stage].location = StageState::Location::kRoot;
        stages_[stage].attach_stage = -1;
        stages_[stage].attach_var = Expr();
      }
      break;
    }
    case v1::Step::kComputeAt:
      s = ComputeAt(step.compute_at());
      break;
    case v1::Step::kCacheWrite:
      s = CacheWrite(step.cache_write(), target);
      break;
    case v1::Step::kLayoutPack:
      s = LayoutPack(step.layout_pack());
      break;
    case v1::Step::kCacheRead:
      s = CacheRead(step.cache_read(), target);
      break;
    case v1::Step::kStorageAlign:
      s = StorageAlign(step.storage_align(), target);
      break;
    case v1::Step::kFollowSplit:
      return absl::UnimplementedError(
          StrCat("step ", index, " (", StepName(step), "): this primitive is not built yet"));
    default:
      s = InvalidArgumentError("empty step");
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
  st.iters.erase(st.iters.begin() + s.iter());
  st.iters.insert(st.iters.begin() + s.iter(), fresh.begin(), fresh.end());
  // Stages computed inside the split loop move into its innermost part.
  MoveAttachments(it.var.get(), fresh.back().var);
  return absl::OkStatus();
}

absl::Status ScheduleState::Reorder(const v1::ReorderStep& s) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage()));
  StageState& st = stages_[s.stage()];
  if (s.order_size() != int(st.iters.size())) {
    return InvalidArgumentError(
        StrCat("order has ", s.order_size(), " loops, the stage has ", st.iters.size()));
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

absl::Status ScheduleState::Annotate(const v1::AnnotateStep& s, const Target& target) {
  TF_RETURN_IF_ERROR(CheckIter(s.stage(), s.iter()));
  StageState& st = stages_[s.stage()];
  LoopIter& it = st.iters[s.iter()];
  if (it.kind != ForKind::kSerial) return InvalidArgumentError("loop is already annotated");
  switch (s.annotation()) {
    case v1::ANNOTATION_PARALLEL:
    case v1::ANNOTATION_VECTORIZE:
      if (target.is_gpu()) {
        return InvalidArgumentError(StrCat(v1::Annotation_Name(s.annotation()),
                                           " is for CPU targets; on cuda, bind the loop to "
                                           "blockIdx/threadIdx or unroll it"));
      }
      if (it.reduce) {
        return InvalidArgumentError(s.annotation() == v1::ANNOTATION_PARALLEL
                                        ? "cannot parallelize a reduction loop"
                                        : "cannot vectorize a reduction loop");
      }
      it.kind =
          s.annotation() == v1::ANNOTATION_PARALLEL ? ForKind::kParallel : ForKind::kVectorized;
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
        return InvalidArgumentError(StrCat("binding to ", v1::Annotation_Name(s.annotation()),
                                           " is for GPU targets, not ", target.ToString()));
      }
      static const ForKind kKinds[] = {ForKind::kBlockX,  ForKind::kBlockY,  ForKind::kBlockZ,
                                       ForKind::kThreadX, ForKind::kThreadY, ForKind::kThreadZ,
                                       ForKind::kVThread};
      ForKind kind = kKinds[s.annotation() - v1::ANNOTATION_BLOCK_X];
      if (it.reduce) {
        return InvalidArgumentError(StrCat("cannot bind reduction loop ", it.var->name, " to ",
                                           BindingName(kind),
                                           " (cross-thread reductions are not built)"));
      }
      if (st.location != StageState::Location::kRoot) {
        return InvalidArgumentError(StrCat("stage ", s.stage(), " (", dag_.stages[s.stage()].name,
                                           ") is computed at another stage; only root stages "
                                           "bind loops to the grid"));
      }
      for (const LoopIter& other : st.iters) {
        if (other.kind == kind) {
          return InvalidArgumentError(StrCat("stage ", s.stage(), " already binds ",
                                             other.var->name, " to ", BindingName(kind)));
        }
      }
      it.kind = kind;
      return absl::OkStatus();
    }
    default:
      return InvalidArgumentError("unknown annotation");
  }
}

absl::Status ScheduleState::StorageAlign(const v1::StorageAlignStep& s, const Target& target) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage()));
  if (!target.is_gpu()) {
    return InvalidArgumentError("storage_align pads GPU shared memory; the target is " +
                                target.ToString());
  }
  const TensorDecl& t = dag_.tensors[dag_.stages[s.stage()].output];
  if (!t.shared) {
    return InvalidArgumentError(StrCat("stage ", s.stage(), " (", t.name,
                                       ") is not a shared-memory copy (cache_read into shared)"));
  }
  if (s.iter() < 0 || s.iter() + 1 >= int(t.shape.size())) {
    return InvalidArgumentError(StrCat("dimension ", s.iter(), " of ", t.name,
                                       " has no inner dimension to pad (it has ", t.shape.size(),
                                       ")"));
  }
  if (s.factor() < 1 || s.factor() > 1024 || s.offset() < 0 || s.offset() >= s.factor()) {
    return InvalidArgumentError(
        StrCat("factor ", s.factor(), " / offset ", s.offset(), ": need 0 <= offset < factor"));
  }
  StageState& st = stages_[s.stage()];
  st.align_dim = s.iter();
  st.align_factor = s.factor();
  st.align_offset = s.offset();
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

absl::Status ScheduleState::ComputeAt(const v1::ComputeAtStep& s) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage()));
  TF_RETURN_IF_ERROR(CheckIter(s.target_stage(), s.target_iter()));
  const Stage& producer = dag_.stages[s.stage()];
  if (producer.output == dag_.output)
    return InvalidArgumentError("the output stage stays at the root");
  if (s.target_stage() <= s.stage()) {
    return InvalidArgumentError(
        StrCat("stage ", s.target_stage(), " does not come after stage ", s.stage()));
  }
  // One level of nesting, except that a cache_read copy may sit inside a
  // stage that is itself computed at another (a register tile computed at a
  // thread loop or a CPU tile, staging its inputs per reduction step).
  const bool copy = dag_.tensors[producer.output].cache_copy;
  if (stages_[s.target_stage()].location != StageState::Location::kRoot && !copy) {
    return InvalidArgumentError(
        StrCat("stage ", s.target_stage(), " is itself computed at another stage"));
  }
  for (size_t j = 0; j < stages_.size(); ++j) {
    if (stages_[j].location == StageState::Location::kAt && stages_[j].attach_stage == s.stage() &&
        !dag_.tensors[dag_.stages[j].output].cache_copy) {
      return InvalidArgumentError(StrCat("stage ", j, " is computed at stage ", s.stage()));
    }
    if (int(j) == s.stage() || stages_[j].location == StageState::Location::kInline) continue;
    bool reads = ReadsTensor(int(j), producer.output);
    if (int(j) == s.target_stage() && !reads) {
      return InvalidArgumentError(
          StrCat("stage ", j, " (", dag_.stages[j].name, ") does not read ", producer.name));
    }
    if (int(j) != s.target_stage() && reads) {
      return InvalidArgumentError(
          StrCat(producer.name, " is also read by stage ", j, " (", dag_.stages[j].name, ")"));
    }
  }
  // The region computed in each iteration is a box of the output; the
  // stage's spatial loops must cover each output axis as plain (split, not
  // fused) loops for the box to shrink them.
  StageState& st = stages_[s.stage()];
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
  st.attach_stage = s.target_stage();
  st.attach_var = stages_[s.target_stage()].iters[s.target_iter()].var;
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

absl::Status ScheduleState::CacheWrite(const v1::CacheWriteStep& s, const Target& target) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage()));
  TF_RETURN_IF_ERROR(CheckScope(s.scope(), target));
  if (s.scope() == v1::MEMORY_SCOPE_SHARED) {
    return absl::UnimplementedError(
        "cache_write into shared memory is not built; accumulate in local (registers)");
  }
  const int stage = s.stage();
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

absl::Status ScheduleState::CacheRead(const v1::CacheReadStep& s, const Target& target) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage()));
  TF_RETURN_IF_ERROR(CheckScope(s.scope(), target));
  TF_ASSIGN_OR_RETURN(const int tensor, Operand(s.stage(), s.input()));
  std::vector<int> readers(s.reader_stages().begin(), s.reader_stages().end());
  if (readers.empty()) readers.push_back(s.stage());
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
  copy_t.name += s.scope() == v1::MEMORY_SCOPE_SHARED ? ".shared" : ".local";
  copy_t.shared = s.scope() == v1::MEMORY_SCOPE_SHARED;
  copy_t.cache_copy = true;
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

absl::Status ScheduleState::LayoutPack(const v1::LayoutPackStep& s) {
  TF_RETURN_IF_ERROR(CheckStage(s.stage()));
  TF_ASSIGN_OR_RETURN(const int tensor, Operand(s.stage(), s.input()));
  const TensorDecl orig = dag_.tensors[tensor];
  auto arg = std::find(dag_.args.begin(), dag_.args.end(), tensor);
  if (!orig.is_constant || arg == dag_.args.end()) {
    return InvalidArgumentError(StrCat("operand ", s.input(), " (", orig.name,
                                       ") is not a constant input; only weights can be repacked"));
  }
  if (s.block_size() != int(orig.shape.size())) {
    return InvalidArgumentError(
        StrCat(orig.name, " has ", orig.shape.size(), " dimensions, block has ", s.block_size()));
  }
  TensorDecl packed = orig;
  packed.name += ".packed";
  packed.packed_from = tensor;
  packed.shape.clear();
  std::vector<int> blocked;
  for (int d = 0; d < s.block_size(); ++d) {
    int64_t b = s.block(d);
    if (b < 0 || b > orig.shape[d]) {
      return InvalidArgumentError(
          StrCat("block ", b, " for dimension ", d, " of extent ", orig.shape[d]));
    }
    packed.pack_block.push_back(b);
    packed.shape.push_back(b == 0 ? orig.shape[d] : (orig.shape[d] + b - 1) / b);
    if (b > 0) blocked.push_back(d);
  }
  if (blocked.empty()) return InvalidArgumentError("no dimension is blocked");
  if (s.inner_dims_size() == 0) {
    packed.pack_inner = blocked;
  } else {
    packed.pack_inner.assign(s.inner_dims().begin(), s.inner_dims().end());
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

v1::Schedule DefaultSchedule(const ComputeDAG& dag, const Target& target) {
  if (target.is_gpu()) return DefaultGpuSchedule(dag, target);
  // Convolutions get the hand-written register-tiled schedule where it applies.
  absl::StatusOr<v1::Schedule> conv =
      HandwrittenConv2dSchedule(dag, target, PickConvTile(dag, target));
  if (conv.ok()) {
    conv->set_is_default(true);
    return *std::move(conv);
  }
  absl::StatusOr<v1::Schedule> dense = HandwrittenDenseSchedule(dag, target);
  if (dense.ok()) {
    dense->set_is_default(true);
    return *std::move(dense);
  }
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
    // Padding is inlined into its readers too: the codegen reads a padded
    // row as one masked load (no gather, no extra pass). Measured on the
    // default schedules of depthwise 3x3 C144 H56 (19 -> 29 GFLOP/s),
    // C96 H112 stride 2 (2.0 -> 8.3) and max pooling 3x3 stride 2 (1.0 ->
    // 4.0) on 1 thread, against padding as a pass of its own.
    if (s.inlinable && s.output != dag.output) {
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

namespace {

bool MentionsAny(const Expr& e, const std::set<const ExprNode*>& vars) {
  if (vars.count(e.get())) return true;
  for (const Expr& a : e->args) {
    if (MentionsAny(a, vars)) return true;
  }
  return false;
}

// The box of a tensor that the loops inside an attach point read:
// [lo[d], lo[d] + extent[d]) per dimension, lo in the outer loop variables.
struct Region {
  std::vector<Expr> lo;
  std::vector<int64_t> extent;
  std::vector<bool> full;         // dimension not analysed: the whole extent
  std::vector<LinearForm> outer;  // lo[d] = outer[d] + lo_const[d]
  std::vector<int64_t> lo_const;
  std::vector<bool> guard_lo, guard_hi;  // lo[d] + i may leave [0, shape[d])
};

// How a stage computed at another stores its region: one buffer dimension
// per spatial loop, in loop order; loop `iter` covers output axis `axis`
// with coefficient `coef` (mixed radix: coef = product of the finer loops).
struct LocalLayout {
  struct Dim {
    int iter;
    int axis;
    int64_t coef;
    bool outermost;  // the loop with the largest coefficient of its axis
    int64_t extent;  // shrunk to the region
  };
  std::vector<Dim> dims;
  std::vector<int64_t> Shape() const {
    std::vector<int64_t> s;
    for (const Dim& d : dims) s.push_back(d.extent);
    return s;
  }
};

class Lowerer {
 public:
  explicit Lowerer(const ScheduleState& state) : state_(state), dag_(state.dag()) {
    for (const Stage& s : dag_.stages) bodies_.push_back(s.body);
    for (size_t i = 0; i < dag_.stages.size(); ++i) {
      if (state_.stages()[i].location != StageState::Location::kInline) continue;
      Stage inlined = dag_.stages[i];
      inlined.body = bodies_[i];
      for (size_t j = i + 1; j < dag_.stages.size(); ++j) {
        bodies_[j] = InlineInto(bodies_[j], inlined.output, inlined);
      }
    }
  }

  Stmt Run() {
    std::vector<Stmt> nests;
    std::vector<int> allocs;
    for (size_t i = 0; i < dag_.stages.size(); ++i) {
      if (state_.stages()[i].location != StageState::Location::kRoot) continue;
      const Stage& s = dag_.stages[i];
      if (s.output != dag_.output) allocs.push_back(s.output);
      thread_loops_.clear();
      for (const LoopIter& it : state_.stages()[i].iters) {
        if (IsThreadBound(it.kind)) thread_loops_.push_back({it.var, it.extent});
      }
      // threadIdx.x varies fastest in the block's linear thread index.
      std::sort(thread_loops_.begin(), thread_loops_.end(), [&](const auto& a, const auto& b) {
        return KindOf(i, a.first) < KindOf(i, b.first);
      });
      Nest(int(i), nullptr, nullptr, &nests);
    }
    Stmt program = Seq(nests);
    for (auto it = allocs.rbegin(); it != allocs.rend(); ++it) {
      program = Allocate(*it, dag_.tensors[*it].shape, false, program);
    }
    return SimplifyProgram(program);
  }

 private:
  static constexpr int64_t kMaxStackBytes = 64 * 1024;

  // The region of `tensor` read by loads in `value` inside loops iters[k+1..].
  // `block_wide`: the region the whole GPU thread block reads (its
  // thread-bound loops, wherever they are, count as inner loops).
  Region InferRegion(int tensor, const Expr& value, const std::vector<LoopIter>& iters, int k,
                     bool block_wide = false) {
    const std::vector<int64_t>& shape = dag_.tensors[tensor].shape;
    size_t nd = shape.size();
    VarRanges ranges;
    std::set<const ExprNode*> inner;
    if (block_wide) {
      ranges = enclosing_ranges_;
      for (const auto& [var, extent] : thread_loops_) inner.insert(var.get());
    }
    for (size_t t = 0; t < iters.size(); ++t) {
      ranges[iters[t].var.get()] = iters[t].extent;
      if (int(t) > k) inner.insert(iters[t].var.get());
    }
    std::vector<std::vector<Expr>> loads;
    VisitLoads(value, [&](const ExprNode& n) {
      if (n.tensor == tensor) loads.push_back(n.args);
    });
    Region r;
    r.lo.resize(nd);
    r.extent.resize(nd);
    r.full.assign(nd, false);
    r.outer.resize(nd);
    r.lo_const.assign(nd, 0);
    r.guard_lo.assign(nd, true);
    r.guard_hi.assign(nd, true);
    for (size_t d = 0; d < nd; ++d) {
      bool ok = !loads.empty();
      std::string key;
      int64_t lo = 0, hi = 0;
      for (size_t l = 0; l < loads.size() && ok; ++l) {
        LinearForm f = Linearize(loads[l][d], ranges);
        LinearForm out, in;
        for (const auto& [atom, coef] : f.terms)
          (MentionsAny(atom, inner) ? in : out).Add(atom, coef);
        int64_t il, ih;
        if (!Bounds(in, ranges, &il, &ih)) {
          ok = false;
          break;
        }
        std::string k2 = ToString(FromLinear(out));
        if (l == 0) {
          key = k2;
          r.outer[d] = out;
          lo = f.constant + il, hi = f.constant + ih;
        } else if (k2 != key) {
          ok = false;
        } else {
          lo = std::min(lo, f.constant + il), hi = std::max(hi, f.constant + ih);
        }
      }
      if (!ok) {
        r.full[d] = true;
        r.lo[d] = IntImm(0);
        r.extent[d] = shape[d];
        r.guard_lo[d] = r.guard_hi[d] = false;
        continue;
      }
      r.lo_const[d] = lo;
      r.outer[d].constant = lo;
      r.lo[d] = FromLinear(r.outer[d]);
      r.extent[d] = hi - lo + 1;
      int64_t lmin, lmax;
      if (Bounds(r.outer[d], ranges, &lmin, &lmax)) {
        r.guard_lo[d] = lmin < 0;
        r.guard_hi[d] = lmax + r.extent[d] > shape[d];
      }
    }
    return r;
  }

  LocalLayout Layout(int stage, const Region& region) {
    const StageState& st = state_.stages()[stage];
    const Stage& s = dag_.stages[stage];
    LocalLayout layout;
    std::vector<LinearForm> forms;
    for (size_t d = 0; d < s.axes.size(); ++d) forms.push_back(Linearize(st.axis_values[d], {}));
    for (size_t t = 0; t < st.iters.size(); ++t) {
      const LoopIter& it = st.iters[t];
      if (it.reduce) continue;
      LocalLayout::Dim dim{int(t), -1, 0, false, it.extent};
      // A loop of one iteration (a split by 1) shares its coefficient with
      // the next loop out; it is always 0 and takes no part in the radix.
      if (it.extent > 1) {
        for (size_t d = 0; d < forms.size(); ++d) {
          int64_t c = forms[d].CoeffOf(it.var.get());
          if (c > 0) dim.axis = int(d), dim.coef = c;
        }
      }
      if (dim.axis >= 0) {
        int64_t ext = region.extent[dim.axis];
        dim.extent = std::min(it.extent, (ext + dim.coef - 1) / dim.coef);
        int64_t largest = 0;
        for (const auto& [atom, coef] : forms[dim.axis].terms) {
          for (const LoopIter& other : st.iters) {
            if (other.var.same_as(atom) && other.extent > 1) largest = std::max(largest, coef);
          }
        }
        dim.outermost = dim.coef == largest;
      }
      layout.dims.push_back(dim);
    }
    return layout;
  }

  // Loads of `tensor` in `value` rewritten to the local buffer's coordinates.
  Expr RewriteLoads(const Expr& value, int tensor, const Region& region, const LocalLayout& layout,
                    const VarRanges& ranges) {
    const StageState& producer = state_.stages()[dag_.ProducerOf(tensor)];
    return MapLoads(value, [&](const ExprNode& load, const std::vector<Expr>& args) {
      if (load.tensor != tensor) return Expr();
      std::vector<Expr> rel(args.size());
      for (size_t d = 0; d < args.size(); ++d) {
        if (region.full[d]) {
          rel[d] = args[d];
          continue;
        }
        LinearForm f = Linearize(args[d], ranges);
        for (const auto& [atom, coef] : region.outer[d].terms) f.Add(atom, -coef);
        f.constant -= region.lo_const[d];
        rel[d] = FromLinear(f);
      }
      std::vector<Expr> idx;
      for (const LocalLayout::Dim& dim : layout.dims) {
        if (dim.axis < 0) {
          idx.push_back(IntImm(0));
          continue;
        }
        Expr c = FloorDiv(rel[dim.axis], IntImm(dim.coef));
        idx.push_back(dim.outermost ? c : FloorMod(c, IntImm(producer.iters[dim.iter].extent)));
      }
      return Load(tensor, load.type, std::move(idx));
    });
  }

  ForKind KindOf(size_t stage, const Expr& var) const {
    for (const LoopIter& it : state_.stages()[stage].iters) {
      if (it.var.same_as(var)) return it.kind;
    }
    return ForKind::kSerial;
  }

  // The shape of a shared-memory box: the region's extents, the last one
  // widened so that dimension `align_dim` has a stride of factor*k + offset.
  std::vector<int64_t> SharedShape(int stage, const Region& region) {
    std::vector<int64_t> shape = region.extent;
    const StageState& st = state_.stages()[stage];
    if (st.align_dim < 0 || st.align_dim + 1 >= int(shape.size())) return shape;
    int64_t mid = 1;
    for (size_t d = st.align_dim + 1; d + 1 < shape.size(); ++d) mid *= shape[d];
    for (int64_t last = shape.back(); last < shape.back() + 1024; ++last) {
      if ((mid * last) % st.align_factor == st.align_offset) {
        shape.back() = last;
        break;
      }
    }
    return shape;
  }

  // All the block's threads copy the box of the shared stage's output:
  // element e (row-major in the box) by linear thread e mod (block size).
  Stmt CooperativeFetch(int stage, const Region& region) {
    const Stage& s = dag_.stages[stage];
    int64_t total = 1;
    for (int64_t e : region.extent) total *= e;
    Expr tid = IntImm(0);
    int64_t threads = 1;
    for (const auto& [var, extent] : thread_loops_) {
      tid = tid + var * IntImm(threads);
      threads *= extent;
    }
    Expr it = Var(s.name + ".fetch");
    Expr e = it * IntImm(threads) + tid;
    int64_t iterations = (total + threads - 1) / threads;
    Expr cond = total % threads != 0 ? e < IntImm(total) : BoolImm(true);
    std::vector<VarMapEntry> map;
    std::vector<Expr> idx;
    int64_t inner = total;
    for (size_t d = 0; d < s.axes.size(); ++d) {
      inner /= region.extent[d];
      Expr c = FloorDiv(e, IntImm(inner));
      if (d > 0) c = FloorMod(c, IntImm(region.extent[d]));
      idx.push_back(c);
      Expr at = region.lo[d] + c;
      if (region.guard_lo[d]) cond = And(cond, at >= IntImm(0));
      if (region.guard_hi[d]) cond = And(cond, at < IntImm(s.axes[d].extent));
      map.push_back({s.axes[d].var.get(), at});
    }
    Stmt store = IfThen(cond, Store(s.output, idx, Substitute(bodies_[stage], map)));
    return For(it, iterations, iterations <= 8 ? ForKind::kUnrolled : ForKind::kSerial, store);
  }

  // Loads of a shared box's tensor in `value`, rewritten to box coordinates.
  Expr RewriteBoxLoads(const Expr& value, int tensor, const Region& region,
                       const VarRanges& ranges) {
    return MapLoads(value, [&](const ExprNode& load, const std::vector<Expr>& args) {
      if (load.tensor != tensor) return Expr();
      std::vector<Expr> idx(args.size());
      for (size_t d = 0; d < args.size(); ++d) {
        if (region.full[d]) {
          idx[d] = args[d];
          continue;
        }
        LinearForm f = Linearize(args[d], ranges);
        for (const auto& [atom, coef] : region.outer[d].terms) {
          // Atoms rebuilt by Linearize are equal in form, not in identity.
          std::string key = ToString(atom);
          bool done = false;
          for (auto& [a2, c2] : f.terms) {
            if (c2 == coef && ToString(a2) == key) {
              f.Add(a2, -coef);
              done = true;
              break;
            }
          }
          if (!done) f.Add(atom, -coef);
        }
        f.constant -= region.lo_const[d];
        idx[d] = FromLinear(f);
      }
      return Load(tensor, load.type, std::move(idx));
    });
  }

  // Appends the loop nest(s) of `stage` to `out`. For a stage computed at
  // another, `region` is the box it computes and `layout` its buffer.
  void Nest(int stage, const Region* region, const LocalLayout* layout, std::vector<Stmt>* out) {
    const StageState& st = state_.stages()[stage];
    const Stage& s = dag_.stages[stage];
    size_t ns = s.axes.size();
    std::vector<LoopIter> iters = st.iters;
    if (layout != nullptr) {
      for (const LocalLayout::Dim& d : layout->dims) iters[d.iter].extent = d.extent;
    }
    VarRanges ranges;
    for (const LoopIter& it : iters) ranges[it.var.get()] = it.extent;

    std::vector<VarMapEntry> map;
    std::vector<Expr> out_idx;
    std::vector<int64_t> out_shape;
    Expr spatial_guards = BoolImm(true);
    for (size_t d = 0; d < st.axis_values.size(); ++d) {
      const IterVar& a = d < ns ? s.axes[d] : s.reduce_axes[d - ns];
      Expr v = st.axis_values[d];
      if (region != nullptr && d < ns) {
        int64_t lo, hi;
        if (!Bounds(v, ranges, &lo, &hi) || hi >= region->extent[d]) {
          spatial_guards = And(spatial_guards, v < IntImm(region->extent[d]));
        }
        v = region->lo[d] + v;
        if (region->guard_lo[d]) spatial_guards = And(spatial_guards, v >= IntImm(0));
        if (region->guard_hi[d]) spatial_guards = And(spatial_guards, v < IntImm(a.extent));
      }
      map.push_back({a.var.get(), v});
      if (d < ns && region == nullptr) out_idx.push_back(v), out_shape.push_back(a.extent);
    }
    if (layout != nullptr) {
      for (const LocalLayout::Dim& d : layout->dims) {
        out_idx.push_back(iters[d.iter].var);
        out_shape.push_back(d.extent);
      }
    }
    Expr value = Substitute(bodies_[stage], map);

    // Stages computed inside this one's loops: their regions, nests and buffers.
    struct Attached {
      int stage;
      int pos;
      Region region;
      LocalLayout layout;
      std::vector<Stmt> nest;
      bool shared = false;
      std::vector<int64_t> shared_shape;
    };
    std::vector<Attached> attached;
    for (size_t j = 0; j < dag_.stages.size(); ++j) {
      const StageState& pj = state_.stages()[j];
      if (pj.location != StageState::Location::kAt || pj.attach_stage != stage) continue;
      int pos = -1;
      for (size_t t = 0; t < iters.size(); ++t) {
        if (iters[t].var.same_as(pj.attach_var)) pos = int(t);
      }
      Attached a{int(j), pos, {}, {}, {}, false, {}};
      int tensor = dag_.stages[j].output;
      // The loops around the attach point, for stages nested further in.
      VarRanges saved = enclosing_ranges_;
      for (int t = 0; t <= pos; ++t) enclosing_ranges_[iters[t].var.get()] = iters[t].extent;
      if (state_.is_gpu() && dag_.tensors[tensor].shared) {
        a.shared = true;
        a.region = InferRegion(tensor, value, iters, pos, /*block_wide=*/true);
        a.shared_shape = SharedShape(int(j), a.region);
        a.nest.push_back(CooperativeFetch(int(j), a.region));
        VarRanges all = enclosing_ranges_;
        for (const LoopIter& it : iters) all[it.var.get()] = it.extent;
        value = RewriteBoxLoads(value, tensor, a.region, all);
      } else {
        a.region = InferRegion(tensor, value, iters, pos);
        a.layout = Layout(int(j), a.region);
        Nest(int(j), &a.region, &a.layout, &a.nest);
        value = RewriteLoads(value, tensor, a.region, a.layout, ranges);
      }
      enclosing_ranges_ = saved;
      attached.push_back(std::move(a));
    }
    auto wrap_attached = [&](int pos, Stmt body) {
      for (auto it = attached.rbegin(); it != attached.rend(); ++it) {
        if (it->pos != pos) continue;
        int tensor = dag_.stages[it->stage].output;
        if (it->shared) {
          // The first barrier keeps the fetch from overwriting what other
          // threads still read in the previous iteration; the second makes
          // the whole box visible before anyone reads it.
          body = AllocateShared(tensor, it->shared_shape,
                                Seq({Barrier(), it->nest[0], Barrier(), body}));
          continue;
        }
        std::vector<Stmt> seq = it->nest;
        seq.push_back(body);
        std::vector<int64_t> shape = it->layout.Shape();
        int64_t bytes = 4;
        for (int64_t e : shape) bytes *= e;
        // On a GPU a stage computed at another is a per-thread array.
        body = Allocate(tensor, shape, bytes <= kMaxStackBytes || state_.is_gpu(), Seq(seq));
      }
      return body;
    };

    Expr all_guards = spatial_guards;
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
      for (size_t k = 0; k < iters.size(); ++k) {
        if (iters[k].reduce && first_reduce < 0) first_reduce = int(k);
        if (!iters[k].reduce) last_spatial = int(k);
      }
      if (first_reduce > last_spatial) {
        init = IfThen(spatial_guards, Store(s.output, out_idx, init_value));
      } else {
        init_value_ = init_value;  // a nest of its own, built below with the final loop kinds
        first_reduce = -1;
      }
    }
    // Auto-unroll: innermost serial loops whose extents multiply to at most the limit.
    std::vector<ForKind> kinds;
    for (const LoopIter& it : iters) kinds.push_back(it.kind);
    if (st.auto_unroll_max_step > 0) {
      int64_t product = 1;
      for (int k = int(iters.size()) - 1; k >= 0; --k) {
        product *= iters[k].extent;
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
    for (int k = int(iters.size()) - 1; k >= 0; --k) {
      if (kinds[k] == ForKind::kUnrolled) {
        if (!innermost_chain || copies * iters[k].extent > kMaxUnrolledCopies) {
          kinds[k] = ForKind::kSerial;
        } else {
          copies *= iters[k].extent;
        }
      }
      innermost_chain =
          innermost_chain && (kinds[k] == ForKind::kUnrolled || kinds[k] == ForKind::kVectorized);
    }
    if (init_value_.defined()) {
      // The initialisation runs over the stage's spatial loops (same order,
      // same annotations, fresh variables) before the reduction nest.
      std::vector<VarMapEntry> fresh;
      for (const LoopIter& it : iters) {
        if (!it.reduce) fresh.push_back({it.var.get(), Var(it.var->name + ".init")});
      }
      std::vector<Expr> idx;
      for (const Expr& e : out_idx) idx.push_back(Substitute(e, fresh));
      Stmt init_nest = IfThen(Substitute(spatial_guards, fresh), Store(s.output, idx, init_value_));
      size_t f = fresh.size();
      for (int k = int(iters.size()) - 1; k >= 0; --k) {
        if (iters[k].reduce) continue;
        init_nest = For(fresh[--f].value, iters[k].extent, kinds[k], init_nest);
      }
      out->push_back(init_nest);
      init_value_ = Expr();
    }
    for (int k = int(iters.size()) - 1; k >= 0; --k) {
      inner = wrap_attached(k, inner);
      inner = For(iters[k].var, iters[k].extent, kinds[k], inner);
      if (k == first_reduce) inner = Seq({init, inner});
    }
    out->push_back(wrap_attached(-1, inner));
  }

  const ScheduleState& state_;
  const ComputeDAG& dag_;
  std::vector<Expr> bodies_;  // with inlined producers substituted
  Expr init_value_;           // the pending initialisation nest's value
  // GPU: the thread-bound loops of the root stage being lowered (x, y, z),
  // and the ranges of the loops around the stage being nested.
  std::vector<std::pair<Expr, int64_t>> thread_loops_;
  VarRanges enclosing_ranges_;
};

}  // namespace

Stmt Lower(const ScheduleState& state) { return Lowerer(state).Run(); }

}  // namespace tunefarm::ir
