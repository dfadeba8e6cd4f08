#include "search/local_measurer.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "compiler/codegen/build.h"
#include "compiler/ir/reference.h"
#include "compiler/schedule/schedule.h"
#include "device_agent/runtime/measure.h"
#include "device_agent/runtime/sandbox_wire.h"

namespace tunefarm::search {

namespace v1 = ::tunefarm::v1;
using Status = MeasureResult::Status;

struct LocalMeasurer::TaskData {
  double best_seconds = 0;                 // fastest ok result so far (0: none)
  std::vector<std::vector<float>> inputs;  // logical layouts
  std::vector<float> reference;
};

namespace {

Status FromOutcome(runtime::SandboxOutcome::Status s) {
  switch (s) {
    case runtime::SandboxOutcome::Status::kOk:
      return Status::kOk;
    case runtime::SandboxOutcome::Status::kWrongResult:
      return Status::kWrongResult;
    case runtime::SandboxOutcome::Status::kTimeout:
      return Status::kTimeout;
    case runtime::SandboxOutcome::Status::kRuntimeError:
    case runtime::SandboxOutcome::Status::kLoadError:
    case runtime::SandboxOutcome::Status::kSandboxViolation:
      break;
  }
  return Status::kRuntimeError;
}

runtime::Kernel KernelOf(const codegen::Artifact& a) { return {a.kind, a.bytes, a.signature}; }

}  // namespace

LocalMeasurer::LocalMeasurer(LocalMeasureOptions options) : options_(options) {}
LocalMeasurer::~LocalMeasurer() = default;

absl::StatusOr<LocalMeasurer::TaskData*> LocalMeasurer::Prepare(const Task& task) {
  const std::string cache_key = task.key + "|" + task.target.ToString();
  auto it = tasks_.find(cache_key);
  if (it != tasks_.end()) return it->second.get();
  auto data = std::make_unique<TaskData>();
  data->inputs = ir::RandomInputs(task.dag, options_.input_seed);
  const bool interpret = options_.interpret_up_to_flops > 0
                             ? task.flops <= options_.interpret_up_to_flops
                             : ir::InterpretReference(task.dag, task.flops);
  if (interpret) {
    TF_ASSIGN_OR_RETURN(std::vector<double> ref, ir::EvaluateReference(task.dag, data->inputs));
    data->reference.assign(ref.begin(), ref.end());
  } else {
    absl::StatusOr<codegen::Artifact> def =
        codegen::Build(task.dag, task.target, schedule::DefaultSchedule(task.dag, task.target));
    if (!def.ok()) {
      return absl::InternalError(absl::StrCat("the default schedule: ", def.status().message()));
    }
    runtime::SandboxOptions so;
    so.threads = options_.threads;
    so.time_limit_s = options_.timeout_s;
    runtime::SandboxOutcome o =
        runtime::RunForOutput(KernelOf(*def), data->inputs, so, &data->reference);
    if (o.status != runtime::SandboxOutcome::Status::kOk) {
      return absl::InternalError(absl::StrCat("the default schedule failed: ", o.error));
    }
  }
  TaskData* out = data.get();
  tasks_[cache_key] = std::move(data);
  return out;
}

std::vector<MeasureResult> LocalMeasurer::Measure(const Task& task,
                                                  const std::vector<schedule::Trace>& schedules) {
  std::vector<MeasureResult> results(schedules.size());
  absl::StatusOr<TaskData*> prepared = Prepare(task);
  if (!prepared.ok()) {
    for (MeasureResult& r : results) {
      r.status = Status::kBuildError;
      r.error = absl::StrCat("reference: ", prepared.status().message());
    }
    return results;
  }
  TaskData& data = **prepared;
  // Build on a few threads, then run one at a time (timings alone).
  std::vector<absl::StatusOr<codegen::Artifact>> built(schedules.size(),
                                                       absl::UnknownError("not built"));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < schedules.size(); i = next++)
      built[i] = codegen::Build(task.dag, task.target, schedules[i]);
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, options_.compile_threads); ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();

  runtime::SandboxOptions so;
  so.threads = options_.threads;
  so.min_repeat_ms = options_.min_repeat_ms;
  so.warmup_ms = options_.warmup_ms;
  so.repeats = options_.repeats;
  so.max_timing_s = options_.max_timing_s;
  so.tolerance = options_.tolerance;
  so.flush_cache = options_.flush_cache;
  for (size_t i = 0; i < schedules.size(); ++i) {
    MeasureResult& r = results[i];
    if (!built[i].ok()) {
      r.status = Status::kBuildError;
      r.error = std::string(built[i].status().message());
      continue;
    }
    r.compile_ms = built[i]->seconds * 1e3;
    // Once something ran, a candidate far slower than the best is cut short:
    // it will not win, and a search must not spend its minutes on it.
    so.time_limit_s = options_.timeout_s;
    // A flushed run first fills its buffer, then writes over it before
    // each repeat (untimed): each allowed at a slow 256 MiB/s, as on a
    // loaded machine.
    const double flush_s =
        options_.flush_cache
            ? double(runtime::wire::CacheFlushBytes()) / (256.0 * (1 << 20)) * (options_.repeats + 1)
            : 0.0;
    const double short_limit_s = 0.25 + flush_s +
                                 (options_.warmup_ms + options_.min_repeat_ms) * 1e-3 +
                                 options_.slow_factor * data.best_seconds;
    const bool cut_short =
        options_.slow_factor > 0 && data.best_seconds > 0 && short_limit_s < options_.timeout_s;
    if (cut_short) so.time_limit_s = short_limit_s;
    runtime::SandboxOutcome o = runtime::Measure(KernelOf(*built[i]), data.inputs, data.reference, so);
    r.status = FromOutcome(o.status);
    r.seconds = o.seconds;
    r.error = o.error;
    if (o.status == runtime::SandboxOutcome::Status::kTimeout && cut_short) {
      r.error = absl::StrFormat("stopped after %.2f s: far slower than the best so far",
                                so.time_limit_s);
    }
    if (r.status == Status::kOk && (data.best_seconds == 0 || r.seconds < data.best_seconds)) {
      data.best_seconds = r.seconds;
    }
  }
  return results;
}

}  // namespace tunefarm::search
