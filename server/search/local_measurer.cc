#include "server/search/local_measurer.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/schedule.h"
#include "device_agent/runner.h"

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

// What the child writes back.
struct ChildReport {
  int32_t status;  // Status
  int32_t rc;
  double seconds;
  double worst_error;
  int64_t bad_index;
};

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
  int64_t n_out = task.dag.NumElements(task.dag.output);
  if (task.flops <= kMaxInterpretedFlops) {
    TF_ASSIGN_OR_RETURN(std::vector<double> ref, ir::EvaluateReference(task.dag, data->inputs));
    data->reference.assign(ref.begin(), ref.end());
    data->reference_source = "float64 interpreter";
  } else {
    Built def = Compile(task, ir::DefaultSchedule(task.dag, task.target));
    if (!def.artifact.ok()) return def.artifact.status();
    // The child writes the output into a shared mapping; no reference yet.
    void* shared = mmap(nullptr, n_out * sizeof(float), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return absl::InternalError("mmap failed");
    TaskData probe;  // no reference: nothing to compare against yet
    probe.inputs = data->inputs;
    MeasureResult r =
        RunChild(task, probe, def.artifact->shared_object, def.dag, static_cast<float*>(shared));
    if (r.status == Status::kOk) {
      data->reference.assign(static_cast<float*>(shared), static_cast<float*>(shared) + n_out);
    }
    munmap(shared, n_out * sizeof(float));
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
                                      const ir::ComputeDAG& scheduled, float* shared_out) const {
  MeasureResult result;
  // Once something ran, a candidate far slower than the best is cut short:
  // it will not win, and a search must not spend its minutes on it.
  double limit = options_.timeout_s;
  if (data.best_seconds > 0)
    limit = std::min(limit, 0.25 + options_.slow_factor * data.best_seconds);
  int fds[2];
  if (pipe(fds) != 0) {
    result.status = Status::kRuntimeError;
    result.error = "pipe failed";
    return result;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    ChildReport rep{int32_t(Status::kRuntimeError), 0, 0, 0, -1};
    auto lib = runner::KernelLibrary::Load(so);
    if (lib.ok()) {
      std::vector<std::unique_ptr<runner::AlignedBuffer>> bufs;
      std::vector<void*> ptrs;
      std::vector<const std::vector<float>*> args;
      for (const std::vector<float>& in : data.inputs) args.push_back(&in);
      auto packed = ir::PackedArguments(scheduled, data.inputs);
      for (const auto& [i, p] : packed) args[i] = &p;
      for (const std::vector<float>* src : args) {
        auto b = std::make_unique<runner::AlignedBuffer>(int64_t(src->size()));
        std::copy(src->begin(), src->end(), b->data());
        ptrs.push_back(b->data());
        bufs.push_back(std::move(b));
      }
      int64_t n_out = task.dag.NumElements(task.dag.output);
      runner::AlignedBuffer out(n_out);
      std::fill(out.data(), out.data() + n_out, std::nanf(""));
      ptrs.push_back(out.data());
      runner::ThreadPool pool(options_.threads);
      rep.rc = (*lib)->Run(ptrs.data(), pool);
      rep.status = int32_t(rep.rc == 0 ? Status::kOk : Status::kRuntimeError);
      if (rep.rc == 0 && !data.reference.empty()) {
        for (int64_t i = 0; i < n_out; ++i) {
          double e = std::fabs(double(out.data()[i]) - data.reference[i]) /
                     std::max(1.0, std::fabs(double(data.reference[i])));
          if (!(e <= options_.tolerance)) {  // NaN too
            rep.status = int32_t(Status::kWrongResult);
            rep.worst_error = std::isnan(e) ? INFINITY : e;
            rep.bad_index = i;
            break;
          }
          rep.worst_error = std::max(rep.worst_error, e);
        }
      }
      if (rep.status == int32_t(Status::kOk)) {
        double t0 = Now();
        (*lib)->Run(ptrs.data(), pool);
        double once = std::max(1e-7, Now() - t0);
        int64_t inner =
            std::max<int64_t>(1, int64_t(options_.min_repeat_ms * 1e-3 / options_.repeats / once));
        // A slow candidate is timed fewer times: it will not be the best, and
        // a search must not spend its minutes on it.
        int repeats = std::max(1, std::min(options_.repeats, int(options_.max_timing_s / once)));
        std::vector<double> times;
        for (int r = 0; r < repeats; ++r) {
          double s = Now();
          for (int64_t k = 0; k < inner; ++k) (*lib)->Run(ptrs.data(), pool);
          times.push_back((Now() - s) / double(inner));
        }
        std::sort(times.begin(), times.end());
        rep.seconds = times[times.size() / 2];
      }
      if (shared_out != nullptr && rep.rc == 0)
        std::copy(out.data(), out.data() + n_out, shared_out);
    }
    ssize_t unused = write(fds[1], &rep, sizeof(rep));
    (void)unused;
    _exit(0);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    result.status = Status::kRuntimeError;
    result.error = "fork failed";
    return result;
  }
  ChildReport rep{};
  size_t got = 0;
  double deadline = Now() + limit;
  bool timed_out = false;
  while (got < sizeof(rep)) {
    double left = deadline - Now();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, int(std::ceil(left * 1000))) <= 0) continue;
    ssize_t n = read(fds[0], reinterpret_cast<char*>(&rep) + got, sizeof(rep) - got);
    if (n <= 0) break;
    got += size_t(n);
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (timed_out) {
    result.status = Status::kTimeout;
    result.error =
        limit < options_.timeout_s
            ? absl::StrFormat("stopped after %.2f s: far slower than the best so far", limit)
            : absl::StrCat("no result within ", options_.timeout_s, " s");
  } else if (got < sizeof(rep)) {
    result.status = Status::kRuntimeError;
    result.error = absl::StrCat("kernel process ", DescribeWaitStatus(wstatus));
  } else {
    result.status = Status(rep.status);
    result.seconds = rep.seconds;
    if (result.status == Status::kWrongResult) {
      result.error =
          absl::StrCat("output ", rep.bad_index, " off by ", rep.worst_error, " (relative)");
    } else if (result.status == Status::kRuntimeError) {
      result.error = absl::StrCat("kernel returned ", rep.rc);
    }
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
