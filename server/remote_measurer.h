// RemoteMeasurer: the search's Measurer over the farm. Every candidate is a
// build lease (any compile worker that builds the target's triple) and then
// a measure lease (any agent of the job's device key); the batch's leases
// are all queued at once, so builds and measurements overlap across
// workers and agents. Workloads too big for the agent's float64 reference
// get the default schedule's build attached as the reference.
//
// While no worker or agent can take the job's work, Measure keeps waiting
// and says so through `on_wait`; when `stopped` turns true it cancels the
// job's outstanding work and returns (those results are marked cancelled).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "search/task.h"
#include "server/work_queue.h"
#include "tunefarm/v1/records.pb.h"

namespace tunefarm::server {

class RemoteMeasurer : public search::Measurer {
 public:
  // What a record needs beyond search::MeasureResult.
  struct Detail {
    v1::MeasureStatus status = v1::MEASURE_STATUS_UNSPECIFIED;
    std::vector<double> costs;
    double build_sec = 0, run_sec = 0;
    v1::Fingerprint fingerprint;  // the worker's compiler + the agent's device
    std::string device_id;        // the agent that measured it
    bool cancelled = false;
    // A new best for its task is PENDING while another device of the key
    // measures it again (SINGLE_DEVICE when there is none); others NOT_NEEDED.
    v1::Confirmation confirmation = v1::CONFIRMATION_NOT_NEEDED;
  };

  struct Options {
    int64_t job_id = 0;
    int priority = 0;
    std::string device_key;
    v1::MeasureOptions measure;
    int threads = 0;  // kernel threads on the agent; 0: every core of the device
    bool llvm_ptx = false;  // cuda builds: BuildRequest.llvm_ptx (NeedsLlvmPtx)
    uint64_t input_seed = 1;
    std::function<bool()> stopped = [] { return false; };
    std::function<void(const std::string&)> on_wait = [](const std::string&) {};
    // Called once per candidate (in its wire form) as its result arrives (not for cancelled
    // work), before the result's ReportResult is acknowledged: the job
    // commits the record here, so an acknowledged result is a stored one.
    std::function<void(const search::Task&, const v1::Schedule&, const search::MeasureResult&,
                       const Detail&)>
        on_result;
    // Confirmation of new bests (docs/security.md), on when both are set.
    // `known_best`: the lowest mean cost of the task's workload and target
    // among records that rank (0: none). A result below it would rank
    // first: another device of the key measures it again, and
    // `on_confirmation` gets the outcome (Confirmation); a second
    // measurement that is lost or cancelled gives none (the record stays
    // pending). It may run after Measure returned, and after the measurer
    // is gone.
    std::function<double(const search::Task&)> known_best;
    struct Confirmation {
      v1::Confirmation outcome = v1::CONFIRMATION_DISPUTED;
      std::string confirmed_by;     // the second device
      double confirm_seconds = 0;   // its median (0: it did not measure it OK)
      // Whose timing disagrees, when they do: the first device when the
      // second measured it slower (DISPUTED: the record does not rank);
      // the second when it measured it faster (CONFIRMED: the record ranks
      // at its own, slower time) or not OK at all (DISPUTED). "" when they
      // agree.
      std::string suspect;
    };
    std::function<void(const v1::Workload&, const v1::Schedule&, const Detail& first,
                       const Confirmation&)>
        on_confirmation;
    // Agreement: the two medians within a factor 1 + this.
    double confirm_tolerance = 0.5;
  };
  RemoteMeasurer(WorkQueue& queue, Options options) : queue_(queue), options_(std::move(options)) {}

  std::vector<search::MeasureResult> Measure(const search::Task& task,
                                             const std::vector<schedule::Trace>& schedules) override;
  // Details of the last batch, in its order.
  const std::vector<Detail>& details() const { return details_; }

 private:
  // What a task's measurements are checked against: the interpreter's
  // output (float32 bytes), or the default schedule's build.
  struct Reference {
    std::string output;
    std::string artifact;
    v1::KernelSignature signature;
    v1::Schedule schedule;
    std::string error;
  };
  // One Measure call's candidates, shared with their work's callbacks; on
  // Measure's stack until its Wait ends. All but task/ref/ref_key under mu_.
  struct Batch {
    const search::Task& task;
    const Reference& ref;
    std::string ref_key;
    std::vector<v1::Schedule> schedules;  // wire form, in the batch's order
    std::vector<search::MeasureResult> results;
    int pending = 0;  // candidates not yet finished
  };
  // The end of candidate `i`: records `status`, calls on_result (unless
  // cancelled) and counts it done. mu_ held.
  void FinishLocked(Batch& batch, size_t i, v1::MeasureStatus status, const std::string& error);
  // Finishes candidate `i` whose work was lost or cancelled (`s`). mu_ held.
  void LostLocked(Batch& batch, size_t i, const absl::Status& s);
  // The build lease of candidate `i`; its result goes to OnBuilt.
  WorkQueue::Item BuildItem(Batch& batch, size_t i);
  // Candidate `i`'s build result: finishes it on an error, else submits its
  // measure lease. Takes mu_ (released before the submit).
  void OnBuilt(Batch& batch, size_t i, absl::StatusOr<v1::ReportResultRequest> r);
  // The measure lease of candidate `i` built as `b`; its result goes to
  // OnMeasured. Called with mu_ held.
  WorkQueue::Item MeasureItem(Batch& batch, size_t i, const v1::BuildResult& b);
  // Candidate `i`'s measurement: checks it, finishes it, and submits a
  // confirmation of a new best. Takes mu_ (held throughout).
  void OnMeasured(Batch& batch, size_t i, const v1::MeasureRequest& request,
                  absl::StatusOr<v1::ReportResultRequest> r);
  const Reference& InterpretedFor(const search::Task& task);
  const Reference& ReferenceFor(const search::Task& task);
  // Whether the OK result `detail` (mean `mean_sec`) of `task` is to be
  // measured again elsewhere; marks it PENDING or SINGLE_DEVICE. mu_ held.
  bool NeedsConfirmationLocked(const search::Task& task, double mean_sec, Detail& detail);
  // Queues `request` again for another device than `first.device_id`.
  void SubmitConfirmation(const search::Task& task, const v1::Schedule& schedule,
                          const v1::MeasureRequest& request, const Detail& first,
                          double first_median);
  // Blocks until `pending` reaches 0 (or the job stops).
  void Wait(const search::Task& task, const int& pending, std::unique_lock<std::mutex>& lock);

  WorkQueue& queue_;
  Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Reference> references_;  // by task key
  std::vector<Detail> details_;
};

}  // namespace tunefarm::server
