#include "server/job_manager.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/protocol.h"
#include "server/limits.h"
#include "tunefarm/v1/package.pb.h"
#include "tunefarm/v1/tuning.pb.h"

namespace tunefarm::server {

absl::Status JobManager::ImportModel(v1::JobSpec* spec) const {
  if (spec->tasks_size() > 0)
    return absl::InvalidArgumentError("SubmitJob: give tasks or an ONNX model, not both");
  frontend::ImportOptions o;
  for (const v1::InputShape& s : spec->input_shapes()) {
    o.input_shapes[s.name()].assign(s.shape().begin(), s.shape().end());
  }
  for (const v1::InputValue& v : spec->input_values()) {
    if (!o.input_values.emplace(v.name(), std::vector<double>(v.values().begin(), v.values().end()))
             .second)
      return absl::InvalidArgumentError(absl::StrCat("model: input '", v.name(), "' fixed twice"));
  }
  absl::StatusOr<frontend::Model> model = frontend::ImportOnnx(spec->onnx_model(), o);
  if (!model.ok())
    return absl::InvalidArgumentError(absl::StrCat("model: ", model.status().message()));
  // The job's tasks are those `tunefarm build` makes for its target.
  absl::StatusOr<ir::Target> target = ir::Target::Parse(spec->target().spec());
  if (!target.ok())
    return absl::InvalidArgumentError(absl::StrCat("target: ", target.status().message()));
  const v1::DType precision =
      spec->precision() == v1::DTYPE_UNSPECIFIED ? v1::DTYPE_FLOAT32 : spec->precision();
  if (absl::Status s = frontend::CheckPrecision(precision, *target); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("precision: ", s.message()));
  std::optional<bool> channels_last;
  if (spec->layout() == v1::DATA_LAYOUT_NHWC) {
    channels_last = true;
  } else if (spec->layout() == v1::DATA_LAYOUT_NCHW) {
    channels_last = false;
  } else if (spec->layout() != v1::DATA_LAYOUT_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout: ", int(spec->layout()), " is not a layout (NCHW or NHWC)"));
  }
  absl::StatusOr<frontend::TaskExtraction> ex = frontend::ExtractTasks(
      *model, frontend::ExtractOptionsFor(*target, channels_last, precision));
  if (!ex.ok()) return absl::InvalidArgumentError(absl::StrCat("model: ", ex.status().message()));
  if (ex->tasks.empty())
    return absl::InvalidArgumentError("model: it has no tunable layers (conv, dense, matmul)");
  spec->clear_precision();  // now in the tasks' dtypes (and tf32 flags)
  spec->clear_layout();     // and in their layouts
  for (const frontend::ModelTask& t : ex->tasks) {
    v1::TaskSpec* ts = spec->add_tasks();
    *ts->mutable_workload() = t.workload;
    ts->set_weight(t.weight);
  }
  spec->clear_onnx_model();
  return absl::OkStatus();
}

namespace {

// Each task's workload_spec parsed into its workload (and cleared), so the
// job stores the message alone.
absl::Status ParseWorkloadSpecs(v1::JobSpec* spec) {
  for (int i = 0; i < spec->tasks_size(); ++i) {
    v1::TaskSpec* t = spec->mutable_tasks(i);
    if (t->workload_spec().empty()) continue;
    const std::string field = absl::StrCat("SubmitJob: tasks[", i, "].workload_spec: ");
    if (t->has_workload()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "the task has a workload too; give one or the other"));
    }
    absl::StatusOr<v1::Workload> w = ir::ParseWorkloadSpec(t->workload_spec());
    if (!w.ok()) return absl::InvalidArgumentError(absl::StrCat(field, w.status().message()));
    *t->mutable_workload() = *std::move(w);
    t->clear_workload_spec();
  }
  return absl::OkStatus();
}

bool OnlineAgentOf(const v1::Device& d, const std::string& device_key) {
  return d.role() == v1::ROLE_AGENT && d.state() == v1::DEVICE_STATE_ONLINE &&
         d.device_key() == device_key;
}

}  // namespace

absl::StatusOr<int64_t> JobManager::Submit(v1::JobSpec spec, const Requester& by,
                                           bool wait_for_device) {
  const std::string& owner = by.name;
  spec.set_owner(owner);
  {
    int active = 0;
    for (v1::JobState st : {v1::JOB_STATE_QUEUED, v1::JOB_STATE_RUNNING,
                            v1::JOB_STATE_WAITING_FOR_DEVICE, v1::JOB_STATE_INTERRUPTED}) {
      TF_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, log_.ListJobs(st, 100000));
      for (const v1::Job& j : jobs) active += j.spec().owner() == owner;
    }
    if (active >= max_jobs_per_owner_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("SubmitJob: token '", owner, "' has ", active,
                       " jobs that have not ended, the most "
                       "one token may have (--max_jobs_per_token); cancel some or wait for them"));
    }
  }
  TF_RETURN_IF_ERROR(ParseWorkloadSpecs(&spec));
  // A model: the job keeps its tasks, not its bytes (weights are the
  // client's to keep).
  if (!spec.onnx_model().empty()) {
    TF_RETURN_IF_ERROR(ImportModel(&spec));
  } else if (spec.precision() != v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "SubmitJob: precision goes with an ONNX model; explicit tasks carry their dtypes");
  } else if (spec.layout() != v1::DATA_LAYOUT_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "SubmitJob: layout goes with an ONNX model; explicit tasks carry their layouts");
  }
  TF_ASSIGN_OR_RETURN(std::vector<v1::Device> devices, devices_.List());
  {
    // The most memory any agent of the key ever reported bounds a workload.
    int64_t memory = 0;
    for (const v1::Device& d : devices) {
      if (d.role() == v1::ROLE_AGENT && d.device_key() == spec.device_key())
        memory = std::max(memory, d.capabilities().memory_bytes());
    }
    TF_RETURN_IF_ERROR(CheckJobSpec(spec, memory));
    if (!wait_for_device) TF_RETURN_IF_ERROR(CheckDeviceKeyKnown(spec.device_key(), devices));
  }
  if (absl::StatusOr<ir::Target> t = ir::Target::Parse(spec.target().spec()); t.ok()) {
    for (int i = 0; i < spec.tasks_size(); ++i) {
      if (absl::Status s = ir::CheckWorkloadTarget(spec.tasks(i).workload(), *t); !s.ok())
        return absl::InvalidArgumentError(absl::StrCat("SubmitJob: task ", i, ": ", s.message()));
    }
    if (t->is_gpu()) {
      TF_RETURN_IF_ERROR(CheckCudaBuilders(*t, devices));
      TF_RETURN_IF_ERROR(CheckCudaAgents(*t, spec.device_key(), devices, "SubmitJob"));
    } else {
      TF_RETURN_IF_ERROR(CheckCpuBuilders(*t, devices));
      TF_RETURN_IF_ERROR(CheckCpuAgents(*t, spec.device_key(), devices));
    }
  }
  TF_ASSIGN_OR_RETURN(int64_t id, log_.CreateJob(spec, by.token_digest));
  Logger("server")->info("event=job_submitted job={} tasks={} target=\"{}\"", id,
                         spec.tasks_size(), spec.target().spec());
  on_change_();
  jobs_.Start(id);
  return id;
}

absl::StatusOr<v1::Device> JobManager::UpdateDevice(const std::string& device_id, int action) {
  auto find = [&]() -> absl::StatusOr<v1::Device> {
    TF_ASSIGN_OR_RETURN(std::vector<v1::Device> devices, devices_.List());
    for (const v1::Device& d : devices) {
      if (d.device_id() == device_id) return d;
    }
    return absl::NotFoundError(
        absl::StrCat("UpdateDevice: no device '", device_id, "' (tunefarm devices lists them)"));
  };
  TF_ASSIGN_OR_RETURN(v1::Device before, find());
  switch (action) {
    case v1::UpdateDeviceRequest::ACTION_DRAIN:
    case v1::UpdateDeviceRequest::ACTION_RESUME: {
      const bool drain = action == v1::UpdateDeviceRequest::ACTION_DRAIN;
      TF_RETURN_IF_ERROR(log_.SetDeviceDrained(device_id, drain));
      queue_.SetDrained(device_id, drain);
      Logger("server")->info("event=device_{} device={}", drain ? "drained" : "resumed", device_id);
      on_change_();
      return find();
    }
    case v1::UpdateDeviceRequest::ACTION_REMOVE:
      if (before.state() == v1::DEVICE_STATE_ONLINE) {
        return absl::FailedPreconditionError(absl::StrCat(
            "UpdateDevice: device '", device_id,
            "' is online: drain it, stop its process, then remove it once it is offline"));
      }
      TF_RETURN_IF_ERROR(log_.RemoveDevice(device_id));
      queue_.SetDrained(device_id, false);
      Logger("server")->info("event=device_removed device={}", device_id);
      return before;
    default:
      return absl::InvalidArgumentError("UpdateDevice: action must be drain, resume or remove");
  }
}

// A device key no agent has ever registered with, on a farm whose agents
// have other keys, is most likely a typo: refused, naming the keys there
// are, unless the submitter asks to wait for it. A farm with no agent yet
// takes any key.
absl::Status JobManager::CheckDeviceKeyKnown(const std::string& device_key,
                                             const std::vector<v1::Device>& devices) const {
  if (device_key.empty()) {
    return absl::InvalidArgumentError(
        "SubmitJob: --device_key is required (the key of the agents that measure the job)");
  }
  std::set<std::string> keys;
  for (const v1::Device& d : devices) {
    if (d.role() != v1::ROLE_AGENT) continue;
    if (d.device_key() == device_key) return absl::OkStatus();
    keys.insert(d.device_key());
  }
  if (keys.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "SubmitJob: --device_key '", device_key, "': no agent with this key has ever registered (",
      keys.size() == 1 ? "the key there is " : "the keys there are ", absl::StrJoin(keys, ", "),
      "); check the key, or pass --wait-for-device to queue the job for such an agent"));
}

// A CUDA job needs a worker whose toolkit builds its arch. With workers
// connected and none that can, the job is refused now, naming what they
// build, rather than queued for a worker that may never come; with no
// worker connected at all it waits, as CPU jobs do.
absl::Status JobManager::CheckCudaBuilders(const ir::Target& target,
                                           const std::vector<v1::Device>& devices) const {
  std::set<std::string> archs;
  std::set<std::string> toolkits;
  int workers = 0;
  for (const v1::Device& d : devices) {
    if (d.role() != v1::ROLE_WORKER || d.state() != v1::DEVICE_STATE_ONLINE) continue;
    ++workers;
    const v1::Capabilities& c = d.capabilities();
    archs.insert(c.cuda_archs().begin(), c.cuda_archs().end());
    if (!c.fingerprint().cuda_toolkit().empty()) toolkits.insert(c.fingerprint().cuda_toolkit());
  }
  if (workers == 0 || archs.count(target.arch())) return absl::OkStatus();
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
      absl::StrAppend(&msg, "; older archs need a worker with an older CUDA toolkit");
  }
  return absl::FailedPreconditionError(msg);
}

// A CPU job needs a worker whose LLVM builds its triple's architecture: with
// workers connected and none that can, refused now naming what they build.
absl::Status JobManager::CheckCpuBuilders(const ir::Target& target,
                                          const std::vector<v1::Device>& devices) const {
  std::set<std::string> triples, cpus, features;
  int workers = 0;
  bool builds = false;
  const std::string prefix = target.arch() + ":";
  for (const v1::Device& d : devices) {
    if (d.role() != v1::ROLE_WORKER || d.state() != v1::DEVICE_STATE_ONLINE) continue;
    ++workers;
    const v1::Capabilities& c = d.capabilities();
    for (const std::string& t : c.build_triples()) {
      builds |= t.substr(0, t.find('-')) == target.arch();
      triples.insert(t);
    }
    for (const std::string& n : c.llvm_cpus())
      if (absl::StartsWith(n, prefix)) cpus.insert(n.substr(prefix.size()));
    for (const std::string& n : c.llvm_features())
      if (absl::StartsWith(n, prefix)) features.insert(n.substr(prefix.size()));
  }
  if (workers == 0 || triples.empty()) return absl::OkStatus();  // none says what it builds
  if (!builds) {
    return absl::FailedPreconditionError(
        absl::StrCat("SubmitJob: --target: no connected compile worker builds ", target.arch(),
                     " (the ", workers, " connected build ", absl::StrJoin(triples, ", "), ")"));
  }
  // The names their LLVM knows, where they say (a worker of an older build
  // reports none).
  auto nearest = [](const std::set<std::string>& names, const std::string& name) {
    std::vector<std::string> out;
    for (size_t n = std::min<size_t>(name.size(), 4); n > 0 && out.empty(); --n) {
      for (const std::string& k : names) {
        if (k.compare(0, n, name, 0, n) == 0 && out.size() < 6) out.push_back(k);
      }
    }
    return out.empty() ? std::string() : absl::StrCat(" (close: ", absl::StrJoin(out, ", "), ")");
  };
  if (!cpus.empty() && target.cpu != "generic" && !cpus.count(target.cpu)) {
    return absl::InvalidArgumentError(absl::StrCat("SubmitJob: --target: -mcpu='", target.cpu,
                                                   "' is not a CPU the connected workers' LLVM "
                                                   "knows for ",
                                                   target.arch(), nearest(cpus, target.cpu)));
  }
  for (const std::string& a : target.attrs) {
    if (!features.empty() && !features.count(a.substr(1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("SubmitJob: --target: -mattr feature '", a.substr(1),
                       "' is not one the connected "
                       "workers' LLVM knows for ",
                       target.arch(), nearest(features, a.substr(1))));
    }
  }
  return absl::OkStatus();
}

// And its device key needs an agent that can run the target's code: the
// same architecture, and the CPU features its -mcpu and -mattr need. With
// agents of the key connected and none that can, the job is refused naming
// each agent's triple and what it lacks; with none connected it waits. An
// agent that reports no triple or no features is not judged on them.
absl::Status JobManager::CheckCpuAgents(const ir::Target& target, const std::string& device_key,
                                        const std::vector<v1::Device>& devices) const {
  const std::vector<std::string> need = target.required_cpu_features();
  std::vector<std::string> seen;
  for (const v1::Device& d : devices) {
    if (!OnlineAgentOf(d, device_key)) continue;
    const v1::Capabilities& c = d.capabilities();
    const std::string arch = c.triple().substr(0, c.triple().find('-'));
    if (!arch.empty() && arch != target.arch()) {
      seen.push_back(absl::StrCat(d.device_id(), " is ", c.triple()));
      continue;
    }
    std::vector<std::string> missing;
    if (c.features_size() > 0) {
      for (const std::string& f : need) {
        if (std::find(c.features().begin(), c.features().end(), f) == c.features().end())
          missing.push_back(f);
      }
    }
    if (missing.empty()) return absl::OkStatus();
    seen.push_back(absl::StrCat(d.device_id(), " lacks ", absl::StrJoin(missing, ",")));
  }
  if (seen.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "SubmitJob: --target '", target.ToString(), "': no connected agent with device key '",
      device_key, "' can run its code (", absl::StrJoin(seen, "; "), ")"));
}

// Likewise its device key needs an agent with a GPU of the target's arch
// (a job's, or a CUDA package's for RunModel, `caller`): with agents of the
// key connected and none such, it is refused naming what they have; with
// none connected it waits for one.
absl::Status JobManager::CheckCudaAgents(const ir::Target& target, const std::string& device_key,
                                         const std::vector<v1::Device>& devices,
                                         const char* caller) const {
  std::vector<std::string> seen;
  for (const v1::Device& d : devices) {
    if (!OnlineAgentOf(d, device_key)) continue;
    const v1::Capabilities& c = d.capabilities();
    // (An agent that does not report its shared memory is taken at its word.)
    const int64_t shared = c.gpu_shared_memory_per_block();
    if (c.has_gpu() &&
        std::find(c.cuda_archs().begin(), c.cuda_archs().end(), target.arch()) !=
            c.cuda_archs().end() &&
        (shared == 0 || target.max_shared_memory_per_block <= shared)) {
      return absl::OkStatus();
    }
    seen.push_back(absl::StrCat(
        d.device_id(), ": ",
        !c.has_gpu() ? "no GPU"
                     : absl::StrCat(c.gpu_name(), " ", absl::StrJoin(c.cuda_archs(), "/"),
                                    shared > 0 ? absl::StrCat(", ", shared, " B shared") : "")));
  }
  if (seen.empty()) return absl::OkStatus();
  // (Past the 48 KiB every GPU allows, the shared memory is asked for too.)
  const std::string with_shared =
      target.max_shared_memory_per_block > ir::kStaticSharedBytes
          ? absl::StrCat(" with ", target.max_shared_memory_per_block, " B of shared memory")
          : "";
  return absl::FailedPreconditionError(
      absl::StrCat(caller, ": no connected agent with device key '", device_key, "' has a ",
                   target.arch(), " GPU", with_shared, " (", absl::StrJoin(seen, "; "), ")"));
}

absl::Status JobManager::CheckOwner(const v1::Job& job, const Requester& by, const char* rpc,
                                    const char* action) const {
  if (by.admin) return absl::OkStatus();
  TF_ASSIGN_OR_RETURN(std::string owner_token, log_.JobOwnerToken(job.job_id()));
  const bool mine = owner_token.empty()
                        ? job.spec().owner() == by.name
                        : !by.token_digest.empty() && owner_token == by.token_digest;
  if (mine) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      rpc, ": job ", job.job_id(), " belongs to token '", job.spec().owner(), "'; token '", by.name,
      "' may not ", action, " it (its owner or an admin token may)"));
}

absl::StatusOr<v1::Job> JobManager::Cancel(int64_t job_id, const Requester& by) {
  {
    TF_ASSIGN_OR_RETURN(v1::Job before, log_.GetJob(job_id));
    TF_RETURN_IF_ERROR(CheckOwner(before, by, "CancelJob", "cancel"));
  }
  TF_ASSIGN_OR_RETURN(v1::Job job, log_.CancelJob(job_id, by.token_digest.empty()
                                                              ? std::string("cancelled by user")
                                                              : absl::StrCat("cancelled by token '",
                                                                             by.name, "'")));
  jobs_.Stop(job_id);
  queue_.CancelJob(job_id);
  Logger("server")->info("event=job_cancelled job={}", job_id);
  on_change_();
  return job;
}

absl::StatusOr<v1::Job> JobManager::Resume(int64_t job_id, const Requester& by) {
  TF_ASSIGN_OR_RETURN(v1::Job job, log_.GetJob(job_id));
  TF_RETURN_IF_ERROR(CheckOwner(job, by, "ResumeJob", "resume"));
  if (job.state() == v1::JOB_STATE_SUCCEEDED || job.state() == v1::JOB_STATE_CANCELLED) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " has ended (",
                                                      v1::JobState_Name(job.state()),
                                                      "); there is nothing to resume"));
  }
  if (!jobs_.Running(job_id)) {
    TF_RETURN_IF_ERROR(log_.SetJobState(
        job_id, v1::JOB_STATE_QUEUED,
        absl::StrCat("resuming after ", job.trials_done(), " trials",
                     job.failed_trials() > 0
                         ? absl::StrCat(" and ", job.failed_trials(), " that did not run")
                         : "")));
    jobs_.Start(job_id);
    Logger("server")->info("event=job_resumed job={} trials_done={}", job_id, job.trials_done());
    on_change_();
  }
  return log_.GetJob(job_id);
}

absl::Status JobManager::Recover(bool auto_resume) {
  for (v1::JobState st :
       {v1::JOB_STATE_QUEUED, v1::JOB_STATE_RUNNING, v1::JOB_STATE_WAITING_FOR_DEVICE}) {
    TF_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, log_.ListJobs(st, 10000));
    for (const v1::Job& j : jobs) {
      if (st == v1::JOB_STATE_QUEUED || auto_resume) {
        jobs_.Start(j.job_id());
      } else {
        TF_RETURN_IF_ERROR(log_.SetJobState(
            j.job_id(), v1::JOB_STATE_INTERRUPTED,
            absl::StrCat("the server stopped after ", j.trials_done(), " trials; `tunefarm resume ",
                         j.job_id(), "` continues it")));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<store::TuningLog::CommitResult> JobManager::ImportRecords(
    std::vector<v1::Record> records) {
  TF_RETURN_IF_ERROR(CheckImport(records));
  // Job ids are local to the farm that made the record, and so is what its
  // devices confirmed.
  for (v1::Record& r : records) {
    r.clear_job_id();
    r.clear_record_id();
    r.clear_confirmation();
    r.clear_confirmed_by();
    r.clear_confirm_cost_sec();
  }
  TF_ASSIGN_OR_RETURN(store::TuningLog::CommitResult res, log_.CommitRecords(records));
  Logger("server")->info("event=records_imported imported={} duplicates={}", res.inserted,
                         res.duplicates);
  return res;
}

void JobManager::Shutdown() { shutdown_ = true; }

absl::StatusOr<v1::ModelRunResult> JobManager::RunModel(const std::string& device_key,
                                                        const v1::ModelRunRequest& run,
                                                        const std::function<bool()>& abandoned) {
  if (device_key.empty()) return absl::InvalidArgumentError("RunModel: device_key is required");
  v1::ModelPackage pkg;
  if (run.package().empty() || !pkg.ParseFromString(run.package()) || pkg.format_version() == 0)
    return absl::InvalidArgumentError(
        "RunModel: the package is not a tunefarm model package (tunefarm build -o)");
  if (run.threads() < 0 || run.threads() > 256)
    return absl::InvalidArgumentError(
        absl::StrCat("RunModel: threads ", run.threads(), " is not in 0..256"));
  if (run.repeats() < 0 || run.repeats() > kMaxModelRepeats)
    return absl::InvalidArgumentError(absl::StrCat("RunModel: repeats ", run.repeats(),
                                                   " is not in 0..", kMaxModelRepeats));
  if (!(run.time_limit_s() >= 0) || run.time_limit_s() > 24 * 3600)
    return absl::InvalidArgumentError(
        "RunModel: time_limit_s must be between 0 (default) and 86400");
  v1::ModelPackage paired;
  if (!run.paired_package().empty() &&
      (!paired.ParseFromString(run.paired_package()) || paired.format_version() == 0))
    return absl::InvalidArgumentError(
        "RunModel: the paired package is not a tunefarm model package (tunefarm build -o)");
  if (run.min_repeats() < 0 || run.min_repeats() > kMaxModelRepeats || !(run.max_run_s() >= 0) ||
      !(run.output_tolerance() >= 0))
    return absl::InvalidArgumentError(
        "RunModel: min_repeats, max_run_s and output_tolerance must not be negative");
  const std::string queue = WorkQueue::MeasureQueue(device_key);
  // Taking work now, or registered and about to (its stream opens after
  // registration).
  bool connected = queue_.HasTaker(queue);
  if (!connected) {
    TF_ASSIGN_OR_RETURN(std::vector<v1::Device> devices, devices_.List());
    for (const v1::Device& d : devices) {
      connected = connected || (d.role() == v1::ROLE_AGENT && d.device_key() == device_key &&
                                d.state() == v1::DEVICE_STATE_ONLINE);
    }
  }
  if (!connected) {
    return absl::FailedPreconditionError(
        absl::StrCat("RunModel: no agent is connected under device key '", device_key,
                     "' (tunefarm devices lists them)"));
  }
  // The run waits in the key's queue like a measurement, ahead of tuning
  // work; an id of its own (negative: never a job's) lets it be dropped
  // when the caller goes away. Its kernels are built by workers first.
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    absl::StatusOr<v1::ReportResultRequest> result = absl::UnknownError("");
  };
  auto wait = std::make_shared<Wait>();
  const int64_t run_id = -next_model_run_.fetch_add(1);
  TF_RETURN_IF_ERROR(RebuildKernels(&pkg, device_key, run_id, abandoned));
  WorkQueue::Item item;
  item.queue = queue;
  item.job_id = run_id;
  item.priority = kModelRunPriority;
  *item.work.mutable_model_run() = run;
  item.work.mutable_model_run()->set_package(pkg.SerializeAsString());
  item.done = [wait](absl::StatusOr<v1::ReportResultRequest> r) {
    std::lock_guard<std::mutex> lock(wait->mu);
    wait->result = std::move(r);
    wait->done = true;
    wait->cv.notify_all();
  };
  queue_.Submit(std::move(item));
  Logger("server")->info("event=model_run_queued run={} key={} package_bytes={}", -run_id,
                         device_key, run.package().size());
  std::unique_lock<std::mutex> lock(wait->mu);
  TF_RETURN_IF_ERROR(WaitForRun(
      lock, wait->cv, [&] { return wait->done; }, run_id, abandoned));
  if (!wait->result.ok()) {
    return absl::AbortedError(
        absl::StrCat("RunModel: the run did not complete: ", wait->result.status().message()));
  }
  if (!wait->result->has_model_run())
    return absl::InternalError("RunModel: the agent answered with no run");
  return wait->result->model_run();
}

absl::Status JobManager::WaitForRun(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                                    const std::function<bool()>& done, int64_t run_id,
                                    const std::function<bool()>& abandoned) {
  while (!done()) {
    cv.wait_for(lock, std::chrono::milliseconds(100));
    if (done()) break;
    const bool stopping = shutdown_;
    if (abandoned() || stopping) {
      lock.unlock();
      queue_.CancelJob(run_id);
      return absl::CancelledError(stopping
                                      ? "RunModel: the server is shutting down"
                                      : "RunModel: the caller went away; the run was dropped");
    }
  }
  return absl::OkStatus();
}

absl::Status JobManager::RebuildKernels(v1::ModelPackage* pkg, const std::string& device_key,
                                        int64_t run_id, const std::function<bool()>& abandoned) {
  absl::StatusOr<ir::Target> target = ir::Target::Parse(pkg->target());
  if (!target.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunModel: the package's target: ", target.status().message()));
  }
  // CPU kernels by triple; CUDA kernels by arch, as cubins, or as PTX
  // through LLVM where the key's board has an older driver (a job's rule).
  const bool gpu = target->is_gpu();
  const std::string build_q =
      gpu ? WorkQueue::CudaBuildQueue(target->arch()) : WorkQueue::BuildQueue(target->triple);
  if (pkg->kernels_size() > 0 && !queue_.HasTaker(build_q)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RunModel: no connected compile worker builds ", gpu ? target->arch() : target->triple,
        " (the package's kernels are built again by a worker; tunefarm devices lists them)"));
  }
  bool llvm_ptx = false;
  if (gpu) {
    // Refused before any build when no online board of the key has the arch.
    TF_ASSIGN_OR_RETURN(std::vector<v1::Device> live, devices_.List());
    TF_RETURN_IF_ERROR(CheckCudaAgents(*target, device_key, live, "RunModel"));
    llvm_ptx = NeedsLlvmPtx(live, device_key, nullptr);
  }
  struct Builds {
    std::mutex mu;
    std::condition_variable cv;
    int pending = 0;
    std::vector<absl::StatusOr<v1::ReportResultRequest>> results;
  };
  auto builds = std::make_shared<Builds>();
  builds->pending = pkg->kernels_size();
  builds->results.assign(size_t(pkg->kernels_size()), absl::UnknownError("not built"));
  for (int k = 0; k < pkg->kernels_size(); ++k) {
    const v1::PackageKernel& kernel = pkg->kernels(k);
    WorkQueue::Item item;
    item.queue = build_q;
    item.job_id = run_id;
    item.priority = kModelRunPriority;
    v1::BuildRequest* b = item.work.mutable_build();
    *b->mutable_workload() = kernel.workload();
    b->mutable_target()->set_spec(pkg->target());
    *b->mutable_schedule() = kernel.schedule();
    b->set_kind(!gpu       ? v1::ARTIFACT_KIND_SHARED_OBJECT
                : llvm_ptx ? v1::ARTIFACT_KIND_PTX
                           : v1::ARTIFACT_KIND_CUBIN);
    b->set_llvm_ptx(llvm_ptx);
    item.done = [builds, k](absl::StatusOr<v1::ReportResultRequest> r) {
      std::lock_guard<std::mutex> lock(builds->mu);
      builds->results[size_t(k)] = std::move(r);
      --builds->pending;
      builds->cv.notify_all();
    };
    queue_.Submit(std::move(item));
  }
  {
    std::unique_lock<std::mutex> lock(builds->mu);
    TF_RETURN_IF_ERROR(WaitForRun(
        lock, builds->cv, [&] { return builds->pending == 0; }, run_id, abandoned));
  }
  for (int k = 0; k < pkg->kernels_size(); ++k) {
    v1::PackageKernel* kernel = pkg->mutable_kernels(k);
    const absl::StatusOr<v1::ReportResultRequest>& r = builds->results[size_t(k)];
    const std::string what =
        absl::StrCat("RunModel: kernel ", k, " (", kernel->workload_key(), ")");
    if (!r.ok()) return absl::AbortedError(absl::StrCat(what, ": ", r.status().message()));
    if (!r->has_build() || !r->build().error().empty() || r->build().artifact().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": its schedule does not build: ",
          r->has_build() ? r->build().error() : std::string("the worker sent no build")));
    }
    if (!google::protobuf::util::MessageDifferencer::Equals(r->build().signature(),
                                                            kernel->signature())) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": the package's kernel signature is not what its schedule builds to"));
    }
    kernel->set_shared_object(r->build().artifact());
  }
  Logger("server")->info("event=model_kernels_rebuilt run={} kernels={}", -run_id,
                         pkg->kernels_size());
  return absl::OkStatus();
}

}  // namespace tunefarm::server
