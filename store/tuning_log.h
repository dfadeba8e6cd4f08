// TuningLog: the SQLite log database that holds every workload, target, job,
// task, device and measurement record of a farm.
//
// Durability contract: CommitRecords() writes a whole batch in one
// transaction (WAL, synchronous=FULL). When it returns OK every record of the
// batch is on disk and survives a crash of this process or the machine; when
// it returns an error none of the batch is stored and what was stored before
// is untouched. Records are deduplicated by content, so committing the same
// record twice (a retried report, a re-import) stores it once.
//
// Errors: a file that is not SQLite, or SQLite that is not a tunefarm
// database -> FailedPrecondition/DataLoss naming the file; a schema newer than
// this build -> FailedPrecondition; a full disk -> ResourceExhausted; bad
// records -> InvalidArgument naming the record's index and field.
//
// Thread safe: one connection, serialised by an internal mutex. Several
// processes may open the same file (SQLite locking, busy timeout).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/canon.h"
#include "tunefarm/v1/records.pb.h"

namespace tunefarm::store {

namespace v1 = ::tunefarm::v1;

namespace internal {
class Db;
}

class TuningLog {
 public:
  struct Options {
    std::string path = "tunefarm.db";
    int busy_timeout_ms = 10000;
    // Caps the file at this many pages (0: no cap). Lets tests fill the "disk".
    int64_t max_page_count = 0;
    // Canonical forms (required; search::CompilerCanon() is the compiler's).
    Canon canon;
  };

  // The schema this build writes; older files are migrated forward on open.
  static constexpr int kSchemaVersion = 7;

  static absl::StatusOr<std::unique_ptr<TuningLog>> Open(const Options& options);
  ~TuningLog();

  const std::string& path() const { return path_; }
  absl::StatusOr<int> SchemaVersion();

  // ---- records ----
  struct CommitResult {
    // One id per input record, in order; a duplicate gets the id of the
    // record already stored.
    std::vector<int64_t> record_ids;
    int64_t inserted = 0;
    int64_t duplicates = 0;
  };
  // Validates and stores `records` in one transaction. Server-assigned
  // fields (record_id, workload_key, schedule_hash) are computed here; a
  // non-empty workload_key must match. job_id must name a stored job or be 0.
  absl::StatusOr<CommitResult> CommitRecords(const std::vector<v1::Record>& records);

  // Best `k` OK records of a workload on a target that rank (not pending
  // or disputed: v1::Confirmation), lowest mean cost first.
  absl::StatusOr<std::vector<v1::Record>> TopK(const std::string& workload_key,
                                               const std::string& target_spec, int k);

  struct RecordQuery {
    std::string workload_key;  // empty: any
    std::string target_spec;   // empty: any
    int64_t job_id = 0;        // 0: any
    v1::MeasureStatus status = v1::MEASURE_STATUS_UNSPECIFIED;
    int64_t after_record_id = 0;   // only ids above it
    int64_t before_record_id = 0;  // only ids below it (0: no bound)
    bool newest_first = false;     // descending ids
    int limit = 100;
  };
  // Records in id order (ascending, or descending when newest_first).
  absl::StatusOr<std::vector<v1::Record>> ListRecords(const RecordQuery& query);
  // How many records match the query's filters and id bounds (its limit
  // and order aside).
  absl::StatusOr<int64_t> CountRecords(const RecordQuery& query);
  absl::StatusOr<int64_t> CountRecords();
  // Jobs per state (v1::JobState -> count), for the metrics.
  absl::StatusOr<std::map<int, int64_t>> CountJobsByState();

  // The SQL plan of the TopK query, for checking that it is an index lookup.
  absl::StatusOr<std::string> ExplainTopK();

  // ---- workloads and targets ----
  // The stored workload with this key, NotFound otherwise.
  absl::StatusOr<v1::Workload> GetWorkload(const std::string& workload_key);

  // ---- jobs ----
  // Validates and stores a job with its tasks (state QUEUED). The seed is
  // drawn when the spec has none, and stored. `owner_token`: the SHA-256 of
  // the token that submitted it ("" on a server without tokens).
  absl::StatusOr<int64_t> CreateJob(const v1::JobSpec& spec, const std::string& owner_token = "");
  // A job with its tasks: per task the trials that ran (OK records of the
  // job) and those that failed, and the best cost on the job's target.
  absl::StatusOr<v1::Job> GetJob(int64_t job_id);
  // The owner_token CreateJob stored ("" for none); NotFound for no job.
  absl::StatusOr<std::string> JobOwnerToken(int64_t job_id);
  // Newest first. state UNSPECIFIED: all.
  absl::StatusOr<std::vector<v1::Job>> ListJobs(v1::JobState state, int limit);
  absl::Status SetJobState(int64_t job_id, v1::JobState state, const std::string& message);
  // Sets the state only if the job has not ended (succeeded, failed,
  // cancelled): a runner never overwrites a cancel. Returns whether it did.
  absl::StatusOr<bool> UpdateActiveJob(int64_t job_id, v1::JobState state,
                                       const std::string& message);
  // Moves a job that has not ended to CANCELLED; FailedPrecondition if it
  // had already succeeded, failed or been cancelled.
  absl::StatusOr<v1::Job> CancelJob(int64_t job_id, const std::string& message);

  // ---- cost models ----
  // A serialized cost model (cost_model::CostModel::Serialize) for a target.
  struct StoredCostModel {
    int64_t id = 0;  // assigned on save
    std::string target_spec;
    std::string objective;
    int64_t trained_on = 0;  // records it was trained on
    int64_t created_unix_ms = 0;
    std::string bytes;
  };
  // Stores a snapshot; the newest kCostModelsKept per target are kept.
  static constexpr int kCostModelsKept = 3;
  absl::StatusOr<int64_t> SaveCostModel(const StoredCostModel& model);
  // The newest snapshot for the target; NotFound when there is none.
  absl::StatusOr<StoredCostModel> LatestCostModel(const std::string& target_spec);

  // A job's search state (v1::SearchSnapshot bytes), replaced on every save;
  // NotFound when the job has none yet.
  absl::Status SaveJobSnapshot(int64_t job_id, const std::string& bytes);
  absl::StatusOr<std::string> LoadJobSnapshot(int64_t job_id);

  // The outcome of measuring a pending record again on another device
  // (v1::Confirmation): CONFIRMED (counted for the device that measured it
  // first) or DISPUTED; the `suspect` device, if any, gets a disputed
  // timing counted.
  struct Confirmation {
    int64_t job_id = 0;
    v1::Workload workload;
    v1::Schedule schedule;
    std::string device_id;  // who measured it first
    v1::Confirmation state = v1::CONFIRMATION_PENDING;
    std::string confirmed_by;
    double confirm_cost_sec = 0;
    std::string suspect;
  };
  // NotFound when no such record is pending.
  absl::Status SetConfirmation(const Confirmation& c);

  // ---- devices ----
  absl::Status UpsertDevice(const v1::Device& device);
  absl::StatusOr<std::vector<v1::Device>> ListDevices();
  // The owner stored with a device id ("" for none); NotFound when no
  // device of that id was ever stored.
  absl::StatusOr<std::string> DeviceOwner(const std::string& device_id);
  // NotFound when no device of that id was ever stored.
  absl::Status SetDeviceDrained(const std::string& device_id, bool drained);
  absl::Status RemoveDevice(const std::string& device_id);

 private:
  TuningLog(std::unique_ptr<internal::Db> db, std::string path, Canon canon);
  absl::Status Migrate();
  absl::StatusOr<int64_t> InternWorkload(const v1::Workload& workload, std::string* key);
  absl::StatusOr<int64_t> InternTarget(const std::string& spec, std::string* canonical);
  absl::StatusOr<v1::Job> LoadJobLocked(int64_t job_id);

  std::mutex mu_;
  std::unique_ptr<internal::Db> db_;
  std::string path_;
  const Canon canon_;
};

}  // namespace tunefarm::store
