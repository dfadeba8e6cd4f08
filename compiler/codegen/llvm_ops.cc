#include "compiler/codegen/llvm_ops.h"

namespace tunefarm::codegen {

llvm::Type* LlvmType(llvm::LLVMContext& ctx, ir::ScalarType t, llvm::Type* integers) {
  switch (t) {
    case ir::ScalarType::kBool:
      return llvm::Type::getInt1Ty(ctx);
    case ir::ScalarType::kInt64:
      return integers;
    case ir::ScalarType::kFloat32:
      return llvm::Type::getFloatTy(ctx);
    case ir::ScalarType::kFloat64:
      return llvm::Type::getDoubleTy(ctx);
  }
  return nullptr;
}

llvm::Value* RowMajorIndex(llvm::IRBuilder<>& b, const std::vector<int64_t>& shape,
                           const std::vector<llvm::Value*>& indices, llvm::Type* integers) {
  llvm::Value* flat = nullptr;
  for (size_t d = 0; d < indices.size(); ++d) {
    const int64_t dim = d < shape.size() ? shape[d] : 1;
    flat = flat ? b.CreateAdd(b.CreateMul(flat, llvm::ConstantInt::get(flat->getType(), dim), "",
                                          false, true),
                              indices[d], "", false, true)
                : indices[d];
  }
  return flat ? flat : llvm::ConstantInt::get(integers, 0);
}

llvm::Value* FloorDivInt(llvm::IRBuilder<>& b, llvm::Value* a, llvm::Value* c) {
  llvm::Value* q = b.CreateSDiv(a, c);
  llvm::Value* r = b.CreateSRem(a, c);
  llvm::Value* zero = llvm::ConstantInt::get(a->getType(), 0);
  llvm::Value* adjust = b.CreateAnd(
      b.CreateICmpNE(r, zero), b.CreateICmpNE(b.CreateICmpSLT(r, zero), b.CreateICmpSLT(c, zero)));
  return b.CreateSub(q, b.CreateZExt(adjust, a->getType()));
}

llvm::Value* BinaryOp(llvm::IRBuilder<>& b, ir::Op op, bool is_float, llvm::Value* a,
                      llvm::Value* c) {
  using ir::Op;
  if (!is_float) {
    switch (op) {
      case Op::kAdd:
        return b.CreateAdd(a, c, "", false, true);
      case Op::kSub:
        return b.CreateSub(a, c, "", false, true);
      case Op::kMul:
        return b.CreateMul(a, c, "", false, true);
      case Op::kFloorDiv:
        return FloorDivInt(b, a, c);
      case Op::kFloorMod:
        return b.CreateSub(a, b.CreateMul(FloorDivInt(b, a, c), c));
      case Op::kMin:
        return b.CreateSelect(b.CreateICmpSLT(c, a), c, a);
      case Op::kMax:
        return b.CreateSelect(b.CreateICmpSLT(a, c), c, a);
      default:
        return nullptr;
    }
  }
  switch (op) {
    case Op::kAdd:
      return b.CreateFAdd(a, c);
    case Op::kSub:
      return b.CreateFSub(a, c);
    case Op::kMul:
      return b.CreateFMul(a, c);
    case Op::kDiv:
      return b.CreateFDiv(a, c);
    // Same as std::min / std::max, which the reference uses.
    case Op::kMin:
      return b.CreateSelect(b.CreateFCmpOLT(c, a), c, a);
    case Op::kMax:
      return b.CreateSelect(b.CreateFCmpOLT(a, c), c, a);
    default:
      return nullptr;
  }
}

llvm::CmpInst::Predicate ComparePredicate(ir::Op op, bool is_float) {
  using ir::Op;
  using P = llvm::CmpInst::Predicate;
  switch (op) {
    case Op::kLt:
      return is_float ? P::FCMP_OLT : P::ICMP_SLT;
    case Op::kLe:
      return is_float ? P::FCMP_OLE : P::ICMP_SLE;
    case Op::kGt:
      return is_float ? P::FCMP_OGT : P::ICMP_SGT;
    case Op::kGe:
      return is_float ? P::FCMP_OGE : P::ICMP_SGE;
    case Op::kEq:
      return is_float ? P::FCMP_OEQ : P::ICMP_EQ;
    default:
      return is_float ? P::FCMP_UNE : P::ICMP_NE;
  }
}

}  // namespace tunefarm::codegen
