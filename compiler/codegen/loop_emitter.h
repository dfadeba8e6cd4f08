// The LLVM IR emission the two LLVM back ends share. The CPU back end
// (cpu_emitter.h) and the NVPTX one (nvptx_codegen.cc) derive from
// LoopEmitter, which owns the builder, each tensor's buffer and shape and
// the loop variables in scope, and emits what does not depend on the
// device: immediates, arithmetic, comparisons, logic, selects and casts;
// element addresses; counted loops with their loop metadata; guarded blocks
// and sequences. A back end adds the rest: loads and stores (element types,
// vector lanes), calls, allocations, barriers, and how loops are spread over
// threads (outlined parallel loops; block and thread indices).
//
// Operands may be scalars or vectors: Match makes two operands alike (the
// CPU back end splats a scalar against a vector; by default they are left
// as they are). Internal to compiler/codegen.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/codegen/llvm_ops.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/functor.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

namespace tunefarm::codegen {

class LoopEmitter : public ir::ExprFunctor<llvm::Value*()>, public ir::StmtFunctor<void()> {
 public:
  using ExprFunctor::Visit;
  using StmtFunctor::Visit;

 protected:
  // `index`: the type of the IR's integers (i64, or i32 where a back end
  // does 32-bit index math). a*b+c may become an FMA (contraction on).
  LoopEmitter(llvm::Module& mod, const ir::ComputeDAG& dag, llvm::Type* index);

  // An expression's value; a back end may emit some kinds its own way first.
  virtual llvm::Value* GenExpr(const ir::Expr& e) { return ExprFunctor::Visit(e); }
  void GenStmt(const ir::Stmt& s) { StmtFunctor::Visit(s); }
  // Makes two operands of one operation alike; default: as they are.
  virtual void Match(llvm::Value*& a, llvm::Value*& b) {}
  // `n` (a binary op) of its operands' values; the ops BinaryOp knows.
  virtual llvm::Value* EmitBinary(const ir::ExprNode& n, llvm::Value* a, llvm::Value* c);
  // How `tensor`'s elements are held; default float32.
  virtual llvm::Type* ElementType(int tensor) const { return f32_; }

  llvm::Type* TypeOf(ir::ScalarType t) { return LlvmType(ctx_, t, idx_); }
  // The in-bounds address of tensor[indices] (row-major over its shape).
  llvm::Value* ElementAddress(int tensor, const std::vector<ir::Expr>& indices);

  // Loop variables in scope, innermost last.
  void Bind(const ir::ExprNode* var, llvm::Value* value) { vars_.emplace_back(var, value); }
  void Unbind() { vars_.pop_back(); }
  llvm::Value* Lookup(const ir::ExprNode* var) const;

  // for (i = begin; i < end; ++i) emit(i), in the index type, with `md`
  // (if any) on the back edge. `end` > `begin` is not assumed.
  void EmitCountedLoop(const std::string& name, llvm::Value* begin, llvm::Value* end,
                       llvm::MDNode* md, const std::function<void(llvm::Value*)>& emit);
  // The loop metadata of a loop of `kind`: kVectorized asks the loop
  // vectorizer (and keeps full unrolling off it), kUnrolled full
  // unrolling; null for the other kinds.
  llvm::MDNode* LoopMetadata(ir::ForKind kind);
  // if (cond) body, for a scalar condition.
  void Guarded(llvm::Value* cond, const ir::Stmt& body);

  // One method per kind (ir::ExprFunctor, ir::StmtFunctor): the kinds that
  // mean the same on every device.
  llvm::Value* VisitIntImm(const ir::Expr& e) override;
  llvm::Value* VisitFloatImm(const ir::Expr& e) override;
  llvm::Value* VisitVar(const ir::Expr& e) override { return Lookup(e.get()); }
  llvm::Value* VisitBinary(const ir::Expr& e) override;
  llvm::Value* VisitCmp(const ir::Expr& e) override;
  llvm::Value* VisitAnd(const ir::Expr& e) override;
  llvm::Value* VisitOr(const ir::Expr& e) override;
  llvm::Value* VisitNot(const ir::Expr& e) override;
  llvm::Value* VisitSelect(const ir::Expr& e) override;
  llvm::Value* VisitCast(const ir::Expr& e) override;
  void VisitSeq(const ir::Stmt& s) override;

  llvm::LLVMContext& ctx_;
  llvm::Module& mod_;
  llvm::IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;  // the function being emitted
  // Per tensor: its buffer in the function being emitted (null: none yet),
  // and its shape (an allocation's, where it is a region).
  std::vector<llvm::Value*> buffers_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<std::pair<const ir::ExprNode*, llvm::Value*>> vars_;
  llvm::PointerType* ptr_;
  llvm::Type* idx_;  // the IR's integers
  llvm::Type *i32_, *f32_;
};

}  // namespace tunefarm::codegen
