#include "server/tuning_service.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/tasks.h"
#include "proto/protocol.h"
#include "tunefarm/v1/package.pb.h"

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

#define TF_GATE(req)                                                        \
  do {                                                                      \
    grpc::Status gate_status = gate_.Check(ctx, (req)->protocol_version()); \
    if (!gate_status.ok()) return gate_status;                              \
  } while (0)

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
  TF_GATE(req);
  v1::JobSpec spec = req->spec();
  if (!spec.onnx_model().empty()) {
    // A model: its tasks are extracted here; the job keeps the tasks, not
    // the model's bytes (weights are the client's to keep).
    if (spec.tasks_size() > 0) return Invalid("SubmitJob: give tasks or an ONNX model, not both");
    frontend::ImportOptions o;
    for (const v1::InputShape& s : spec.input_shapes()) {
      o.input_shapes[s.name()].assign(s.shape().begin(), s.shape().end());
    }
    absl::StatusOr<frontend::Model> model = frontend::ImportOnnx(spec.onnx_model(), o);
    if (!model.ok()) return Invalid(absl::StrCat("model: ", model.status().message()));
    absl::StatusOr<frontend::TaskExtraction> ex = frontend::ExtractTasks(*model);
    if (!ex.ok()) return Invalid(absl::StrCat("model: ", ex.status().message()));
    if (ex->tasks.empty()) return Invalid("model: it has no tunable layers (conv, dense, matmul)");
    for (const frontend::ModelTask& t : ex->tasks) {
      v1::TaskSpec* ts = spec.add_tasks();
      *ts->mutable_workload() = t.workload;
      ts->set_weight(t.weight);
    }
    spec.clear_onnx_model();
  }
  if (absl::StatusOr<ir::Target> t = ir::Target::Parse(spec.target().spec());
      t.ok() && t->is_gpu()) {
    if (grpc::Status g = CheckCudaBuilders(*t); !g.ok()) return g;
    if (grpc::Status g = CheckCudaAgents(*t, spec.device_key()); !g.ok()) return g;
  }
  absl::StatusOr<int64_t> id = log_.CreateJob(spec);
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_job_id(*id);
  Logger("server")->info("event=job_submitted job={} tasks={} target=\"{}\"", *id,
                         spec.tasks_size(), spec.target().spec());
  NotifyJobsChanged();
  jobs_.Start(*id);
  return grpc::Status::OK;
}

// A CUDA job needs a worker whose toolkit builds its arch. With workers
// connected and none that can, the job is refused now, naming what they
// build, rather than queued for a worker that may never come; with no
// worker connected at all it waits, as CPU jobs do.
grpc::Status TuningService::CheckCudaBuilders(const ir::Target& target) {
  absl::StatusOr<std::vector<v1::Device>> devices = devices_.List();
  if (!devices.ok()) return ToGrpcStatus(devices.status());
  std::set<std::string> archs;
  std::set<std::string> toolkits;
  int workers = 0;
  for (const v1::Device& d : *devices) {
    if (d.role() != v1::ROLE_WORKER || d.state() != v1::DEVICE_STATE_ONLINE) continue;
    ++workers;
    const v1::Capabilities& c = d.capabilities();
    archs.insert(c.cuda_archs().begin(), c.cuda_archs().end());
    if (!c.fingerprint().cuda_toolkit().empty()) toolkits.insert(c.fingerprint().cuda_toolkit());
  }
  if (workers == 0 || archs.count(target.arch())) return grpc::Status::OK;
  auto number = [](const std::string& a) {
    int n = 0;
    return a.size() > 3 && absl::SimpleAtoi(a.substr(3), &n) ? n : 0;
  };
  std::vector<std::string> sorted(archs.begin(), archs.end());
  std::sort(sorted.begin(), sorted.end(),
            [&](const std::string& a, const std::string& b) { return number(a) < number(b); });
  std::string msg = absl::StrCat("SubmitJob: no connected compile worker builds ", target.arch());
  if (sorted.empty()) {
    absl::StrAppend(&msg, " (", workers, " connected, none with a CUDA toolkit)");
  } else {
    absl::StrAppend(&msg, " (the ", workers, " connected build ", absl::StrJoin(sorted, ", "),
                    toolkits.empty() ? "" : absl::StrCat(" with ", absl::StrJoin(toolkits, ", ")),
                    ")");
    if (number(target.arch()) > 0 && number(target.arch()) < number(sorted.front()))
      absl::StrAppend(&msg,
                      "; older archs need a worker with an older CUDA toolkit (sm_72, "
                      "Jetson Xavier: CUDA 12 or older)");
  }
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, msg);
}

// Likewise its device key needs an agent with a GPU of the target's arch:
// with agents of the key connected and none such, the job is refused naming
// what they have; with none connected it waits for one.
grpc::Status TuningService::CheckCudaAgents(const ir::Target& target,
                                            const std::string& device_key) {
  absl::StatusOr<std::vector<v1::Device>> devices = devices_.List();
  if (!devices.ok()) return ToGrpcStatus(devices.status());
  std::vector<std::string> seen;
  for (const v1::Device& d : *devices) {
    if (d.role() != v1::ROLE_AGENT || d.state() != v1::DEVICE_STATE_ONLINE ||
        d.device_key() != device_key) {
      continue;
    }
    const v1::Capabilities& c = d.capabilities();
    if (c.has_gpu() && std::find(c.cuda_archs().begin(), c.cuda_archs().end(), target.arch()) !=
                           c.cuda_archs().end()) {
      return grpc::Status::OK;
    }
    seen.push_back(absl::StrCat(
        d.device_id(), ": ",
        !c.has_gpu() ? "no GPU"
                     : absl::StrCat(c.gpu_name(), " ", absl::StrJoin(c.cuda_archs(), "/"))));
  }
  if (seen.empty()) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION,
      absl::StrCat("SubmitJob: no connected agent with device key '", device_key, "' has a ",
                   target.arch(), " GPU (", absl::StrJoin(seen, "; "), ")"));
}

grpc::Status TuningService::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::Job* resp) {
  TF_GATE(req);
  absl::StatusOr<v1::Job> job = log_.GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status TuningService::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) {
  TF_GATE(req);
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
  TF_GATE(req);
  v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
  int64_t last_trials = -1;
  while (true) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen = generation_;
    }
    absl::StatusOr<v1::Job> job = log_.GetJob(req->job_id());
    if (!job.ok()) return ToGrpcStatus(job.status());
    if (job->state() != last_state || job->trials_done() != last_trials) {
      v1::JobEvent ev;
      ev.set_job_id(job->job_id());
      ev.set_state(job->state());
      ev.set_trials_done(job->trials_done());
      ev.set_message(job->status_message());
      ev.set_timestamp_unix_ms(job->updated_unix_ms());
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
  TF_GATE(req);
  absl::StatusOr<v1::Job> job = log_.CancelJob(req->job_id(), "cancelled by user");
  if (!job.ok()) return ToGrpcStatus(job.status());
  jobs_.Stop(req->job_id());
  queue_.CancelJob(req->job_id());
  Logger("server")->info("event=job_cancelled job={}", req->job_id());
  NotifyJobsChanged();
  *resp = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status TuningService::ResumeJob(grpc::ServerContext* ctx, const v1::ResumeJobRequest* req,
                                      v1::Job* resp) {
  TF_GATE(req);
  absl::StatusOr<v1::Job> job = log_.GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  switch (job->state()) {
    case v1::JOB_STATE_SUCCEEDED:
    case v1::JOB_STATE_CANCELLED:
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("job ", req->job_id(), " has ended (", v1::JobState_Name(job->state()),
                       "); there is nothing to resume"));
    default:
      break;
  }
  if (!jobs_.Running(req->job_id())) {
    absl::Status s =
        log_.SetJobState(req->job_id(), v1::JOB_STATE_QUEUED,
                         absl::StrCat("resuming after ", job->trials_done(), " trials"));
    if (!s.ok()) return ToGrpcStatus(s);
    jobs_.Start(req->job_id());
    Logger("server")->info("event=job_resumed job={} trials_done={}", req->job_id(),
                           job->trials_done());
    NotifyJobsChanged();
  }
  job = log_.GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = *std::move(job);
  return grpc::Status::OK;
}

grpc::Status TuningService::QueryBest(grpc::ServerContext* ctx, const v1::QueryBestRequest* req,
                                      v1::QueryBestResponse* resp) {
  TF_GATE(req);
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
  TF_GATE(req);
  absl::StatusOr<store::TuningLog::RecordQuery> q = ToQuery(req->filter());
  if (!q.ok()) return ToGrpcStatus(q.status());
  if (req->limit() < 0 || req->limit() > kMaxListLimit) {
    return Invalid(absl::StrCat("limit must be in [0, ", kMaxListLimit, "]"));
  }
  q->limit = req->limit() == 0 ? kDefaultListLimit : req->limit();
  q->after_record_id = req->after_record_id();
  absl::StatusOr<std::vector<v1::Record>> records = log_.ListRecords(*q);
  if (!records.ok()) return ToGrpcStatus(records.status());
  if (static_cast<int>(records->size()) == q->limit) {
    resp->set_last_record_id(records->back().record_id());
  }
  for (v1::Record& r : *records) *resp->add_records() = std::move(r);
  return grpc::Status::OK;
}

grpc::Status TuningService::ExportRecords(grpc::ServerContext* ctx,
                                          const v1::ExportRecordsRequest* req,
                                          grpc::ServerWriter<v1::RecordChunk>* writer) {
  TF_GATE(req);
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
  TF_GATE(req);
  std::vector<v1::Record> records(req->records().begin(), req->records().end());
  // Job ids are local to the farm that made the record.
  for (v1::Record& r : records) {
    r.clear_job_id();
    r.clear_record_id();
  }
  absl::StatusOr<store::TuningLog::CommitResult> res = log_.CommitRecords(records);
  if (!res.ok()) return ToGrpcStatus(res.status());
  resp->set_imported(res->inserted);
  resp->set_duplicates(res->duplicates);
  Logger("server")->info("event=records_imported imported={} duplicates={}", res->inserted,
                         res->duplicates);
  return grpc::Status::OK;
}

grpc::Status TuningService::ListDevices(grpc::ServerContext* ctx, const v1::ListDevicesRequest* req,
                                        v1::ListDevicesResponse* resp) {
  TF_GATE(req);
  absl::StatusOr<std::vector<v1::Device>> devices = devices_.List();
  if (!devices.ok()) return ToGrpcStatus(devices.status());
  for (v1::Device& d : *devices) *resp->add_devices() = std::move(d);
  return grpc::Status::OK;
}

grpc::Status TuningService::RunModel(grpc::ServerContext* ctx, const v1::RunModelRequest* req,
                                     v1::RunModelResponse* resp) {
  TF_GATE(req);
  const v1::ModelRunRequest& run = req->run();
  if (req->device_key().empty()) return Invalid("RunModel: device_key is required");
  v1::ModelPackage pkg;
  if (run.package().empty() || !pkg.ParseFromString(run.package()) || pkg.format_version() == 0)
    return Invalid("RunModel: the package is not a tunefarm model package (tunefarm build -o)");
  if (run.threads() < 0 || run.threads() > 256)
    return Invalid(absl::StrCat("RunModel: threads ", run.threads(), " is not in 0..256"));
  if (run.repeats() < 0 || run.repeats() > kMaxModelRepeats)
    return Invalid(absl::StrCat("RunModel: repeats ", run.repeats(), " is not in 0..",
                                kMaxModelRepeats));
  if (!(run.time_limit_s() >= 0) || run.time_limit_s() > 24 * 3600)
    return Invalid("RunModel: time_limit_s must be between 0 (default) and 86400");
  const std::string queue = WorkQueue::MeasureQueue(req->device_key());
  // Taking work now, or registered and about to (its stream opens after
  // registration).
  bool connected = queue_.HasTaker(queue);
  if (!connected) {
    absl::StatusOr<std::vector<v1::Device>> devices = devices_.List();
    if (!devices.ok()) return ToGrpcStatus(devices.status());
    for (const v1::Device& d : *devices) {
      connected = connected || (d.role() == v1::ROLE_AGENT && d.device_key() == req->device_key() &&
                                d.state() == v1::DEVICE_STATE_ONLINE);
    }
  }
  if (!connected) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("RunModel: no agent is connected under device key '",
                                     req->device_key(), "' (tunefarm devices lists them)"));
  }
  // The run waits in the key's queue like a measurement, ahead of tuning
  // work; an id of its own (negative: never a job's) lets it be dropped
  // when the caller goes away.
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    absl::StatusOr<v1::ReportResultRequest> result = absl::UnknownError("");
  };
  auto wait = std::make_shared<Wait>();
  const int64_t run_id = -next_model_run_.fetch_add(1);
  WorkQueue::Item item;
  item.queue = queue;
  item.job_id = run_id;
  item.priority = kModelRunPriority;
  *item.work.mutable_model_run() = run;
  item.done = [wait](absl::StatusOr<v1::ReportResultRequest> r) {
    std::lock_guard<std::mutex> lock(wait->mu);
    wait->result = std::move(r);
    wait->done = true;
    wait->cv.notify_all();
  };
  queue_.Submit(std::move(item));
  Logger("server")->info("event=model_run_queued run={} key={} package_bytes={}", -run_id,
                         req->device_key(), run.package().size());
  std::unique_lock<std::mutex> lock(wait->mu);
  while (!wait->done) {
    wait->cv.wait_for(lock, std::chrono::milliseconds(100));
    if (wait->done) break;
    bool stopping;
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping = shutdown_;
    }
    if (ctx->IsCancelled() || stopping) {
      lock.unlock();
      queue_.CancelJob(run_id);
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          stopping ? "RunModel: the server is shutting down"
                                   : "RunModel: the caller went away; the run was dropped");
    }
  }
  if (!wait->result.ok()) {
    const absl::Status& s = wait->result.status();
    return grpc::Status(grpc::StatusCode::ABORTED,
                        absl::StrCat("RunModel: the run did not complete: ", s.message()));
  }
  if (!wait->result->has_model_run())
    return grpc::Status(grpc::StatusCode::INTERNAL, "RunModel: the agent answered with no run");
  *resp->mutable_result() = wait->result->model_run();
  return grpc::Status::OK;
}

}  // namespace tunefarm::server
