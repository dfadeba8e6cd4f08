#include "tests/compiler/kernel_check.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/codegen/build.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/reference.h"
#include "compiler/schedule/schedule.h"
#include "device_agent/runtime/runner.h"
#include "proto/kernel_signature.h"

namespace tunefarm::testing {

namespace {

struct Built {
  std::vector<float> out;
  double compile_ms = 0;
  int steps = 0;
};

absl::StatusOr<Built> BuildAndRun(const ir::ComputeDAG& dag, const schedule::Trace* schedule,
                                  const ir::Target& target,
                                  const std::vector<std::vector<float>>& inputs,
                                  const KernelRunFn& run) {
  schedule::Trace sched = schedule ? *schedule : schedule::DefaultSchedule(dag, target);
  TF_ASSIGN_OR_RETURN(codegen::Artifact art, codegen::Build(dag, target, sched));
  int64_t n_out = dag.NumElements(dag.output);
  // Weights the schedule repacked (layout_pack) are packed once, as a
  // deployment would; the reference reads the original layout.
  std::vector<std::vector<float>> kernel_inputs;
  for (size_t i = 0; i < inputs.size(); ++i)
    kernel_inputs.push_back(PackArgument(art.signature.args(int(i)), inputs[i]));
  Built b;
  TF_ASSIGN_OR_RETURN(b.out, run(art.bytes, kernel_inputs, n_out));
  if (int64_t(b.out.size()) != n_out) {
    return absl::InternalError(
        absl::StrCat("kernel gave ", b.out.size(), " outputs, expected ", n_out));
  }
  b.compile_ms = art.seconds * 1e3;
  b.steps = int(sched.steps.size());
  return b;
}

KernelRunFn InProcess(int threads) {
  return [threads](const std::string& so, const std::vector<std::vector<float>>& inputs,
                   int64_t n_out) -> absl::StatusOr<std::vector<float>> {
    TF_ASSIGN_OR_RETURN(auto lib, runtime::KernelLibrary::Load(so));
    std::vector<std::unique_ptr<runtime::AlignedBuffer>> buffers;
    std::vector<void*> ptrs;
    for (const std::vector<float>& in : inputs) {
      auto buf = std::make_unique<runtime::AlignedBuffer>(int64_t(in.size()));
      std::copy(in.begin(), in.end(), buf->data());
      ptrs.push_back(buf->data());
      buffers.push_back(std::move(buf));
    }
    runtime::AlignedBuffer out(n_out);
    std::fill(out.data(), out.data() + n_out, std::nanf(""));  // every output must be written
    ptrs.push_back(out.data());
    runtime::ThreadPool pool(threads);
    int32_t rc = lib->Run(ptrs.data(), pool);
    if (rc != 0) return absl::InternalError(absl::StrCat("kernel returned ", rc));
    return std::vector<float>(out.data(), out.data() + n_out);
  };
}

}  // namespace

absl::StatusOr<std::vector<float>> RunKernel(const v1::Workload& workload,
                                             const schedule::Trace* schedule, const ir::Target& target,
                                             const std::vector<std::vector<float>>& inputs,
                                             int threads) {
  TF_ASSIGN_OR_RETURN(ir::ComputeDAG dag, ir::BuildComputeDAG(workload));
  if (inputs.size() + 1 != dag.args.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(inputs.size(), " inputs for a kernel of ", dag.args.size() - 1));
  }
  TF_ASSIGN_OR_RETURN(Built b, BuildAndRun(dag, schedule, target, inputs, InProcess(threads)));
  return std::move(b.out);
}

absl::StatusOr<KernelCheck> CheckKernelWith(const v1::Workload& workload, const schedule::Trace* schedule,
                                            const ir::Target& target, uint64_t seed,
                                            double tolerance, const KernelRunFn& run) {
  TF_ASSIGN_OR_RETURN(ir::ComputeDAG dag, ir::BuildComputeDAG(workload));
  std::vector<std::vector<float>> inputs = ir::RandomInputs(dag, seed);
  TF_ASSIGN_OR_RETURN(Built built, BuildAndRun(dag, schedule, target, inputs, run));
  const std::vector<float>& out = built.out;
  const int64_t n_out = int64_t(out.size());
  TF_ASSIGN_OR_RETURN(std::vector<double> ref, ir::EvaluateReference(dag, inputs));

  KernelCheck check;
  check.outputs = n_out;
  check.compile_ms = built.compile_ms;
  for (int64_t i = 0; i < n_out; ++i) {
    double o = out[i], r = ref[i];
    double abs_err = std::fabs(o - r);
    double rel = abs_err / std::max(1.0, std::fabs(r));
    if (!(rel <= tolerance)) {  // also catches NaN
      return absl::InternalError(absl::StrCat("output ", i, " is ", o, ", reference ", r,
                                              " (schedule of ", built.steps, " steps)"));
    }
    check.max_abs_error = std::max(check.max_abs_error, abs_err);
    check.max_rel_error = std::max(check.max_rel_error, rel);
  }
  return check;
}

absl::StatusOr<KernelCheck> CheckKernel(const v1::Workload& workload, const schedule::Trace* schedule,
                                        const ir::Target& target, uint64_t seed, double tolerance,
                                        int threads) {
  return CheckKernelWith(workload, schedule, target, seed, tolerance, InProcess(threads));
}

}  // namespace tunefarm::testing
