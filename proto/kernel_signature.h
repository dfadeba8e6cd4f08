// Calling a built kernel from its KernelSignature alone (workload.proto): the
// sizes of its arguments, its random inputs and the packing of constants.
// Used by whoever runs kernels (the runtime, the agent, the graph runtime)
// and by the compiler that writes the signature, so both sides pack alike.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "common/float16.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm {

// Elements of the argument as its caller holds it (the logical shape).
int64_t LogicalElements(const v1::KernelArgument& arg);
// The shape the kernel reads (the packed one where the argument is packed).
std::vector<int64_t> KernelShape(const v1::KernelArgument& arg);
int64_t KernelElements(const v1::KernelArgument& arg);

// OK when every argument is float32 with positive extents, its packing is
// consistent (one block per dimension, each split dimension named once in
// pack_inner) and all arguments together hold at most `max_elements`
// elements; otherwise INVALID_ARGUMENT naming the argument.
absl::Status CheckSignature(const v1::KernelSignature& signature, int64_t max_elements);

// The 16-bit format of `dtype` (float16, bfloat16); nullopt for float32.
inline std::optional<HalfKind> HalfKindOf(v1::DType dtype) {
  if (dtype == v1::DTYPE_FLOAT16) return HalfKind::kFloat16;
  if (dtype == v1::DTYPE_BFLOAT16) return HalfKind::kBFloat16;
  return std::nullopt;
}

// The dtype's name in messages: "float32", "float16", "bfloat16", else its
// enum name ("DTYPE_INT8").
inline const char* DTypeWord(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return "float32";
    case v1::DTYPE_FLOAT16:
      return "float16";
    case v1::DTYPE_BFLOAT16:
      return "bfloat16";
    default:
      return v1::DType_Name(dtype).c_str();
  }
}

// `logical` (row-major, LogicalElements values) in the layout the kernel
// reads: a copy where the argument is not packed.
std::vector<float> PackArgument(const v1::KernelArgument& arg, const std::vector<float>& logical);

// The random inputs of a kernel (every argument but the last), logical
// layouts, from FillUniform(seed, argument index); a float16 or bfloat16
// argument's values rounded to its dtype, every float32 one's to TF32 where
// the signature is tf32 (a zero made 0.5).
std::vector<std::vector<float>> RandomInputs(const v1::KernelSignature& signature, uint64_t seed);
// Input `index` of RandomInputs alone.
std::vector<float> RandomInput(const v1::KernelSignature& signature, int index, uint64_t seed);

}  // namespace tunefarm
