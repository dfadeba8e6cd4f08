// Kernel arguments of a compute DAG: the packed layouts layout_pack steps
// make (PackedIndex, PackConstant, PackedArguments), the kernel signature
// and element sizes. Declared in compute.h.
#include "compiler/ir/compute.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "proto/kernel_signature.h"

namespace tunefarm::ir {

std::vector<Expr> PackedIndex(const TensorDecl& packed, const std::vector<Expr>& index) {
  std::vector<Expr> outer, inner(packed.pack_inner.size());
  for (size_t d = 0; d < index.size(); ++d) {
    int64_t b = packed.pack_block[d];
    if (b == 0) {
      outer.push_back(index[d]);
      continue;
    }
    outer.push_back(FloorDiv(index[d], IntImm(b)));
    size_t pos = std::find(packed.pack_inner.begin(), packed.pack_inner.end(), int(d)) -
                 packed.pack_inner.begin();
    inner[pos] = FloorMod(index[d], IntImm(b));
  }
  outer.insert(outer.end(), inner.begin(), inner.end());
  return outer;
}

namespace {

namespace v1 = ::tunefarm::v1;

v1::KernelArgument ArgumentOf(const ComputeDAG& dag, int tensor) {
  const TensorDecl& t = dag.tensors[size_t(tensor)];
  v1::KernelArgument a;
  a.set_dtype(!t.float16                        ? v1::DTYPE_FLOAT32
              : dag.half == HalfKind::kBFloat16 ? v1::DTYPE_BFLOAT16
                                                : v1::DTYPE_FLOAT16);
  a.set_tensor(tensor);
  if (t.packed_from < 0) {
    for (int64_t e : t.shape) a.add_shape(e);
    return a;
  }
  for (int64_t e : dag.tensors[size_t(t.packed_from)].shape) a.add_shape(e);
  for (int64_t b : t.pack_block) a.add_pack_block(b);
  for (int d : t.pack_inner) a.add_pack_inner(d);
  return a;
}

}  // namespace

std::vector<float> PackConstant(const ComputeDAG& dag, int packed,
                                const std::vector<float>& original) {
  return PackArgument(ArgumentOf(dag, packed), original);
}

v1::KernelSignature SignatureOf(const ComputeDAG& scheduled) {
  v1::KernelSignature s;
  for (int t : scheduled.args) *s.add_args() = ArgumentOf(scheduled, t);
  s.set_tf32(scheduled.tf32);
  return s;
}

std::vector<std::pair<size_t, std::vector<float>>> PackedArguments(
    const ComputeDAG& scheduled, const std::vector<std::vector<float>>& inputs) {
  std::vector<std::pair<size_t, std::vector<float>>> packed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    int arg = scheduled.args[i];
    if (scheduled.tensors[size_t(arg)].packed_from >= 0) {
      packed.emplace_back(i, PackConstant(scheduled, arg, inputs[i]));
    }
  }
  return packed;
}

int64_t ElementBytes(const TensorDecl& t) { return t.float16 ? 2 : 4; }

bool HasFloat16(const ComputeDAG& dag) {
  for (const TensorDecl& t : dag.tensors) {
    if (t.float16) return true;
  }
  return false;
}

}  // namespace tunefarm::ir
