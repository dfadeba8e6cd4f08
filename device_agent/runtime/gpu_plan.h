// What the GPU runner needs of a CUDA build: the module image (cubin or PTX)
// and each kernel's launch, with its parameters as buffer indices. The
// worker ships a GpuModule (farm.proto) whose parameters are tensor ids; the
// runtime maps them to buffers (PlanFromModule in measure.h, through the
// build's KernelSignature) and sends the plan to the runner process in the
// flat form below, so the runner parses no protobuf.
//
// Buffers: 0..n_args-1 the kernel inputs in ABI order, n_args the output,
// n_args+1+w workspace w.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/float16.h"

namespace tunefarm::runtime {

struct GpuPlan {
  struct Kernel {
    std::string name;
    std::array<int64_t, 3> grid = {1, 1, 1};
    std::array<int64_t, 3> block = {1, 1, 1};
    std::vector<int> buffers;  // one per kernel parameter
    // Dynamic shared memory each launch passes (opted in to at load); 0 for
    // a kernel with static shared memory only.
    int64_t dynamic_shared_bytes = 0;
  };
  std::string image;  // cubin (ELF) or PTX text
  std::vector<Kernel> kernels;
  std::vector<int64_t> workspace_bytes;
  // Argument buffers (inputs and the output, 0..n_args) the kernels hold in
  // 16 bits, all in the format `half` (float16 or bfloat16): the runner
  // converts them from floats at upload and back at download.
  std::vector<int> float16_buffers;
  HalfKind half = HalfKind::kFloat16;
};

// Limits of the flat form (a plan past them is refused when encoded).
constexpr int kMaxGpuKernels = 64;
constexpr int kMaxGpuParams = 64;
constexpr int kMaxGpuKernelName = 63;
constexpr int64_t kMaxGpuDynamicShared = 256 * 1024;  // above every arch's opt-in limit

// The flat bytes of `plan`; InvalidArgument past the limits above.
absl::StatusOr<std::string> EncodeGpuPlan(const GpuPlan& plan);
// Back from bytes; InvalidArgument naming what is wrong for anything that
// is not a plan `n_args` inputs can run (truncated, counts out of range,
// a parameter naming no buffer, a launch dimension below 1, dynamic shared
// memory past kMaxGpuDynamicShared, a float16 buffer that is not an
// argument).
absl::StatusOr<GpuPlan> DecodeGpuPlan(const char* data, size_t size, int64_t n_args);

}  // namespace tunefarm::runtime
