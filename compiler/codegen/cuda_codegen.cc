// CUDA C emission from the loop IR and launch-limit checks. The device
// functions it calls are in cuda_prelude.h, the cubin reader in
// cubin_reader.cc, NVRTC itself in cuda_compile.cc.
#include "compiler/codegen/cuda_codegen.h"

#include <cinttypes>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/codegen/cuda_prelude.h"
#include "compiler/ir/functor.h"
#include "compiler/ir/workload.h"
#include "compiler/schedule/gpu_launch.h"
#include "proto/kernel_signature.h"

namespace tunefarm::codegen {
namespace {

using absl::StrAppend;
using absl::StrCat;
using ir::Expr;
using ir::ExprKind;
using ir::ExprNode;
using ir::ForKind;
using ir::Op;
using ir::ScalarType;
using ir::Stmt;
using ir::StmtKind;


bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int Log2(int64_t v) {
  int n = 0;
  while ((int64_t{1} << n) < v) ++n;
  return n;
}

// The tensors a statement loads and stores.
class AccessCollector : public ir::StmtVisitor {
 public:
  AccessCollector(std::set<int>* loads, std::set<int>* stores) : loads_(loads), stores_(stores) {}

 protected:
  void VisitExpr(const Expr& e) override {
    ir::VisitLoads(e, [&](const ExprNode& n) { loads_->insert(n.tensor); });
  }
  void VisitStore(const Stmt& s) override {
    stores_->insert(s->tensor);
    StmtVisitor::VisitStore(s);
  }

 private:
  std::set<int>* loads_;
  std::set<int>* stores_;
};

void CollectAccesses(const Stmt& s, std::set<int>* loads, std::set<int>* stores) {
  AccessCollector(loads, stores).Visit(s);
}

class KernelEmitter : public ir::ExprFunctor<std::string()>,
                      public ir::StmtFunctor<void(int, std::string*)> {
  using ExprFunctor::Visit;
  using StmtFunctor::Visit;

 public:
  KernelEmitter(const ir::ComputeDAG& dag, const schedule::GpuLaunch& launch, std::string name)
      : dag_(dag), launch_(launch) {
    kernel_.name = std::move(name);
    kernel_.grid = launch.grid;
    kernel_.block = launch.block;
    kernel_.shared_bytes = launch.shared_bytes;
    for (const ir::TensorDecl& t : dag.tensors) shapes_.push_back(t.shape);
  }

  // The wgmma shapes the kernel uses: (n, A MN-major, B MN-major).
  const std::set<std::tuple<int64_t, bool, bool>>& wgmma_shapes() const { return wgmma_shapes_; }

  GpuKernel Emit(const std::set<int>& global_tensors, std::string* out) {
    std::set<int> loads, stores;
    CollectAccesses(launch_.nest, &loads, &stores);
    std::vector<std::string> params;
    for (int t : global_tensors) {
      if (!loads.count(t) && !stores.count(t)) continue;
      kernel_.params.push_back(t);
      params.push_back(StrCat(stores.count(t) ? "" : "const ", ElementType(t), "* __restrict__ ",
                              TensorName(t)));
    }
    std::string body;
    // Up to the static limit, one __shared__ array per buffer; past it the
    // buffers are carved from the dynamic shared memory the launch passes
    // (shared_bytes), which the loader opts in to, at the launch's layout.
    kernel_.dynamic_shared = launch_.DynamicShared();
    if (kernel_.dynamic_shared) {
      kernel_.shared_bytes = launch_.shared_end;
      StrAppend(&body, "  extern __shared__ __align__(16) unsigned char tf_shared[];\n");
    }
    for (size_t i = 0; i < launch_.shared.size(); ++i) {
      const auto& [tensor, elements] = launch_.shared[i];
      if (kernel_.dynamic_shared) {
        StrAppend(&body, "  ", ElementType(tensor), "* const ", TensorName(tensor), " = (",
                  ElementType(tensor), "*)(tf_shared + ", launch_.shared_offsets[i], ");\n");
      } else {
        StrAppend(&body, "  __shared__ __align__(16) ", ElementType(tensor), " ",
                  TensorName(tensor), "[", elements, "];\n");
      }
    }
    for (const auto& [var, kind] : launch_.bound) {
      StrAppend(&body, "  const tf_idx ", VarName(var), " = (tf_idx)", ir::BindingName(kind),
                ";\n");
    }
    EmitStmt(launch_.nest, 1, &body);
    StrAppend(out, "extern \"C\" __global__ void __launch_bounds__(", kernel_.threads(), ") ",
              kernel_.name, "(", absl::StrJoin(params, ", "), ") {\n", body, "}\n\n");
    return kernel_;
  }

 private:
  std::set<std::tuple<int64_t, bool, bool>> wgmma_shapes_;  // (n, a MN-major, b MN-major)

  std::string TensorName(int t) const { return StrCat("t", t); }
  bool IsHalf(int t) const { return dag_.tensors[size_t(t)].float16; }
  // The 16 bits of a float16 load, not widened.
  std::string HalfBits(const ExprNode& load) {
    return StrCat(TensorName(load.tensor), "[", Flat(load.tensor, load.args), "]");
  }
  static bool IsZero(const Expr& e) {
    return e->kind == ExprKind::kFloatImm && e->float_value == 0 && !std::signbit(e->float_value);
  }
  // Whether `value` copies a load: the load itself, or the load where
  // `cond` holds and +0 elsewhere (cond left undefined for a plain copy).
  bool AsCopy(const Expr& value, Expr* cond, Expr* load) const {
    *load = value;
    if (value->kind == ExprKind::kSelect && IsZero(value->args[2])) {
      *cond = value->args[0];
      *load = value->args[1];
    }
    return (*load)->kind == ExprKind::kLoad;
  }
  // Whether `value` copies a float16 load (see AsCopy).
  bool AsHalfCopy(const Expr& value, Expr* cond, Expr* load) const {
    return AsCopy(value, cond, load) && IsHalf((*load)->tensor);
  }
  // How a tensor's elements are declared: float, or the bits of a float16.
  const char* ElementType(int t) const { return IsHalf(t) ? "unsigned short" : "float"; }

  std::string VarName(const ExprNode* v) {
    auto it = var_names_.find(v);
    if (it != var_names_.end()) return it->second;
    std::string clean;
    for (char c : v->name) clean += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    std::string name = StrCat("v", var_names_.size(), "_", clean);
    var_names_[v] = name;
    return name;
  }

  std::string Flat(int tensor, const std::vector<Expr>& idx) {
    const std::vector<int64_t>& shape = shapes_[tensor];
    std::string out;
    int64_t stride = 1;
    for (int d = int(idx.size()) - 1; d >= 0; --d) {
      int64_t c;
      if (ir::IsConstInt(idx[d], &c) && c == 0) {
        stride *= d < int(shape.size()) ? shape[d] : 1;
        continue;
      }
      std::string term = stride == 1 ? GenExpr(idx[d]) : StrCat(GenExpr(idx[d]), " * ", stride);
      out = out.empty() ? term : StrCat(term, " + ", out);
      stride *= d < int(shape.size()) ? shape[d] : 1;
    }
    return out.empty() ? "0" : out;
  }

  static std::string Float(double v) {
    if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
    if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%af", float(v));
    return buf;
  }

  std::string GenExpr(const Expr& e) { return Visit(e); }

  // One method per expression kind (ir::ExprFunctor).
  std::string VisitIntImm(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    return n.int_value < 0 ? StrCat("((tf_idx)", n.int_value, ")") : StrCat(n.int_value);
  }

  std::string VisitFloatImm(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    return Float(n.float_value);
  }

  std::string VisitVar(const ir::Expr& e) override {
    return VarName(e.get());
  }

  std::string VisitBinary(const ir::Expr& e) override {
    auto arg = [&](int i) { return GenExpr(e->args[size_t(i)]); };
    const bool is_float = ir::IsFloat(e->type);
    const ExprNode& n = *e.get();
    int64_t c = 0;
    bool const_rhs = ir::IsConstInt(n.args[1], &c);
    switch (n.op) {
      case Op::kAdd:
        return StrCat("(", arg(0), " + ", arg(1), ")");
      case Op::kSub:
        return StrCat("(", arg(0), " - ", arg(1), ")");
      case Op::kMul:
        return StrCat("(", arg(0), " * ", arg(1), ")");
      case Op::kDiv:
        return StrCat("(", arg(0), " / ", arg(1), ")");
      case Op::kFloorDiv:
        // An arithmetic shift is floor division for any sign.
        if (const_rhs && IsPowerOfTwo(c)) return StrCat("(", arg(0), " >> ", Log2(c), ")");
        return StrCat("tf_floordiv(", arg(0), ", ", arg(1), ")");
      case Op::kFloorMod:
        if (const_rhs && IsPowerOfTwo(c)) return StrCat("(", arg(0), " & ", c - 1, ")");
        return StrCat("tf_floormod(", arg(0), ", ", arg(1), ")");
      case Op::kMin:
        return StrCat(is_float ? "fminf(" : "min(", arg(0), ", ", arg(1), ")");
      case Op::kMax:
        return StrCat(is_float ? "fmaxf(" : "max(", arg(0), ", ", arg(1), ")");
      default:
        break;
    }
    return "/* unknown expression */ 0";
  }

  std::string VisitCmp(const ir::Expr& e) override {
    auto arg = [&](int i) { return GenExpr(e->args[size_t(i)]); };
    const ExprNode& n = *e.get();
    static const std::map<Op, const char*> kOps = {{Op::kLt, "<"},  {Op::kLe, "<="},
                                                   {Op::kGt, ">"},  {Op::kGe, ">="},
                                                   {Op::kEq, "=="}, {Op::kNe, "!="}};
    return StrCat("(", arg(0), " ", kOps.at(n.op), " ", arg(1), ")");
  }

  std::string VisitAnd(const ir::Expr& e) override {
    auto arg = [&](int i) { return GenExpr(e->args[size_t(i)]); };
    return StrCat("(", arg(0), " && ", arg(1), ")");
  }

  std::string VisitOr(const ir::Expr& e) override {
    auto arg = [&](int i) { return GenExpr(e->args[size_t(i)]); };
    return StrCat("(", arg(0), " || ", arg(1), ")");
  }

  std::string VisitNot(const ir::Expr& e) override {
    auto arg = [&](int i) { return GenExpr(e->args[size_t(i)]); };
    return StrCat("(!", arg(0), ")");
  }

  std::string VisitSelect(const ir::Expr& e) override {
    auto arg = [&](int i) { return GenExpr(e->args[size_t(i)]); };
    return StrCat("(", arg(0), " ? ", arg(1), " : ", arg(2), ")");
  }

  std::string VisitCast(const ir::Expr& e) override {
    auto arg = [&](int i) { return GenExpr(e->args[size_t(i)]); };
    const ExprNode& n = *e.get();
    switch (n.type) {
      case ScalarType::kFloat32:
        return StrCat("((float)", arg(0), ")");
      case ScalarType::kFloat64:
        return StrCat("((double)", arg(0), ")");
      case ScalarType::kInt64:
        return StrCat("((tf_idx)", arg(0), ")");
      case ScalarType::kBool:
        return StrCat("((bool)", arg(0), ")");
    }
    return "/* unknown expression */ 0";
  }

  std::string VisitCall(const ir::Expr& e) override {
    auto arg = [&](int i) { return GenExpr(e->args[size_t(i)]); };
    const ExprNode& n = *e.get();
    static const std::map<Op, const char*> kFns = {{Op::kExp, "expf"},
                                                   {Op::kSqrt, "sqrtf"},
                                                   {Op::kTanh, "tanhf"},
                                                   {Op::kAbs, "fabsf"},
                                                   {Op::kLog, "logf"}};
    return StrCat(kFns.at(n.op), "(", arg(0), ")");
  }

  std::string VisitLoad(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    std::string element = StrCat(TensorName(n.tensor), "[", Flat(n.tensor, n.args), "]");
    return IsHalf(n.tensor) ? StrCat("tf_h2f(", element, ")") : element;
  }

  std::string VisitDefault(const ir::Expr&) override { return "/* unknown expression */ 0"; }

  void EmitStmt(const Stmt& s, int indent, std::string* out) {
    StmtFunctor::Visit(s, indent, out);
  }

  // One method per statement kind (ir::StmtFunctor).
  void VisitFor(const Stmt& s, int indent, std::string* out) override {
    std::string pad(size_t(indent) * 2, ' ');
    bool block = ir::IsBlockBound(s->for_kind);
    if (block || ir::IsThreadBound(s->for_kind)) {
      // The variable is the block or thread index (set at the top); a
      // guard only where the launch is wider than this loop.
      int axis = ir::BindingAxis(s->for_kind);
      int64_t launch = block ? kernel_.grid[axis] : kernel_.block[axis];
      if (s->extent < launch) {
        StrAppend(out, pad, "if (", VarName(s->var.get()), " < ", s->extent, ") {\n");
        EmitStmt(s->body[0], indent + 1, out);
        StrAppend(out, pad, "}\n");
      } else {
        EmitStmt(s->body[0], indent, out);
      }
      return;
    }
    if (s->for_kind == ForKind::kVectorized && EmitVector16(s, indent, out)) return;
    if (s->for_kind == ForKind::kUnrolled || s->for_kind == ForKind::kVThread) {
      StrAppend(out, pad, "#pragma unroll\n");
    }
    std::string v = VarName(s->var.get());
    StrAppend(out, pad, "for (tf_idx ", v, " = 0; ", v, " < ", s->extent, "; ++", v, ") {\n");
    EmitStmt(s->body[0], indent + 1, out);
    StrAppend(out, pad, "}\n");
  }

  // A vectorized loop on a GPU (the tensor-core lowering's, see schedule::Lower):
  // 16 bytes (8 16-bit elements or 4 floats) copied, or zeroed where the
  // guard is false, as one load and store; both starts are 16-byte aligned
  // by contract. False, emitting nothing, for any other loop.
  bool EmitVector16(const Stmt& s, int indent, std::string* out) {
    const Stmt& b = s->body[0];
    if (b->kind != StmtKind::kStore || s->extent != (IsHalf(b->tensor) ? 8 : 4)) return false;
    Expr cond, load;
    if (!AsCopy(b->value, &cond, &load) || IsHalf(load->tensor) != IsHalf(b->tensor)) return false;
    const ExprNode* v = s->var.get();
    if (cond.defined() && ir::Mentions(cond, v)) return false;
    const std::vector<ir::VarMapEntry> first = {{v, ir::IntImm(0)}};
    std::vector<Expr> dst, src;
    for (const Expr& i : b->indices) dst.push_back(ir::Substitute(i, first));
    for (const Expr& i : load->args) src.push_back(ir::Substitute(i, first));
    if (s->async_copy) {
      StrAppend(out, std::string(size_t(indent) * 2, ' '), "tf_cp_async16(&", TensorName(b->tensor),
                "[", Flat(b->tensor, dst), "], &", TensorName(load->tensor), "[",
                Flat(load->tensor, src), "], ", cond.defined() ? GenExpr(cond) : "true", ");\n");
      return true;
    }
    std::string value =
        StrCat("*(const tf_v16*)&", TensorName(load->tensor), "[", Flat(load->tensor, src), "]");
    if (cond.defined())
      value = StrCat("(", GenExpr(cond), " ? ", value, " : tf_v16{0u, 0u, 0u, 0u})");
    StrAppend(out, std::string(size_t(indent) * 2, ' '), "*(tf_v16*)&", TensorName(b->tensor), "[",
              Flat(b->tensor, dst), "] = ", value, ";\n");
    return true;
  }

  void VisitStore(const Stmt& s, int indent, std::string* out) override {
    std::string pad(size_t(indent) * 2, ' ');
    std::string value;
    if (!IsHalf(s->tensor)) {
      value = GenExpr(s->value);
    } else if (Expr cond, load; AsHalfCopy(s->value, &cond, &load)) {
      // A float16 copy (staging in shared memory) moves the bits; a guarded
      // one (a tile's edge) the bits or +0.
      value = HalfBits(*load.get());
      if (cond.defined()) value = StrCat("(", GenExpr(cond), " ? ", value, " : (unsigned short)0)");
    } else {
      value = StrCat("tf_f2h(", GenExpr(s->value), ")");
    }
    StrAppend(out, pad, TensorName(s->tensor), "[", Flat(s->tensor, s->indices), "] = ", value,
              ";\n");
  }

  void VisitMma(const Stmt& s, int indent, std::string* out) override {
    std::string pad(size_t(indent) * 2, ' ');
    if (s->mma_wgmma) {
      // Descriptors' offsets in bytes: the strides are in 16-bit elements.
      wgmma_shapes_.insert({s->mma_n, s->mma_a_mn_major, s->mma_b_mn_major});
      StrAppend(out, pad, WgmmaName(s->mma_n, s->mma_a_mn_major, s->mma_b_mn_major), "(&",
                TensorName(s->tensor), "[", GenExpr(s->indices[0]), "], tf_wgmma_desc(",
                TensorName(s->mma_a), " + ", GenExpr(s->mma_offsets[0]), ", ",
                2 * s->mma_a_strides[0], "u, ", 2 * s->mma_a_strides[1], "u), tf_wgmma_desc(",
                TensorName(s->mma_b), " + ", GenExpr(s->mma_offsets[1]), ", ",
                2 * s->mma_b_strides[0], "u, ", 2 * s->mma_b_strides[1], "u));\n");
      return;
    }
    const char* shape = s->mma_tf32 ? "tf_mma_m16n8k8_tf32" : "tf_mma_m16n8k16";
    if (s->mma_load == 0) {
      StrAppend(out, pad, shape, "(&", TensorName(s->tensor), "[", GenExpr(s->indices[0]), "], &",
                TensorName(s->mma_a), "[", FragmentRegister(s->mma_offsets[0]), "], &",
                TensorName(s->mma_b), "[", FragmentRegister(s->mma_offsets[1]), "]);\n");
      return;
    }
    const std::string regs =
        StrCat("&", TensorName(s->tensor), "[", FragmentRegister(s->indices[0]), "]");
    if (s->mma_ldmatrix) {
      StrAppend(out, pad, "tf_ldmatrix_x", ir::LdmatrixMatrices(*s),
                ir::LdmatrixTransposed(*s) ? "_trans" : "", "(", regs, ", &", TensorName(s->mma_a),
                "[", GenExpr(s->mma_row), "]);\n");
      return;
    }
    const std::array<int64_t, 2>& st = s->mma_a_strides;
    StrAppend(out, pad, shape, s->mma_load == 2 ? "_frag_b(" : "_frag_a(", regs, ", ",
              TensorName(s->mma_a), " + ", GenExpr(s->mma_offsets[0]), ", ", st[0], ", ", st[1],
              ");\n");
  }

  // mma_fragment values per 32-bit register: two 16-bit ones, or one TF32.
  int64_t ValuesPerRegister() const { return dag_.tf32 ? 1 : 2; }
  // The 32-bit register of an mma_fragment tensor that holds element `at`.
  std::string FragmentRegister(const Expr& at) {
    return ValuesPerRegister() == 1 ? GenExpr(at) : StrCat("(", GenExpr(at), ") / 2");
  }

  void VisitAsyncCommit(const Stmt& s, int indent, std::string* out) override {
    std::string pad(size_t(indent) * 2, ' ');
    StrAppend(out, pad, "asm volatile(\"cp.async.commit_group;\\n\" ::);\n");
    if (s->extent >= 0)
      StrAppend(out, pad, "asm volatile(\"cp.async.wait_group ", s->extent, ";\\n\" ::);\n");
    if (s->proxy_fence)
      StrAppend(out, pad, "asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n");
  }

  // wgmma.fence, or commit and wait; either way the
  // accumulators are pinned in place around it (an empty asm that reads
  // and writes each), so the compiler moves no access to them across.
  void VisitWgmmaSync(const Stmt& s, int indent, std::string* out) override {
    std::string pad(size_t(indent) * 2, ' ');
    const std::string pin = StrCat(pad, "#pragma unroll\n", pad, "for (int tf_i = 0; tf_i < ",
                                   s->shape[0], "; ++tf_i) asm volatile(\"\" : \"+f\"(",
                                   TensorName(s->tensor), "[tf_i]) :: \"memory\");\n");
    if (s->extent < 0) {
      StrAppend(out, pin, pad, "tf_wgmma_fence();\n");
    } else {
      StrAppend(out, pad, "tf_wgmma_commit();\n", pad,
                "asm volatile(\"wgmma.wait_group.sync.aligned ", s->extent,
                ";\\n\" ::: \"memory\");\n", pin);
    }
  }

  void VisitSeq(const Stmt& s, int indent, std::string* out) override {
    for (const Stmt& b : s->body) EmitStmt(b, indent, out);
  }

  void VisitIf(const Stmt& s, int indent, std::string* out) override {
    std::string pad(size_t(indent) * 2, ' ');
    StrAppend(out, pad, "if (", GenExpr(s->cond), ") {\n");
    EmitStmt(s->body[0], indent + 1, out);
    StrAppend(out, pad, "}\n");
  }

  void VisitAllocate(const Stmt& s, int indent, std::string* out) override {
    std::string pad(size_t(indent) * 2, ' ');
    std::vector<int64_t> saved = shapes_[s->tensor];
    shapes_[s->tensor] = s->shape;
    if (s->shared) {  // declared at the top of the kernel
      EmitStmt(s->body[0], indent, out);
    } else {
      int64_t elements = 1;
      for (int64_t e : s->shape) elements *= e;
      // mma fragments are 32-bit registers (FragmentRegister); 16-bit
      // registers and a tf32 schedule's take 16-byte copies.
      const std::string decl =
          dag_.tensors[size_t(s->tensor)].mma_fragment
              ? StrCat("unsigned ", TensorName(s->tensor), "[", elements / ValuesPerRegister(), "]")
              : StrCat(IsHalf(s->tensor) || dag_.tf32 ? "__align__(16) " : "",
                       ElementType(s->tensor), " ", TensorName(s->tensor), "[", elements, "]");
      StrAppend(out, pad, "{\n", pad, "  ", decl, ";\n");
      EmitStmt(s->body[0], indent + 1, out);
      StrAppend(out, pad, "}\n");
    }
    shapes_[s->tensor] = saved;
  }

  void VisitBarrier(const Stmt& s, int indent, std::string* out) override {
    std::string pad(size_t(indent) * 2, ' ');
    StrAppend(out, pad, "__syncthreads();\n");
  }

  void VisitDefault(const Stmt&, int, std::string*) override {}

  const ir::ComputeDAG& dag_;
  const schedule::GpuLaunch& launch_;
  GpuKernel kernel_;
  std::vector<std::vector<int64_t>> shapes_;
  std::unordered_map<const ExprNode*, std::string> var_names_;
};

}  // namespace

absl::StatusOr<GpuProgram> EmitCuda(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                    const ir::Target& target) {
  if (!target.is_gpu()) {
    return absl::InvalidArgumentError("EmitCuda needs a cuda target, got " + target.ToString());
  }
  const v1::DType dtype = !ir::HasFloat16(dag)              ? v1::DTYPE_FLOAT32
                          : dag.half == HalfKind::kBFloat16 ? v1::DTYPE_BFLOAT16
                                                            : v1::DTYPE_FLOAT16;
  if (absl::Status s =
          ir::CheckFormatTarget(dtype, dag.tf32, target,
                                dag.tf32 ? "tf32 products" : StrCat(DTypeWord(dtype), " kernels"));
      !s.ok())
    return absl::UnimplementedError(s.message());
  TF_ASSIGN_OR_RETURN(schedule::GpuLaunchPlan plan, schedule::PlanGpuLaunches(dag, program, target));
  GpuProgram out;
  std::set<int> global(dag.args.begin(), dag.args.end());
  for (const auto& [tensor, shape] : plan.workspace) {
    int64_t bytes = ir::ElementBytes(dag.tensors[size_t(tensor)]);
    for (int64_t e : shape) bytes *= e;
    out.workspace.push_back({tensor, bytes});
    global.insert(tensor);
  }
  int64_t largest = 1;
  for (int t : global) largest = std::max(largest, dag.NumElements(t));
  std::string kernels;
  std::set<std::tuple<int64_t, bool, bool>> wgmma_shapes;
  for (const schedule::GpuLaunch& launch : plan.kernels) {
    KernelEmitter k(dag, launch, StrCat("tf_kernel_", out.kernels.size()));
    out.kernels.push_back(k.Emit(global, &kernels));
    wgmma_shapes.insert(k.wgmma_shapes().begin(), k.wgmma_shapes().end());
  }
  // 32-bit index math where every tensor fits (64-bit multiplies are slow).
  std::string prelude = kCudaPrelude;
  const char* index_t = largest < (int64_t{1} << 31) ? "int" : "long long";
  prelude.replace(prelude.find("TF_INDEX_T"), strlen("TF_INDEX_T"), index_t);
  const bool bf16 = dag.half == HalfKind::kBFloat16;
  if (kernels.find("tf_v16") != std::string::npos ||
      kernels.find("tf_cp_async16") != std::string::npos)
    prelude += kCudaVector16Prelude;
  if (ir::HasFloat16(dag)) prelude += bf16 ? kCudaBFloat16Prelude : kCudaFloat16Prelude;
  // (The m16n8k16 prelude's ldmatrix form takes shared addresses too.)
  if (kernels.find("tf_cp_async16") != std::string::npos ||
      kernels.find("tf_mma_m16n8k16") != std::string::npos)
    prelude += kCudaSharedPrelude;
  if (kernels.find("tf_mma_m16n8k8_tf32") != std::string::npos) prelude += kCudaMmaTf32Prelude;
  if (kernels.find("tf_mma_m16n8k16") != std::string::npos) {
    // The product's operand type: .f16 or .bf16 (the same fragment layouts).
    std::string mma = kCudaMmaPrelude;
    for (size_t at = mma.find(".f32.f16.f16.f32"); bf16 && at != std::string::npos;
         at = mma.find(".f32.f16.f16.f32", at))
      mma.replace(at, strlen(".f32.f16.f16.f32"), ".f32.bf16.bf16.f32");
    prelude += mma;
  }
  if (!wgmma_shapes.empty()) {
    if (target.sm != 90) {
      return absl::InvalidArgumentError(
          StrCat("wgmma kernels are sm_90a code; the target is ", target.arch()));
    }
    if (prelude.find("tf_shared_address") == std::string::npos) prelude += kCudaSharedPrelude;
    prelude += kCudaWgmmaPrelude;
    for (const auto& [n, a_mn, b_mn] : wgmma_shapes)
      prelude += WgmmaFunction(n, bf16 ? "bf16" : "f16", a_mn, b_mn);
    out.arch_specific = true;
  }
  out.source = prelude + "\n" + kernels;
  return out;
}


}  // namespace tunefarm::codegen
