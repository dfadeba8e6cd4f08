// GroupCommitter: records that arrive at the same time from many devices go
// to the database in one transaction (one fsync) instead of one each.
//
// Commit() returns once the record is on disk (or with the reason it is
// not), so a caller may acknowledge a result as soon as Commit returns OK,
// exactly as with TuningLog::CommitRecords. A caller that finds no commit in
// progress writes everything queued by then (its own record included) in one
// transaction; records that arrive meanwhile wait and go in the next one. A batch the
// database refuses as a whole is retried record by record, so one bad record
// fails only its own caller.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "store/tuning_log.h"

namespace tunefarm::store {

class GroupCommitter {
 public:
  explicit GroupCommitter(TuningLog& log) : log_(log) {}

  absl::Status Commit(const v1::Record& record);

  // Transactions written so far (records per transaction, for the log).
  int64_t transactions() const;

  // Records waiting for the next transaction (not yet taken by a writer).
  int64_t queued() const;
  // Whether a transaction is being written now.
  bool writing() const;

  // For the metrics: the seconds each transaction took, as a histogram
  // (counts per upper bound in kCommitBuckets, then above them all), and
  // the records committed so far by status.
  static constexpr double kCommitBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                              0.1,   0.25,   0.5,   1,    2.5};
  struct Stats {
    std::vector<int64_t> buckets;  // one per bound, then +Inf; not cumulative
    int64_t count = 0;
    double sum_s = 0;
    std::map<int, int64_t> records_by_status;  // v1::MeasureStatus -> records
  };
  Stats stats() const;

 private:
  struct Pending {
    const v1::Record* record;
    absl::Status status;
    bool done = false;
  };

  TuningLog& log_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending*> queue_;
  bool committing_ = false;
  int64_t transactions_ = 0;
  Stats stats_;
};

}  // namespace tunefarm::store
