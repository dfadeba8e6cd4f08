// The loop IR a scheduled program lowers to: loops, stores, conditionals,
// sequences and buffer allocations over the tensors of a ComputeDAG.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/expr.h"

namespace tunefarm::ir {

enum class ForKind : uint8_t { kSerial, kParallel, kVectorized, kUnrolled };
enum class StmtKind : uint8_t { kFor, kStore, kSeq, kIf, kAllocate };

struct StmtNode;
using Stmt = std::shared_ptr<const StmtNode>;

struct StmtNode {
  StmtKind kind;
  // kFor
  Expr var;
  int64_t extent = 0;
  ForKind for_kind = ForKind::kSerial;
  // kStore (multi-dimensional indices into `tensor`) and kAllocate (`tensor`)
  int tensor = -1;
  std::vector<Expr> indices;
  Expr value;
  // kIf
  Expr cond;
  // kAllocate: the buffer's shape (a region of the tensor for a stage
  // computed inside another's loop) and whether it lives on the stack.
  std::vector<int64_t> shape;
  bool local = false;
  // kFor, kIf, kAllocate: body[0]; kSeq: the statements in order
  std::vector<Stmt> body;
};

Stmt For(Expr var, int64_t extent, ForKind kind, Stmt body);
Stmt Store(int tensor, std::vector<Expr> indices, Expr value);
Stmt Seq(std::vector<Stmt> stmts);
Stmt IfThen(Expr cond, Stmt then_case);
Stmt Allocate(int tensor, std::vector<int64_t> shape, bool local, Stmt body);

std::string ToString(const Stmt& s, const std::vector<std::string>* tensor_names = nullptr);

}  // namespace tunefarm::ir
