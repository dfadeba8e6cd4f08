#include "device_agent/runtime/gpu_plan.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tunefarm::runtime {
namespace {

constexpr uint32_t kPlanMagic = 0x4c504654;  // "TFPL"

// Fixed-size records, copied as bytes (writer and reader are one build).
struct PlanHeader {
  uint32_t magic;
  int32_t n_kernels;
  int32_t n_workspace;
  int32_t n_float16;
  int32_t bfloat16;  // 1: the float16 buffers hold bfloat16
  int32_t reserved;  // 0: no padding bytes go out unset
  int64_t image_bytes;
};

struct KernelRecord {
  char name[kMaxGpuKernelName + 1];
  int64_t grid[3];
  int64_t block[3];
  int64_t dynamic_shared_bytes;
  int32_t n_params;
  int32_t params[kMaxGpuParams];
};

template <typename T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

absl::StatusOr<std::string> EncodeGpuPlan(const GpuPlan& plan) {
  if (plan.kernels.empty() || plan.kernels.size() > size_t(kMaxGpuKernels)) {
    return absl::InvalidArgumentError(absl::StrCat("a GPU plan has 1 to ", kMaxGpuKernels,
                                                   " kernels, not ", plan.kernels.size()));
  }
  std::string out;
  if (plan.float16_buffers.size() > size_t(kMaxGpuParams)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a GPU plan has at most ", kMaxGpuParams, " float16 buffers"));
  }
  PlanHeader h{kPlanMagic,
               int32_t(plan.kernels.size()),
               int32_t(plan.workspace_bytes.size()),
               int32_t(plan.float16_buffers.size()),
               plan.half == HalfKind::kBFloat16 ? 1 : 0,
               0,
               int64_t(plan.image.size())};
  Put(&out, h);
  for (const GpuPlan::Kernel& k : plan.kernels) {
    if (k.name.empty() || k.name.size() > size_t(kMaxGpuKernelName) ||
        k.buffers.size() > size_t(kMaxGpuParams)) {
      return absl::InvalidArgumentError(absl::StrCat("kernel '", k.name, "': names of 1 to ",
                                                     kMaxGpuKernelName, " characters and at most ",
                                                     kMaxGpuParams, " parameters"));
    }
    KernelRecord r{};
    std::memcpy(r.name, k.name.data(), k.name.size());
    for (int i = 0; i < 3; ++i) r.grid[i] = k.grid[i], r.block[i] = k.block[i];
    r.dynamic_shared_bytes = k.dynamic_shared_bytes;
    r.n_params = int32_t(k.buffers.size());
    for (size_t i = 0; i < k.buffers.size(); ++i) r.params[i] = k.buffers[i];
    Put(&out, r);
  }
  for (int64_t b : plan.workspace_bytes) Put(&out, b);
  for (int b : plan.float16_buffers) Put(&out, int32_t(b));
  out.append(plan.image);
  return out;
}

absl::StatusOr<GpuPlan> DecodeGpuPlan(const char* data, size_t size, int64_t n_args) {
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("GPU plan: ", why));
  };
  PlanHeader h;
  if (size < sizeof(h)) return bad("truncated header");
  std::memcpy(&h, data, sizeof(h));
  if (h.magic != kPlanMagic) return bad("not a plan from this build");
  if (h.n_kernels < 1 || h.n_kernels > kMaxGpuKernels) return bad("kernel count out of range");
  if (h.n_workspace < 0 || h.n_workspace > 1024) return bad("workspace count out of range");
  if (h.n_float16 < 0 || h.n_float16 > kMaxGpuParams) return bad("float16 count out of range");
  if (h.bfloat16 != 0 && h.bfloat16 != 1) return bad("16-bit format out of range");
  const size_t fixed = sizeof(h) + size_t(h.n_kernels) * sizeof(KernelRecord) +
                       size_t(h.n_workspace) * sizeof(int64_t) +
                       size_t(h.n_float16) * sizeof(int32_t);
  if (h.image_bytes < 1 || size < fixed || size - fixed != uint64_t(h.image_bytes)) {
    return bad("sizes do not add up");
  }
  const int64_t n_buffers = n_args + 1 + h.n_workspace;
  GpuPlan plan;
  plan.half = h.bfloat16 == 1 ? HalfKind::kBFloat16 : HalfKind::kFloat16;
  const char* p = data + sizeof(h);
  for (int k = 0; k < h.n_kernels; ++k, p += sizeof(KernelRecord)) {
    KernelRecord r;
    std::memcpy(&r, p, sizeof(r));
    GpuPlan::Kernel kernel;
    kernel.name.assign(r.name, strnlen(r.name, sizeof(r.name)));
    if (kernel.name.empty() || kernel.name.size() > size_t(kMaxGpuKernelName))
      return bad(absl::StrCat("kernel ", k, " has no name"));
    // CUDA's own limits: grid x < 2^31, y and z < 2^16; block x, y 1024,
    // z 64, and 1024 threads in all.
    static constexpr int64_t kGridMax[3] = {0x7fffffffLL, 65535, 65535};
    static constexpr int64_t kBlockMax[3] = {1024, 1024, 64};
    for (int i = 0; i < 3; ++i) {
      if (r.grid[i] < 1 || r.grid[i] > kGridMax[i] || r.block[i] < 1 || r.block[i] > kBlockMax[i])
        return bad(absl::StrCat("kernel ", kernel.name, ": launch dimension out of range"));
      kernel.grid[i] = r.grid[i], kernel.block[i] = r.block[i];
    }
    if (r.block[0] * r.block[1] * r.block[2] > 1024)
      return bad(absl::StrCat("kernel ", kernel.name, ": more than 1024 threads per block"));
    if (r.dynamic_shared_bytes < 0 || r.dynamic_shared_bytes > kMaxGpuDynamicShared)
      return bad(absl::StrCat("kernel ", kernel.name, ": dynamic shared memory out of range"));
    kernel.dynamic_shared_bytes = r.dynamic_shared_bytes;
    if (r.n_params < 0 || r.n_params > kMaxGpuParams)
      return bad(absl::StrCat("kernel ", kernel.name, ": parameter count out of range"));
    for (int i = 0; i < r.n_params; ++i) {
      if (r.params[i] < 0 || r.params[i] >= n_buffers) {
        return bad(absl::StrCat("kernel ", kernel.name, ": parameter ", i, " names buffer ",
                                r.params[i], " of ", n_buffers));
      }
      kernel.buffers.push_back(r.params[i]);
    }
    plan.kernels.push_back(std::move(kernel));
  }
  for (int w = 0; w < h.n_workspace; ++w, p += sizeof(int64_t)) {
    int64_t bytes;
    std::memcpy(&bytes, p, sizeof(bytes));
    if (bytes < 0 || bytes > (int64_t{1} << 40)) return bad("workspace size out of range");
    plan.workspace_bytes.push_back(bytes);
  }
  for (int f = 0; f < h.n_float16; ++f, p += sizeof(int32_t)) {
    int32_t b;
    std::memcpy(&b, p, sizeof(b));
    if (b < 0 || b > n_args) return bad(absl::StrCat("float16 buffer ", b, " is not an argument"));
    plan.float16_buffers.push_back(b);
  }
  plan.image.assign(p, size_t(h.image_bytes));
  return plan;
}

}  // namespace tunefarm::runtime
