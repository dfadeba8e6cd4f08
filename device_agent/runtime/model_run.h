// The runtime's Measure for whole models (measure.h is the kernels'): a
// package from a ModelRunRequest runs in a child process
// (tunefarm-model-runner, through child_exec.h), confined as the kernel
// runner is (confine.h), so a kernel that crashes or hangs inside the model
// becomes a RUNTIME_ERROR or TIMEOUT result and the caller carries on. A
// refused system call is a SANDBOX_VIOLATION read from how the runner died
// (SIGSYS), never from what it wrote. One package is timed run by run; a
// paired request times two builds against each other and first checks
// that their outputs agree (WRONG_RESULT where they do not). An agent's
// model runs, `tunefarm run`, the whole-model build's A/B timings and the
// models bench all measure through here.
//
// Wire (both ends come from the same build): the request file holds a
// ModelRunWireHeader, then the serialized ModelRunRequest; the child writes
// a serialized ModelRunResult to fd 4.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/protocol.h"
#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::runtime {

namespace v1 = ::tunefarm::v1;

struct ModelRunWireHeader {
  uint32_t magic;  // kModelRunMagic
  uint32_t filter_optional;    // ConfineOptions::filter_optional
  int64_t memory_limit_bytes;  // address space the child may add after start-up; 0: none
  int64_t request_bytes;
  double cpu_limit_s;  // RLIMIT_CPU of the confined runner; 0: none
};
constexpr uint32_t kModelRunMagic = 0x324d4654;  // "TFM2"
constexpr double kDefaultModelTimeLimitS = 300;
constexpr int kDefaultModelRepeats = 10;

struct ModelRunOptions {
  int64_t memory_limit_bytes = 0;
  std::string runner_path;  // empty: ModelRunnerPath()
  std::vector<std::string> runner_wrapper;  // SandboxOptions::runner_wrapper
  bool filter_optional = false;  // SandboxOptions::filter_optional
  // Asked every 100 ms while the model runs; true kills it.
  std::function<bool()> cancelled;
};

// Runs the request's package (and paired package) in a confined child
// process; never throws, never returns without a status set.
v1::ModelRunResult MeasureModel(const v1::ModelRunRequest& request,
                                const ModelRunOptions& options = {});

// `inputs` (name -> row-major float32) as the request's given inputs,
// shaped as `package`'s values say.
void SetModelInputs(const v1::ModelPackage& package,
                    const std::map<std::string, std::vector<float>>& inputs,
                    v1::ModelRunRequest* request);

// The outputs a result carries (return_outputs), by name.
std::map<std::string, std::vector<float>> ModelRunOutputs(const v1::ModelRunResult& result);

// The outputs of one untimed run of `package` at `threads` on `inputs`
// (the package's other inputs seeded), measured as MeasureModel measures:
// what a check against a reference reads.
absl::StatusOr<std::map<std::string, std::vector<float>>> RunModelOnce(
    const v1::ModelPackage& package, const std::map<std::string, std::vector<float>>& inputs,
    int threads = 1);

// OK where `result` is, else an error whose message names the status
// ("wrong result: the two builds disagree ...").
absl::Status ModelRunStatus(const v1::ModelRunResult& result);

// tunefarm-model-runner: $TUNEFARM_MODEL_RUNNER, beside this executable, or
// in the build tree; empty when none is found.
const std::string& ModelRunnerPath();

}  // namespace tunefarm::runtime
