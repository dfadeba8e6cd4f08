#include "store/group_commit.h"

#include <iterator>
#include <vector>

#include "absl/time/clock.h"

namespace tunefarm::store {

int64_t GroupCommitter::transactions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return transactions_;
}

int64_t GroupCommitter::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int64_t(queue_.size());
}

GroupCommitter::Stats GroupCommitter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.buckets.resize(std::size(kCommitBuckets) + 1);
  return s;
}

bool GroupCommitter::writing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return committing_;
}

absl::Status GroupCommitter::Commit(const v1::Record& record) {
  Pending mine{&record};
  std::unique_lock<std::mutex> lock(mu_);
  queue_.push_back(&mine);
  cv_.wait(lock, [&] { return mine.done || !committing_; });
  if (mine.done) return mine.status;
  // No commit in progress: this caller writes everything queued so far
  // (its own record included), then hands over to the next waiter.
  committing_ = true;
  std::vector<Pending*> batch(queue_.begin(), queue_.end());
  queue_.clear();
  lock.unlock();
  std::vector<v1::Record> records;
  records.reserve(batch.size());
  for (Pending* p : batch) records.push_back(*p->record);
  const absl::Time started = absl::Now();
  absl::Status s = log_.CommitRecords(records).status();
  int64_t transactions = 1;
  if (!s.ok() && batch.size() > 1 && absl::IsInvalidArgument(s)) {
    // A bad record refuses the whole batch: find it by committing singly.
    transactions = 0;
    for (Pending* p : batch) {
      p->status = log_.CommitRecords({*p->record}).status();
      ++transactions;
    }
  } else {
    for (Pending* p : batch) p->status = s;
  }
  const double took = absl::ToDoubleSeconds(absl::Now() - started);
  lock.lock();
  transactions_ += transactions;
  stats_.buckets.resize(std::size(kCommitBuckets) + 1);
  size_t b = 0;
  while (b < std::size(kCommitBuckets) && took > kCommitBuckets[b]) ++b;
  ++stats_.buckets[b];
  ++stats_.count;
  stats_.sum_s += took;
  for (Pending* p : batch) {
    if (p->status.ok()) ++stats_.records_by_status[p->record->status()];
  }
  for (Pending* p : batch) p->done = true;
  committing_ = false;
  cv_.notify_all();
  return mine.status;
}

}  // namespace tunefarm::store
