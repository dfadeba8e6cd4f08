#include "server/search/local_measurer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/schedule.h"
#include "device_agent/runtime/sandbox.h"

namespace tunefarm::search {

namespace v1 = ::tunefarm::v1;
using Status = MeasureResult::Status;

struct LocalMeasurer::TaskData {
  double best_seconds = 0;                 // fastest ok result so far (0: none)
  std::vector<std::vector<float>> inputs;  // original layouts
  std::vector<float> reference;
  std::string reference_source;  // "float64 interpreter" or "default schedule"
};

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Built {
  absl::StatusOr<codegen::CpuArtifact> artifact = absl::UnknownError("not built");
  ir::ComputeDAG dag;  // the scheduled DAG (packed weights)
  double ms = 0;
};

Built Compile(const Task& task, const v1::Schedule& schedule) {
  Built b;
  double t0 = Now();
  absl::StatusOr<ir::ScheduleState> st = ir::ScheduleState::Replay(task.dag, schedule, task.target);
  if (!st.ok()) {
    b.artifact = st.status();
  } else {
    b.dag = st->dag();
    b.artifact = codegen::CompileCpu(st->dag(), ir::Lower(*st), task.target);
  }
  b.ms = (Now() - t0) * 1e3;
  return b;
}

}  // namespace

LocalMeasurer::LocalMeasurer(LocalMeasureOptions options) : options_(options) {}
LocalMeasurer::~LocalMeasurer() = default;

absl::StatusOr<LocalMeasurer::TaskData*> LocalMeasurer::Prepare(const Task& task) {
  const std::string cache_key = task.key + "|" + task.target.ToString();
  auto it = tasks_.find(cache_key);
  if (it != tasks_.end()) return it->second.get();
  auto data = std::make_unique<TaskData>();
  data->inputs = ir::RandomInputs(task.dag, std::hash<std::string>()(task.key));
  if (task.flops <= kMaxInterpretedFlops) {
    TF_ASSIGN_OR_RETURN(std::vector<double> ref, ir::EvaluateReference(task.dag, data->inputs));
    data->reference.assign(ref.begin(), ref.end());
    data->reference_source = "float64 interpreter";
  } else {
    Built def = Compile(task, ir::DefaultSchedule(task.dag, task.target));
    if (!def.artifact.ok()) return def.artifact.status();
    TaskData probe;  // no reference: nothing to compare against yet
    probe.inputs = data->inputs;
    MeasureResult r = RunChild(task, probe, def.artifact->shared_object, def.dag, &data->reference);
    if (r.status != Status::kOk) {
      return absl::InternalError(absl::StrCat("the default schedule failed: ", r.error));
    }
    data->reference_source = "default schedule";
  }
  TaskData* out = data.get();
  tasks_[cache_key] = std::move(data);
  return out;
}

MeasureResult LocalMeasurer::RunChild(const Task& task, const TaskData& data, const std::string& so,
                                      const ir::ComputeDAG& scheduled,
                                      std::vector<float>* output) const {
  // Once something ran, a candidate far slower than the best is cut short:
  // it will not win, and a search must not spend its minutes on it.
  runner::SandboxOptions so_opts;
  so_opts.threads = options_.threads;
  so_opts.min_repeat_ms = options_.min_repeat_ms;
  so_opts.warmup_ms = options_.warmup_ms;
  so_opts.repeats = options_.repeats;
  so_opts.max_timing_s = options_.max_timing_s;
  so_opts.tolerance = options_.tolerance;
  so_opts.time_limit_s = options_.timeout_s;
  const double short_limit_s = 0.25 + (options_.warmup_ms + options_.min_repeat_ms) * 1e-3 +
                               options_.slow_factor * data.best_seconds;
  const bool cut_short = data.best_seconds > 0 && short_limit_s < options_.timeout_s;
  if (cut_short) so_opts.time_limit_s = short_limit_s;
  std::vector<const std::vector<float>*> args;
  for (const std::vector<float>& in : data.inputs) args.push_back(&in);
  auto packed = ir::PackedArguments(scheduled, data.inputs);
  for (const auto& [i, p] : packed) args[i] = &p;
  runner::SandboxOutcome o = runner::MeasureInSandbox(
      so, args, task.dag.NumElements(task.dag.output), data.reference, so_opts, output);
  MeasureResult result;
  result.seconds = o.seconds;
  result.error = o.error;
  switch (o.status) {
    case runner::SandboxOutcome::Status::kOk:
      result.status = Status::kOk;
      break;
    case runner::SandboxOutcome::Status::kWrongResult:
      result.status = Status::kWrongResult;
      break;
    case runner::SandboxOutcome::Status::kRuntimeError:
    case runner::SandboxOutcome::Status::kLoadError:
      result.status = Status::kRuntimeError;
      break;
    case runner::SandboxOutcome::Status::kTimeout:
      result.status = Status::kTimeout;
      if (cut_short) {
        result.error = absl::StrFormat("stopped after %.2f s: far slower than the best so far",
                                       so_opts.time_limit_s);
      }
      break;
  }
  return result;
}

std::vector<MeasureResult> LocalMeasurer::Measure(const Task& task,
                                                  const std::vector<v1::Schedule>& schedules) {
  std::vector<MeasureResult> results(schedules.size());
  absl::StatusOr<TaskData*> data = Prepare(task);
  if (!data.ok()) {
    for (MeasureResult& r : results) {
      r.status = Status::kBuildError;
      r.error = absl::StrCat("reference: ", data.status().message());
    }
    return results;
  }
  // Compile on a few threads, then run one at a time (timings alone).
  std::vector<Built> built(schedules.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < schedules.size(); i = next++)
      built[i] = Compile(task, schedules[i]);
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, options_.compile_threads); ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < schedules.size(); ++i) {
    if (!built[i].artifact.ok()) {
      results[i].status = Status::kBuildError;
      results[i].error = std::string(built[i].artifact.status().message());
    } else {
      results[i] = RunChild(task, **data, built[i].artifact->shared_object, built[i].dag);
      if (results[i].status == Status::kOk &&
          ((*data)->best_seconds == 0 || results[i].seconds < (*data)->best_seconds)) {
        (*data)->best_seconds = results[i].seconds;
      }
    }
    results[i].compile_ms = built[i].ms;
  }
  return results;
}

}  // namespace tunefarm::search
