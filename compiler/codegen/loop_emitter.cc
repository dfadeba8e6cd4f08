#include "compiler/codegen/loop_emitter.h"

#include "common/status_macros.h"

namespace tunefarm::codegen {

using ir::ExprKind;
using ir::ExprNode;
using ir::ScalarType;

LoopEmitter::LoopEmitter(llvm::Module& mod, const ir::ComputeDAG& dag, llvm::Type* index)
    : ctx_(mod.getContext()),
      mod_(mod),
      b_(ctx_),
      buffers_(dag.tensors.size(), nullptr),
      ptr_(llvm::PointerType::getUnqual(ctx_)),
      idx_(index),
      i32_(llvm::Type::getInt32Ty(ctx_)),
      f32_(llvm::Type::getFloatTy(ctx_)) {
  for (const ir::TensorDecl& t : dag.tensors) shapes_.push_back(t.shape);
  llvm::FastMathFlags fmf;
  fmf.setAllowContract(true);
  b_.setFastMathFlags(fmf);
}

llvm::Value* LoopEmitter::Lookup(const ExprNode* var) const {
  for (auto it = vars_.rbegin(); it != vars_.rend(); ++it) {
    if (it->first == var) return it->second;
  }
  TF_CHECK(false && "unbound loop variable in codegen");
  return nullptr;
}

llvm::Value* LoopEmitter::ElementAddress(int tensor, const std::vector<ir::Expr>& indices) {
  llvm::Value* base = buffers_[size_t(tensor)];
  TF_CHECK(base != nullptr && "a tensor without a buffer in codegen");
  std::vector<llvm::Value*> values;
  for (size_t d = 0; d < shapes_[size_t(tensor)].size(); ++d) values.push_back(GenExpr(indices[d]));
  llvm::Value* flat = RowMajorIndex(b_, shapes_[size_t(tensor)], values, idx_);
  return b_.CreateInBoundsGEP(ElementType(tensor), base, flat);
}

void LoopEmitter::EmitCountedLoop(const std::string& name, llvm::Value* begin, llvm::Value* end,
                                  llvm::MDNode* md,
                                  const std::function<void(llvm::Value*)>& emit) {
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
  auto* loop_body = llvm::BasicBlock::Create(ctx_, "body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* phi = b_.CreatePHI(idx_, 2, name);
  phi->addIncoming(begin, pre);
  b_.CreateCondBr(b_.CreateICmpSLT(phi, end), loop_body, exit);
  b_.SetInsertPoint(loop_body);
  emit(phi);
  llvm::Value* next = b_.CreateAdd(phi, llvm::ConstantInt::get(idx_, 1), "", true, true);
  llvm::BranchInst* back = b_.CreateBr(header);
  if (md != nullptr) back->setMetadata(llvm::LLVMContext::MD_loop, md);
  phi->addIncoming(next, b_.GetInsertBlock());
  b_.SetInsertPoint(exit);
}

llvm::MDNode* LoopEmitter::LoopMetadata(ir::ForKind kind) {
  std::vector<llvm::Metadata*> ops = {nullptr};
  auto flag = [&](const char* name) {
    ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name)}));
  };
  if (kind == ir::ForKind::kVectorized) {
    // Full unrolling stays off this loop, so the loop vectorizer sees it.
    ops.push_back(llvm::MDNode::get(
        ctx_, {llvm::MDString::get(ctx_, "llvm.loop.vectorize.enable"),
               llvm::ConstantAsMetadata::get(llvm::ConstantInt::getTrue(ctx_))}));
    flag("llvm.loop.unroll.disable");
  } else if (kind == ir::ForKind::kUnrolled) {
    flag("llvm.loop.unroll.full");
  } else {
    return nullptr;
  }
  llvm::MDNode* md = llvm::MDNode::getDistinct(ctx_, ops);
  md->replaceOperandWith(0, md);
  return md;
}

void LoopEmitter::Guarded(llvm::Value* cond, const ir::Stmt& body) {
  auto* then_bb = llvm::BasicBlock::Create(ctx_, "then", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "endif", fn_);
  b_.CreateCondBr(cond, then_bb, done);
  b_.SetInsertPoint(then_bb);
  GenStmt(body);
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
}

llvm::Value* LoopEmitter::VisitIntImm(const ir::Expr& e) {
  const ExprNode& n = *e.get();
  return n.type == ScalarType::kBool ? llvm::ConstantInt::getBool(ctx_, n.int_value != 0)
                                     : llvm::ConstantInt::get(idx_, n.int_value, true);
}

llvm::Value* LoopEmitter::VisitFloatImm(const ir::Expr& e) {
  return llvm::ConstantFP::get(TypeOf(e->type), e->float_value);
}

llvm::Value* LoopEmitter::EmitBinary(const ExprNode& n, llvm::Value* a, llvm::Value* c) {
  llvm::Value* v = BinaryOp(b_, n.op, ir::IsFloat(n.type), a, c);
  TF_CHECK(v != nullptr && "unsupported binary op in codegen");
  return v;
}

llvm::Value* LoopEmitter::VisitBinary(const ir::Expr& e) {
  const ExprNode& n = *e.get();
  llvm::Value* a = GenExpr(n.args[0]);
  llvm::Value* c = GenExpr(n.args[1]);
  Match(a, c);
  return EmitBinary(n, a, c);
}

llvm::Value* LoopEmitter::VisitCmp(const ir::Expr& e) {
  const ExprNode& n = *e.get();
  llvm::Value* a = GenExpr(n.args[0]);
  llvm::Value* c = GenExpr(n.args[1]);
  Match(a, c);
  const bool is_float = ir::IsFloat(n.args[0]->type);
  const llvm::CmpInst::Predicate p = ComparePredicate(n.op, is_float);
  return is_float ? b_.CreateFCmp(p, a, c) : b_.CreateICmp(p, a, c);
}

llvm::Value* LoopEmitter::VisitAnd(const ir::Expr& e) {
  llvm::Value* a = GenExpr(e->args[0]);
  llvm::Value* c = GenExpr(e->args[1]);
  Match(a, c);
  return b_.CreateAnd(a, c);
}

llvm::Value* LoopEmitter::VisitOr(const ir::Expr& e) {
  llvm::Value* a = GenExpr(e->args[0]);
  llvm::Value* c = GenExpr(e->args[1]);
  Match(a, c);
  return b_.CreateOr(a, c);
}

llvm::Value* LoopEmitter::VisitNot(const ir::Expr& e) { return b_.CreateNot(GenExpr(e->args[0])); }

llvm::Value* LoopEmitter::VisitSelect(const ir::Expr& e) {
  llvm::Value* cond = GenExpr(e->args[0]);
  llvm::Value* t = GenExpr(e->args[1]);
  llvm::Value* f = GenExpr(e->args[2]);
  Match(t, f);
  if (auto* vty = llvm::dyn_cast<llvm::VectorType>(cond->getType());
      vty != nullptr && !t->getType()->isVectorTy()) {
    t = b_.CreateVectorSplat(vty->getElementCount(), t);
    f = b_.CreateVectorSplat(vty->getElementCount(), f);
  }
  return b_.CreateSelect(cond, t, f);
}

llvm::Value* LoopEmitter::VisitCast(const ir::Expr& e) {
  const ExprNode& n = *e.get();
  llvm::Value* x = GenExpr(n.args[0]);
  const bool from_f = ir::IsFloat(n.args[0]->type), to_f = ir::IsFloat(n.type);
  llvm::Type* to = TypeOf(n.type);
  if (auto* vty = llvm::dyn_cast<llvm::VectorType>(x->getType()))
    to = llvm::VectorType::get(to, vty->getElementCount());
  // To bool: x != 0 (true for NaN, as C's conversion); from bool: 0 or 1.
  if (n.type == ScalarType::kBool) {
    return from_f ? b_.CreateFCmpUNE(x, llvm::ConstantFP::get(x->getType(), 0))
                  : b_.CreateICmpNE(x, llvm::ConstantInt::get(x->getType(), 0));
  }
  if (n.args[0]->type == ScalarType::kBool) {
    return to_f ? b_.CreateUIToFP(x, to) : b_.CreateZExt(x, to);
  }
  if (!from_f && to_f) return b_.CreateSIToFP(x, to);
  if (from_f && !to_f) return b_.CreateFPToSI(x, to);
  if (from_f && to_f) return b_.CreateFPCast(x, to);
  return b_.CreateIntCast(x, to, true);
}

void LoopEmitter::VisitSeq(const ir::Stmt& s) {
  for (const ir::Stmt& x : s->body) GenStmt(x);
}

}  // namespace tunefarm::codegen
