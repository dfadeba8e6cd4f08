// JobRunner: runs the tuning loop of each job on the farm, one thread per
// running job. The job's tasks are tuned by the search (search::Tuner) with
// a RemoteMeasurer; every result is committed to the log database with the
// job id as it arrives (so trials done = the job's records), and the job's
// state moves QUEUED -> RUNNING (WAITING_FOR_DEVICE while no worker or agent
// can take its work) -> SUCCEEDED / FAILED / CANCELLED. A job stopped by a
// server shutdown is left INTERRUPTED.
//
// Start-up of a job (first run or resume): the records already in the
// database for its workloads on its target are history (never proposed
// again) and the target's other records train the cost model (warm start);
// the budget already spent is the job's own count of records that ran
// (status OK). Its failed trials spend no budget: a resumed job measures
// again first those a board may have failed (all but build errors and
// wrong results), and a default schedule that never ran is measured again.
// A run makes at most twice the trials its budget has left, so a broken
// board cannot keep a job going; one whose every trial failed ends FAILED,
// its failures counted by status. Records made on other hardware are reused
// with a warning or left out, by policy.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "search/tuner.h"
#include "store/group_commit.h"
#include "store/tuning_log.h"
#include "server/work_queue.h"

namespace tunefarm::server {

// The kind of failure an error message reports: the message with what
// varies from one candidate to the next taken out (a word holding a '/'
// becomes "<path>", a word holding a digit "#"), so the same failure with a
// different temporary file, lease or size is the same kind.
std::string FailureKind(absl::string_view error);

// Whether a cuda job's kernels must be built as PTX through LLVM (the
// build route of BuildRequest.llvm_ptx): an online agent of `device_key`
// reports a CUDA driver whose major version is below every online
// worker's CUDA toolkit (a JetPack 5 or 6 board, CUDA 11.4 / 12.x, against
// CUDA 13 workers: their cubins and PTX would not load). `why` (may be
// null) then says which board and toolkit.
bool NeedsLlvmPtx(const std::vector<v1::Device>& devices, const std::string& device_key,
                  std::string* why);

class JobRunner {
 public:
  struct Options {
    int default_trials_per_task = 64;  // when the budget names no trial count
    int batch = 16;
    // Records of the job's workloads measured on other hardware (CPU model
    // in the fingerprint unlike every agent registered under the job's
    // device key): kWarn reuses them and says how many in the job's status;
    // kRefuse leaves them out, so those schedules are measured again.
    enum class FingerprintPolicy { kWarn, kRefuse };
    FingerprintPolicy fingerprint_policy = FingerprintPolicy::kWarn;
    // Jobs tuned at once, a thread each; more wait, QUEUED, in start order.
    int max_running_jobs = 32;
    // The farm's devices with their live state (DeviceRegistry::List), for
    // the choices made at a job's start (NeedsLlvmPtx). Unset: none online.
    std::function<std::vector<v1::Device>()> live_devices;
    // A new best measured again on a second device of the key confirms
    // when the two medians are within a factor 1 + this (RemoteMeasurer).
    double confirm_tolerance = 0.5;
  };
  JobRunner(store::TuningLog& log, WorkQueue& queue, std::function<void()> on_change,
            Options options)
      : log_(log), queue_(queue), on_change_(std::move(on_change)), options_(options) {}
  ~JobRunner();

  // Runs the job on a thread of its own (no-op if it is running or waiting
  // already); with max_running_jobs running, it waits for a slot.
  void Start(int64_t job_id);
  // Stops a running job's loop, or drops a waiting one; the caller has
  // already stored its state.
  void Stop(int64_t job_id);
  // Stops every job: their state becomes INTERRUPTED (resumable).
  void Shutdown();
  bool Running(int64_t job_id);
  // The committer of every job's results (its stats feed the metrics).
  const store::GroupCommitter& commits() const { return commits_; }

 private:
  struct Running_ {
    std::thread thread;
    std::atomic<bool> stop{false};
    std::atomic<bool> done{false};
    std::atomic<bool> exited{false};  // the thread has nothing left to do
  };
  // Starts `job_id`'s thread (mu_ held).
  void LaunchLocked(int64_t job_id);
  // Starts waiting jobs while there are free slots (a finishing job's
  // thread calls it).
  void LaunchWaiting();
  void RunJob(int64_t job_id, Running_* r);
  // Restores a resumed job's saved search state into `tuner`; false (and a
  // warning) when there is none that restores: the search continues from
  // the records.
  bool RestoreSearch(int64_t job_id, search::Tuner* tuner);
  void Reap();

  store::TuningLog& log_;
  store::GroupCommitter commits_{log_};  // results of all jobs
  WorkQueue& queue_;
  std::function<void()> on_change_;
  const Options options_;
  std::mutex mu_;
  bool shutting_down_ = false;
  std::map<int64_t, std::unique_ptr<Running_>> jobs_;
  std::deque<int64_t> waiting_;                     // jobs started while every slot was taken
  std::vector<std::unique_ptr<Running_>> retired_;  // earlier runs, threads exiting
};

}  // namespace tunefarm::server
