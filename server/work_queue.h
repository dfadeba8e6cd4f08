// WorkQueue: the farm's queued build and measure work and the leases that
// hand it to connected workers and agents.
//
// Work is queued under a key: "build:<triple>" (any worker that lists the
// triple among its build_triples), "build:cuda:<sm_XX>" (any worker that
// lists the arch among its cuda_archs) or "measure:<device key>" (any agent
// registered under that key). A session takes work with Next(); the server
// writes each lease down the session's StreamWork call. A lease lives while
// its session heartbeats (every heartbeat extends all of the session's
// leases by lease_timeout), so a long measurement is never cut by the
// queue: time limits are the agent's, counted from when it starts. A lease
// whose session closes or stops heartbeating goes back to the front of its
// queue; work lost `max_attempts` times ends with an error (the candidate
// that keeps killing devices is not retried forever).
//
// Fairness: within a key, higher priority first; among jobs of the same
// priority, the job that has been handed the fewest leases. Thread safe;
// `done` callbacks run without the lock held, exactly once per item.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::server {

namespace v1 = ::tunefarm::v1;

class WorkQueue {
 public:
  struct Options {
    absl::Duration lease_timeout = absl::Seconds(6);
    int max_attempts = 2;
    std::function<absl::Time()> now = [] { return absl::Now(); };
    // Called on every lease as it is handed out, id assigned (the server
    // signs measurements and model runs here).
    std::function<void(v1::WorkLease*)> on_lease;
  };
  // The result reported for the lease, or an error: NOT_FOUND/ABORTED when
  // the work was lost max_attempts times, CANCELLED when its job was.
  using Done = std::function<void(absl::StatusOr<v1::ReportResultRequest>)>;

  struct Item {
    std::string queue;  // "build:<triple>" or "measure:<device key>"
    int64_t job_id = 0;
    int priority = 0;
    v1::WorkLease work;  // build or measure set; lease_id and deadline are assigned
    Done done;
    // Never leased to this device (a measurement to confirm its timing
    // elsewhere); waits for another device of the queue.
    std::string exclude_device;
  };

  WorkQueue() : WorkQueue(Options()) {}
  explicit WorkQueue(Options options) : options_(std::move(options)) {}

  static std::string BuildQueue(const std::string& triple) { return "build:" + triple; }
  static std::string CudaBuildQueue(const std::string& arch) { return "build:cuda:" + arch; }
  static std::string MeasureQueue(const std::string& device_key) { return "measure:" + device_key; }

  void Submit(Item item);

  // A session that takes work from `queues`, at most `max_in_flight` at once.
  void OpenSession(const std::string& session_id, const std::string& device_id,
                   std::vector<std::string> queues, int max_in_flight);
  // Its leases go back to their queues (counted as lost attempts).
  void CloseSession(const std::string& session_id);
  // The next lease for the session: waits up to `wait`; nullopt on timeout or
  // when the session is closed (check SessionOpen).
  std::optional<v1::WorkLease> Next(const std::string& session_id, absl::Duration wait);
  bool SessionOpen(const std::string& session_id);
  // Extends the session's leases; returns the ids it holds that are no
  // longer live (expired or cancelled: drop their work).
  std::vector<std::string> Heartbeat(const std::string& session_id,
                                     const std::vector<std::string>& held);
  // Completes a lease. Returns whether it was live; a late result for work
  // that was re-queued still completes it when it comes from the session
  // that held the lease, or another open session of the same device.
  // NOT_FOUND for a lease id never issued or already completed;
  // PERMISSION_DENIED for another session's lease.
  absl::StatusOr<bool> Complete(const std::string& session_id,
                                const v1::ReportResultRequest& result);
  // Drops the job's queued work and leases; their `done` gets CANCELLED.
  void CancelJob(int64_t job_id);
  // Moves expired leases back to their queues (Next does this as it waits).
  void Expire();

  // Queued items per queue key, and leases out.
  std::map<std::string, int> QueuedByKey();
  int LeasesOut();
  // A lease in flight as the dashboard shows it.
  struct LeaseView {
    std::string device_id;
    int64_t job_id = 0;
    std::string kind;       // "build", "measure" or "model run"
    v1::Workload workload;  // of a build or a measurement
    absl::Time leased_at;
  };
  // Every lease in flight, oldest first.
  std::vector<LeaseView> Leases();
  // Whether any open session of a device not drained takes work from `queue`.
  bool HasTaker(const std::string& queue);
  // The same, of a device other than `device`.
  bool HasOtherTaker(const std::string& queue, const std::string& device);

  // A drained device is leased no new work (what it holds it finishes and
  // reports); undrained, it takes work again.
  void SetDrained(const std::string& device_id, bool drained);

 private:
  struct Queued {
    int64_t id = 0;
    Item item;
    int attempts = 0;  // leases of it lost so far
    std::string last_device;
    std::string lost_by;  // the device whose lease of it was lost last
  };
  struct Lease {
    Queued q;
    std::string session_id;
    std::string device_id;
    absl::Time deadline;
    absl::Time leased_at;
  };
  struct Session {
    std::string device_id;
    std::vector<std::string> queues;
    int max_in_flight = 1;
    std::set<std::string> leases;
    // Each session waits on its own condition, so new work wakes one
    // session that can take it, not every connected device.
    std::shared_ptr<std::condition_variable> cv = std::make_shared<std::condition_variable>();
    bool waiting = false;
  };
  using Callbacks = std::vector<std::function<void()>>;
  void RequeueLocked(Lease lease, const std::string& why, Callbacks* callbacks);
  void ExpireLocked(Callbacks* callbacks);
  std::optional<Queued> TakeLocked(const Session& s);
  // Whether an open session of another device than `device` takes `queue`.
  bool OtherDeviceTakesLocked(const std::string& queue, const std::string& device) const;
  static void RunAll(Callbacks& callbacks);
  // Wakes one waiting session that takes from `queue` and has room.
  void WakeOneLocked(const std::string& queue);
  void WakeAllLocked();

  const Options options_;
  std::mutex mu_;
  absl::Time next_expiry_scan_ = absl::InfinitePast();
  std::map<std::string, std::deque<Queued>> queues_;
  std::map<std::string, Lease> leases_;  // by lease id
  std::map<std::string, Session> sessions_;
  std::map<int64_t, int64_t> served_;    // leases handed out per job
  std::set<std::string> drained_;        // device ids
  struct Late {
    int64_t item = 0;                   // the item the lease carried
    std::string session_id, device_id;  // who held it
  };
  std::map<std::string, Late> late_;  // by lost lease id
  int64_t next_item_ = 1;
};

}  // namespace tunefarm::server
