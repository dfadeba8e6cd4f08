// The CPU back end's emitter: a loop program of one ComputeDAG as LLVM IR
// functions `tf_body` (noalias buffers) and TF_KERNEL_ENTRY (the kernel ABI
// of common/kernel_abi.h: buffers by pointer, a TFRuntime). On top of
// LoopEmitter it adds parallel loops (outlined into tf_par_N and handed to
// the runtime's parallel_for), allocations (stack tiles, or the runtime's
// allocator), libm-free exp and tanh, and explicit vector code: a
// vectorized loop with no loop inside becomes chunks of `vector_lanes`
// lanes whose variable is a vector, with guards as lane masks
// (cpu_vector.cc). Internal to compiler/codegen: CompileCpu
// (llvm_codegen.h) is the interface.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/codegen/loop_emitter.h"
#include "compiler/ir/simplify.h"

namespace tunefarm::codegen {

// A parallel loop that stores fewer elements than this runs on the calling
// thread: handing it to the pool costs more than it saves
// (docs/compiler.md, "Code generation", has the measurements).
inline constexpr int64_t kMinParallelStores = 16384;

class CpuEmitter : public LoopEmitter {
 public:
  // `vector_lanes`: floats per vector chunk (one full register).
  CpuEmitter(llvm::Module& mod, const ir::ComputeDAG& dag, int vector_lanes);

  // Emits both functions into the module; `fn_attrs_kv` are attribute
  // name/value pairs put on every function.
  void Generate(const ir::Stmt& program, const std::vector<std::string>& fn_attrs_kv);

 private:
  // Field indices of TFRuntime as an LLVM struct.
  enum RuntimeField { kAbi = 0, kThreads, kParallelFor, kCtx, kAlloc, kFree };

  void Decorate(llvm::Function* f, const std::vector<std::string>& kv);
  // Splats a scalar against a vector of the current lane count.
  void Match(llvm::Value*& a, llvm::Value*& b) override;
  llvm::Value* Widen(llvm::Value* v);
  // Inside a vectorized loop: its variable is a ramp, loads vector loads.
  llvm::Value* GenExpr(const ir::Expr& e) override;

  llvm::Value* VisitSelect(const ir::Expr& e) override;
  llvm::Value* VisitCall(const ir::Expr& e) override;
  llvm::Value* VisitLoad(const ir::Expr& e) override;
  llvm::Value* VisitDefault(const ir::Expr&) override { return nullptr; }
  void VisitFor(const ir::Stmt& s) override;
  void VisitStore(const ir::Stmt& s) override;
  void VisitBarrier(const ir::Stmt&) override {}  // GPU programs never reach the CPU back end
  void VisitIf(const ir::Stmt& s) override;
  void VisitAllocate(const ir::Stmt& s) override;
  void VisitDefault(const ir::Stmt&) override {}

  // Loops (cpu_emitter.cc).
  void GenFor(const ir::Stmt& s);
  void GenLoop(const ir::Expr& var, llvm::Value* begin, llvm::Value* end, ir::ForKind kind,
               const ir::Stmt& body);
  void GenParallel(const ir::StmtNode& s);
  bool OnStack(int tensor) const;
  bool AlwaysInside(int tensor, const ir::Expr& flat) const;

  // Vector code (cpu_vector.cc).
  ir::Expr FlatIndexExpr(int tensor, const std::vector<ir::Expr>& idx);
  static bool LinearCoeff(const ir::Expr& e, const ir::ExprNode* var, int64_t* coeff);
  llvm::Value* ScalarIndex(const ir::Expr& flat);
  int64_t Elements(int tensor) const;
  llvm::Value* ScalarAddress(int tensor, const ir::Expr& flat);
  llvm::Value* MaskedAddress(int tensor, const ir::Expr& flat);
  llvm::Value* StridedMaskedLoad(llvm::Value* addr, int coeff, llvm::Value* mask,
                                 llvm::Value* fill);
  llvm::Value* AllTrue();
  llvm::Value* GenVectorLoad(const ir::ExprNode& n);
  llvm::Value* GenGuardedVectorLoad(const ir::ExprNode& n);
  bool EndsDecide(const ir::Expr& cond) const;
  llvm::Value* ScalarAtLane(const ir::Expr& e, int lane);
  void GenVectorStore(const ir::StmtNode& s);
  llvm::Value* PaddedLoad(llvm::Value* addr);
  llvm::Value* F(llvm::Value* like, double v);
  llvm::Value* MulAdd(llvm::Value* a, llvm::Value* b, llvm::Value* c);
  llvm::Value* FastTanh(llvm::Value* x);
  llvm::Value* FastExp(llvm::Value* x);
  llvm::Value* PerLane(const char* name, llvm::Value* x);
  static bool HasLoop(const ir::Stmt& s);
  void GenVectorLoop(const ir::StmtNode& s);

  const ir::ComputeDAG& dag_;
  const int vector_lanes_;
  llvm::StructType* runtime_ty_;  // TFRuntime
  ir::VarRanges ranges_;          // the loops being generated: variable -> extent
  llvm::Value* rt_ = nullptr;     // the TFRuntime* of the function being emitted
  llvm::Function* body_fn_ = nullptr;
  int in_parallel_ = 0;
  int parallel_count_ = 0;
  // Explicit vectorization state: the vectorized loop's variable while its
  // body is generated, the lane count, and the active-lane mask (or null).
  const ir::ExprNode* vec_var_ = nullptr;
  int lanes_ = 16;
  llvm::Value* mask_ = nullptr;
  std::vector<std::string> fn_attrs_kv_;
};

}  // namespace tunefarm::codegen
