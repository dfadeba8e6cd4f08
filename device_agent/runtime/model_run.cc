#include "device_agent/runtime/model_run.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_format.h"
#include "common/subprocess.h"
#include "device_agent/runtime/child_exec.h"
#include "device_agent/runtime/sandbox_wire.h"

namespace tunefarm::runtime {

const std::string& ModelRunnerPath() {
#ifdef TF_MODEL_RUNNER_BUILD_PATH
  static const std::string path = FindHelper("TUNEFARM_MODEL_RUNNER", "tunefarm-model-runner",
                                             TF_MODEL_RUNNER_BUILD_PATH);
#else
  static const std::string path =
      FindHelper("TUNEFARM_MODEL_RUNNER", "tunefarm-model-runner", nullptr);
#endif
  return path;
}

v1::ModelRunResult MeasureModel(const v1::ModelRunRequest& request,
                                const ModelRunOptions& options) {
  const double start = MonotonicSeconds();
  v1::ModelRunResult result;
  result.set_status(v1::MEASURE_STATUS_RUNTIME_ERROR);
  auto finish = [&](v1::MeasureStatus status, const std::string& error) {
    result.set_status(status);
    result.set_error(error);
    result.set_run_sec(MonotonicSeconds() - start);
    return result;
  };
  const std::string runner = options.runner_path.empty() ? ModelRunnerPath() : options.runner_path;
  if (!Executable(runner)) {
    return finish(v1::MEASURE_STATUS_RUNTIME_ERROR,
                  "tunefarm-model-runner not found (install it beside tunefarm-agent or set "
                  "TUNEFARM_MODEL_RUNNER)");
  }
  const double limit =
      request.time_limit_s() > 0 ? request.time_limit_s() : kDefaultModelTimeLimitS;
  const std::string body = request.SerializeAsString();
  ModelRunWireHeader h{};
  h.magic = kModelRunMagic;
  h.memory_limit_bytes = options.memory_limit_bytes;
  h.filter_optional = options.filter_optional;
  h.request_bytes = int64_t(body.size());
  h.cpu_limit_s =
      limit * std::max(1, request.threads() > 0 ? request.threads()
                                                : int(std::thread::hardware_concurrency())) +
      1;
  int fd = NewRequestFile("tunefarm-model");
  if (fd < 0 || !wire::WriteAll(fd, &h, sizeof(h)) ||
      !wire::WriteAll(fd, body.data(), body.size())) {
    if (fd >= 0) close(fd);
    return finish(v1::MEASURE_STATUS_RUNTIME_ERROR,
                  "cannot set up the model process (request file failed)");
  }
  // The report carries the outputs when asked for: allow the package's size
  // plus room, which is more than any output set of that package.
  const size_t max_report = (size_t(64) << 20) + request.package().size() +
                            request.paired_package().size();
  const std::vector<std::string> command = HelperCommand(options.runner_wrapper, runner);
  ChildExchange x = ExchangeWithChild(command, fd, start + limit, max_report, options.cancelled);
  if (!x.started) return finish(v1::MEASURE_STATUS_RUNTIME_ERROR, x.error);
  if (x.cancelled) {
    return finish(v1::MEASURE_STATUS_RUNTIME_ERROR,
                  "cancelled: the server took the run back (the request was abandoned)");
  }
  if (x.timed_out) {
    return finish(v1::MEASURE_STATUS_TIMEOUT,
                  absl::StrFormat("the model did not finish within %.0f s (load, warm-up and "
                                  "%d runs)",
                                  limit,
                                  request.repeats() > 0 ? request.repeats()
                                                        : kDefaultModelRepeats));
  }
  // How it ended first: a refused system call kills the runner (SIGSYS),
  // whatever it wrote before.
  const int w = x.wait_status;
  if (WIFSIGNALED(w) && WTERMSIG(w) == SIGSYS) {
    return finish(v1::MEASURE_STATUS_SANDBOX_VIOLATION,
                  "the package's code made a system call the sandbox does not allow (killed by "
                  "SIGSYS)");
  }
  v1::ModelRunResult reported;
  if (!WIFEXITED(w) || x.report.empty() || !reported.ParseFromString(x.report) ||
      reported.status() == v1::MEASURE_STATUS_UNSPECIFIED) {
    return finish(v1::MEASURE_STATUS_RUNTIME_ERROR,
                  x.exec_errno != 0
                      ? DescribeExecFailure(command, x.exec_errno)
                      : absl::StrCat("model process ", DescribeWaitStatus(w),
                                     WIFEXITED(w) ? " with no report" : ""));
  }
  reported.set_run_sec(MonotonicSeconds() - start);
  return reported;
}

void SetModelInputs(const v1::ModelPackage& package,
                    const std::map<std::string, std::vector<float>>& inputs,
                    v1::ModelRunRequest* request) {
  for (const auto& [name, values] : inputs) {
    v1::PackageTensor* t = request->add_inputs();
    t->set_name(name);
    for (const v1::PackageValue& v : package.values()) {
      if (v.name() == name) t->mutable_shape()->CopyFrom(v.shape());
    }
    t->set_f32(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  }
}

std::map<std::string, std::vector<float>> ModelRunOutputs(const v1::ModelRunResult& result) {
  std::map<std::string, std::vector<float>> out;
  for (const v1::PackageTensor& t : result.outputs()) {
    std::vector<float>& v = out[t.name()];
    v.resize(t.f32().size() / 4);
    std::memcpy(v.data(), t.f32().data(), v.size() * 4);
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::vector<float>>> RunModelOnce(
    const v1::ModelPackage& package, const std::map<std::string, std::vector<float>>& inputs,
    int threads) {
  v1::ModelRunRequest req;
  req.set_package(package.SerializeAsString());
  req.set_threads(threads);
  req.set_first_run_only(true);
  req.set_return_outputs(true);
  SetModelInputs(package, inputs, &req);
  const v1::ModelRunResult r = MeasureModel(req);
  if (absl::Status s = ModelRunStatus(r); !s.ok()) return s;
  return ModelRunOutputs(r);
}

absl::Status ModelRunStatus(const v1::ModelRunResult& result) {
  if (result.status() == v1::MEASURE_STATUS_OK) return absl::OkStatus();
  std::string kind = v1::MeasureStatus_Name(result.status());
  if (absl::StartsWith(kind, "MEASURE_STATUS_")) kind = kind.substr(15);
  absl::AsciiStrToLower(&kind);
  absl::StrReplaceAll({{"_", " "}}, &kind);
  const std::string message = absl::StrCat(kind, ": ", result.error());
  switch (result.status()) {
    case v1::MEASURE_STATUS_TIMEOUT: return absl::DeadlineExceededError(message);
    case v1::MEASURE_STATUS_UPLOAD_ERROR: return absl::InvalidArgumentError(message);
    case v1::MEASURE_STATUS_WRONG_RESULT: return absl::DataLossError(message);
    default: return absl::InternalError(message);
  }
}

}  // namespace tunefarm::runtime
