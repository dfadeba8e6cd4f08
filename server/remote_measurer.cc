#include "server/remote_measurer.h"

#include <algorithm>
#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "compiler/ir/reference.h"
#include "compiler/schedule/schedule.h"
#include "server/limits.h"

namespace tunefarm::server {

namespace {

using search::MeasureResult;
using Status = MeasureResult::Status;

v1::WorkLease BuildWork(const search::Task& task, const v1::Schedule& schedule, bool llvm_ptx) {
  v1::WorkLease w;
  v1::BuildRequest* b = w.mutable_build();
  *b->mutable_workload() = task.workload;
  b->mutable_target()->set_spec(task.target.ToString());
  *b->mutable_schedule() = schedule;
  const bool ptx = task.target.is_gpu() && llvm_ptx;
  b->set_kind(!task.target.is_gpu() ? v1::ARTIFACT_KIND_SHARED_OBJECT
              : ptx                 ? v1::ARTIFACT_KIND_PTX
                                    : v1::ARTIFACT_KIND_CUBIN);
  b->set_llvm_ptx(ptx);
  return w;
}

// Workers take CPU builds by LLVM triple and CUDA builds by arch.
std::string BuildQueueOf(const ir::Target& target) {
  return target.is_gpu() ? WorkQueue::CudaBuildQueue(target.arch())
                         : WorkQueue::BuildQueue(target.triple);
}

}  // namespace

void RemoteMeasurer::Wait(const search::Task& task, const int& pending,
                          std::unique_lock<std::mutex>& lock) {
  const std::string build_q = BuildQueueOf(task.target);
  const std::string measure_q = WorkQueue::MeasureQueue(options_.device_key);
  std::string said;
  while (pending > 0) {
    if (cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return pending == 0; })) break;
    lock.unlock();
    if (options_.stopped()) {
      // Outstanding work of the job is dropped; its callbacks mark it cancelled.
      queue_.CancelJob(options_.job_id);
      lock.lock();
      continue;
    }
    std::string why;
    if (!queue_.HasTaker(build_q)) {
      why = absl::StrCat("waiting for a compile worker that builds ",
                         task.target.is_gpu() ? task.target.arch() : task.target.triple);
    } else if (!queue_.HasTaker(measure_q)) {
      why = absl::StrCat("waiting for an agent with device key ", options_.device_key);
    }
    if (why != said) options_.on_wait(why);
    said = why;
    lock.lock();
  }
  if (!said.empty()) options_.on_wait("");
}

const RemoteMeasurer::Reference& RemoteMeasurer::InterpretedFor(const search::Task& task) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = references_.find(task.key);
  if (it != references_.end()) return it->second;
  lock.unlock();
  Reference ref;
  absl::StatusOr<std::vector<double>> out =
      ir::EvaluateReference(task.dag, ir::RandomInputs(task.dag, options_.input_seed));
  if (!out.ok()) {
    ref.error = std::string(out.status().message());
  } else {
    std::vector<float> f(out->begin(), out->end());
    ref.output.assign(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
  }
  lock.lock();
  return references_[task.key] = std::move(ref);
}

const RemoteMeasurer::Reference& RemoteMeasurer::ReferenceFor(const search::Task& task) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = references_.find(task.key);
  if (it != references_.end() && it->second.error.empty()) return it->second;
  Reference& ref = references_[task.key];
  ref = Reference();
  ref.schedule = schedule::ToProto(schedule::DefaultSchedule(task.dag, task.target));
  int pending = 1;
  WorkQueue::Item item;
  item.queue = BuildQueueOf(task.target);
  item.job_id = options_.job_id;
  item.priority = options_.priority + 1;  // everything of the task waits on it
  item.work = BuildWork(task, ref.schedule, options_.llvm_ptx);
  item.done = [this, &ref, &pending](absl::StatusOr<v1::ReportResultRequest> r) {
    std::lock_guard<std::mutex> l(mu_);
    if (!r.ok()) {
      ref.error = std::string(r.status().message());
    } else if (!r->has_build() || !r->build().error().empty()) {
      ref.error = r->has_build() ? r->build().error() : "the worker answered with no build";
    } else {
      ref.artifact = r->build().artifact();
      ref.signature = r->build().signature();
    }
    --pending;
    cv_.notify_all();
  };
  lock.unlock();
  queue_.Submit(std::move(item));
  lock.lock();
  Wait(task, pending, lock);
  if (ref.artifact.empty() && ref.error.empty()) ref.error = "cancelled";
  return ref;
}

bool RemoteMeasurer::NeedsConfirmationLocked(const search::Task& task, double mean_sec,
                                             Detail& detail) {
  if (!options_.known_best || !options_.on_confirmation) return false;
  const double best = options_.known_best(task);
  if (best > 0 && mean_sec >= best) return false;
  const bool other = queue_.HasOtherTaker(WorkQueue::MeasureQueue(options_.device_key),
                                          detail.device_id);
  detail.confirmation = other ? v1::CONFIRMATION_PENDING : v1::CONFIRMATION_SINGLE_DEVICE;
  return other;
}

void RemoteMeasurer::SubmitConfirmation(const search::Task& task, const v1::Schedule& schedule,
                                        const v1::MeasureRequest& request, const Detail& first,
                                        double first_median) {
  WorkQueue::Item item;
  item.queue = WorkQueue::MeasureQueue(options_.device_key);
  item.job_id = options_.job_id;
  item.priority = options_.priority + 1;
  item.exclude_device = first.device_id;
  *item.work.mutable_measure() = request;
  item.done = [on_confirmation = options_.on_confirmation, workload = task.workload, schedule,
               first, first_median, tolerance = options_.confirm_tolerance, flops = task.flops,
               peak = PeakFlops(task.target)](absl::StatusOr<v1::ReportResultRequest> r) {
    // Lost or cancelled (the job stopped): the record stays pending and
    // does not rank.
    if (!r.ok()) return;
    Options::Confirmation c;
    const v1::MeasureResult& mr = r->measure();
    c.confirmed_by = mr.device_id();
    std::vector<double> costs(mr.costs_sec().begin(), mr.costs_sec().end());
    bool ok = mr.status() == v1::MEASURE_STATUS_OK && !costs.empty();
    for (double s : costs) ok = ok && CheckTiming(s, flops, peak).ok();
    if (ok) {
      std::sort(costs.begin(), costs.end());
      c.confirm_seconds = costs[costs.size() / 2];
    }
    const double slack = 1 + tolerance;
    if (!ok) {
      // It could not measure what another device ran: it is the suspect.
      c.outcome = v1::CONFIRMATION_DISPUTED;
      c.suspect = c.confirmed_by;
    } else if (c.confirm_seconds > slack * first_median) {
      c.outcome = v1::CONFIRMATION_DISPUTED;
      c.suspect = first.device_id;
    } else {
      c.outcome = v1::CONFIRMATION_CONFIRMED;
      if (first_median > slack * c.confirm_seconds) c.suspect = c.confirmed_by;
    }
    Logger("server")->log(
        c.suspect.empty() && c.outcome == v1::CONFIRMATION_CONFIRMED ? spdlog::level::info
                                                                     : spdlog::level::warn,
        "event=timing_checked outcome={} device={} seconds={:.3g} confirmer={} "
        "confirm_seconds={:.3g} confirm_status={} suspect={}",
        v1::Confirmation_Name(c.outcome), first.device_id, first_median, c.confirmed_by,
        c.confirm_seconds, v1::MeasureStatus_Name(mr.status()), c.suspect);
    on_confirmation(workload, schedule, first, c);
  };
  queue_.Submit(std::move(item));
}

void RemoteMeasurer::FinishLocked(Batch& batch, size_t i, v1::MeasureStatus status,
                                  const std::string& error) {
  details_[i].status = status;
  batch.results[i].status = search::StatusFromProto(status);
  batch.results[i].error = error;
  if (!details_[i].cancelled && options_.on_result) {
    options_.on_result(batch.task, batch.schedules[i], batch.results[i], details_[i]);
  }
  --batch.pending;
  cv_.notify_all();
}

void RemoteMeasurer::LostLocked(Batch& batch, size_t i, const absl::Status& s) {
  details_[i].cancelled = absl::IsCancelled(s);
  FinishLocked(batch, i,
               absl::IsCancelled(s) ? v1::MEASURE_STATUS_RUNTIME_ERROR : v1::MEASURE_STATUS_LOST,
               std::string(s.message()));
}

WorkQueue::Item RemoteMeasurer::BuildItem(Batch& batch, size_t i) {
  WorkQueue::Item item;
  item.queue = BuildQueueOf(batch.task.target);
  item.job_id = options_.job_id;
  item.priority = options_.priority;
  item.work = BuildWork(batch.task, batch.schedules[i], options_.llvm_ptx);
  item.done = [this, &batch, i](absl::StatusOr<v1::ReportResultRequest> r) {
    OnBuilt(batch, i, std::move(r));
  };
  return item;
}

void RemoteMeasurer::OnBuilt(Batch& batch, size_t i, absl::StatusOr<v1::ReportResultRequest> r) {
  std::unique_lock<std::mutex> l(mu_);
  if (!r.ok()) return LostLocked(batch, i, r.status());
  if (!r->has_build()) {
    return FinishLocked(batch, i, v1::MEASURE_STATUS_COMPILE_ERROR, "no build result");
  }
  const v1::BuildResult& b = r->build();
  details_[i].build_sec = b.compile_sec();
  batch.results[i].compile_ms = b.compile_sec() * 1e3;
  *details_[i].fingerprint.mutable_compiler() = b.fingerprint().compiler();
  *details_[i].fingerprint.mutable_cuda_toolkit() = b.fingerprint().cuda_toolkit();
  if (!b.error().empty()) {
    return FinishLocked(batch, i, v1::MEASURE_STATUS_COMPILE_ERROR, b.error());
  }
  WorkQueue::Item m = MeasureItem(batch, i, b);
  l.unlock();
  queue_.Submit(std::move(m));
}

WorkQueue::Item RemoteMeasurer::MeasureItem(Batch& batch, size_t i, const v1::BuildResult& b) {
  const search::Task& task = batch.task;
  const Reference* ref = &batch.ref;
  WorkQueue::Item m;
  m.queue = WorkQueue::MeasureQueue(options_.device_key);
  m.job_id = options_.job_id;
  m.priority = options_.priority;
  v1::MeasureRequest* req = m.work.mutable_measure();
  *req->mutable_workload() = task.workload;
  req->mutable_target()->set_spec(task.target.ToString());
  *req->mutable_schedule() = batch.schedules[i];
  req->set_kind(b.kind());
  req->set_artifact(b.artifact());
  req->set_artifact_sha256(b.artifact_sha256());
  *req->mutable_options() = options_.measure;
  req->set_input_seed(options_.input_seed);
  req->set_threads(options_.threads);
  *req->mutable_signature() = b.signature();
  req->set_reference_key(batch.ref_key);
  if (!ref->output.empty()) {
    req->set_reference_output(ref->output);
  } else {
    req->set_reference_artifact(ref->artifact);
    *req->mutable_reference_signature() = ref->signature;
    *req->mutable_reference_schedule() = ref->schedule;
  }
  auto request = std::make_shared<const v1::MeasureRequest>(*req);
  m.done = [this, &batch, i, request](absl::StatusOr<v1::ReportResultRequest> r) {
    OnMeasured(batch, i, *request, std::move(r));
  };
  return m;
}

void RemoteMeasurer::OnMeasured(Batch& batch, size_t i, const v1::MeasureRequest& request,
                                absl::StatusOr<v1::ReportResultRequest> r) {
  const search::Task& task = batch.task;
  std::lock_guard<std::mutex> l(mu_);
  if (!r.ok()) return LostLocked(batch, i, r.status());
  if (!r->has_measure()) {
    return FinishLocked(batch, i, v1::MEASURE_STATUS_RUNTIME_ERROR,
                        "the agent answered with no measurement");
  }
  const v1::MeasureResult& mr = r->measure();
  Detail& d = details_[i];
  d.costs.assign(mr.costs_sec().begin(), mr.costs_sec().end());
  d.run_sec = mr.run_sec();
  d.device_id = mr.device_id();
  // The board's fingerprint, with the toolchain the worker built with.
  v1::Fingerprint built = d.fingerprint;
  d.fingerprint = mr.fingerprint();
  d.fingerprint.set_compiler(built.compiler());
  if (!built.cuda_toolkit().empty()) d.fingerprint.set_cuda_toolkit(built.cuda_toolkit());
  v1::MeasureStatus st = mr.status();
  if (st == v1::MEASURE_STATUS_OK && d.costs.empty()) {
    st = v1::MEASURE_STATUS_RUNTIME_ERROR;
    return FinishLocked(batch, i, st, "the agent reported success without timings");
  }
  if (st == v1::MEASURE_STATUS_OK) {
    for (double c : d.costs) {
      if (absl::Status t = CheckTiming(c, task.flops, PeakFlops(task.target)); !t.ok()) {
        Logger("server")->warn("event=implausible_timing device={} seconds={} flops={}",
                               d.device_id, c, task.flops);
        return FinishLocked(batch, i, v1::MEASURE_STATUS_RUNTIME_ERROR,
                            absl::StrCat("refused from ", d.device_id, ": ", t.message()));
      }
    }
  }
  bool confirm = false;
  if (st == v1::MEASURE_STATUS_OK) {
    std::vector<double> c = d.costs;
    std::sort(c.begin(), c.end());
    batch.results[i].seconds = c[c.size() / 2];
    const double mean = std::accumulate(c.begin(), c.end(), 0.0) / double(c.size());
    confirm = NeedsConfirmationLocked(task, mean, d);
  }
  FinishLocked(batch, i, st, mr.error());
  // After the record is stored as pending; Measure cannot return
  // while mu_ is held, so `task` and the schedule are still there.
  if (confirm) {
    SubmitConfirmation(task, batch.schedules[i], request, d, batch.results[i].seconds);
  }
}

std::vector<MeasureResult> RemoteMeasurer::Measure(const search::Task& task,
                                                   const std::vector<schedule::Trace>& traces) {
  const size_t n = traces.size();
  // The wire form of each candidate: what the builds, the measurements and
  // the records carry.
  std::vector<v1::Schedule> schedules;
  schedules.reserve(n);
  for (const schedule::Trace& t : traces) schedules.push_back(schedule::ToProto(t));
  std::vector<MeasureResult> results(n);
  details_.assign(n, Detail());
  const bool interpreted = ir::InterpretReference(task.dag, task.flops);
  const Reference* ref = interpreted ? &InterpretedFor(task) : &ReferenceFor(task);
  if (!ref->error.empty()) {
    for (size_t i = 0; i < n; ++i) {
      results[i].status = Status::kBuildError;
      results[i].error = absl::StrCat(
          interpreted ? "reference (interpreter): " : "reference (default schedule): ", ref->error);
      details_[i].status = v1::MEASURE_STATUS_COMPILE_ERROR;
      details_[i].cancelled = options_.stopped();
    }
    return results;
  }
  Batch batch{task, *ref, absl::StrCat(task.key, "|", options_.input_seed), std::move(schedules),
              std::move(results), 0};
  std::unique_lock<std::mutex> lock(mu_);
  batch.pending = int(n);
  std::vector<WorkQueue::Item> builds;
  for (size_t i = 0; i < n; ++i) builds.push_back(BuildItem(batch, i));
  lock.unlock();
  for (WorkQueue::Item& b : builds) queue_.Submit(std::move(b));
  lock.lock();
  Wait(task, batch.pending, lock);
  return std::move(batch.results);
}

}  // namespace tunefarm::server
