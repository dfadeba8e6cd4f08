#include "device_agent/runtime/measure.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "proto/kernel_signature.h"

namespace tunefarm::runtime {

namespace v1 = ::tunefarm::v1;

namespace {

// What the runner takes for `kernel`: its shared object, or its GpuModule as
// an encoded GpuPlan (options->cuda set); the output's size in n_out. A
// reference (when not empty) must have that size.
absl::StatusOr<std::string> RunnerBytes(const Kernel& kernel, const std::vector<float>& reference,
                                        SandboxOptions* options, int64_t* n_out) {
  const v1::KernelSignature& sig = kernel.signature;
  if (absl::Status s = CheckSignature(sig, MaxKernelElements(options->memory_limit_bytes));
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("signature: ", s.message()));
  }
  *n_out = KernelElements(sig.args(sig.args_size() - 1));
  if (!reference.empty() && int64_t(reference.size()) != *n_out) {
    return absl::InvalidArgumentError(
        absl::StrCat("the reference has ", reference.size(), " values, the output ", *n_out));
  }
  options->cuda = kernel.kind == v1::ARTIFACT_KIND_CUBIN || kernel.kind == v1::ARTIFACT_KIND_PTX;
  if (!options->cuda) {
    if (kernel.kind != v1::ARTIFACT_KIND_SHARED_OBJECT) {
      return absl::InvalidArgumentError("unknown artifact kind");
    }
    return kernel.bytes;
  }
  v1::GpuModule module;
  if (!module.ParseFromString(kernel.bytes)) {
    return absl::InvalidArgumentError("the artifact is not a GpuModule");
  }
  absl::StatusOr<GpuPlan> plan = PlanFromModule(module, sig);
  if (!plan.ok()) return plan.status();
  return EncodeGpuPlan(*plan);
}

SandboxOutcome Refused(const absl::Status& why) {
  SandboxOutcome bad;
  bad.status = SandboxOutcome::Status::kRuntimeError;
  bad.error = std::string(why.message());
  return bad;
}

SandboxOptions ForOutput(SandboxOptions options) {
  options.repeats = 1;
  options.min_repeat_ms = 0;
  options.warmup_ms = 0;
  return options;
}

}  // namespace

SandboxOutcome Measure(const Kernel& kernel, const std::vector<std::vector<float>>& inputs,
                       const std::vector<float>& reference, SandboxOptions options,
                       std::vector<float>* output) {
  int64_t n_out = 0;
  absl::StatusOr<std::string> bytes = RunnerBytes(kernel, reference, &options, &n_out);
  if (!bytes.ok()) return Refused(bytes.status());
  const v1::KernelSignature& sig = kernel.signature;
  if (inputs.size() + 1 != size_t(sig.args_size())) {
    return Refused(absl::InvalidArgumentError(
        absl::StrCat("the kernel takes ", sig.args_size() - 1, " inputs, given ", inputs.size())));
  }
  std::vector<std::vector<float>> packed(inputs.size());
  std::vector<const std::vector<float>*> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const v1::KernelArgument& a = sig.args(int(i));
    if (int64_t(inputs[i].size()) != LogicalElements(a)) {
      return Refused(absl::InvalidArgumentError(absl::StrCat("input ", i, " has ", inputs[i].size(),
                                                             " elements, the kernel reads ",
                                                             LogicalElements(a))));
    }
    if (a.pack_block_size() == 0) {
      args.push_back(&inputs[i]);
    } else {
      packed[i] = PackArgument(a, inputs[i]);
      args.push_back(&packed[i]);
    }
  }
  return MeasureInSandbox(*bytes, args, n_out, reference, options, output);
}

SandboxOutcome MeasureFromSeed(const Kernel& kernel, uint64_t input_seed,
                               const std::vector<float>& reference, SandboxOptions options,
                               std::vector<float>* output) {
  int64_t n_out = 0;
  absl::StatusOr<std::string> bytes = RunnerBytes(kernel, reference, &options, &n_out);
  if (!bytes.ok()) return Refused(bytes.status());
  return MeasureInSandboxFromSeed(*bytes, kernel.signature.SerializeAsString(), input_seed, n_out,
                                  reference, options, output);
}

SandboxOutcome RunForOutput(const Kernel& kernel, const std::vector<std::vector<float>>& inputs,
                            SandboxOptions options, std::vector<float>* output) {
  return Measure(kernel, inputs, {}, ForOutput(options), output);
}

SandboxOutcome RunForOutputFromSeed(const Kernel& kernel, uint64_t input_seed,
                                    SandboxOptions options, std::vector<float>* output) {
  return MeasureFromSeed(kernel, input_seed, {}, ForOutput(options), output);
}

}  // namespace tunefarm::runtime
