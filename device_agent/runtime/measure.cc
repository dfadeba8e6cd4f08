#include "device_agent/runtime/measure.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "proto/kernel_signature.h"

namespace tunefarm::runner {

namespace v1 = ::tunefarm::v1;

absl::StatusOr<GpuPlan> PlanFromModule(const v1::GpuModule& module,
                                       const v1::KernelSignature& signature) {
  GpuPlan plan;
  plan.image = module.image();
  const int n_inputs = signature.args_size() - 1;
  std::map<int, int> buffer_of;  // tensor id -> buffer index
  for (int i = 0; i < signature.args_size(); ++i) buffer_of[signature.args(i).tensor()] = i;
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

int64_t MaxKernelElements(int64_t memory_limit_bytes) {
  return (memory_limit_bytes > 0 ? memory_limit_bytes : int64_t{4} << 30) / 4;
}

SandboxOutcome Measure(const Kernel& kernel, const std::vector<std::vector<float>>& inputs,
                       const std::vector<float>& reference, SandboxOptions options,
                       std::vector<float>* output) {
  SandboxOutcome bad;
  bad.status = SandboxOutcome::Status::kRuntimeError;
  const v1::KernelSignature& sig = kernel.signature;
  if (absl::Status s = CheckSignature(sig, MaxKernelElements(options.memory_limit_bytes));
      !s.ok()) {
    bad.error = absl::StrCat("signature: ", s.message());
    return bad;
  }
  if (inputs.size() + 1 != size_t(sig.args_size())) {
    bad.error = absl::StrCat("the kernel takes ", sig.args_size() - 1, " inputs, given ",
                             inputs.size());
    return bad;
  }
  std::vector<std::vector<float>> packed(inputs.size());
  std::vector<const std::vector<float>*> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const v1::KernelArgument& a = sig.args(int(i));
    if (int64_t(inputs[i].size()) != LogicalElements(a)) {
      bad.error = absl::StrCat("input ", i, " has ", inputs[i].size(), " elements, the kernel reads ",
                               LogicalElements(a));
      return bad;
    }
    if (a.pack_block_size() == 0) {
      args.push_back(&inputs[i]);
    } else {
      packed[i] = PackArgument(a, inputs[i]);
      args.push_back(&packed[i]);
    }
  }
  const int64_t n_out = KernelElements(sig.args(sig.args_size() - 1));
  if (!reference.empty() && int64_t(reference.size()) != n_out) {
    bad.error = absl::StrCat("the reference has ", reference.size(), " values, the output ", n_out);
    return bad;
  }
  options.cuda =
      kernel.kind == v1::ARTIFACT_KIND_CUBIN || kernel.kind == v1::ARTIFACT_KIND_PTX;
  if (!options.cuda) {
    if (kernel.kind != v1::ARTIFACT_KIND_SHARED_OBJECT) {
      bad.error = "unknown artifact kind";
      return bad;
    }
    return MeasureInSandbox(kernel.bytes, args, n_out, reference, options, output);
  }
  v1::GpuModule module;
  if (!module.ParseFromString(kernel.bytes)) {
    bad.error = "the artifact is not a GpuModule";
    return bad;
  }
  absl::StatusOr<GpuPlan> plan = PlanFromModule(module, sig);
  if (!plan.ok()) {
    bad.error = std::string(plan.status().message());
    return bad;
  }
  absl::StatusOr<std::string> encoded = EncodeGpuPlan(*plan);
  if (!encoded.ok()) {
    bad.error = std::string(encoded.status().message());
    return bad;
  }
  return MeasureInSandbox(*encoded, args, n_out, reference, options, output);
}

SandboxOutcome RunForOutput(const Kernel& kernel, const std::vector<std::vector<float>>& inputs,
                            SandboxOptions options, std::vector<float>* output) {
  options.repeats = 1;
  options.min_repeat_ms = 0;
  options.warmup_ms = 0;
  return Measure(kernel, inputs, {}, options, output);
}

}  // namespace tunefarm::runner
