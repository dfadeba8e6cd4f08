#include "server/work_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/access_tokens.h"
#include "common/logging.h"

namespace tunefarm::server {

void WorkQueue::RunAll(Callbacks& callbacks) {
  for (auto& c : callbacks) c();
  callbacks.clear();
}

void WorkQueue::WakeOneLocked(const std::string& queue) {
  for (auto& [id, s] : sessions_) {
    if (!s.waiting || int(s.leases.size()) >= s.max_in_flight) continue;
    if (std::find(s.queues.begin(), s.queues.end(), queue) == s.queues.end()) continue;
    s.waiting = false;  // the next piece of work wakes another one
    s.cv->notify_one();
    return;
  }
}

void WorkQueue::WakeAllLocked() {
  for (auto& [id, s] : sessions_) s.cv->notify_all();
}

void WorkQueue::Submit(Item item) {
  std::lock_guard<std::mutex> lock(mu_);
  Queued q;
  q.id = next_item_++;
  std::string key = item.queue;
  q.item = std::move(item);
  q.item.work.set_queued_unix_us(absl::ToUnixMicros(options_.now()));
  const bool excludes = !q.item.exclude_device.empty();
  queues_[key].push_back(std::move(q));
  // The one woken might be the excluded device.
  if (excludes) {
    WakeAllLocked();
  } else {
    WakeOneLocked(key);
  }
}

void WorkQueue::OpenSession(const std::string& session_id, const std::string& device_id,
                            std::vector<std::string> queues, int max_in_flight) {
  std::lock_guard<std::mutex> lock(mu_);
  Session& s = sessions_[session_id];
  s.device_id = device_id;
  s.queues = std::move(queues);
  s.max_in_flight = std::max(1, max_in_flight);
}

void WorkQueue::CloseSession(const std::string& session_id) {
  Callbacks callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return;
    std::set<std::string> held = it->second.leases;
    std::string device = it->second.device_id;
    it->second.cv->notify_all();  // its Next returns
    sessions_.erase(it);
    for (const std::string& id : held) {
      auto l = leases_.find(id);
      if (l == leases_.end()) continue;
      Lease lease = std::move(l->second);
      leases_.erase(l);
      RequeueLocked(std::move(lease), absl::StrCat("device ", device, " disconnected"), &callbacks);
    }
  }
  RunAll(callbacks);
}

bool WorkQueue::SessionOpen(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.count(session_id) > 0;
}

void WorkQueue::RequeueLocked(Lease lease, const std::string& why, Callbacks* callbacks) {
  const std::string lease_id = lease.q.item.work.lease_id();
  const std::string session_id = lease.session_id, device_id = lease.device_id;
  Queued q = std::move(lease.q);
  q.lost_by = device_id;
  q.attempts++;
  q.last_device = why;
  Logger("server")->warn("event=work_requeued lease={} job={} queue={} attempts={} why=\"{}\"",
                         lease_id, q.item.job_id, q.item.queue, q.attempts, why);
  if (q.attempts >= options_.max_attempts) {
    Done done = std::move(q.item.done);
    std::string msg = absl::StrCat("work lost ", q.attempts, " times (last: ", why, ")");
    callbacks->push_back([done, msg] { done(absl::AbortedError(msg)); });
    return;
  }
  late_[lease_id] = Late{q.id, session_id, device_id};
  std::string key = q.item.queue;
  queues_[key].push_front(std::move(q));
  WakeOneLocked(key);
}

void WorkQueue::ExpireLocked(Callbacks* callbacks) {
  absl::Time now = options_.now();
  // Leases live for lease_timeout and heartbeats only extend them: a scan
  // every 50 ms finds each expiry soon enough without walking every lease
  // on every call.
  if (now < next_expiry_scan_) return;
  next_expiry_scan_ = now + absl::Milliseconds(50);
  std::vector<std::string> expired;
  for (const auto& [id, l] : leases_) {
    if (l.deadline < now) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    auto l = leases_.find(id);
    Lease lease = std::move(l->second);
    leases_.erase(l);
    auto s = sessions_.find(lease.session_id);
    std::string device = "?";
    if (s != sessions_.end()) {
      s->second.leases.erase(id);
      device = s->second.device_id;
    }
    RequeueLocked(std::move(lease), absl::StrCat("device ", device, " missed its lease deadline"),
                  callbacks);
  }
}

void WorkQueue::Expire() {
  Callbacks callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_expiry_scan_ = absl::InfinitePast();
    ExpireLocked(&callbacks);
  }
  RunAll(callbacks);
}

bool WorkQueue::OtherDeviceTakesLocked(const std::string& queue, const std::string& device) const {
  for (const auto& [id, other] : sessions_) {
    if (other.device_id != device && !drained_.count(other.device_id) &&
        std::find(other.queues.begin(), other.queues.end(), queue) != other.queues.end()) {
      return true;
    }
  }
  return false;
}

std::optional<WorkQueue::Queued> WorkQueue::TakeLocked(const Session& s) {
  if (int(s.leases.size()) >= s.max_in_flight || drained_.count(s.device_id)) return std::nullopt;
  std::deque<Queued>* best_q = nullptr;
  std::deque<Queued>::iterator best;
  for (const std::string& key : s.queues) {
    auto qi = queues_.find(key);
    if (qi == queues_.end()) continue;
    // Work whose lease this device lost (it went silent) goes to another
    // device of the queue while there is one, never straight back.
    const bool others = OtherDeviceTakesLocked(key, s.device_id);
    for (auto it = qi->second.begin(); it != qi->second.end(); ++it) {
      if (it->item.exclude_device == s.device_id) continue;
      // (An item that excludes a device may have no third one to go to.)
      if (others && it->lost_by == s.device_id && it->item.exclude_device.empty()) continue;
      if (best_q == nullptr) {
        best_q = &qi->second, best = it;
        continue;
      }
      const Item& a = it->item;
      const Item& b = best->item;
      if (a.priority != b.priority) {
        if (a.priority > b.priority) best_q = &qi->second, best = it;
        continue;
      }
      // Same priority: the job served least so far; ties keep queue order
      // (a re-queued item sits at the front).
      if (a.job_id != b.job_id && served_[a.job_id] < served_[b.job_id]) {
        best_q = &qi->second, best = it;
      }
    }
  }
  if (best_q == nullptr) return std::nullopt;
  Queued q = std::move(*best);
  best_q->erase(best);
  return q;
}

std::optional<v1::WorkLease> WorkQueue::Next(const std::string& session_id, absl::Duration wait) {
  Callbacks callbacks;
  std::optional<v1::WorkLease> out;
  {
    std::unique_lock<std::mutex> lock(mu_);
    absl::Time until = absl::Now() + wait;
    while (true) {
      ExpireLocked(&callbacks);
      auto s = sessions_.find(session_id);
      if (s == sessions_.end()) break;
      std::optional<Queued> q = TakeLocked(s->second);
      if (q) {
        // Unguessable: a lease id is half of what completes the work.
        absl::StatusOr<std::string> random = RandomHex(16);
        if (!random.ok()) {
          Logger("server")->error("event=lease_id_failed error=\"{}\"", random.status().ToString());
          break;
        }
        std::string id = "L" + *random;
        q->item.work.set_lease_id(id);
        q->item.work.set_job_id(q->item.job_id);
        absl::Time deadline = options_.now() + options_.lease_timeout;
        q->item.work.set_deadline_unix_ms(absl::ToUnixMillis(deadline));
        served_[q->item.job_id]++;
        if (options_.on_lease) options_.on_lease(&q->item.work);
        out = q->item.work;
        s->second.leases.insert(id);
        leases_[id] =
            Lease{*std::move(q), session_id, s->second.device_id, deadline, options_.now()};
        break;
      }
      absl::Duration left = until - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      // Wake now and then to expire leases of silent sessions.
      std::shared_ptr<std::condition_variable> cv = s->second.cv;
      s->second.waiting = true;
      cv->wait_for(lock, absl::ToChronoNanoseconds(std::min(left, absl::Milliseconds(200))));
      if (auto again = sessions_.find(session_id); again != sessions_.end())
        again->second.waiting = false;
    }
  }
  RunAll(callbacks);
  return out;
}

std::vector<std::string> WorkQueue::Heartbeat(const std::string& session_id,
                                              const std::vector<std::string>& held) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> gone;
  auto s = sessions_.find(session_id);
  if (s == sessions_.end()) return held;
  absl::Time deadline = options_.now() + options_.lease_timeout;
  for (const std::string& id : s->second.leases) leases_[id].deadline = deadline;
  for (const std::string& id : held) {
    if (!s->second.leases.count(id)) gone.push_back(id);
  }
  return gone;
}

absl::StatusOr<bool> WorkQueue::Complete(const std::string& session_id,
                                         const v1::ReportResultRequest& result) {
  Done done;
  bool live = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string& id = result.lease_id();
    auto l = leases_.find(id);
    if (l != leases_.end()) {
      if (l->second.session_id != session_id) {
        return absl::PermissionDeniedError(
            absl::StrCat("lease '", id, "' belongs to another session"));
      }
      done = std::move(l->second.q.item.done);
      auto s = sessions_.find(session_id);
      if (s != sessions_.end()) {
        s->second.leases.erase(id);
        s->second.cv->notify_all();  // a slot of the session is free
      }
      leases_.erase(l);
      live = true;
    } else if (auto late = late_.find(id); late != late_.end()) {
      // The work went back to the queue; the first result for it wins, if
      // it comes from the device that held the lease.
      auto reporter = sessions_.find(session_id);
      if (late->second.session_id != session_id &&
          (reporter == sessions_.end() || reporter->second.device_id != late->second.device_id)) {
        return absl::PermissionDeniedError(
            absl::StrCat("lease '", id, "' was held by device '", late->second.device_id, "'"));
      }
      int64_t item = late->second.item;
      late_.erase(late);
      for (auto& [key, q] : queues_) {
        auto it = std::find_if(q.begin(), q.end(), [&](const Queued& x) { return x.id == item; });
        if (it != q.end()) {
          done = std::move(it->item.done);
          q.erase(it);
          break;
        }
      }
      if (!done) {
        for (auto it = leases_.begin(); it != leases_.end(); ++it) {
          if (it->second.q.id != item) continue;
          done = std::move(it->second.q.item.done);
          auto s = sessions_.find(it->second.session_id);
          if (s != sessions_.end()) {
            s->second.leases.erase(it->first);
            s->second.cv->notify_all();
          }
          leases_.erase(it);
          break;
        }
      }
    }
    if (!done) {
      return absl::NotFoundError(absl::StrCat("unknown or already completed lease '", id, "'"));
    }
  }
  done(result);
  return live;
}

void WorkQueue::CancelJob(int64_t job_id) {
  Callbacks callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, q] : queues_) {
      for (auto it = q.begin(); it != q.end();) {
        if (it->item.job_id != job_id) {
          ++it;
          continue;
        }
        Done done = std::move(it->item.done);
        callbacks.push_back([done] { done(absl::CancelledError("the job was cancelled")); });
        it = q.erase(it);
      }
    }
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second.q.item.job_id != job_id) {
        ++it;
        continue;
      }
      Done done = std::move(it->second.q.item.done);
      callbacks.push_back([done] { done(absl::CancelledError("the job was cancelled")); });
      auto s = sessions_.find(it->second.session_id);
      if (s != sessions_.end()) s->second.leases.erase(it->first);
      it = leases_.erase(it);
    }
    WakeAllLocked();
  }
  RunAll(callbacks);
}

std::map<std::string, int> WorkQueue::QueuedByKey() {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int> out;
  for (const auto& [key, q] : queues_) {
    if (!q.empty()) out[key] = int(q.size());
  }
  return out;
}

int WorkQueue::LeasesOut() {
  std::lock_guard<std::mutex> lock(mu_);
  return int(leases_.size());
}

std::vector<WorkQueue::LeaseView> WorkQueue::Leases() {
  std::vector<LeaseView> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, l] : leases_) {
    const v1::WorkLease& w = l.q.item.work;
    LeaseView v{l.device_id, l.q.item.job_id, "model run", {}, l.leased_at};
    if (w.has_build()) {
      v.kind = "build";
      v.workload = w.build().workload();
    } else if (w.has_measure()) {
      v.kind = "measure";
      v.workload = w.measure().workload();
    }
    out.push_back(std::move(v));
  }
  std::sort(out.begin(), out.end(),
            [](const LeaseView& a, const LeaseView& b) { return a.leased_at < b.leased_at; });
  return out;
}

bool WorkQueue::HasTaker(const std::string& queue) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, s] : sessions_) {
    if (!drained_.count(s.device_id) &&
        std::find(s.queues.begin(), s.queues.end(), queue) != s.queues.end()) {
      return true;
    }
  }
  return false;
}

bool WorkQueue::HasOtherTaker(const std::string& queue, const std::string& device) {
  std::lock_guard<std::mutex> lock(mu_);
  return OtherDeviceTakesLocked(queue, device);
}

void WorkQueue::SetDrained(const std::string& device_id, bool drained) {
  std::lock_guard<std::mutex> lock(mu_);
  if (drained) {
    drained_.insert(device_id);
  } else if (drained_.erase(device_id) > 0) {
    WakeAllLocked();
  }
}

}  // namespace tunefarm::server
