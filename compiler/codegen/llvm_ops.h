// The loop IR's scalar operators as LLVM instructions, shared by the CPU
// (llvm_codegen.cc) and GPU (nvptx_codegen.cc) back ends. Operands may be
// scalars or vectors of the same type: the builder's operations and the
// constants here are lane-wise.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/ir/expr.h"
#include "llvm/IR/IRBuilder.h"

namespace tunefarm::codegen {

// The LLVM type of an IR scalar type; `integers` is the IR's kInt64 (i64,
// or i32 where the back end does 32-bit index math).
llvm::Type* LlvmType(llvm::LLVMContext& ctx, ir::ScalarType t, llvm::Type* integers);

// The row-major element index of `indices` into a tensor of `shape`, in
// the integer type of the indices (0 of `integers` when there are none).
llvm::Value* RowMajorIndex(llvm::IRBuilder<>& b, const std::vector<int64_t>& shape,
                           const std::vector<llvm::Value*>& indices, llvm::Type* integers);

// floor(a / b) for signed integers (the IR's kFloorDiv).
llvm::Value* FloorDivInt(llvm::IRBuilder<>& b, llvm::Value* a, llvm::Value* c);

// a `op` c for the arithmetic binary ops (kAdd, kSub, kMul, kDiv for
// floats, kFloorDiv and kFloorMod for integers, kMin, kMax as std::min and
// std::max); nullptr for any other op.
llvm::Value* BinaryOp(llvm::IRBuilder<>& b, ir::Op op, bool is_float, llvm::Value* a,
                      llvm::Value* c);

// The predicate of a comparison op (kLt .. kNe): ordered for floats but
// kNe, which is true for NaN as C's != is.
llvm::CmpInst::Predicate ComparePredicate(ir::Op op, bool is_float);

}  // namespace tunefarm::codegen
