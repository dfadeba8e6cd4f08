#include "device_agent/runtime/gpu_module.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "proto/kernel_signature.h"

namespace tunefarm::runtime {

namespace v1 = ::tunefarm::v1;

absl::StatusOr<GpuPlan> PlanFromModule(const v1::GpuModule& module,
                                       const v1::KernelSignature& signature) {
  GpuPlan plan;
  plan.image = module.image();
  const int n_inputs = signature.args_size() - 1;
  std::map<int, int> buffer_of;  // tensor id -> buffer index
  for (int i = 0; i < signature.args_size(); ++i) {
    buffer_of[signature.args(i).tensor()] = i;
    if (std::optional<HalfKind> k = HalfKindOf(signature.args(i).dtype())) {
      if (!plan.float16_buffers.empty() && *k != plan.half)
        return absl::InvalidArgumentError("kernel arguments of two 16-bit formats");
      plan.half = *k;
      plan.float16_buffers.push_back(i);
    }
  }
  for (const v1::GpuModule::Workspace& w : module.workspace()) {
    buffer_of.emplace(w.tensor(), n_inputs + 1 + int(plan.workspace_bytes.size()));
    plan.workspace_bytes.push_back(w.bytes());
  }
  for (const v1::GpuModule::Kernel& k : module.kernels()) {
    GpuPlan::Kernel pk;
    pk.name = k.name();
    if (k.grid_size() != 3 || k.block_size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel ", k.name(), ": a launch has 3 grid and 3 block dimensions"));
    }
    for (int i = 0; i < 3; ++i) pk.grid[size_t(i)] = k.grid(i), pk.block[size_t(i)] = k.block(i);
    if (k.dynamic_shared()) {
      if (k.shared_bytes() < 1 || k.shared_bytes() > kMaxGpuDynamicShared) {
        return absl::InvalidArgumentError(absl::StrCat("kernel ", k.name(), ": ", k.shared_bytes(),
                                                       " bytes of dynamic shared memory"));
      }
      pk.dynamic_shared_bytes = k.shared_bytes();
    }
    for (int t : k.params()) {
      auto it = buffer_of.find(t);
      if (it == buffer_of.end()) {
        return absl::InvalidArgumentError(absl::StrCat("kernel ", k.name(), ": parameter tensor ",
                                                       t,
                                                       " is neither an argument nor a workspace"));
      }
      pk.buffers.push_back(it->second);
    }
    plan.kernels.push_back(std::move(pk));
  }
  return plan;
}

}  // namespace tunefarm::runtime
