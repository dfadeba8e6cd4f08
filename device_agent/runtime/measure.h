// The one measure path: a built kernel (its bytes and KernelSignature) and
// its inputs in, a checked timing out. Packs the inputs the way the
// signature says, runs the kernel in the sandbox (sandbox.h), compares its
// output with the reference and times it. CPU shared objects, and CUDA
// builds (a GpuModule) on a machine with a GPU. Links no compiler code: the
// agent, the local measurers, the benches and the tests all call this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device_agent/runtime/child_exec.h"
#include "device_agent/runtime/gpu_module.h"
#include "device_agent/runtime/gpu_plan.h"
#include "device_agent/runtime/sandbox.h"
#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::runtime {

// A built kernel as the runtime takes it (codegen::Artifact's wire fields).
struct Kernel {
  ::tunefarm::v1::ArtifactKind kind = ::tunefarm::v1::ARTIFACT_KIND_SHARED_OBJECT;
  std::string bytes;  // shared object, or a serialized GpuModule
  ::tunefarm::v1::KernelSignature signature;
};

// `inputs`: one buffer per kernel input, logical layouts (RandomInputs of
// proto/kernel_signature.h makes them). `reference`: the expected output
// (empty: no check). options.cuda is set from the kernel's kind. A kernel
// whose signature does not match the inputs, is too large for
// options.memory_limit_bytes, or whose GpuModule does not parse is a
// kRuntimeError outcome naming the problem.
SandboxOutcome Measure(const Kernel& kernel, const std::vector<std::vector<float>>& inputs,
                       const std::vector<float>& reference, SandboxOptions options,
                       std::vector<float>* output = nullptr);

// Measure with the inputs RandomInputs(signature, input_seed) made inside
// the confined runner (sandbox.h): what an agent runs, so a kernel's inputs
// never take the agent's own memory.
SandboxOutcome MeasureFromSeed(const Kernel& kernel, uint64_t input_seed,
                               const std::vector<float>& reference, SandboxOptions options,
                               std::vector<float>* output = nullptr);

// Runs `kernel` once on `inputs` for its output, untimed and unchecked (a
// reference build's output): Measure with one repeat and no warm-up.
SandboxOutcome RunForOutput(const Kernel& kernel, const std::vector<std::vector<float>>& inputs,
                            SandboxOptions options, std::vector<float>* output);
// The same with the inputs made in the runner (MeasureFromSeed).
SandboxOutcome RunForOutputFromSeed(const Kernel& kernel, uint64_t input_seed,
                                    SandboxOptions options, std::vector<float>* output);

}  // namespace tunefarm::runtime
