// JobManager: what the farm does for a user request beyond reading the log
// database. It owns job submission (a model's ONNX import and task
// extraction, the checks that a CUDA job can ever run), cancel and resume,
// record imports, the jobs a restarted server finds, and model runs on a
// board. The gRPC services only translate to and from these calls.
// Thread safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/target.h"
#include "server/device_registry.h"
#include "server/job_runner.h"
#include "store/tuning_log.h"
#include "server/work_queue.h"
#include "tunefarm/v1/tuning.pb.h"

namespace tunefarm::server {

// Who asks for a change to a job: the calling token's name and the SHA-256
// of its secret (empty on a server without tokens), and whether its role is
// admin.
struct Requester {
  std::string name = "anonymous";
  std::string token_digest;
  bool admin = true;
};

class JobManager {
 public:
  // `on_change` is called after every change of a job's state made here.
  JobManager(store::TuningLog& log, DeviceRegistry& devices, WorkQueue& queue, JobRunner& jobs,
             std::function<void()> on_change)
      : log_(log), devices_(devices), queue_(queue), jobs_(jobs), on_change_(std::move(on_change)) {}

  // Stores the job and starts it; its id. A spec with an ONNX model gets
  // the model's tasks (the model's bytes are not kept). INVALID_ARGUMENT
  // for a spec that names no work or a model that does not import;
  // FAILED_PRECONDITION for a CUDA job no connected worker or agent of
  // its key can serve; RESOURCE_EXHAUSTED when `owner` (the submitting
  // token: its name is stored as spec.owner, its digest with the job) has
  // max_jobs_per_owner jobs that have not ended.
  // `wait_for_device`: queue it even when no agent of its key has ever
  // registered while agents of other keys have (a typo, otherwise).
  absl::StatusOr<int64_t> Submit(v1::JobSpec spec, const Requester& owner = {},
                                 bool wait_for_device = false);

  // Drains, resumes or removes a device (UpdateDeviceRequest's actions);
  // the device as it is now (as it was, for a removal). Removing an online
  // device is refused: drain it and stop its process first.
  absl::StatusOr<v1::Device> UpdateDevice(const std::string& device_id, int action);
  // Cancel and Resume are for the job's owner (the token that submitted
  // it) or an admin: PERMISSION_DENIED naming the owner otherwise. A job
  // stored without its token's digest belongs to every token of its
  // owner's name.
  absl::StatusOr<v1::Job> Cancel(int64_t job_id, const Requester& by = {});
  // Starts a job that is not running and has not ended (FAILED_PRECONDITION
  // for one that succeeded or was cancelled); the job as it is then. A
  // failed job gets its failed trials measured again (JobRunner).
  absl::StatusOr<v1::Job> Resume(int64_t job_id, const Requester& by = {});
  // The jobs a previous server left: queued ones start; running or waiting
  // ones become INTERRUPTED, or start again with `auto_resume`.
  absl::Status Recover(bool auto_resume);

  // Records from another farm (their job and record ids dropped).
  absl::StatusOr<store::TuningLog::CommitResult> ImportRecords(std::vector<v1::Record> records);

  // Runs a model package on an agent of `device_key`, ahead of tuning work
  // in its queue, and waits for the result. The package's native code never
  // reaches the board as the client sent it: every kernel is built again by
  // a compile worker from its workload and schedule, and those builds are
  // what the board loads. FAILED_PRECONDITION when no agent of the key (or
  // no worker of the package's target) is connected, or a kernel's schedule
  // does not build to the kernel the package describes; CANCELLED when
  // `abandoned` turns true (polled) or at Shutdown, and the run is dropped;
  // ABORTED when the run did not complete.
  absl::StatusOr<v1::ModelRunResult> RunModel(const std::string& device_key,
                                              const v1::ModelRunRequest& run,
                                              const std::function<bool()>& abandoned);

  void set_max_jobs_per_owner(int n) { max_jobs_per_owner_ = n; }

  // Ends waiting model runs promptly.
  void Shutdown();

 private:
  // OK when `by` may change `job`; the error names `rpc` and `action`
  // ("cancel", "resume").
  absl::Status CheckOwner(const v1::Job& job, const Requester& by, const char* rpc,
                          const char* action) const;
  // Adds the tasks of the spec's ONNX model to it and drops the model.
  absl::Status ImportModel(v1::JobSpec* spec) const;
  // Against the devices registered now (`devices`).
  absl::Status CheckCudaBuilders(const ir::Target& target,
                                 const std::vector<v1::Device>& devices) const;
  absl::Status CheckCudaAgents(const ir::Target& target, const std::string& device_key,
                               const std::vector<v1::Device>& devices, const char* caller) const;
  absl::Status CheckDeviceKeyKnown(const std::string& device_key,
                                   const std::vector<v1::Device>& devices) const;
  absl::Status CheckCpuBuilders(const ir::Target& target,
                                const std::vector<v1::Device>& devices) const;
  absl::Status CheckCpuAgents(const ir::Target& target, const std::string& device_key,
                              const std::vector<v1::Device>& devices) const;
  // Waits on `cv` (its `lock` held) until `done()`; when `abandoned()` turns
  // true or the server shuts down, drops the work of `run_id` (the lock
  // released) and says so, CANCELLED.
  absl::Status WaitForRun(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                          const std::function<bool()>& done, int64_t run_id,
                          const std::function<bool()>& abandoned);
  // Replaces every kernel's shared object (a CUDA package's GpuModule) in
  // `pkg` by a worker's build of its workload and schedule (work of
  // `run_id`, waited for like the run), for the boards of `device_key`.
  absl::Status RebuildKernels(v1::ModelPackage* pkg, const std::string& device_key, int64_t run_id,
                              const std::function<bool()>& abandoned);

  store::TuningLog& log_;
  DeviceRegistry& devices_;
  WorkQueue& queue_;
  JobRunner& jobs_;
  std::function<void()> on_change_;
  // Model runs go ahead of tuning work in their key's queue.
  static constexpr int kModelRunPriority = 1000;
  std::atomic<int64_t> next_model_run_{1};
  std::atomic<bool> shutdown_{false};
  int max_jobs_per_owner_ = 256;
};

}  // namespace tunefarm::server
