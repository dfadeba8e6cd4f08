#include "server/tuning_service.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"
#include "proto/job_progress.h"
#include "proto/protocol.h"

namespace tunefarm::server {
namespace {

constexpr int kDefaultListLimit = 100;
constexpr int kMaxListLimit = 10000;
constexpr int kExportChunk = 500;

bool IsFinal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

grpc::Status Invalid(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

// Converts a filter to a TuningLog query; the target must parse.
absl::StatusOr<store::TuningLog::RecordQuery> ToQuery(const v1::RecordFilter& f) {
  store::TuningLog::RecordQuery q;
  q.workload_key = f.workload_key();
  q.target_spec = f.target().spec();
  if (!q.target_spec.empty()) {
    absl::StatusOr<ir::Target> t = ir::Target::Parse(q.target_spec);
    if (!t.ok()) return t.status();
  }
  q.job_id = f.job_id();
  if (!v1::MeasureStatus_IsValid(f.status())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown status filter ", f.status()));
  }
  q.status = f.status();
  return q;
}

// The protocol version, the token and the permission `need` (READ, SUBMIT,
// ADMIN) of the RPC named `rpc`.
#define TF_GATE(req, need, rpc)                                                                    \
  do {                                                                                             \
    grpc::Status gate_status = gate_.Check(ctx, (req)->protocol_version(), Permission::need, rpc); \
    if (!gate_status.ok()) return gate_status;                                                     \
  } while (0)

// What a job may spend, as the first WatchJob event says it: "24 trials",
// "8 trials per task, 600 s", ...
std::string BudgetText(const v1::Budget& b) {
  std::vector<std::string> parts;
  if (b.max_trials() > 0) parts.push_back(absl::StrCat(b.max_trials(), " trials"));
  if (b.max_trials_per_task() > 0)
    parts.push_back(absl::StrCat(b.max_trials_per_task(), " trials per task"));
  if (b.max_seconds() > 0) parts.push_back(absl::StrCat(b.max_seconds(), " s of tuning"));
  if (b.early_stop_trials() > 0) {
    parts.push_back(absl::StrCat("a task stops after ", b.early_stop_trials(),
                                 " trials without a better schedule"));
  }
  if (b.max_trials() <= 0 && b.max_trials_per_task() <= 0 && b.max_seconds() <= 0)
    parts.insert(parts.begin(), "the server's default trials per task");
  return absl::StrJoin(parts, ", ");
}

// The caller as the job manager sees it.
Requester RequesterOf(const Caller& c) {
  return Requester{c.name, c.token == nullptr ? "" : c.token->digest, c.role == TokenRole::kAdmin};
}

}  // namespace

void TuningService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  changed_.notify_all();
}

void TuningService::NotifyJobsChanged() {
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
  changed_.notify_all();
}

grpc::Status TuningService::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) {
  Caller caller;
  grpc::Status gate =
      gate_.Check(ctx, req->protocol_version(), Permission::kSubmit, "SubmitJob", &caller);
  if (!gate.ok()) return gate;
  absl::StatusOr<int64_t> id =
      manager_.Submit(req->spec(), RequesterOf(caller), req->wait_for_device());
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status TuningService::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::Job* resp) {
  TF_GATE(req, kRead, "GetJob");
  absl::StatusOr<v1::Job> job = log_.GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status TuningService::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) {
  TF_GATE(req, kRead, "ListJobs");
  if (!v1::JobState_IsValid(req->state())) return Invalid("unknown job state filter");
  if (req->limit() < 0) return Invalid("limit must not be negative");
  int limit = req->limit() == 0 ? kDefaultListLimit : std::min(req->limit(), kMaxListLimit);
  absl::StatusOr<std::vector<v1::Job>> jobs = log_.ListJobs(req->state(), limit);
  if (!jobs.ok()) return ToGrpcStatus(jobs.status());
  for (v1::Job& j : *jobs) *resp->add_jobs() = std::move(j);
  return grpc::Status::OK;
}

grpc::Status TuningService::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                     grpc::ServerWriter<v1::JobEvent>* writer) {
  TF_GATE(req, kRead, "WatchJob");
  v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
  int64_t last_trials = -1;
  std::map<int64_t, double> best;  // task id -> best sent
  bool first = true;
  const absl::Time start = absl::Now();
  int64_t start_trials = -1;
  while (true) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen = generation_;
    }
    absl::StatusOr<v1::Job> job = log_.GetJob(req->job_id());
    if (!job.ok()) return ToGrpcStatus(job.status());
    const absl::Time now = absl::Now();
    if (start_trials < 0) start_trials = job->trials_done();
    // Each task's new best first, then the job's progress.
    for (int i = 0; i < job->tasks_size(); ++i) {
      const v1::Task& t = job->tasks(i);
      if (t.best_cost_sec() <= 0 || best[t.task_id()] == t.best_cost_sec()) continue;
      best[t.task_id()] = t.best_cost_sec();
      v1::JobEvent ev;
      ev.set_job_id(job->job_id());
      ev.set_state(job->state());
      ev.set_trials_done(job->trials_done());
      ev.set_task_id(t.task_id());
      ev.set_task_number(i + 1);
      ev.set_best_cost_sec(t.best_cost_sec());
      ev.set_timestamp_unix_ms(absl::ToUnixMillis(now));
      if (!writer->Write(ev)) return grpc::Status::OK;
    }
    if (job->state() != last_state || job->trials_done() != last_trials) {
      v1::JobEvent ev;
      ev.set_job_id(job->job_id());
      ev.set_state(job->state());
      ev.set_trials_done(job->trials_done());
      // The first event says what the job is; the rest, its status.
      ev.set_message(first ? absl::StrCat(job->tasks_size(),
                                          job->tasks_size() == 1 ? " task" : " tasks",
                                          "; budget: ", BudgetText(job->spec().budget()),
                                          job->status_message().empty() ? "" : "; ",
                                          job->status_message())
                           : job->status_message());
      first = false;
      ev.set_timestamp_unix_ms(absl::ToUnixMillis(now));
      // The rate since this watch began.
      const JobProgress p = ProgressOf(*job, job->trials_done() - start_trials,
                                       absl::ToDoubleMinutes(now - start));
      ev.set_tasks(p.tasks);
      ev.set_model_best_sec(p.model_best_sec);
      ev.set_tasks_with_best(p.tasks_with_best);
      ev.set_trials_per_minute(p.trials_per_minute);
      ev.set_eta_sec(p.eta_sec);
      if (!writer->Write(ev)) return grpc::Status::OK;  // client went away
      last_state = job->state();
      last_trials = job->trials_done();
    }
    if (IsFinal(job->state())) return grpc::Status::OK;
    std::unique_lock<std::mutex> lock(mu_);
    // Wake on a change, at shutdown, or every half second to notice a
    // cancelled call (gRPC's sync API has no cancellation callback).
    changed_.wait_for(lock, std::chrono::milliseconds(500),
                      [&] { return generation_ != seen || shutdown_; });
    if (shutdown_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server shutting down");
    if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
  }
}

grpc::Status TuningService::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                                      v1::Job* resp) {
  Caller caller;
  grpc::Status gate =
      gate_.Check(ctx, req->protocol_version(), Permission::kSubmit, "CancelJob", &caller);
  if (!gate.ok()) return gate;
  absl::StatusOr<v1::Job> job = manager_.Cancel(req->job_id(), RequesterOf(caller));
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status TuningService::ResumeJob(grpc::ServerContext* ctx, const v1::ResumeJobRequest* req,
                                      v1::Job* resp) {
  Caller caller;
  grpc::Status gate =
      gate_.Check(ctx, req->protocol_version(), Permission::kSubmit, "ResumeJob", &caller);
  if (!gate.ok()) return gate;
  absl::StatusOr<v1::Job> job = manager_.Resume(req->job_id(), RequesterOf(caller));
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status TuningService::QueryBest(grpc::ServerContext* ctx, const v1::QueryBestRequest* req,
                                      v1::QueryBestResponse* resp) {
  TF_GATE(req, kRead, "QueryBest");
  if (req->top_k() < 0 || req->top_k() > 1000) return Invalid("top_k must be in [0, 1000]");
  int k = req->top_k() == 0 ? 1 : req->top_k();
  std::string target = req->target().spec();
  std::vector<std::pair<std::string, double>> keys;  // workload key, weight
  switch (req->query_case()) {
    case v1::QueryBestRequest::kWorkload: {
      const v1::WorkloadQuery& q = req->workload();
      if (q.has_workload()) {
        absl::StatusOr<ir::CanonicalWorkload> cw = ir::Canonicalize(q.workload());
        if (!cw.ok()) return ToGrpcStatus(cw.status());
        keys.emplace_back(cw->key, 1);
      } else if (!q.workload_key().empty()) {
        keys.emplace_back(q.workload_key(), 1);
      } else {
        return Invalid("QueryBest: give a workload_key or a workload");
      }
      break;
    }
    case v1::QueryBestRequest::kJobId: {
      absl::StatusOr<v1::Job> job = log_.GetJob(req->job_id());
      if (!job.ok()) return ToGrpcStatus(job.status());
      if (target.empty()) target = job->spec().target().spec();
      for (const v1::Task& t : job->tasks()) keys.emplace_back(t.workload_key(), t.weight());
      break;
    }
    case v1::QueryBestRequest::kModel:
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          "QueryBest by model is not served: import the model on the client "
                          "(`tunefarm best --model` does) and query its tasks by workload key, "
                          "or query by job");
    default:
      return Invalid("QueryBest: no query (workload, model or job_id)");
  }
  if (target.empty()) return Invalid("QueryBest: target is required");
  absl::StatusOr<ir::Target> parsed = ir::Target::Parse(target);
  if (!parsed.ok()) return ToGrpcStatus(parsed.status());
  for (const auto& [key, weight] : keys) {
    absl::StatusOr<std::vector<v1::Record>> top = log_.TopK(key, target, k);
    if (!top.ok()) return ToGrpcStatus(top.status());
    v1::BestEntry* e = resp->add_entries();
    e->set_workload_key(key);
    e->set_weight(weight);
    for (v1::Record& r : *top) *e->add_records() = std::move(r);
  }
  return grpc::Status::OK;
}

grpc::Status TuningService::ListRecords(grpc::ServerContext* ctx, const v1::ListRecordsRequest* req,
                                        v1::ListRecordsResponse* resp) {
  TF_GATE(req, kRead, "ListRecords");
  absl::StatusOr<store::TuningLog::RecordQuery> q = ToQuery(req->filter());
  if (!q.ok()) return ToGrpcStatus(q.status());
  if (req->limit() < 0 || req->limit() > kMaxListLimit) {
    return Invalid(absl::StrCat("limit must be in [0, ", kMaxListLimit, "]"));
  }
  if (req->after_record_id() < 0 || req->before_record_id() < 0) {
    return Invalid("after_record_id and before_record_id must not be negative");
  }
  q->limit = req->limit() == 0 ? kDefaultListLimit : req->limit();
  q->after_record_id = req->after_record_id();
  q->before_record_id = req->before_record_id();
  q->newest_first = req->newest_first();
  absl::StatusOr<std::vector<v1::Record>> records = log_.ListRecords(*q);
  if (!records.ok()) return ToGrpcStatus(records.status());
  absl::StatusOr<int64_t> matching = log_.CountRecords(*q);
  if (!matching.ok()) return ToGrpcStatus(matching.status());
  const int64_t more = *matching - static_cast<int64_t>(records->size());
  resp->set_more(std::max<int64_t>(0, more));
  if (more > 0) resp->set_last_record_id(records->back().record_id());
  for (v1::Record& r : *records) *resp->add_records() = std::move(r);
  return grpc::Status::OK;
}

grpc::Status TuningService::ExportRecords(grpc::ServerContext* ctx,
                                          const v1::ExportRecordsRequest* req,
                                          grpc::ServerWriter<v1::RecordChunk>* writer) {
  TF_GATE(req, kRead, "ExportRecords");
  absl::StatusOr<store::TuningLog::RecordQuery> q = ToQuery(req->filter());
  if (!q.ok()) return ToGrpcStatus(q.status());
  q->limit = kExportChunk;
  while (true) {
    if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
    absl::StatusOr<std::vector<v1::Record>> records = log_.ListRecords(*q);
    if (!records.ok()) return ToGrpcStatus(records.status());
    if (records->empty()) return grpc::Status::OK;
    q->after_record_id = records->back().record_id();
    v1::RecordChunk chunk;
    for (v1::Record& r : *records) *chunk.add_records() = std::move(r);
    if (!writer->Write(chunk)) return grpc::Status::CANCELLED;
  }
}

grpc::Status TuningService::ImportRecords(grpc::ServerContext* ctx,
                                          const v1::ImportRecordsRequest* req,
                                          v1::ImportRecordsResponse* resp) {
  TF_GATE(req, kAdmin, "ImportRecords");
  absl::StatusOr<store::TuningLog::CommitResult> res =
      manager_.ImportRecords({req->records().begin(), req->records().end()});
  if (!res.ok()) return ToGrpcStatus(res.status());
  resp->set_imported(res->inserted);
  resp->set_duplicates(res->duplicates);
  return grpc::Status::OK;
}

grpc::Status TuningService::ListDevices(grpc::ServerContext* ctx, const v1::ListDevicesRequest* req,
                                        v1::ListDevicesResponse* resp) {
  TF_GATE(req, kRead, "ListDevices");
  absl::StatusOr<std::vector<v1::Device>> devices = devices_.List();
  if (!devices.ok()) return ToGrpcStatus(devices.status());
  for (v1::Device& d : *devices) *resp->add_devices() = std::move(d);
  return grpc::Status::OK;
}

grpc::Status TuningService::UpdateDevice(grpc::ServerContext* ctx,
                                         const v1::UpdateDeviceRequest* req, v1::Device* resp) {
  TF_GATE(req, kAdmin, "UpdateDevice");
  absl::StatusOr<v1::Device> d = manager_.UpdateDevice(req->device_id(), req->action());
  if (!d.ok()) return ToGrpcStatus(d.status());
  *resp = *std::move(d);
  return grpc::Status::OK;
}

grpc::Status TuningService::RunModel(grpc::ServerContext* ctx, const v1::RunModelRequest* req,
                                     v1::RunModelResponse* resp) {
  TF_GATE(req, kSubmit, "RunModel");
  absl::StatusOr<v1::ModelRunResult> result =
      manager_.RunModel(req->device_key(), req->run(), [ctx] { return ctx->IsCancelled(); });
  if (!result.ok()) return ToGrpcStatus(result.status());
  *resp->mutable_result() = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace tunefarm::server
