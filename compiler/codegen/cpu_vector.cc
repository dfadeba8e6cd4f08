// The CPU back end's vector code: a vectorized loop with no loop inside as
// chunks of lanes (CpuEmitter, cpu_emitter.h).
#include <functional>
#include <limits>
#include <map>

#include "common/status_macros.h"
#include "compiler/codegen/cpu_emitter.h"
#include "llvm/IR/Intrinsics.h"

namespace tunefarm::codegen {

using ir::ExprKind;
using ir::ExprNode;
using ir::Op;
using ir::ScalarType;
using ir::StmtKind;

// The flat (row-major) index of a tensor access as an IR expression.
ir::Expr CpuEmitter::FlatIndexExpr(int tensor, const std::vector<ir::Expr>& idx) {
  const std::vector<int64_t>& shape = shapes_[tensor];
  ir::Expr flat;
  for (size_t d = 0; d < shape.size(); ++d) {
    flat = flat.defined() ? flat * ir::IntImm(shape[d]) + idx[d] : idx[d];
  }
  return flat.defined() ? flat : ir::IntImm(0);
}

// The coefficient of `var` in `e` when e is affine in it (var not under
// division, min/max, select or a load); false otherwise.
bool CpuEmitter::LinearCoeff(const ir::Expr& e, const ExprNode* var, int64_t* coeff) {
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
llvm::Value* CpuEmitter::ScalarIndex(const ir::Expr& flat) {
  const ExprNode* saved = vec_var_;
  vec_var_ = nullptr;
  llvm::Value* index = GenExpr(flat);
  vec_var_ = saved;
  return index;
}

// The element count of `tensor` (of its allocation, where it is a region).
int64_t CpuEmitter::Elements(int tensor) const {
  int64_t total = 1;
  for (int64_t d : shapes_[size_t(tensor)]) total *= d;
  return total;
}

// Address of element 0 of an access every lane of which is inside the buffer.
llvm::Value* CpuEmitter::ScalarAddress(int tensor, const ir::Expr& flat) {
  return b_.CreateInBoundsGEP(f32_, buffers_[tensor], ScalarIndex(flat));
}

// The address of a masked vector access of `tensor` starting at element
// `flat` (not `inbounds`: lane 0 may lie outside the buffer, a masked-off
// padding lane): element 0 where the whole vector starts past the
// tensor's end, so every lane is masked off there. A masked-off lane on an
// unmapped page is not read, but the core pays an assist for it on every
// access (docs/tuning-guide.md).
llvm::Value* CpuEmitter::MaskedAddress(int tensor, const ir::Expr& flat) {
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
llvm::Value* CpuEmitter::StridedMaskedLoad(llvm::Value* addr, int coeff, llvm::Value* mask,
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

// An unmasked load of lanes_ (not a power of two) contiguous elements from
// memory as one masked load of the next power of two, the lanes past
// lanes_ off, narrowed back to lanes_ (a shuffle LLVM folds away where the
// narrow vector's arithmetic is widened to the register). With AVX-512 that
// is one instruction where LLVM splits a 14-lane load into 8 + 4 + 2 loads
// and inserts; elsewhere (AVX2's vmaskmov, NEON without masked loads) null:
// the plain load is kept.
llvm::Value* CpuEmitter::PaddedLoad(llvm::Value* addr) {
  if (vector_lanes_ < 16 || (lanes_ & (lanes_ - 1)) == 0) return nullptr;
  int wide = 1;
  while (wide < lanes_) wide *= 2;
  if (wide > vector_lanes_) return nullptr;
  std::vector<llvm::Constant*> bits;
  std::vector<int> narrow;
  for (int i = 0; i < wide; ++i) bits.push_back(b_.getInt1(i < lanes_));
  for (int i = 0; i < lanes_; ++i) narrow.push_back(i);
  llvm::Value* all = b_.CreateMaskedLoad(llvm::VectorType::get(f32_, wide, false), addr,
                                         llvm::Align(4), llvm::ConstantVector::get(bits));
  return b_.CreateShuffleVector(all, narrow);
}

llvm::Value* CpuEmitter::AllTrue() {
  return llvm::ConstantInt::getTrue(llvm::VectorType::get(b_.getInt1Ty(), lanes_, false));
}

llvm::Value* CpuEmitter::GenVectorLoad(const ExprNode& n) {
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
    if (mask_ == nullptr && !OnStack(n.tensor)) {
      if (llvm::Value* v = PaddedLoad(ScalarAddress(n.tensor, flat))) return v;
    }
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
llvm::Value* CpuEmitter::GenGuardedVectorLoad(const ExprNode& n) {
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
bool CpuEmitter::EndsDecide(const ir::Expr& cond) const {
  if (!ir::Mentions(cond, vec_var_)) return true;
  if (cond->kind == ExprKind::kAnd) return EndsDecide(cond->args[0]) && EndsDecide(cond->args[1]);
  int64_t k = 0, coeff = 0;
  return cond->kind == ExprKind::kCmp && ir::IsConstInt(cond->args[1], &k) &&
         cond->op != Op::kEq && cond->op != Op::kNe &&
         LinearCoeff(cond->args[0], vec_var_, &coeff);
}

// `e` as a scalar at lane `lane` of the current chunk.
llvm::Value* CpuEmitter::ScalarAtLane(const ir::Expr& e, int lane) {
  const ExprNode* var = vec_var_;
  llvm::Value* base = Lookup(var);
  vars_.emplace_back(var, b_.CreateAdd(base, llvm::ConstantInt::get(idx_, lane)));
  vec_var_ = nullptr;
  llvm::Value* v = GenExpr(e);
  vec_var_ = var;
  vars_.pop_back();
  return v;
}

void CpuEmitter::GenVectorStore(const ir::StmtNode& s) {
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
      // memory (docs/tuning-guide.md).
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
llvm::Value* CpuEmitter::F(llvm::Value* like, double v) { return llvm::ConstantFP::get(like->getType(), v); }

llvm::Value* CpuEmitter::MulAdd(llvm::Value* a, llvm::Value* b, llvm::Value* c) {
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
llvm::Value* CpuEmitter::FastTanh(llvm::Value* x) {
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
llvm::Value* CpuEmitter::FastExp(llvm::Value* x) {
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
llvm::Value* CpuEmitter::PerLane(const char* name, llvm::Value* x) {
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

bool CpuEmitter::HasLoop(const ir::Stmt& s) {
  if (s->kind == StmtKind::kFor || s->kind == StmtKind::kAllocate) return true;
  for (const ir::Stmt& b : s->body) {
    if (HasLoop(b)) return true;
  }
  return false;
}

// A vectorized loop with no loop inside: chunks of `vector_lanes_`, the loop
// variable a vector; guards inside are masks.
void CpuEmitter::GenVectorLoop(const ir::StmtNode& s) {
  // A lane count that divides the extent where one does; else full
  // registers and then one narrower vector for the rest. No chunk is
  // masked for the extent: masked stores cost many times a plain store on
  // some cores (docs/tuning-guide.md), and a masked store to a local
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
        s.var->name + ".v", llvm::ConstantInt::get(idx_, 0), llvm::ConstantInt::get(idx_, full),
        nullptr, [&](llvm::Value* chunk) {
          chunk_body(b_.CreateMul(chunk, llvm::ConstantInt::get(idx_, lanes), "", true, true),
                     lanes);
        });
  }
  if (rest > 0) chunk_body(llvm::ConstantInt::get(idx_, full * lanes), int(rest));
}

}  // namespace tunefarm::codegen
