#include "device_agent/measure_handler.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/schedule.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"
#include "device_agent/sandbox.h"

namespace tunefarm::agent {

namespace v1 = ::tunefarm::v1;

namespace {

v1::MeasureStatus ToProto(runner::SandboxOutcome::Status s) {
  switch (s) {
    case runner::SandboxOutcome::Status::kOk:
      return v1::MEASURE_STATUS_OK;
    case runner::SandboxOutcome::Status::kWrongResult:
      return v1::MEASURE_STATUS_WRONG_RESULT;
    case runner::SandboxOutcome::Status::kRuntimeError:
      return v1::MEASURE_STATUS_RUNTIME_ERROR;
    case runner::SandboxOutcome::Status::kTimeout:
      return v1::MEASURE_STATUS_TIMEOUT;
    case runner::SandboxOutcome::Status::kLoadError:
      return v1::MEASURE_STATUS_UPLOAD_ERROR;
  }
  return v1::MEASURE_STATUS_RUNTIME_ERROR;
}

// The kernel's input buffers for `schedule` (constants packed where it packs them).
absl::StatusOr<std::vector<std::vector<float>>> Arguments(
    const ir::ComputeDAG& dag, const v1::Schedule& schedule, const ir::Target& target,
    const std::vector<std::vector<float>>& in) {
  absl::StatusOr<ir::ScheduleState> st = ir::ScheduleState::Replay(dag, schedule, target);
  if (!st.ok()) return st.status();
  std::vector<std::vector<float>> args = in;
  for (auto& [i, packed] : ir::PackedArguments(st->dag(), in)) args[i] = std::move(packed);
  return args;
}

std::vector<const std::vector<float>*> Pointers(const std::vector<std::vector<float>>& v) {
  std::vector<const std::vector<float>*> out;
  for (const auto& x : v) out.push_back(&x);
  return out;
}

}  // namespace

v1::MeasureResult MeasureHandler::Measure(const v1::MeasureRequest& req) {
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
  if (req.kind() != v1::ARTIFACT_KIND_SHARED_OBJECT) {
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, "this agent runs CPU shared objects only");
  }
  absl::StatusOr<ir::Target> target = ir::Target::Parse(req.target().spec());
  if (!target.ok())
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(target.status().message()));
  absl::StatusOr<ir::CanonicalWorkload> cw = ir::Canonicalize(req.workload());
  if (!cw.ok()) return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(cw.status().message()));
  absl::StatusOr<ir::ComputeDAG> dag = ir::BuildComputeDAG(cw->workload);
  if (!dag.ok()) return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(dag.status().message()));
  const std::vector<std::vector<float>> inputs = ir::RandomInputs(*dag, req.input_seed());
  const int64_t n_out = dag->NumElements(dag->output);

  runner::SandboxOptions so;
  so.threads =
      req.threads() > 0 ? req.threads() : std::max(1, int(std::thread::hardware_concurrency()));
  if (req.options().repeat() > 0) so.repeats = req.options().repeat();
  if (req.options().min_repeat_ms() > 0) so.min_repeat_ms = req.options().min_repeat_ms();
  if (req.options().number() > 0) so.number = req.options().number();
  so.flush_cache = req.options().flush_cache();
  so.time_limit_s = req.options().timeout_ms() > 0 ? req.options().timeout_ms() * 1e-3
                                                   : options_.default_timeout_s;
  so.memory_limit_bytes = options_.memory_limit_bytes;

  std::lock_guard<std::mutex> lock(mu_);
  const std::string ref_key = absl::StrCat(cw->key, "|", req.input_seed());
  auto ref = references_.find(ref_key);
  if (ref == references_.end()) {
    std::vector<float> reference;
    if (cw->flops <= kMaxInterpretedFlops) {
      absl::StatusOr<std::vector<double>> r = ir::EvaluateReference(*dag, inputs);
      if (!r.ok()) return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(r.status().message()));
      reference.assign(r->begin(), r->end());
    } else if (!req.reference_artifact().empty()) {
      auto args = Arguments(*dag, req.reference_schedule(), *target, inputs);
      if (!args.ok()) {
        return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                    absl::StrCat("reference schedule: ", args.status().message()));
      }
      runner::SandboxOptions ro = so;
      ro.repeats = 1;
      ro.min_repeat_ms = 0;
      runner::SandboxOutcome o = runner::MeasureInSandbox(req.reference_artifact(), Pointers(*args),
                                                          n_out, {}, ro, &reference);
      if (o.status != runner::SandboxOutcome::Status::kOk) {
        return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                    absl::StrCat("the reference (default schedule) failed: ", o.error));
      }
    } else {
      return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                  "no reference: the workload is too big for the interpreter and the request "
                  "carries no reference artifact");
    }
    ref = references_.emplace(ref_key, std::move(reference)).first;
  }
  auto args = Arguments(*dag, req.schedule(), *target, inputs);
  if (!args.ok()) {
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                absl::StrCat("schedule: ", args.status().message()));
  }
  runner::SandboxOutcome o =
      runner::MeasureInSandbox(req.artifact(), Pointers(*args), n_out, ref->second, so);
  out.set_status(ToProto(o.status));
  out.set_error(o.error);
  for (double c : o.costs) out.add_costs_sec(c);
  out.set_run_sec(o.run_s);
  return out;
}

}  // namespace tunefarm::agent
