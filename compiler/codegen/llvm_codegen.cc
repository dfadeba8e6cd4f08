#include "compiler/codegen/llvm_codegen.h"

#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/kernel_abi.h"
#include "common/status_macros.h"
#include "compiler/codegen/llvm_ops.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/functor.h"
#include "compiler/ir/simplify.h"
#include "llvm/Analysis/CGSCCPassManager.h"
#include "llvm/Analysis/LoopAnalysisManager.h"
#include "llvm/IR/DiagnosticInfo.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

namespace tunefarm::codegen {
namespace {

using ir::ExprKind;
using ir::ExprNode;
using ir::Op;
using ir::ScalarType;
using ir::StmtKind;

// A parallel loop that stores fewer elements than this runs on the calling
// thread: handing it to the pool costs more than it saves. Measured on
// Silero VAD at 2 threads on a 2-core Zen 5 VM, in the model: a 387-element
// pow 0.6 us split against 0.05 on one thread, 12k-49k-MAC convolutions
// 1.1-1.7 us against 0.6-1.2, the whole model 0.023 -> 0.019 ms; from
// 262,144 on, a 198k-MAC convolution lost its split (0.019 -> 0.027 ms).
constexpr int64_t kMinParallelStores = 16384;

// Field indices of TFRuntime as an LLVM struct.
enum RuntimeField { kAbi = 0, kThreads, kParallelFor, kCtx, kAlloc, kFree };

class CodeGen : public ir::ExprFunctor<llvm::Value*()>, public ir::StmtFunctor<void()> {
  using ExprFunctor::Visit;
  using StmtFunctor::Visit;

 public:
  CodeGen(llvm::LLVMContext& ctx, llvm::Module& mod, const ir::ComputeDAG& dag)
      : ctx_(ctx), mod_(mod), b_(ctx), dag_(dag), buffers_(dag.tensors.size(), nullptr) {
    for (const ir::TensorDecl& t : dag.tensors) shapes_.push_back(t.shape);
    ptr_ = llvm::PointerType::getUnqual(ctx);
    i64_ = llvm::Type::getInt64Ty(ctx);
    i32_ = llvm::Type::getInt32Ty(ctx);
    f32_ = llvm::Type::getFloatTy(ctx);
    runtime_ty_ = llvm::StructType::get(ctx, {i32_, i32_, ptr_, ptr_, ptr_, ptr_});
    llvm::FastMathFlags fmf;
    fmf.setAllowContract(true);  // a*b+c may become an FMA
    b_.setFastMathFlags(fmf);
  }

  void Generate(const ir::Stmt& program, const std::vector<std::string>& fn_attrs_kv) {
    fn_attrs_kv_ = fn_attrs_kv;
    // tf_body(noalias buffers..., rt): the real work, with noalias on every buffer.
    std::vector<llvm::Type*> params(dag_.args.size(), ptr_);
    params.push_back(ptr_);
    auto* body_ty = llvm::FunctionType::get(i32_, params, false);
    body_fn_ = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage, "tf_body", mod_);
    for (size_t i = 0; i < dag_.args.size(); ++i) {
      body_fn_->addParamAttr(unsigned(i), llvm::Attribute::NoAlias);
      body_fn_->addParamAttr(unsigned(i), llvm::Attribute::NoCapture);
    }
    Decorate(body_fn_, fn_attrs_kv);
    fn_ = body_fn_;
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", body_fn_));
    for (size_t i = 0; i < dag_.args.size(); ++i)
      buffers_[dag_.args[i]] = body_fn_->getArg(unsigned(i));
    rt_ = body_fn_->getArg(unsigned(dag_.args.size()));
    GenStmt(program);
    b_.CreateRet(llvm::ConstantInt::get(i32_, 0));

    // tf_main(void* const* buffers, const TFRuntime* rt)
    auto* main_ty = llvm::FunctionType::get(i32_, {ptr_, ptr_}, false);
    auto* main =
        llvm::Function::Create(main_ty, llvm::Function::ExternalLinkage, TF_KERNEL_ENTRY, mod_);
    Decorate(main, fn_attrs_kv);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", main));
    std::vector<llvm::Value*> args;
    for (size_t i = 0; i < dag_.args.size(); ++i) {
      llvm::Value* slot = b_.CreateConstGEP1_64(ptr_, main->getArg(0), i);
      args.push_back(b_.CreateLoad(ptr_, slot));
    }
    args.push_back(main->getArg(1));
    b_.CreateRet(b_.CreateCall(body_fn_, args));
  }

 private:
  void Decorate(llvm::Function* f, const std::vector<std::string>& kv) {
    for (size_t i = 0; i + 1 < kv.size(); i += 2) f->addFnAttr(kv[i], kv[i + 1]);
    f->addFnAttr(llvm::Attribute::NoUnwind);
  }

  llvm::Value* Lookup(const ExprNode* var) {
    for (auto it = vars_.rbegin(); it != vars_.rend(); ++it) {
      if (it->first == var) return it->second;
    }
    TF_CHECK(false && "unbound loop variable in codegen");
    return nullptr;
  }

  llvm::Type* TypeOf(ScalarType t) { return LlvmType(ctx_, t, i64_); }

  llvm::Value* FlatIndex(int tensor, const std::vector<ir::Expr>& idx) {
    std::vector<llvm::Value*> values;
    for (size_t d = 0; d < shapes_[tensor].size(); ++d) values.push_back(GenExpr(idx[d]));
    return RowMajorIndex(b_, shapes_[tensor], values, i64_);
  }

  // Broadcasts scalars to the vector width when the other operand is a vector.
  void Match(llvm::Value*& a, llvm::Value*& b) {
    bool va = a->getType()->isVectorTy(), vb = b->getType()->isVectorTy();
    if (va && !vb) b = b_.CreateVectorSplat(lanes_, b);
    if (vb && !va) a = b_.CreateVectorSplat(lanes_, a);
  }
  llvm::Value* Widen(llvm::Value* v) {
    return v->getType()->isVectorTy() ? v : b_.CreateVectorSplat(lanes_, v);
  }

  llvm::Value* GenExpr(const ir::Expr& e) {
    const ExprNode& n = *e.get();
    if (vec_var_ != nullptr) {
      if (n.kind == ExprKind::kVar && e.get() == vec_var_) {
        // chunk base + <0, 1, ..., lanes-1>
        std::vector<llvm::Constant*> ramp;
        for (int i = 0; i < lanes_; ++i) ramp.push_back(llvm::ConstantInt::get(i64_, i));
        return b_.CreateAdd(b_.CreateVectorSplat(lanes_, Lookup(e.get())),
                            llvm::ConstantVector::get(ramp));
      }
      if (n.kind == ExprKind::kLoad) return GenVectorLoad(n);
    }
    return Visit(e);
  }

  // One method per expression kind (ir::ExprFunctor).
  llvm::Value* VisitIntImm(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    return n.type == ScalarType::kBool ? llvm::ConstantInt::getBool(ctx_, n.int_value != 0)
                                       : llvm::ConstantInt::get(i64_, n.int_value, true);
  }

  llvm::Value* VisitFloatImm(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    return llvm::ConstantFP::get(TypeOf(n.type), n.float_value);
  }

  llvm::Value* VisitVar(const ir::Expr& e) override {
    return Lookup(e.get());
  }

  llvm::Value* VisitBinary(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    llvm::Value* a = GenExpr(n.args[0]);
    llvm::Value* c = GenExpr(n.args[1]);
    Match(a, c);
    if (llvm::Value* v = BinaryOp(b_, n.op, ir::IsFloat(n.type), a, c)) return v;
    TF_CHECK(false && "unsupported binary op");
    return nullptr;
  }

  llvm::Value* VisitCmp(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    llvm::Value* a = GenExpr(n.args[0]);
    llvm::Value* c = GenExpr(n.args[1]);
    Match(a, c);
    bool isf = ir::IsFloat(n.args[0]->type);
    llvm::CmpInst::Predicate p = ComparePredicate(n.op, isf);
    return isf ? b_.CreateFCmp(p, a, c) : b_.CreateICmp(p, a, c);
  }

  llvm::Value* GenAndOr(const ir::Expr& e) {
    const ExprNode& n = *e.get();
    llvm::Value* a = GenExpr(n.args[0]);
    llvm::Value* c = GenExpr(n.args[1]);
    Match(a, c);
    return n.kind == ExprKind::kAnd ? b_.CreateAnd(a, c) : b_.CreateOr(a, c);
  }

  llvm::Value* VisitAnd(const ir::Expr& e) override { return GenAndOr(e); }

  llvm::Value* VisitOr(const ir::Expr& e) override { return GenAndOr(e); }

  llvm::Value* VisitNot(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    return b_.CreateNot(GenExpr(n.args[0]));
  }

  llvm::Value* VisitSelect(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    if (vec_var_ != nullptr) {
      if (llvm::Value* v = GenGuardedVectorLoad(n)) return v;
    }
    llvm::Value* cond = GenExpr(n.args[0]);
    llvm::Value* t = GenExpr(n.args[1]);
    llvm::Value* f = GenExpr(n.args[2]);
    Match(t, f);
    if (cond->getType()->isVectorTy() && !t->getType()->isVectorTy())
      t = Widen(t), f = Widen(f);
    return b_.CreateSelect(cond, t, f);
  }

  llvm::Value* VisitCast(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    llvm::Value* x = GenExpr(n.args[0]);
    bool from_f = ir::IsFloat(n.args[0]->type), to_f = ir::IsFloat(n.type);
    llvm::Type* to = TypeOf(n.type);
    if (x->getType()->isVectorTy()) to = llvm::VectorType::get(to, lanes_, false);
    if (!from_f && to_f) return b_.CreateSIToFP(x, to);
    if (from_f && !to_f) return b_.CreateFPToSI(x, to);
    if (from_f && to_f) return b_.CreateFPCast(x, to);
    return b_.CreateIntCast(x, to, true);
  }

  llvm::Value* VisitCall(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    llvm::Value* x = GenExpr(n.args[0]);
    llvm::Intrinsic::ID id = llvm::Intrinsic::not_intrinsic;
    switch (n.op) {
      case Op::kExp:
        return FastExp(x);
      case Op::kTanh:
        return FastTanh(x);
      case Op::kLog:
        return PerLane("logf", x);
      case Op::kSqrt:
        id = llvm::Intrinsic::sqrt;
        break;
      case Op::kAbs:
        id = llvm::Intrinsic::fabs;
        break;
      default:
        break;
    }
    TF_CHECK(id != llvm::Intrinsic::not_intrinsic);
    llvm::Function* f = llvm::Intrinsic::getDeclaration(&mod_, id, {x->getType()});
    return b_.CreateCall(f, {x});
  }

  llvm::Value* VisitLoad(const ir::Expr& e) override {
    const ExprNode& n = *e.get();
    llvm::Value* base = buffers_[n.tensor];
    TF_CHECK(base != nullptr);
    llvm::Value* addr = b_.CreateInBoundsGEP(f32_, base, FlatIndex(n.tensor, n.args));
    return b_.CreateAlignedLoad(f32_, addr, llvm::Align(4));
  }

  llvm::Value* VisitDefault(const ir::Expr&) override { return nullptr; }

  // The flat (row-major) index of a tensor access as an IR expression.
  ir::Expr FlatIndexExpr(int tensor, const std::vector<ir::Expr>& idx) {
    const std::vector<int64_t>& shape = shapes_[tensor];
    ir::Expr flat;
    for (size_t d = 0; d < shape.size(); ++d) {
      flat = flat.defined() ? flat * ir::IntImm(shape[d]) + idx[d] : idx[d];
    }
    return flat.defined() ? flat : ir::IntImm(0);
  }

  // The coefficient of `var` in `e` when e is affine in it (var not under
  // division, min/max, select or a load); false otherwise.
  static bool LinearCoeff(const ir::Expr& e, const ExprNode* var, int64_t* coeff) {
    if (!ir::Mentions(e, var)) return *coeff = 0, true;
    if (e.get() == var) return *coeff = 1, true;
    if (e->kind != ExprKind::kBinary) return false;
    int64_t a = 0, b = 0, k = 0;
    switch (e->op) {
      case Op::kAdd:
      case Op::kSub:
        if (!LinearCoeff(e->args[0], var, &a) || !LinearCoeff(e->args[1], var, &b)) return false;
        *coeff = e->op == Op::kAdd ? a + b : a - b;
        return true;
      case Op::kMul:
        if (ir::IsConstInt(e->args[0], &k) && LinearCoeff(e->args[1], var, &b))
          return *coeff = k * b, true;
        if (ir::IsConstInt(e->args[1], &k) && LinearCoeff(e->args[0], var, &a))
          return *coeff = k * a, true;
        return false;
      default:
        return false;
    }
  }

  // The flat index of element 0 of the vector access: `flat` with the
  // vectorized variable at the chunk base (scalar code).
  llvm::Value* ScalarIndex(const ir::Expr& flat) {
    const ExprNode* saved = vec_var_;
    vec_var_ = nullptr;
    llvm::Value* index = GenExpr(flat);
    vec_var_ = saved;
    return index;
  }

  // The element count of `tensor` (of its allocation, where it is a region).
  int64_t Elements(int tensor) const {
    int64_t total = 1;
    for (int64_t d : shapes_[size_t(tensor)]) total *= d;
    return total;
  }

  // Address of element 0 of an access every lane of which is inside the buffer.
  llvm::Value* ScalarAddress(int tensor, const ir::Expr& flat) {
    return b_.CreateInBoundsGEP(f32_, buffers_[tensor], ScalarIndex(flat));
  }

  // The address of a masked vector access of `tensor` starting at element
  // `flat` (not `inbounds`: lane 0 may lie outside the buffer, a masked-off
  // padding lane): element 0 where the whole vector starts past the
  // tensor's end, so every lane is masked off there. A masked-off lane on an
  // unmapped page is not read, but the core pays an assist for it on every
  // access: a tile whose last channel blocks lay past a 264 KB weight
  // (malloc maps such buffers alone, so what follows is unmapped) ran 10-30x
  // slower, depending on where the allocator had put the weight.
  llvm::Value* MaskedAddress(int tensor, const ir::Expr& flat) {
    llvm::Value* index = ScalarIndex(flat);
    llvm::Value* past =
        b_.CreateICmpSGE(index, llvm::ConstantInt::get(index->getType(), Elements(tensor)));
    index = b_.CreateSelect(past, llvm::ConstantInt::get(index->getType(), 0), index);
    return b_.CreateGEP(f32_, buffers_[tensor], index);
  }

  // Stride 2-4 (strided convolutions): one wide masked load of the span at
  // `addr`, then every coeff-th element; elements between lanes are not
  // read. Lanes whose mask bit is off get `fill` (a scalar), or are undefined
  // without one.
  llvm::Value* StridedMaskedLoad(llvm::Value* addr, int coeff, llvm::Value* mask,
                                 llvm::Value* fill) {
    const int wide = lanes_ * coeff;
    std::vector<int> spread(wide), pick(lanes_);
    for (int j = 0; j < wide; ++j) spread[j] = j % coeff == 0 ? j / coeff : lanes_;
    for (int i = 0; i < lanes_; ++i) pick[i] = i * coeff;
    // Lane i's mask bit goes to element i*coeff; the rest are false.
    llvm::Value* wide_mask =
        b_.CreateShuffleVector(mask, llvm::ConstantInt::getFalse(mask->getType()), spread);
    auto* wty = llvm::VectorType::get(f32_, wide, false);
    llvm::Value* all =
        fill ? b_.CreateMaskedLoad(wty, addr, llvm::Align(4), wide_mask,
                                   b_.CreateVectorSplat(wide, fill))
             : b_.CreateMaskedLoad(wty, addr, llvm::Align(4), wide_mask);
    return b_.CreateShuffleVector(all, pick);
  }

  llvm::Value* AllTrue() {
    return llvm::ConstantInt::getTrue(llvm::VectorType::get(b_.getInt1Ty(), lanes_, false));
  }

  llvm::Value* GenVectorLoad(const ExprNode& n) {
    TF_CHECK(buffers_[n.tensor] != nullptr);
    ir::Expr flat = FlatIndexExpr(n.tensor, n.args);
    if (!ir::Mentions(flat, vec_var_)) {  // the same element in every lane
      return b_.CreateAlignedLoad(f32_, ScalarAddress(n.tensor, flat), llvm::Align(4));
    }
    auto* vty = llvm::VectorType::get(f32_, lanes_, false);
    llvm::Value* mask = mask_ ? mask_ : AllTrue();
    int64_t coeff = 0;
    if (LinearCoeff(flat, vec_var_, &coeff) && coeff == 1) {
      // Unmasked accesses stay plain loads, which SROA can keep in registers;
      // so do guarded ones of a stack tile that the loops keep inside it
      // (the guard keeps lanes out of the output, not out of the tile).
      if (mask_ == nullptr || (OnStack(n.tensor) && AlwaysInside(n.tensor, flat)))
        return b_.CreateAlignedLoad(vty, ScalarAddress(n.tensor, flat), llvm::Align(4));
      return b_.CreateMaskedLoad(vty, MaskedAddress(n.tensor, flat), llvm::Align(4), mask);
    }
    if (coeff >= 2 && coeff <= 4)
      return StridedMaskedLoad(
          mask_ ? MaskedAddress(n.tensor, flat) : ScalarAddress(n.tensor, flat), int(coeff), mask,
          nullptr);
    llvm::Value* ptrs = b_.CreateInBoundsGEP(f32_, buffers_[n.tensor], Widen(GenExpr(flat)));
    return b_.CreateMaskedGather(vty, ptrs, llvm::Align(4), mask);
  }

  // select(cond, T[clamp(x0, lo, hi), ...], f), the padding pattern: where
  // `cond` bounds every clamped index (a conjunct x >= lo and one x <= hi,
  // or tighter), the clamps change nothing in the lanes cond selects, so the
  // unclamped access is contiguous along the vector: one masked load whose
  // masked-off lanes are f and never read. Null when the pattern does not
  // hold (the caller then evaluates both sides, the load as a gather).
  llvm::Value* GenGuardedVectorLoad(const ExprNode& n) {
    const ir::Expr& load = n.args[1];
    if (load->kind != ExprKind::kLoad || load->type != ScalarType::kFloat32 ||
        buffers_[load->tensor] == nullptr) {
      return nullptr;
    }
    // Bounds the condition proves: text of the bounded expression -> [lo, hi].
    std::map<std::string, std::pair<int64_t, int64_t>> bounds;
    std::function<void(const ir::Expr&)> collect = [&](const ir::Expr& c) {
      if (c->kind == ExprKind::kAnd) {
        collect(c->args[0]);
        collect(c->args[1]);
        return;
      }
      int64_t k = 0;
      if (c->kind != ExprKind::kCmp || !ir::IsConstInt(c->args[1], &k)) return;
      auto& b = bounds.emplace(ir::ToString(c->args[0]),
                               std::make_pair(std::numeric_limits<int64_t>::min(),
                                              std::numeric_limits<int64_t>::max()))
                    .first->second;
      switch (c->op) {
        case Op::kGe: b.first = std::max(b.first, k); break;
        case Op::kGt: b.first = std::max(b.first, k + 1); break;
        case Op::kLe: b.second = std::min(b.second, k); break;
        case Op::kLt: b.second = std::min(b.second, k - 1); break;
        default: break;
      }
    };
    collect(n.args[0]);
    std::vector<ir::Expr> idx;
    bool clamped = false;
    for (const ir::Expr& a : load->args) {
      // max(min(x, hi), lo), or one side alone (the simplifier drops a clamp
      // the loop ranges prove idle, and the condition's conjunct with it).
      int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
      ir::Expr x = a;
      if (x->kind == ExprKind::kBinary && x->op == Op::kMax && ir::IsConstInt(x->args[1], &lo)) {
        x = x->args[0];
      }
      if (x->kind == ExprKind::kBinary && x->op == Op::kMin && ir::IsConstInt(x->args[1], &hi)) {
        x = x->args[0];
      }
      if (x.same_as(a)) {
        idx.push_back(a);
        continue;
      }
      auto b = bounds.find(ir::ToString(x));
      if (b == bounds.end() || b->second.first < lo || b->second.second > hi) return nullptr;
      idx.push_back(x);
      clamped = true;
    }
    ir::Expr flat = FlatIndexExpr(load->tensor, idx);
    int64_t coeff = 0;
    if (!clamped || !LinearCoeff(flat, vec_var_, &coeff) || coeff < 1 || coeff > 4) return nullptr;
    // A per-lane fill (the next input of a concat's select chain) is the
    // masked load's pass-through; a strided load takes a uniform one only
    // (checked before any code is emitted: the caller then evaluates the
    // select as usual).
    if (coeff != 1 && ir::Mentions(n.args[2], vec_var_)) return nullptr;
    // Lane 0's element may lie outside the buffer (left padding); only the
    // selected lanes are dereferenced.
    llvm::Value* addr = MaskedAddress(load->tensor, flat);
    llvm::Value* fill = GenExpr(n.args[2]);
    auto* vty = llvm::VectorType::get(f32_, lanes_, false);
    auto masked = [&]() -> llvm::Value* {
      llvm::Value* cond = GenExpr(n.args[0]);
      if (!cond->getType()->isVectorTy()) cond = b_.CreateVectorSplat(lanes_, cond);
      if (mask_ != nullptr) cond = b_.CreateAnd(cond, mask_);
      if (coeff == 1) return b_.CreateMaskedLoad(vty, addr, llvm::Align(4), cond, Widen(fill));
      return StridedMaskedLoad(addr, int(coeff), cond, fill);
    };
    if (mask_ != nullptr || !EndsDecide(n.args[0])) return masked();
    // Inside the padding's frame every lane is selected: a plain load (a
    // constant mask when strided), no per-lane mask to compute. The
    // condition is monotonic in the lane, so its first and last lanes decide.
    llvm::Value* all_in =
        b_.CreateAnd(ScalarAtLane(n.args[0], 0), ScalarAtLane(n.args[0], lanes_ - 1));
    llvm::BasicBlock* inside = llvm::BasicBlock::Create(ctx_, "inside", fn_);
    llvm::BasicBlock* edge = llvm::BasicBlock::Create(ctx_, "edge", fn_);
    llvm::BasicBlock* join = llvm::BasicBlock::Create(ctx_, "join", fn_);
    b_.CreateCondBr(all_in, inside, edge);
    b_.SetInsertPoint(inside);
    llvm::Value* fast =
        coeff == 1 ? static_cast<llvm::Value*>(b_.CreateAlignedLoad(vty, addr, llvm::Align(4)))
                   : StridedMaskedLoad(addr, int(coeff), AllTrue(), nullptr);
    llvm::BasicBlock* inside_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(edge);
    llvm::Value* slow = masked();
    llvm::BasicBlock* edge_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    llvm::PHINode* phi = b_.CreatePHI(vty, 2);
    phi->addIncoming(fast, inside_end);
    phi->addIncoming(slow, edge_end);
    return phi;
  }

  // Whether every conjunct of `cond` is lane-invariant or compares an
  // expression affine in the vector variable with a constant (true on an
  // interval of lanes, so lanes 0 and lanes-1 decide all of them).
  bool EndsDecide(const ir::Expr& cond) const {
    if (!ir::Mentions(cond, vec_var_)) return true;
    if (cond->kind == ExprKind::kAnd) return EndsDecide(cond->args[0]) && EndsDecide(cond->args[1]);
    int64_t k = 0, coeff = 0;
    return cond->kind == ExprKind::kCmp && ir::IsConstInt(cond->args[1], &k) &&
           cond->op != Op::kEq && cond->op != Op::kNe &&
           LinearCoeff(cond->args[0], vec_var_, &coeff);
  }

  // `e` as a scalar at lane `lane` of the current chunk.
  llvm::Value* ScalarAtLane(const ir::Expr& e, int lane) {
    const ExprNode* var = vec_var_;
    llvm::Value* base = Lookup(var);
    vars_.emplace_back(var, b_.CreateAdd(base, llvm::ConstantInt::get(i64_, lane)));
    vec_var_ = nullptr;
    llvm::Value* v = GenExpr(e);
    vec_var_ = var;
    vars_.pop_back();
    return v;
  }

  void GenVectorStore(const ir::StmtNode& s) {
    llvm::Value* v = Widen(GenExpr(s.value));
    ir::Expr flat = FlatIndexExpr(s.tensor, s.indices);
    llvm::Value* mask = mask_ ? mask_ : AllTrue();
    int64_t coeff = 0;
    if (LinearCoeff(flat, vec_var_, &coeff) && coeff == 1) {
      if (mask_ == nullptr) {
        b_.CreateAlignedStore(v, ScalarAddress(s.tensor, flat), llvm::Align(4));
      } else if (OnStack(s.tensor) && AlwaysInside(s.tensor, flat)) {
        // A guarded store to a stack tile, every lane inside it whatever the
        // guard: the lanes the guard leaves off keep their value, through a
        // blend and a plain store. A masked store would keep the tile in
        // memory: an accumulator tile over 258 channels (16-lane blocks, the
        // last guarded) ran 4-7x slower so.
        llvm::Value* addr = ScalarAddress(s.tensor, flat);
        llvm::Value* old = b_.CreateAlignedLoad(v->getType(), addr, llvm::Align(4));
        b_.CreateAlignedStore(b_.CreateSelect(mask, v, old), addr, llvm::Align(4));
      } else {
        b_.CreateMaskedStore(v, MaskedAddress(s.tensor, flat), llvm::Align(4), mask);
      }
      return;
    }
    // Lanes store to distinct elements (a loop variable always reaches the
    // output index injectively), so a scatter keeps the scalar meaning.
    llvm::Value* ptrs = b_.CreateInBoundsGEP(f32_, buffers_[s.tensor], Widen(GenExpr(flat)));
    b_.CreateMaskedScatter(v, ptrs, llvm::Align(4), mask);
  }

  // A float constant of x's type (scalar or vector), and fmuladd (an FMA
  // where the target has one).
  llvm::Value* F(llvm::Value* like, double v) { return llvm::ConstantFP::get(like->getType(), v); }
  llvm::Value* MulAdd(llvm::Value* a, llvm::Value* b, llvm::Value* c) {
    llvm::Function* f =
        llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::fmuladd, {a->getType()});
    return b_.CreateCall(f, {a, b, c});
  }

  // tanh as a [13/6] odd rational function of x on [-7.9988, 7.9988] (the
  // coefficients of Eigen's fast float tanh, a few ulp from tanhf), clamped
  // outside, where tanh rounds to +-1 within an ulp; x itself below 4e-4
  // and for NaN.
  // Straight-line vector arithmetic: no libm call per lane, and nothing in
  // it makes a denormal from a normal input.
  llvm::Value* FastTanh(llvm::Value* x) {
    const double clamp = 7.99881172180175781;
    llvm::Value* c = b_.CreateMaxNum(b_.CreateMinNum(x, F(x, clamp)), F(x, -clamp));
    llvm::Value* x2 = b_.CreateFMul(c, c);
    llvm::Value* p = F(x, -2.76076847742355e-16);
    for (double a : {2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
                     1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03})
      p = MulAdd(p, x2, F(x, a));
    p = b_.CreateFMul(p, c);
    llvm::Value* q = F(x, 1.19825839466702e-06);
    for (double bc : {1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03})
      q = MulAdd(q, x2, F(x, bc));
    llvm::Value* r = b_.CreateFDiv(p, q);
    llvm::Function* fabs =
        llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::fabs, {x->getType()});
    llvm::Value* tiny = b_.CreateFCmpULT(b_.CreateCall(fabs, {x}), F(x, 0.0004));
    return b_.CreateSelect(tiny, x, r);
  }

  // exp(x) in straight-line arithmetic, so a vector of lanes stays a vector
  // (llvm.exp would become one libm call per lane): x = n ln2 + r with
  // |r| <= ln2/2 (ln2 in two parts), e^r by Cephes' degree-6 polynomial
  // (about 1 ulp), 2^n placed in the exponent bits. x is clamped to
  // [-87.34, 88.38] first, so the result is always a normal float: at most
  // 2.4e38 above the range and 1.2e-38 below it; NaN gives the upper bound.
  llvm::Value* FastExp(llvm::Value* x) {
    llvm::Type* ty = x->getType();
    x = b_.CreateMaxNum(b_.CreateMinNum(x, F(x, 88.3762626647949)), F(x, -87.3365447505531));
    // n = round(x log2 e): adding 1.5 * 2^23 rounds to an integer, which the
    // sum's low mantissa bits then hold.
    const double magic = 12582912.0;
    llvm::Value* t = MulAdd(x, F(x, 1.44269504088896341), F(x, magic));
    llvm::Value* n = b_.CreateFSub(t, F(x, magic));
    llvm::Value* r = MulAdd(n, F(x, -0.693359375), x);
    r = MulAdd(n, F(x, 2.12194440e-4), r);
    llvm::Value* p = F(x, 1.9875691500e-4);
    for (double c :
         {1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1})
      p = MulAdd(p, r, F(x, c));
    llvm::Value* y = MulAdd(p, b_.CreateFMul(r, r), b_.CreateFAdd(r, F(x, 1.0)));
    llvm::Type* ity = ty->isVectorTy() ? static_cast<llvm::Type*>(llvm::VectorType::getInteger(
                                             llvm::cast<llvm::VectorType>(ty)))
                                       : static_cast<llvm::Type*>(b_.getInt32Ty());
    // 2^n: (n + 127) << 23 as float bits; t's integer part is n + 1.5 * 2^23.
    llvm::Value* bits =
        b_.CreateSub(b_.CreateBitCast(t, ity), llvm::ConstantInt::get(ity, 0x4B400000 - 127));
    llvm::Value* scale = b_.CreateBitCast(b_.CreateShl(bits, 23), ty);
    return b_.CreateFMul(y, scale);
  }

  // tanh has no vector form here: one libm call per lane.
  // The C library's float function `name` on each lane.
  llvm::Value* PerLane(const char* name, llvm::Value* x) {
    llvm::FunctionCallee fn =
        mod_.getOrInsertFunction(name, llvm::FunctionType::get(f32_, {f32_}, false));
    if (!x->getType()->isVectorTy()) return b_.CreateCall(fn, {x});
    const unsigned lanes = llvm::cast<llvm::FixedVectorType>(x->getType())->getNumElements();
    llvm::Value* out = llvm::PoisonValue::get(x->getType());
    for (unsigned i = 0; i < lanes; ++i) {
      llvm::Value* lane = b_.CreateExtractElement(x, uint64_t(i));
      out = b_.CreateInsertElement(out, b_.CreateCall(fn, {lane}), uint64_t(i));
    }
    return out;
  }

  static bool HasLoop(const ir::Stmt& s) {
    if (s->kind == StmtKind::kFor || s->kind == StmtKind::kAllocate) return true;
    for (const ir::Stmt& b : s->body) {
      if (HasLoop(b)) return true;
    }
    return false;
  }

  // A vectorized loop with no loop inside: chunks of `vector_lanes_`, the loop
  // variable a vector; guards inside are masks.
  void GenVectorLoop(const ir::StmtNode& s) {
    // A lane count that divides the extent where one does; else full
    // registers and then one narrower vector for the rest. No chunk is
    // masked for the extent: masked stores cost many times a plain store on
    // some cores (8x on AMD Zen 3, measured), and a masked store to a local
    // tile keeps it out of registers. (LLVM splits an odd-width vector into
    // legal pieces without touching memory past it.)
    int lanes = 0;
    for (int w = vector_lanes_; w >= 4 && lanes == 0; w /= 2) {
      if (s.extent % w == 0) lanes = w;
    }
    if (lanes == 0) lanes = vector_lanes_;
    const int64_t full = s.extent / lanes, rest = s.extent % lanes;
    auto chunk_body = [&](llvm::Value* base, int width) {
      lanes_ = width;
      vars_.emplace_back(s.var.get(), base);
      vec_var_ = s.var.get();
      GenStmt(s.body[0]);
      vec_var_ = nullptr;
      vars_.pop_back();
    };
    if (full > 0) {
      EmitCountedLoop(
          s.var->name + ".v", llvm::ConstantInt::get(i64_, 0), llvm::ConstantInt::get(i64_, full),
          nullptr, [&](llvm::Value* chunk) {
            chunk_body(b_.CreateMul(chunk, llvm::ConstantInt::get(i64_, lanes), "", true, true),
                       lanes);
          });
    }
    if (rest > 0) chunk_body(llvm::ConstantInt::get(i64_, full * lanes), int(rest));
  }

  llvm::MDNode* LoopMetadata(ir::ForKind kind) {
    std::vector<llvm::Metadata*> ops = {nullptr};
    auto flag = [&](const char* name) {
      ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name)}));
    };
    auto flag_true = [&](const char* name) {
      ops.push_back(llvm::MDNode::get(
          ctx_, {llvm::MDString::get(ctx_, name),
                 llvm::ConstantAsMetadata::get(llvm::ConstantInt::getTrue(ctx_))}));
    };
    if (kind == ir::ForKind::kVectorized) {
      // Keep the full-unroll pass off this loop, so the loop vectorizer sees it.
      flag_true("llvm.loop.vectorize.enable");
      flag("llvm.loop.unroll.disable");
    } else if (kind == ir::ForKind::kUnrolled)
      flag("llvm.loop.unroll.full");
    else
      return nullptr;
    llvm::MDNode* md = llvm::MDNode::getDistinct(ctx_, ops);
    md->replaceOperandWith(0, md);
    return md;
  }

  // The skeleton of a counted loop: for (i = begin; i < end; ++i) emit(i),
  // with `md` (if any) on the back edge. `end` > `begin` is not assumed.
  void EmitCountedLoop(const std::string& name, llvm::Value* begin, llvm::Value* end,
                       llvm::MDNode* md, const std::function<void(llvm::Value*)>& emit) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* loop_body = llvm::BasicBlock::Create(ctx_, "body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* phi = b_.CreatePHI(i64_, 2, name);
    phi->addIncoming(begin, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(phi, end), loop_body, exit);
    b_.SetInsertPoint(loop_body);
    emit(phi);
    llvm::Value* next = b_.CreateAdd(phi, llvm::ConstantInt::get(i64_, 1), "", true, true);
    llvm::BranchInst* back = b_.CreateBr(header);
    if (md != nullptr) back->setMetadata(llvm::LLVMContext::MD_loop, md);
    phi->addIncoming(next, b_.GetInsertBlock());
    b_.SetInsertPoint(exit);
  }

  void GenLoop(const ir::Expr& var, llvm::Value* begin, llvm::Value* end, ir::ForKind kind,
               const ir::Stmt& body) {
    EmitCountedLoop(var->name, begin, end, LoopMetadata(kind), [&](llvm::Value* i) {
      vars_.emplace_back(var.get(), i);
      GenStmt(body);
      vars_.pop_back();
    });
  }

  // Outlines a parallel loop into tf_par_N(closure, begin, end) and hands it
  // to rt->parallel_for. The closure carries the buffers, the runtime and the
  // enclosing loop variables.
  void GenParallel(const ir::StmtNode& s) {
    std::vector<llvm::Type*> fields = {ptr_};  // rt
    std::vector<int> tensors;
    for (size_t t = 0; t < buffers_.size(); ++t) {
      if (buffers_[t]) tensors.push_back(int(t)), fields.push_back(ptr_);
    }
    for (size_t v = 0; v < vars_.size(); ++v) fields.push_back(i64_);
    auto* closure_ty = llvm::StructType::get(ctx_, fields);
    llvm::IRBuilderBase::InsertPoint saved_ip = b_.saveIP();
    llvm::Function* parent = fn_;

    llvm::Value* closure;
    {
      llvm::IRBuilder<> entry(&parent->getEntryBlock(), parent->getEntryBlock().begin());
      closure = entry.CreateAlloca(closure_ty);
    }
    unsigned f = 0;
    b_.CreateStore(rt_, b_.CreateStructGEP(closure_ty, closure, f++));
    for (int t : tensors) b_.CreateStore(buffers_[t], b_.CreateStructGEP(closure_ty, closure, f++));
    for (auto& [var, val] : vars_)
      b_.CreateStore(val, b_.CreateStructGEP(closure_ty, closure, f++));

    auto* par_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr_, i64_, i64_}, false);
    auto* par = llvm::Function::Create(par_ty, llvm::Function::InternalLinkage,
                                       absl::StrCat("tf_par_", parallel_count_++), mod_);
    Decorate(par, fn_attrs_kv_);
    // The call below: rt->parallel_for(rt->ctx, extent, closure, par)
    llvm::Value* pf = b_.CreateLoad(ptr_, b_.CreateStructGEP(runtime_ty_, rt_, kParallelFor));
    llvm::Value* ctx = b_.CreateLoad(ptr_, b_.CreateStructGEP(runtime_ty_, rt_, kCtx));
    auto* pf_ty = llvm::FunctionType::get(i32_, {ptr_, i64_, ptr_, ptr_}, false);
    b_.CreateCall(pf_ty, pf, {ctx, llvm::ConstantInt::get(i64_, s.extent), closure, par});
    llvm::IRBuilderBase::InsertPoint after = b_.saveIP();
    (void)saved_ip;

    // tf_par_N unpacks the closure and calls tf_par_N_body, whose buffer
    // parameters are noalias like tf_body's (a closure field carries none).
    std::vector<llvm::Type*> inner_params = {ptr_};  // rt
    for (size_t t = 0; t < tensors.size(); ++t) inner_params.push_back(ptr_);
    for (size_t v = 0; v < vars_.size(); ++v) inner_params.push_back(i64_);
    inner_params.push_back(i64_);  // begin
    inner_params.push_back(i64_);  // end
    auto* inner_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), inner_params, false);
    auto* inner = llvm::Function::Create(inner_ty, llvm::Function::InternalLinkage,
                                         absl::StrCat(par->getName().str(), "_body"), mod_);
    Decorate(inner, fn_attrs_kv_);
    for (size_t t = 0; t < tensors.size(); ++t) {
      inner->addParamAttr(unsigned(1 + t), llvm::Attribute::NoAlias);
    }
    std::vector<llvm::Value*> saved_buffers = buffers_;
    auto saved_vars = vars_;
    llvm::Value* saved_rt = rt_;
    {
      b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", par));
      llvm::Value* c = par->getArg(0);
      std::vector<llvm::Value*> call_args;
      for (unsigned k = 0; k < fields.size(); ++k) {
        call_args.push_back(b_.CreateLoad(fields[k], b_.CreateStructGEP(closure_ty, c, k)));
      }
      call_args.push_back(par->getArg(1));
      call_args.push_back(par->getArg(2));
      b_.CreateCall(inner, call_args);
      b_.CreateRetVoid();
    }
    fn_ = inner;
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", inner));
    unsigned arg = 0;
    rt_ = inner->getArg(arg++);
    for (int t : tensors) buffers_[t] = inner->getArg(arg++);
    for (auto& [var, val] : vars_) val = inner->getArg(arg++);
    llvm::Value* begin = inner->getArg(arg++);
    llvm::Value* end = inner->getArg(arg++);
    ++in_parallel_;
    GenLoop(s.var, begin, end, ir::ForKind::kSerial, s.body[0]);
    --in_parallel_;
    b_.CreateRetVoid();

    fn_ = parent;
    buffers_ = std::move(saved_buffers);
    vars_ = std::move(saved_vars);
    rt_ = saved_rt;
    b_.restoreIP(after);
  }

  void GenStmt(const ir::Stmt& s) {
    StmtFunctor::Visit(s);
  }

  // One method per statement kind (ir::StmtFunctor).
  void VisitFor(const ir::Stmt& s) override {
    ranges_[s->var.get()] = s->extent;
    GenFor(s);
    ranges_.erase(s->var.get());
  }

  // Whether `tensor` is a stack array of the function being generated (an
  // accumulator tile): no other thread reads or writes it.
  bool OnStack(int tensor) const { return llvm::isa<llvm::AllocaInst>(buffers_[size_t(tensor)]); }

  // Whether every element `flat` reaches over the enclosing loops' ranges
  // lies inside `tensor`.
  bool AlwaysInside(int tensor, const ir::Expr& flat) const {
    int64_t lo = 0, hi = 0;
    return ir::Bounds(flat, ranges_, &lo, &hi) && lo >= 0 && hi < Elements(tensor);
  }

  void GenFor(const ir::Stmt& s) {
    if (s->for_kind == ir::ForKind::kParallel && in_parallel_ == 0 && s->extent > 1 &&
        ir::StoreCount(s) >= kMinParallelStores) {
      GenParallel(*s);
    } else if (s->for_kind == ir::ForKind::kVectorized && vec_var_ == nullptr && s->extent > 1 &&
               !HasLoop(s->body[0])) {
      GenVectorLoop(*s);
    } else {
      ir::ForKind kind =
          s->for_kind == ir::ForKind::kParallel ? ir::ForKind::kSerial : s->for_kind;
      GenLoop(s->var, llvm::ConstantInt::get(i64_, 0), llvm::ConstantInt::get(i64_, s->extent),
              kind, s->body[0]);
    }
  }

  void VisitStore(const ir::Stmt& s) override {
    if (vec_var_ != nullptr) {
      GenVectorStore(*s);
      return;
    }
    llvm::Value* v = GenExpr(s->value);
    llvm::Value* addr =
        b_.CreateInBoundsGEP(f32_, buffers_[s->tensor], FlatIndex(s->tensor, s->indices));
    b_.CreateAlignedStore(v, addr, llvm::Align(4));
  }

  void VisitSeq(const ir::Stmt& s) override {
    for (const ir::Stmt& x : s->body) GenStmt(x);
  }

  void VisitBarrier(const ir::Stmt&) override {}  // GPU programs never reach the CPU back end

  void VisitIf(const ir::Stmt& s) override {
    llvm::Value* cond = GenExpr(s->cond);
    if (cond->getType()->isVectorTy()) {  // a guard on the vector lanes: a mask
      llvm::Value* saved = mask_;
      mask_ = mask_ ? b_.CreateAnd(mask_, cond) : cond;
      GenStmt(s->body[0]);
      mask_ = saved;
      return;
    }
    auto* then_bb = llvm::BasicBlock::Create(ctx_, "then", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "endif", fn_);
    b_.CreateCondBr(cond, then_bb, done);
    b_.SetInsertPoint(then_bb);
    GenStmt(s->body[0]);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  void VisitAllocate(const ir::Stmt& s) override {
    std::vector<int64_t> saved_shape = shapes_[s->tensor];
    shapes_[s->tensor] = s->shape;
    int64_t elements = 1;
    for (int64_t e : s->shape) elements *= e;
    if (s->local) {
      // A small region (an accumulator tile): a stack array in the entry
      // block of the function running the loop, so SROA can promote it.
      llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
      llvm::AllocaInst* a = entry.CreateAlloca(f32_, llvm::ConstantInt::get(i64_, elements));
      a->setAlignment(llvm::Align(64));
      buffers_[s->tensor] = a;
      GenStmt(s->body[0]);
      buffers_[s->tensor] = nullptr;
      shapes_[s->tensor] = saved_shape;
      return;
    }
    int64_t bytes = elements * 4;
    llvm::Value* alloc = b_.CreateLoad(ptr_, b_.CreateStructGEP(runtime_ty_, rt_, kAlloc));
    llvm::Value* ctx = b_.CreateLoad(ptr_, b_.CreateStructGEP(runtime_ty_, rt_, kCtx));
    auto* alloc_ty = llvm::FunctionType::get(ptr_, {ptr_, i64_}, false);
    llvm::CallInst* p = b_.CreateCall(alloc_ty, alloc, {ctx, llvm::ConstantInt::get(i64_, bytes)});
    // Fresh memory, as malloc's: no other pointer of the kernel reaches it,
    // so accumulators in it can live in registers across a reduction loop.
    p->addRetAttr(llvm::Attribute::NoAlias);
    buffers_[s->tensor] = p;
    GenStmt(s->body[0]);
    buffers_[s->tensor] = nullptr;
    llvm::Value* free_fn = b_.CreateLoad(ptr_, b_.CreateStructGEP(runtime_ty_, rt_, kFree));
    auto* free_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr_, ptr_}, false);
    b_.CreateCall(free_ty, free_fn, {ctx, p});
    shapes_[s->tensor] = saved_shape;
  }

  void VisitDefault(const ir::Stmt&) override {}

  llvm::LLVMContext& ctx_;
  llvm::Module& mod_;
  llvm::IRBuilder<> b_;
  const ir::ComputeDAG& dag_;
  std::vector<llvm::Value*> buffers_;
  ir::VarRanges ranges_;                      // the loops being generated: variable -> extent
  std::vector<std::vector<int64_t>> shapes_;  // the allocation's shape where it is a region
  std::vector<std::pair<const ExprNode*, llvm::Value*>> vars_;
  llvm::Value* rt_ = nullptr;
  llvm::Function* fn_ = nullptr;
  llvm::Function* body_fn_ = nullptr;
  llvm::Type *ptr_, *i64_, *i32_, *f32_;
  llvm::StructType* runtime_ty_;
  int in_parallel_ = 0;
  int parallel_count_ = 0;
  // Explicit vectorization state: the vectorized loop's variable while its
  // body is generated, the lane count, and the active-lane mask (or null).
  const ExprNode* vec_var_ = nullptr;
  int lanes_ = 16;
  llvm::Value* mask_ = nullptr;

 public:
  int vector_lanes_ = 16;

 private:
  std::vector<std::string> fn_attrs_kv_;
};

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

absl::StatusOr<CpuArtifact> CompileCpu(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                       const ir::Target& target, const CpuCompileOptions& options) {
  if (target.is_gpu()) return absl::InvalidArgumentError("CompileCpu needs an llvm target");
  if (ir::HasFloat16(dag)) {
    return absl::UnimplementedError(
        "float16 and bfloat16 kernels build for cuda targets only (CPU kernels are float32)");
  }
  if (dag.tf32) {
    return absl::UnimplementedError(
        "tf32 products build for cuda targets only (CPU kernels are float32)");
  }
  InitLLVMTargets();
  auto t0 = std::chrono::steady_clock::now();
  std::string error;
  const llvm::Target* llvm_target = llvm::TargetRegistry::lookupTarget(target.triple, error);
  if (llvm_target == nullptr) return absl::InvalidArgumentError(absl::StrCat("-mtriple: ", error));
  std::string features = absl::StrJoin(target.attrs, ",");
  llvm::TargetOptions topts;
  std::unique_ptr<llvm::TargetMachine> tm(llvm_target->createTargetMachine(
      target.triple, target.cpu, features, topts, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (tm == nullptr) return absl::InternalError("LLVM made no TargetMachine");

  llvm::LLVMContext ctx;
  // Optimisation remarks and "loop not vectorized" warnings are hints about a
  // candidate, not failures; keep them off stderr (a search compiles thousands).
  ctx.setDiagnosticHandlerCallBack(
      [](const llvm::DiagnosticInfo* info, void*) {
        if (info->getSeverity() == llvm::DS_Error) {
          llvm::errs() << "tunefarm codegen: LLVM error diagnostic\n";
        }
      },
      nullptr);
  auto mod = std::make_unique<llvm::Module>("tunefarm_kernel", ctx);
  mod->setTargetTriple(target.triple);
  mod->setDataLayout(tm->createDataLayout());
  std::vector<std::string> attrs = {"target-cpu", target.cpu};
  if (!features.empty()) attrs.insert(attrs.end(), {"target-features", features});
  if (target.wide_vectors()) {
    // LLVM prefers 256-bit vectors on these cores, which halves FMA throughput.
    attrs.insert(attrs.end(), {"prefer-vector-width", "512", "min-legal-vector-width", "512"});
  }
  CodeGen gen(ctx, *mod, dag);
  // Lanes per vector chunk: one full vector register of floats.
  gen.vector_lanes_ = target.float_lanes();
  gen.Generate(program, attrs);
  std::string verify;
  llvm::raw_string_ostream vs(verify);
  if (llvm::verifyModule(*mod, &vs)) {
    return absl::InternalError(absl::StrCat("generated LLVM IR is invalid: ", vs.str()));
  }

  if (options.optimize) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    // No SLP vectorizer: LLVM 19's miscompiles fully unrolled scalar
    // reductions into a buffer inside an outlined parallel loop (a random
    // conv2d_nhwc schedule of the property test read 2.34 for 3.15; bisected
    // to SLPVectorizerPass on tf_par_1), and upstream has fixed several such
    // SLP bugs since. Vector code comes from vectorized loops (our own vector
    // IR, and the loop vectorizer), which the schedules ask for explicitly.
    pto.SLPVectorization = false;
    llvm::PassBuilder pb(tm.get(), pto);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    mpm.run(*mod, mam);
  }
  CpuArtifact out;
  if (options.keep_llvm_ir) {
    llvm::raw_string_ostream os(out.llvm_ir);
    mod->print(os, nullptr);
  }
  auto emit = [&](llvm::CodeGenFileType type, std::string* dest) -> absl::Status {
    llvm::SmallVector<char, 0> buf;
    llvm::raw_svector_ostream os(buf);
    llvm::legacy::PassManager pm;  // LLVM 19's code generator still runs on the legacy PM
    if (tm->addPassesToEmitFile(pm, os, nullptr, type)) {
      return absl::InternalError("the target cannot emit this file type");
    }
    pm.run(*mod);
    dest->assign(buf.begin(), buf.end());
    return absl::OkStatus();
  };
  if (options.keep_assembly)
    TF_RETURN_IF_ERROR(emit(llvm::CodeGenFileType::AssemblyFile, &out.assembly));
  TF_RETURN_IF_ERROR(emit(llvm::CodeGenFileType::ObjectFile, &out.object));
  out.codegen_ms = MsSince(t0);
  if (options.link) {
    auto t1 = std::chrono::steady_clock::now();
    TF_ASSIGN_OR_RETURN(out.shared_object, LinkSharedObject(out.object));
    out.link_ms = MsSince(t1);
  }
  return out;
}

}  // namespace tunefarm::codegen
