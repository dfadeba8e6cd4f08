#include "device_agent/measure_handler.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "device_agent/runtime/measure.h"
#include "proto/kernel_signature.h"

namespace tunefarm::agent {

namespace v1 = ::tunefarm::v1;

namespace {

v1::MeasureStatus ToProto(runtime::SandboxOutcome::Status s) {
  switch (s) {
    case runtime::SandboxOutcome::Status::kOk:
      return v1::MEASURE_STATUS_OK;
    case runtime::SandboxOutcome::Status::kWrongResult:
      return v1::MEASURE_STATUS_WRONG_RESULT;
    case runtime::SandboxOutcome::Status::kRuntimeError:
      return v1::MEASURE_STATUS_RUNTIME_ERROR;
    case runtime::SandboxOutcome::Status::kTimeout:
      return v1::MEASURE_STATUS_TIMEOUT;
    case runtime::SandboxOutcome::Status::kLoadError:
      return v1::MEASURE_STATUS_UPLOAD_ERROR;
    case runtime::SandboxOutcome::Status::kSandboxViolation:
      return v1::MEASURE_STATUS_SANDBOX_VIOLATION;
  }
  return v1::MEASURE_STATUS_RUNTIME_ERROR;
}

}  // namespace

void MeasureHandler::NoteConfinement(const runtime::SandboxOutcome& o) {
  // Only a runner that got as far as its kernel's output says how it was
  // confined.
  if (o.status != runtime::SandboxOutcome::Status::kOk &&
      o.status != runtime::SandboxOutcome::Status::kWrongResult) {
    return;
  }
  auto yes = [](bool b) { return b ? "yes" : "no"; };
  std::string line = absl::StrCat("event=sandbox namespaces=", yes(o.namespaces),
                                  " pid_namespace=", yes(o.pid_namespace),
                                  " filter=", yes(o.filtered));
  if (line == confinement_logged_) return;
  confinement_logged_ = line;
  static const auto log = Logger("agent");
  std::vector<std::string> missing;
  if (!o.namespaces) missing.push_back("no own root: kernels can read what this user can");
  if (!o.pid_namespace) {
    missing.push_back(o.filtered
                          ? "no PID namespace: only the seccomp filter keeps kernels from naming "
                            "other processes"
                          : "no PID namespace");
  }
  if (!o.filtered) missing.push_back("no seccomp filter");
  if (missing.empty()) {
    log->info("{}", line);
  } else {
    log->warn("{} ({})", line, absl::StrJoin(missing, "; "));
  }
}

v1::MeasureResult MeasureHandler::Measure(const v1::MeasureRequest& req,
                                          const std::function<bool()>& cancelled) {
  v1::MeasureResult out;
  *out.mutable_fingerprint() = options_.fingerprint;
  auto fail = [&](v1::MeasureStatus status, const std::string& msg) {
    out.set_status(status);
    out.set_error(msg);
    return out;
  };
  if (req.artifact().empty()) {
    return fail(v1::MEASURE_STATUS_UPLOAD_ERROR, "the measurement carries no artifact");
  }
  const bool cuda = req.kind() == v1::ARTIFACT_KIND_CUBIN || req.kind() == v1::ARTIFACT_KIND_PTX;
  if (!cuda && req.kind() != v1::ARTIFACT_KIND_SHARED_OBJECT) {
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, "unknown artifact kind");
  }
  if (cuda && !options_.gpu) {
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                "this agent has no GPU: it cannot run a CUDA build (cubin/PTX)");
  }
  // Checked first (the inputs are made in the runner, but a reference output
  // is held here): a huge workload is a result, not an allocation failure of
  // the agent.
  if (absl::Status s = CheckSignature(req.signature(),
                                      runtime::MaxKernelElements(options_.memory_limit_bytes));
      !s.ok()) {
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, absl::StrCat("signature: ", s.message()));
  }
  const v1::KernelArgument& out_arg = req.signature().args(req.signature().args_size() - 1);
  const int64_t n_out = KernelElements(out_arg);

  runtime::SandboxOptions so;
  so.threads =
      req.threads() > 0 ? req.threads() : std::max(1, int(std::thread::hardware_concurrency()));
  if (req.options().repeat() > 0) so.repeats = req.options().repeat();
  if (req.options().min_repeat_ms() > 0) so.min_repeat_ms = req.options().min_repeat_ms();
  if (req.options().number() > 0) so.number = req.options().number();
  so.flush_cache = req.options().flush_cache();
  so.time_limit_s = req.options().timeout_ms() > 0 ? req.options().timeout_ms() * 1e-3
                                                   : options_.default_timeout_s;
  so.memory_limit_bytes = options_.memory_limit_bytes;
  so.cancelled = cancelled;
  so.filter_optional = options_.filter_optional;
  so.runner_path = options_.runner_path;
  so.runner_wrapper = options_.runner_wrapper;

  std::lock_guard<std::mutex> lock(mu_);
  const std::string& key = req.reference_key();
  const std::vector<float>* reference = nullptr;
  std::vector<float> made;
  if (auto it = references_.find(key); !key.empty() && it != references_.end()) {
    reference = &it->second;
  } else {
    if (!req.reference_output().empty()) {
      if (int64_t(req.reference_output().size()) != n_out * 4) {
        return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                    absl::StrCat("the reference output has ", req.reference_output().size(),
                                 " bytes, the kernel writes ", n_out * 4));
      }
      made.resize(size_t(n_out));
      std::memcpy(made.data(), req.reference_output().data(), made.size() * 4);
    } else if (!req.reference_artifact().empty()) {
      runtime::Kernel k{req.kind(), req.reference_artifact(), req.reference_signature()};
      runtime::SandboxOutcome o = runtime::RunForOutputFromSeed(k, req.input_seed(), so, &made);
      if (o.status != runtime::SandboxOutcome::Status::kOk) {
        return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                    absl::StrCat("the reference (default schedule) failed: ", o.error));
      }
    } else {
      return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                  "no reference: the request carries neither a reference output nor a "
                  "reference build");
    }
    reference = &made;
    if (!key.empty()) {
      if (references_.size() >= options_.max_cached_references) {
        references_.erase(reference_order_.front());
        reference_order_.erase(reference_order_.begin());
      }
      reference_order_.push_back(key);
      reference = &(references_[key] = std::move(made));
    }
  }
  runtime::Kernel k{req.kind(), req.artifact(), req.signature()};
  runtime::SandboxOutcome o = runtime::MeasureFromSeed(k, req.input_seed(), *reference, so);
  NoteConfinement(o);
  out.set_status(ToProto(o.status));
  out.set_error(o.error);
  for (double c : o.costs) out.add_costs_sec(c);
  out.set_run_sec(o.run_s);
  return out;
}

}  // namespace tunefarm::agent
