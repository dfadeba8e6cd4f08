#include "compiler/schedule/gpu_tensor_core.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/schedule/gpu_tensor_core_internal.h"
#include "compiler/schedule/tiling.h"

namespace tunefarm::schedule {

using ir::ComputeDAG;
using ir::Expr;
using ir::ExprKind;
using ir::ExprNode;
using ir::HasFloat16;
using ir::IterVar;
using ir::MapLoads;
using ir::Mentions;
using ir::MmaFragmentElements;
using ir::Op;
using ir::Stage;
using ir::Substitute;
using ir::Target;
using ir::TensorDecl;
using ir::VarMapEntry;
using ir::VisitLoads;
using ir::kGpuTensorCoreSketchId;
using tensor_core::AxisGroup;
using tensor_core::CeilDiv;
using tensor_core::Gemm;
using tensor_core::kMinTensorCoreSm;
using tensor_core::kWireSize;
using tensor_core::MatchGemm;
using tensor_core::VectorA;
using tensor_core::VectorB;
using tensor_core::VectorElements;

namespace {

// The first load of `e`, or null.
const ExprNode* FirstLoad(const Expr& e) {
  const ExprNode* first = nullptr;
  VisitLoads(e, [&](const ExprNode& l) {
    if (first == nullptr) first = &l;
  });
  return first;
}

}  // namespace

absl::StatusOr<Gemm> tensor_core::MatchGemm(const ComputeDAG& dag) {
  auto no = [](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("no tensor-core schedule: ", why));
  };
  if (!HasFloat16(dag) && !dag.tf32)
    return no("the workload is float32 without tf32 (float16, bfloat16 or tf32 products are)");
  const int main = TilingMainStage(dag);
  if (main < 0) return no("no reduction");
  const Stage& s = dag.stages[size_t(main)];
  // Cheap stages the reduction reads (padding) inlined into its body.
  Expr body = s.body;
  for (int i = main - 1; i >= 0; --i) {
    const Stage& p = dag.stages[size_t(i)];
    if (!p.inlinable || !p.reduce_axes.empty()) continue;
    body = MapLoads(body, [&](const ExprNode& load, const std::vector<Expr>& args) {
      if (load.tensor != p.output) return Expr();
      std::vector<VarMapEntry> map;
      for (size_t d = 0; d < p.axes.size(); ++d) map.push_back({p.axes[d].var.get(), args[d]});
      return Substitute(p.body, map);
    });
  }
  if (body->kind != ExprKind::kBinary || body->op != Op::kMul)
    return no("the reduction is not a product of two factors");
  Gemm g;
  g.tf32 = dag.tf32;
  g.main = main;
  g.a = body->args[0];
  g.b = body->args[1];
  for (const IterVar& a : s.axes) {
    g.out_axes.push_back(a.var.get());
    const bool in_a = Mentions(g.a, a.var.get()), in_b = Mentions(g.b, a.var.get());
    (in_a && !in_b ? g.m : in_b && !in_a ? g.n : g.batch).Add(a);
  }
  for (const IterVar& a : s.reduce_axes) g.k.Add(a);
  if (g.m.size < 16 || g.n.size < 8 || g.k.size < 8) {
    return no(absl::StrCat("the product is ", g.m.size, " x ", g.n.size, " x ", g.k.size,
                           " (M x N x K): too small for 16x8x", g.tf32 ? 8 : 16, " tiles"));
  }
  // Each factor's contiguous axis: the variable its first load's last index
  // is. A factor that is that load, or that load guarded by a condition
  // the axis does not change (padding), moves in vectors along the axis
  // when it is its group's last (A's is made the last of K; B's then must
  // be). Otherwise the factor's K side is the one its last index mentions.
  auto contiguous = [&](const Expr& factor, AxisGroup* other, bool* k_inner, bool* plain,
                        int64_t* vector_extent) {
    const ExprNode* load = FirstLoad(factor);
    if (load == nullptr) return false;
    const Expr& last = load->args.back();
    *k_inner = false;
    for (const ExprNode* v : g.k.vars) *k_inner = *k_inner || Mentions(last, v);
    AxisGroup* group = *k_inner ? &g.k : other;
    const auto at = std::find(group->vars.begin(), group->vars.end(), last.get());
    const bool guarded = factor->kind == ExprKind::kSelect && factor->args[1].get() == load &&
                         factor->args[2]->kind == ExprKind::kFloatImm &&
                         factor->args[2]->float_value == 0 &&
                         !Mentions(factor->args[0], last.get());
    *plain = at != group->vars.end() && (factor.get() == load || guarded);
    if (*plain && group == &g.k && at + 1 != group->vars.end()) {
      if (other == &g.m) {
        group->MoveLast(last.get());
      } else {
        *plain = false;  // A chose K's order
      }
    }
    if (*plain && group->vars.back() != last.get()) *plain = false;
    *vector_extent = *plain ? group->extents.back() : 0;
    return true;
  };
  if (!contiguous(g.a, &g.m, &g.a_k_inner, &g.a_plain, &g.a_vector_extent) ||
      !contiguous(g.b, &g.n, &g.b_k_inner, &g.b_plain, &g.b_vector_extent))
    return no("a factor of the product reads no tensor");
  // The only other stages: padding (inlined above) and an elementwise
  // epilogue writing the output and reading the product at its own indices.
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& e = dag.stages[i];
    if (int(i) == main || (int(i) < main && e.inlinable && e.reduce_axes.empty())) continue;
    if (g.epilogue >= 0 || e.output != dag.output || !e.reduce_axes.empty() ||
        e.axes.size() != s.axes.size())
      return no(absl::StrCat("stage ", e.name, " is not an epilogue of the product"));
    g.epilogue = int(i);
    bool at_own_indices = true;
    VisitLoads(e.body, [&](const ExprNode& load) {
      if (load.tensor != s.output) return;
      for (size_t d = 0; d < load.args.size(); ++d)
        at_own_indices = at_own_indices && load.args[d].get() == e.axes[d].var.get();
    });
    if (!at_own_indices) return no("the epilogue reads the product elsewhere than its own element");
  }
  if (g.epilogue < 0 && s.output != dag.output) return no("the product is not the output");
  return g;
}

namespace {

// The most lanes of a warp that read one shared-memory bank as each loads
// the first element of its tf32 fragment of a tile whose rows hold `row`
// floats: lane (g, t) = (lane / 4, lane % 4) reads row g, column t where K
// runs along the rows (k_inner), else row t, column g.
int Tf32BankConflicts(int64_t row, bool k_inner) {
  std::array<int, 32> hits{};
  int worst = 0;
  for (int64_t lane = 0; lane < 32; ++lane) {
    const int64_t g = lane / 4, t = lane % 4;
    const int64_t at = k_inner ? g * row + t : t * row + g;
    worst = std::max(worst, ++hits[size_t(at % 32)]);
  }
  return worst;
}

}  // namespace

std::array<int64_t, 3> TensorCoreProductShape(const ComputeDAG& dag) {
  absl::StatusOr<Gemm> g = MatchGemm(dag);
  if (!g.ok()) return {0, 0, 0};
  return {g->m.size, g->n.size, g->k.size};
}

std::vector<int64_t> TensorCoreTiling::Encode() const {
  std::vector<int64_t> wire = {warps_m, warps_n, frags_m,  frags_n,   k_steps,
                               pad,     stages,  ldmatrix, async_copy};
  if (wgmma != 0 || swizzle != 0) wire.push_back(wgmma);
  if (swizzle != 0) wire.push_back(swizzle);
  return wire;
}

std::optional<TensorCoreTiling> TensorCoreTiling::Decode(absl::Span<const int64_t> wire,
                                                         bool tf32) {
  if (wire.size() < kWireSize || wire.size() > kWireSize + 2) return std::nullopt;
  TensorCoreTiling t;
  t.tf32 = tf32;
  t.warps_m = wire[0];
  t.warps_n = wire[1];
  t.frags_m = wire[2];
  t.frags_n = wire[3];
  t.k_steps = wire[4];
  t.pad = wire[5];
  t.stages = wire[6];
  t.ldmatrix = wire[7];
  t.async_copy = wire[8];
  t.wgmma = wire.size() > kWireSize ? wire[9] : 0;
  t.swizzle = wire.size() > kWireSize + 1 ? wire[10] : 0;
  return t;
}

absl::Status CheckTensorCoreSketch(const ComputeDAG& dag, const Target& target) {
  if (!target.is_gpu()) return absl::FailedPreconditionError("no tensor-core schedule: not cuda");
  if (target.sm < kMinTensorCoreSm) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no tensor-core schedule: ", target.arch(), " has no ",
        dag.tf32 ? "tf32 mma.sync m16n8k8" : "float16 mma.sync m16n8k16", " (sm_80 and newer do)"));
  }
  return MatchGemm(dag).status();
}

absl::Status CheckTensorCoreTiling(const TensorCoreTiling& t, const Target& target) {
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-core decisions: ", why));
  };
  if (t.warps_m < 1 || t.warps_m > 4 || t.warps_n < 1 || t.warps_n > 4 || t.warps_m * t.warps_n > 8)
    return bad("1 to 4 warps along each of M and N, 8 in all");
  if (t.wgmma < 0 || t.wgmma > 2) return bad("wgmma 0, 1 or 2");
  if (t.wgmma == 2 && t.stages < 3)
    return bad("wgmma 2 (products left in flight) needs 3 stages or more");
  if (t.frags_m < 1 || t.frags_m > 8 || t.frags_n < 1 || t.frags_n > (t.wgmma ? 32 : 8))
    return bad(t.wgmma ? "1 to 8 fragments along M and 1 to 32 along N (wgmma)"
                       : "1 to 8 fragments along each of M and N");
  if (t.wgmma != 0) {
    if (target.sm != 90)
      return bad(absl::StrCat("wgmma is sm_90's (sm_90a code), not ", target.arch(), "'s"));
    if (t.tf32) return bad("wgmma for 16-bit factors only here");
    if (t.warps_m != 4) return bad("wgmma needs 4 warps along M (a warpgroup)");
    if (t.pad != 0 || t.ldmatrix != 0 || t.async_copy != 1)
      return bad("wgmma tiles are core matrices: pad 0, ldmatrix 0, async_copy 1");
  }
  if (t.k_steps < 1 || t.k_steps > 4) return bad("1 to 4 k steps");
  if (t.pad != 0 && t.pad != 8 && !(t.tf32 && t.pad == 4))
    return bad(t.tf32 ? "a pad of 0, 4 or 8" : "a pad of 0 or 8");
  if (t.stages < 1 || t.stages > kMaxTensorCoreStages)
    return bad(absl::StrCat("1 to ", kMaxTensorCoreStages, " stages"));
  if (t.ldmatrix != 0 && t.ldmatrix != 1) return bad("ldmatrix 0 or 1");
  if (t.swizzle != 0) {
    if (t.swizzle != 1) return bad("swizzle 0 or 1");
    if (t.tf32 || t.wgmma != 0 || t.pad != 0 || t.ldmatrix != 1)
      return bad("swizzled tiles are 16-bit mma.sync tiles read by ldmatrix, with pad 0");
    for (int64_t row : {t.BlockM(), t.BlockN(), t.BlockK()}) {
      if ((row & (row - 1)) != 0)
        return bad(absl::StrCat("swizzled tiles need power-of-two rows, not ", row));
    }
  }
  if (t.tf32 && t.ldmatrix != 0) return bad("ldmatrix 0 for tf32 (it moves 16-bit rows)");
  if (t.async_copy != 0 && t.async_copy != 1) return bad("async_copy 0 or 1");
  if (t.async_copy == 1 && t.stages < 2) return bad("async_copy needs 2 stages or more");
  if (t.async_copy == 0 && t.stages > 2) return bad("more than 2 stages need async_copy");
  if (t.Accumulators() > kMaxTensorCoreAccumulators)
    return bad(absl::StrCat(t.Accumulators(), " accumulators per thread exceed ",
                            kMaxTensorCoreAccumulators));
  if (t.Threads() > target.max_threads_per_block)
    return bad(absl::StrCat(t.Threads(), " threads per block exceed the target's ",
                            target.max_threads_per_block));
  if (t.SharedBytes() > target.max_shared_memory_per_block)
    return bad(absl::StrCat(t.SharedBytes(), " bytes of shared memory exceed the target's ",
                            target.max_shared_memory_per_block));
  return absl::OkStatus();
}

TensorCoreTiling DefaultTensorCoreTiling(const ComputeDAG& dag, const Target& target) {
  TensorCoreTiling t;
  t.tf32 = dag.tf32;
  if (t.tf32) t.ldmatrix = 0;
  absl::StatusOr<Gemm> g = MatchGemm(dag);
  if (!g.ok()) return t;
  // No more tile than the matrix: halve fragments, then warps.
  while (t.BlockM() / 2 >= g->m.size && t.frags_m > 1) t.frags_m /= 2;
  while (t.BlockM() / 2 >= g->m.size && t.warps_m > 1) t.warps_m /= 2;
  while (t.BlockN() / 2 >= g->n.size && t.frags_n > 1) t.frags_n /= 2;
  while (t.BlockN() / 2 >= g->n.size && t.warps_n > 1) t.warps_n /= 2;
  while (t.BlockK() / 2 >= g->k.size && t.k_steps > 1) t.k_steps /= 2;
  // tf32 fragments are read element by element: the pad whose rows spread
  // a warp's reads over the most banks (fewest conflicts).
  auto choose_pad = [&] {
    if (!t.tf32) return;
    int best = 1 << 30;
    for (int64_t pad : {4, 8, 0}) {
      const int64_t a_row = (g->a_k_inner ? t.BlockK() : t.BlockM()) + pad,
                    b_row = (g->b_k_inner ? t.BlockK() : t.BlockN()) + pad;
      const int conflicts =
          Tf32BankConflicts(a_row, g->a_k_inner) + Tf32BankConflicts(b_row, g->b_k_inner);
      if (conflicts < best) {
        best = conflicts;
        t.pad = pad;
      }
    }
  };
  choose_pad();
  while (!CheckTensorCoreTiling(t, target).ok() && t.k_steps > 1) {
    t.k_steps /= 2;
    choose_pad();
  }
  t.async_copy = VectorA(*g) && VectorB(*g) ? 1 : 0;
  // cp.async keeps two tiles in flight where the K loop is long enough and
  // the third buffer fits.
  if (t.async_copy == 1 && CeilDiv(g->k.size, t.BlockK()) >= 3) {
    TensorCoreTiling deeper = t;
    deeper.stages = 3;
    if (CheckTensorCoreTiling(deeper, target).ok()) t = deeper;
  }
  return t;
}

absl::StatusOr<Trace> TensorCoreSchedule(const ComputeDAG& dag, const Target& target,
                                         TensorCoreTiling tiling) {
  tiling.tf32 = dag.tf32;
  TF_ASSIGN_OR_RETURN(const Gemm g, MatchGemm(dag));
  TF_RETURN_IF_ERROR(CheckTensorCoreSketch(dag, target));
  TF_RETURN_IF_ERROR(CheckTensorCoreTiling(tiling, target));
  if (tiling.async_copy == 1 && !(VectorA(g) && VectorB(g))) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-core decisions: async_copy needs both tiles' rows to move 16 bytes "
                     "at a time (contiguous, a multiple of ",
                     VectorElements(g.tf32), " elements)"));
  }
  Trace t;
  t.sketch_id = kGpuTensorCoreSketchId;
  t.decisions = tiling.Encode();
  return t;
}

absl::StatusOr<ComputeDAG> TensorCoreDag(const ComputeDAG& dag, const Target& target,
                                         absl::Span<const int64_t> decisions) {
  TF_RETURN_IF_ERROR(CheckTensorCoreSketch(dag, target));
  std::optional<TensorCoreTiling> t = TensorCoreTiling::Decode(decisions, dag.tf32);
  if (!t) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-core decisions: ", kWireSize, " to ",
                                                   kWireSize + 2, " values, not ",
                                                   decisions.size()));
  }
  TF_RETURN_IF_ERROR(CheckTensorCoreTiling(*t, target));
  const Gemm g = *MatchGemm(dag);
  // Only cp.async fills the core-matrix layout and keeps more than one
  // tile in flight: such decisions replayed onto a product whose rows
  // cannot move 16 bytes at a time are refused. (Two stages fall back to
  // double buffering through registers.)
  if ((t->wgmma != 0 || t->stages > 2) && !(VectorA(g) && VectorB(g))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor-core decisions: ", t->wgmma != 0 ? "wgmma" : "more than 2 stages",
        " needs both tiles' rows to move 16 bytes at a time (contiguous, a multiple of ",
        VectorElements(g.tf32), " elements)"));
  }
  ComputeDAG out = dag;
  TensorDecl a;
  a.name = "a.shared";
  a.shape = g.a_k_inner ? std::vector<int64_t>{t->stages, t->BlockM(), t->BlockK() + t->pad}
                        : std::vector<int64_t>{t->stages, t->BlockK(), t->BlockM() + t->pad};
  a.role = TensorDecl::Role::kIntermediate;
  a.shared = true;
  a.cache_copy = true;
  a.float16 = !dag.tf32;
  TensorDecl b = a;
  b.name = "b.shared";
  b.shape = g.b_k_inner ? std::vector<int64_t>{t->stages, t->BlockN(), t->BlockK() + t->pad}
                        : std::vector<int64_t>{t->stages, t->BlockK(), t->BlockN() + t->pad};
  if (t->wgmma != 0) {  // core matrices: stages x (16-byte rows) x 8 elements
    a.shape = {t->stages, t->BlockM() * t->BlockK() / 8, 8};
    b.shape = {t->stages, t->BlockN() * t->BlockK() / 8, 8};
  }
  TensorDecl acc;
  acc.name = "acc.local";
  acc.shape = {t->Accumulators()};
  acc.role = TensorDecl::Role::kIntermediate;
  // Each thread's share of the next tiles (double buffering), in the
  // operands' format.
  TensorDecl a_next = acc, b_next = acc;
  a_next.name = "a.next";
  a_next.float16 = !dag.tf32;
  b_next.name = "b.next";
  b_next.float16 = !dag.tf32;
  // Each warp's fragments of one k step: frags_m of A, frags_n of B.
  TensorDecl a_frag = a_next, b_frag = b_next;
  a_frag.name = "a.frag";
  a_frag.shape = {t->frags_m * MmaFragmentElements(false, dag.tf32)};
  a_frag.mma_fragment = true;
  b_frag.name = "b.frag";
  b_frag.shape = {t->frags_n * MmaFragmentElements(true, dag.tf32)};
  b_frag.mma_fragment = true;
  for (const TensorDecl& d : {a, b, acc, a_next, b_next, a_frag, b_frag}) out.tensors.push_back(d);
  return out;
}

}  // namespace tunefarm::schedule
