// Internal to compiler/schedule: what gpu_tensor_core.cc (the sketch,
// its tilings and the scheduled DAG) and gpu_tensor_core_lower.cc (the
// lowering of a tensor-core schedule) share: the GEMM a tensor-core DAG
// computes, read off the DAG, and its operands' vector widths.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/expr.h"

namespace tunefarm::schedule::tensor_core {

using ir::ComputeDAG;
using ir::Expr;
using ir::ExprNode;
using ir::FloorDiv;
using ir::FloorMod;
using ir::IntImm;
using ir::IterVar;
using ir::VarMapEntry;


inline constexpr size_t kWireSize = 9;       // 10 with wgmma, 11 with swizzle
inline constexpr int kAddedTensors = 7;      // by TensorCoreDag
// Elements a thread moves at once where a tile's rows are contiguous in
// memory: 16 bytes (8 16-bit elements, 4 floats), one vectorized loop (see
// Lower's contract for GPU targets in schedule.h).
inline int64_t VectorElements(bool tf32) { return tf32 ? 4 : 8; }
inline constexpr int kMinTensorCoreSm = 80;  // mma.sync m16n8k16 (16-bit), m16n8k8 (tf32)

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Loop axes fused into one GEMM dimension, the last fastest.
struct AxisGroup {
  std::vector<const ExprNode*> vars;
  std::vector<int64_t> extents;
  int64_t size = 1;

  void Add(const IterVar& a) {
    vars.push_back(a.var.get());
    extents.push_back(a.extent);
    size *= a.extent;
  }
  // `v` (one of vars) made the fastest.
  void MoveLast(const ExprNode* v) {
    const size_t i = size_t(std::find(vars.begin(), vars.end(), v) - vars.begin());
    vars.push_back(vars[i]);
    extents.push_back(extents[i]);
    vars.erase(vars.begin() + long(i));
    extents.erase(extents.begin() + long(i));
  }
  // Each variable's value at fused position `at`.
  std::vector<VarMapEntry> At(const Expr& at) const {
    std::vector<VarMapEntry> out;
    int64_t inner = size;
    for (size_t d = 0; d < vars.size(); ++d) {
      inner /= extents[d];
      Expr v = inner == 1 ? at : FloorDiv(at, IntImm(inner));
      out.push_back({vars[d], d == 0 ? v : FloorMod(v, IntImm(extents[d]))});
    }
    return out;
  }
};

// The product a tensor-core schedule computes, read off the DAG (an
// implicit GEMM): out[batch, m, n] = sum_k A(batch, m, k) * B(batch, k, n),
// then the epilogue. A is the first factor of the reduction's product
// (padding stages inlined into it), B the second; an output axis A alone
// reads is along M, B alone along N, both (or neither) a batch axis; every
// reduction axis is along K. A matmul is one axis each; a convolution's M
// is its (n, y, x), N its output channels, K its (c, r, s).
struct Gemm {
  int main = -1, epilogue = -1;  // stage indices; epilogue -1 when main is the output
  AxisGroup batch, m, n, k;
  std::vector<const ExprNode*> out_axes;  // the main stage's, in order
  Expr a, b;
  // Whether the operand's first load runs along K in its innermost index (its
  // shared tile then keeps K contiguous too, so consecutive threads read
  // consecutive elements), and whether the operand is that load (perhaps
  // guarded) with the last variable of its contiguous group as its last
  // index (then its rows can move 16 bytes at a time where that axis's
  // extent is a multiple of VectorElements).
  bool a_k_inner = true, b_k_inner = false;
  bool a_plain = false, b_plain = false;
  int64_t a_vector_extent = 0, b_vector_extent = 0;  // of the contiguous axis
  bool tf32 = false;                                 // float32 tiles, mma.sync m16n8k8 tf32
};

// The GEMM `dag` computes; FailedPrecondition naming why when it has none
// a tensor-core schedule can take.
absl::StatusOr<Gemm> MatchGemm(const ComputeDAG& dag);

// Whether the rows of A's (B's) tile move 16 bytes at a time: the
// operand is a (guarded) load contiguous along its tile rows, and the
// contiguous axis's extent keeps every vector aligned and inside one row
// of memory.
inline bool VectorA(const Gemm& g) {
  return g.a_plain && g.a_vector_extent % VectorElements(g.tf32) == 0;
}
inline bool VectorB(const Gemm& g) {
  return g.b_plain && g.b_vector_extent % VectorElements(g.tf32) == 0;
}

}  // namespace tunefarm::schedule::tensor_core
