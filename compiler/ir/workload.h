// Workloads: canonical form, stable key, output shape and FLOP count.
//
// A workload is canonicalised before anything keys on it: omitted attributes
// take their defaults (strides 1, pads 0, dilations 1, groups 1, out_dtype =
// the first input's dtype), then it is validated. Two workloads that describe
// the same computation have the same canonical JSON and hence the same key.
// Errors are InvalidArgument and name the offending field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/target.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::ir {

namespace v1 = ::tunefarm::v1;

struct CanonicalWorkload {
  v1::Workload workload;         // defaults filled in
  std::string canonical_json;    // deterministic JSON of `workload`
  std::string key;               // "<op>-<24 hex digits of sha256(canonical_json)>"
  std::vector<int64_t> output_shape;
  double flops = 0;              // main computation plus epilogue, per run
};

absl::StatusOr<CanonicalWorkload> Canonicalize(const v1::Workload& workload);

// The one dtype of every tensor a canonical workload names (inputs, map
// inputs that give one, the output): float32, float16 or bfloat16. Unimplemented
// naming the tensor for another dtype or a mix.
absl::StatusOr<v1::DType> WorkloadDType(const v1::Workload& canonical);

// OK when kernels of `w` build for `target`: float16, bfloat16 and tf32 on
// cuda targets only, bfloat16 and tf32 from sm_80. Otherwise
// InvalidArgument saying which and why ("bfloat16 kernels need sm_80 or
// newer (sm_75 has no bfloat16 conversions)").
absl::Status CheckWorkloadTarget(const v1::Workload& w, const Target& target);
// The rule under it and frontend::CheckPrecision: values of `dtype` and,
// with `tf32`, tf32 products on `target`; the error names `what` ("tf32
// products", "bfloat16 models").
absl::Status CheckFormatTarget(v1::DType dtype, bool tf32, const Target& target,
                               const std::string& what);

// Whether `op` is a product that may take Workload.tf32 (conv2d,
// conv2d_transpose, dense, matmul, batch_matmul).
bool IsProductOp(v1::OpKind op);

// `w` with every tensor it names (inputs, map inputs, the output) of dtype
// `dtype`, canonical again (its key changes with the dtype).
absl::StatusOr<CanonicalWorkload> WithDType(const v1::Workload& w, v1::DType dtype);

// Output extent of a sliding window over `in` cells padded by pad_lo/pad_hi;
// 0 when no window fits. ceil_mode counts a last partial window, except one
// that would start in the high padding (ONNX Runtime's and PyTorch's rule).
int64_t WindowOutput(int64_t in, int64_t pad_lo, int64_t pad_hi, int64_t kernel, int64_t stride,
                     int64_t dilation = 1, bool ceil_mode = false);

// A rearrange index map's value where its output dimension is at `o`:
// floor((mul * o + add) / div), or add when mul is 0.
int64_t RearrangeIndexAt(const v1::RearrangeIndex& m, int64_t o);

// Short op name used as the key prefix: "conv2d", "dense", ...
std::string OpName(v1::OpKind op);

// "conv2d 1x64x56x56 * 64x64x3x3 s1 p1 +bias+relu"-style one-line summary
// ("conv2d fp16 1x64x56x56 ..." where the tensors are float16, bf16 for
// bfloat16).
std::string Describe(const v1::Workload& workload);

}  // namespace tunefarm::ir
