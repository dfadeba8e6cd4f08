#include "compiler/codegen/cpu_emitter.h"

#include "absl/strings/str_cat.h"
#include "common/kernel_abi.h"
#include "common/status_macros.h"
#include "llvm/IR/Intrinsics.h"

namespace tunefarm::codegen {

using ir::ExprKind;
using ir::ExprNode;
using ir::Op;
using ir::ScalarType;
using ir::StmtKind;

CpuEmitter::CpuEmitter(llvm::Module& mod, const ir::ComputeDAG& dag, int vector_lanes)
    : LoopEmitter(mod, dag, llvm::Type::getInt64Ty(mod.getContext())),
      dag_(dag),
      vector_lanes_(vector_lanes),
      runtime_ty_(llvm::StructType::get(ctx_, {i32_, i32_, ptr_, ptr_, ptr_, ptr_})) {}

void CpuEmitter::Generate(const ir::Stmt& program, const std::vector<std::string>& fn_attrs_kv) {
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

void CpuEmitter::Decorate(llvm::Function* f, const std::vector<std::string>& kv) {
  for (size_t i = 0; i + 1 < kv.size(); i += 2) f->addFnAttr(kv[i], kv[i + 1]);
  f->addFnAttr(llvm::Attribute::NoUnwind);
}

// Broadcasts scalars to the vector width when the other operand is a vector.
void CpuEmitter::Match(llvm::Value*& a, llvm::Value*& b) {
  bool va = a->getType()->isVectorTy(), vb = b->getType()->isVectorTy();
  if (va && !vb) b = b_.CreateVectorSplat(lanes_, b);
  if (vb && !va) a = b_.CreateVectorSplat(lanes_, a);
}

llvm::Value* CpuEmitter::Widen(llvm::Value* v) {
  return v->getType()->isVectorTy() ? v : b_.CreateVectorSplat(lanes_, v);
}

llvm::Value* CpuEmitter::GenExpr(const ir::Expr& e) {
  const ExprNode& n = *e.get();
  if (vec_var_ != nullptr) {
    if (n.kind == ExprKind::kVar && e.get() == vec_var_) {
      // chunk base + <0, 1, ..., lanes-1>
      std::vector<llvm::Constant*> ramp;
      for (int i = 0; i < lanes_; ++i) ramp.push_back(llvm::ConstantInt::get(idx_, i));
      return b_.CreateAdd(b_.CreateVectorSplat(lanes_, Lookup(e.get())),
                          llvm::ConstantVector::get(ramp));
    }
    if (n.kind == ExprKind::kLoad) return GenVectorLoad(n);
  }
  return Visit(e);
}

// The padding pattern as one masked load where it holds.
llvm::Value* CpuEmitter::VisitSelect(const ir::Expr& e) {
  if (vec_var_ != nullptr) {
    if (llvm::Value* v = GenGuardedVectorLoad(*e.get())) return v;
  }
  return LoopEmitter::VisitSelect(e);
}

llvm::Value* CpuEmitter::VisitCall(const ir::Expr& e) {
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

llvm::Value* CpuEmitter::VisitLoad(const ir::Expr& e) {
  return b_.CreateAlignedLoad(f32_, ElementAddress(e->tensor, e->args), llvm::Align(4));
}

void CpuEmitter::GenLoop(const ir::Expr& var, llvm::Value* begin, llvm::Value* end, ir::ForKind kind,
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
void CpuEmitter::GenParallel(const ir::StmtNode& s) {
  std::vector<llvm::Type*> fields = {ptr_};  // rt
  std::vector<int> tensors;
  for (size_t t = 0; t < buffers_.size(); ++t) {
    if (buffers_[t]) tensors.push_back(int(t)), fields.push_back(ptr_);
  }
  for (size_t v = 0; v < vars_.size(); ++v) fields.push_back(idx_);
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

  auto* par_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr_, idx_, idx_}, false);
  auto* par = llvm::Function::Create(par_ty, llvm::Function::InternalLinkage,
                                     absl::StrCat("tf_par_", parallel_count_++), mod_);
  Decorate(par, fn_attrs_kv_);
  // The call below: rt->parallel_for(rt->ctx, extent, closure, par)
  llvm::Value* pf = b_.CreateLoad(ptr_, b_.CreateStructGEP(runtime_ty_, rt_, kParallelFor));
  llvm::Value* ctx = b_.CreateLoad(ptr_, b_.CreateStructGEP(runtime_ty_, rt_, kCtx));
  auto* pf_ty = llvm::FunctionType::get(i32_, {ptr_, idx_, ptr_, ptr_}, false);
  b_.CreateCall(pf_ty, pf, {ctx, llvm::ConstantInt::get(idx_, s.extent), closure, par});
  llvm::IRBuilderBase::InsertPoint after = b_.saveIP();
  (void)saved_ip;

  // tf_par_N unpacks the closure and calls tf_par_N_body, whose buffer
  // parameters are noalias like tf_body's (a closure field carries none).
  std::vector<llvm::Type*> inner_params = {ptr_};  // rt
  for (size_t t = 0; t < tensors.size(); ++t) inner_params.push_back(ptr_);
  for (size_t v = 0; v < vars_.size(); ++v) inner_params.push_back(idx_);
  inner_params.push_back(idx_);  // begin
  inner_params.push_back(idx_);  // end
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

// One method per statement kind (ir::StmtFunctor).
void CpuEmitter::VisitFor(const ir::Stmt& s) {
  ranges_[s->var.get()] = s->extent;
  GenFor(s);
  ranges_.erase(s->var.get());
}

// Whether `tensor` is a stack array of the function being generated (an
// accumulator tile): no other thread reads or writes it.
bool CpuEmitter::OnStack(int tensor) const { return llvm::isa<llvm::AllocaInst>(buffers_[size_t(tensor)]); }

// Whether every element `flat` reaches over the enclosing loops' ranges
// lies inside `tensor`.
bool CpuEmitter::AlwaysInside(int tensor, const ir::Expr& flat) const {
  int64_t lo = 0, hi = 0;
  return ir::Bounds(flat, ranges_, &lo, &hi) && lo >= 0 && hi < Elements(tensor);
}

void CpuEmitter::GenFor(const ir::Stmt& s) {
  if (s->for_kind == ir::ForKind::kParallel && in_parallel_ == 0 && s->extent > 1 &&
      ir::StoreCount(s) >= kMinParallelStores) {
    GenParallel(*s);
  } else if (s->for_kind == ir::ForKind::kVectorized && vec_var_ == nullptr && s->extent > 1 &&
             !HasLoop(s->body[0])) {
    GenVectorLoop(*s);
  } else {
    ir::ForKind kind =
        s->for_kind == ir::ForKind::kParallel ? ir::ForKind::kSerial : s->for_kind;
    GenLoop(s->var, llvm::ConstantInt::get(idx_, 0), llvm::ConstantInt::get(idx_, s->extent),
            kind, s->body[0]);
  }
}

void CpuEmitter::VisitStore(const ir::Stmt& s) {
  if (vec_var_ != nullptr) {
    GenVectorStore(*s);
    return;
  }
  llvm::Value* v = GenExpr(s->value);
  b_.CreateAlignedStore(v, ElementAddress(s->tensor, s->indices), llvm::Align(4));
}

void CpuEmitter::VisitIf(const ir::Stmt& s) {
  llvm::Value* cond = GenExpr(s->cond);
  if (cond->getType()->isVectorTy()) {  // a guard on the vector lanes: a mask
    llvm::Value* saved = mask_;
    mask_ = mask_ ? b_.CreateAnd(mask_, cond) : cond;
    GenStmt(s->body[0]);
    mask_ = saved;
    return;
  }
  Guarded(cond, s->body[0]);
}

void CpuEmitter::VisitAllocate(const ir::Stmt& s) {
  std::vector<int64_t> saved_shape = shapes_[s->tensor];
  shapes_[s->tensor] = s->shape;
  int64_t elements = 1;
  for (int64_t e : s->shape) elements *= e;
  if (s->local) {
    // A small region (an accumulator tile): a stack array in the entry
    // block of the function running the loop, so SROA can promote it.
    llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::AllocaInst* a = entry.CreateAlloca(f32_, llvm::ConstantInt::get(idx_, elements));
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
  auto* alloc_ty = llvm::FunctionType::get(ptr_, {ptr_, idx_}, false);
  llvm::CallInst* p = b_.CreateCall(alloc_ty, alloc, {ctx, llvm::ConstantInt::get(idx_, bytes)});
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

}  // namespace tunefarm::codegen
