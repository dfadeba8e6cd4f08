// Whole-model runs on an agent: a package from a ModelRunRequest runs in a
// child process (tunefarm-model-runner, through child_exec.h), confined as
// the kernel runner is (confine.h), so a kernel that crashes or hangs
// inside the model becomes a RUNTIME_ERROR or TIMEOUT result and the agent
// carries on. A refused system call is a SANDBOX_VIOLATION read from how
// the runner died (SIGSYS), never from what it wrote.
//
// Wire (both ends come from the same build): the request file holds a
// ModelRunWireHeader, then the serialized ModelRunRequest; the child writes
// a serialized ModelRunResult to fd 4.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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

// Runs the request's package in a child process; never throws, never
// returns without a status set.
v1::ModelRunResult RunModelInChild(const v1::ModelRunRequest& request,
                                   const ModelRunOptions& options);

// tunefarm-model-runner: $TUNEFARM_MODEL_RUNNER, beside this executable, or
// in the build tree; empty when none is found.
const std::string& ModelRunnerPath();

}  // namespace tunefarm::runtime
