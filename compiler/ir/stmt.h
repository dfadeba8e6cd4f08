// The loop IR a scheduled program lowers to: loops, stores, conditionals,
// sequences and buffer allocations over the tensors of a ComputeDAG.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/expr.h"

namespace tunefarm::ir {

// kBlock*/kThread* loops are bound to the CUDA grid: each thread of the
// launch runs the body once with the loop variable set to its block or thread
// index (guarded when the extent is below the launch's). kVThread is a
// virtual thread: a serial loop inside each thread (TVM's vthread).
enum class ForKind : uint8_t {
  kSerial,
  kParallel,
  kVectorized,
  kUnrolled,
  kBlockX,
  kBlockY,
  kBlockZ,
  kThreadX,
  kThreadY,
  kThreadZ,
  kVThread,
};
// kBarrier: every thread of a GPU block waits there (__syncthreads).
enum class StmtKind : uint8_t { kFor, kStore, kSeq, kIf, kAllocate, kBarrier };

bool IsBlockBound(ForKind k);
bool IsThreadBound(ForKind k);
// 0, 1, 2 for the x, y, z of a block- or thread-bound kind.
int BindingAxis(ForKind k);
// "blockIdx.x", "threadIdx.y", "vthread", or "" for CPU kinds.
const char* BindingName(ForKind k);

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
  // computed inside another's loop) and whether it lives on the stack (CPU)
  // or in each thread's registers (GPU), or in the GPU block's shared memory.
  // `shape` may be wider than the region in its last dimension
  // (storage_align padding); indices stay below the region's extents.
  std::vector<int64_t> shape;
  bool local = false;
  bool shared = false;
  // kFor, kIf, kAllocate: body[0]; kSeq: the statements in order
  std::vector<Stmt> body;
};

Stmt For(Expr var, int64_t extent, ForKind kind, Stmt body);
Stmt Store(int tensor, std::vector<Expr> indices, Expr value);
Stmt Seq(std::vector<Stmt> stmts);
Stmt IfThen(Expr cond, Stmt then_case);
Stmt Allocate(int tensor, std::vector<int64_t> shape, bool local, Stmt body);
Stmt AllocateShared(int tensor, std::vector<int64_t> shape, Stmt body);
Stmt Barrier();

std::string ToString(const Stmt& s, const std::vector<std::string>* tensor_names = nullptr);

// How many element stores `s` executes: loop extents times the stores they
// hold, each vector lane one element, every guarded store counted (an
// upper bound). A kernel's work in the units a parallel loop splits.
int64_t StoreCount(const Stmt& s);

}  // namespace tunefarm::ir
