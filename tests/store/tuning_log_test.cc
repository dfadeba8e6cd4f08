#include "store/tuning_log.h"

#include <sqlite3.h>

#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "search/store_canon.h"
#include "store/group_commit.h"
#include "store/sqlite_db.h"
#include "tests/server/test_records.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::server {
namespace {

using ::tunefarm::testing::Conv2d;
using ::tunefarm::testing::Dense;
using ::tunefarm::testing::kTargetX86;
using ::tunefarm::testing::MakeRecord;
using ::tunefarm::testing::TempDir;

std::unique_ptr<store::TuningLog> OpenOrDie(const std::string& path, int64_t max_pages = 0) {
  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = path;
  o.max_page_count = max_pages;
  auto log = store::TuningLog::Open(o);
  EXPECT_TRUE(log.ok()) << log.status();
  return log.ok() ? *std::move(log) : nullptr;
}

// Runs one SQL statement on a file with the plain SQLite API.
void RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

// The store files things under the canonical forms it is given and holds
// no compiler code: no forms, no database; a form that fails makes the
// record invalid, named by its index.
TEST(TuningLog, UsesTheCanonicalFormsItIsGiven) {
  TempDir dir;
  store::TuningLog::Options o;
  o.path = dir.File("t.db");
  absl::StatusOr<std::unique_ptr<store::TuningLog>> none = store::TuningLog::Open(o);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::StrContains(none.status().message(), "canon")) << none.status();
  o.canon = search::CompilerCanon();
  auto compiler_target = o.canon.target;
  o.canon.target = [compiler_target](const std::string& spec)
      -> absl::StatusOr<store::Canon::Target> {
    if (absl::StrContains(spec, "znver3")) return absl::InvalidArgumentError("no znver3 here");
    return compiler_target(spec);
  };
  auto log = store::TuningLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  v1::Record ok = MakeRecord(Conv2d(16, 16, 14), kTargetX86, 1e-3, 1);
  v1::Record refused = ok;
  refused.mutable_target()->set_spec("llvm -mtriple=x86_64-linux-gnu -mcpu=znver3");
  absl::StatusOr<store::TuningLog::CommitResult> r = (*log)->CommitRecords({ok, refused});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "record 1")) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), "no znver3 here")) << r.status();
  EXPECT_EQ(*(*log)->CountRecords(), 0);  // the batch is all or nothing
  r = (*log)->CommitRecords({ok});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->inserted, 1);
}

TEST(TuningLog, CommitAndTopK) {
  TempDir dir;
  auto log = OpenOrDie(dir.File("t.db"));
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(*log->SchemaVersion(), store::TuningLog::kSchemaVersion);
  v1::Workload conv = Conv2d(64, 64, 56);
  std::vector<v1::Record> batch;
  for (int i = 1; i <= 20; ++i) batch.push_back(MakeRecord(conv, kTargetX86, 1e-3 / i, i));
  v1::Record failed = MakeRecord(conv, kTargetX86, 1e-9, 99);
  failed.set_status(v1::MEASURE_STATUS_RUNTIME_ERROR);
  failed.clear_costs_sec();
  failed.set_error("segfault");
  batch.push_back(failed);
  auto res = log->CommitRecords(batch);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->inserted, 21);
  EXPECT_EQ(res->duplicates, 0);
  EXPECT_EQ(*log->CountRecords(), 21);

  std::string key = res->record_ids.empty() ? "" : log->ListRecords({})->front().workload_key();
  auto top = log->TopK(key, kTargetX86, 3);
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_EQ(top->size(), 3u);
  // Best first: salt 20 has the lowest cost; the runtime error never counts.
  EXPECT_EQ((*top)[0].schedule().steps(0).split().lengths(0), 20);
  EXPECT_EQ((*top)[1].schedule().steps(0).split().lengths(0), 19);
  EXPECT_EQ((*top)[0].costs_sec_size(), 3);
  EXPECT_EQ((*top)[0].device_id(), "test-board");
  EXPECT_EQ((*top)[0].schedule_hash().size(), 64u);
  // The target is matched in canonical form, however it is spelled.
  auto same = log->TopK(key, "llvm -mcpu=skylake-avx512 -mtriple=x86_64-linux-gnu", 1);
  ASSERT_TRUE(same.ok());
  ASSERT_EQ(same->size(), 1u);
  EXPECT_EQ(same->front().record_id(), (*top)[0].record_id());
  // Another target knows nothing.
  EXPECT_TRUE(log->TopK(key, "llvm -mcpu=znver3", 1)->empty());
}

TEST(TuningLog, RecordsSurviveReopenExactly) {
  TempDir dir;
  v1::Record in = MakeRecord(Dense(16, 256, 512), kTargetX86, 2e-5, 5);
  int64_t id;
  {
    auto log = OpenOrDie(dir.File("t.db"));
    auto res = log->CommitRecords({in});
    ASSERT_TRUE(res.ok()) << res.status();
    id = res->record_ids[0];
  }
  auto log = OpenOrDie(dir.File("t.db"));
  auto all = log->ListRecords({});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  const v1::Record& out = all->front();
  EXPECT_EQ(out.record_id(), id);
  EXPECT_EQ(out.costs_sec_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(out.costs_sec(i), in.costs_sec(i));
  EXPECT_EQ(out.schedule().SerializeAsString(), in.schedule().SerializeAsString());
  EXPECT_EQ(out.fingerprint().compiler(), "tunefarm test");
  EXPECT_EQ(out.timestamp_unix_ms(), in.timestamp_unix_ms());
}

TEST(TuningLog, DuplicatesAreStoredOnce) {
  TempDir dir;
  auto log = OpenOrDie(dir.File("t.db"));
  v1::Record r = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, 1);
  ASSERT_TRUE(log->CommitRecords({r}).ok());
  auto again = log->CommitRecords({r, MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, 2)});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->inserted, 1);
  EXPECT_EQ(again->duplicates, 1);
  EXPECT_EQ(*log->CountRecords(), 2);
  // A record sent without a time stamp gets one, and is still one record
  // when sent again (a retried import).
  v1::Record untimed = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, 3);
  untimed.clear_timestamp_unix_ms();
  auto first = log->CommitRecords({untimed});
  auto second = log->CommitRecords({untimed});
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(second->duplicates, 1);
  EXPECT_EQ(second->record_ids[0], first->record_ids[0]);
  EXPECT_GT(log->ListRecords({})->back().timestamp_unix_ms(), 0);
}

TEST(TuningLog, BadRecordRejectsWholeBatch) {
  TempDir dir;
  auto log = OpenOrDie(dir.File("t.db"));
  std::vector<v1::Record> batch = {MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, 1),
                                   MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, 2)};
  struct Case {
    std::function<void(v1::Record*)> mutate;
    std::string expect;
  };
  std::vector<Case> cases = {
      {[](v1::Record* r) { r->mutable_target()->set_spec("llvm -mcpu"); }, "record 1: target"},
      {[](v1::Record* r) { r->mutable_workload()->mutable_conv2d()->set_groups(3); },
       "record 1: workload: conv2d.groups"},
      {[](v1::Record* r) { r->set_costs_sec(0, -1); }, "costs_sec"},
      {[](v1::Record* r) { r->set_costs_sec(0, std::nan("")); }, "costs_sec"},
      {[](v1::Record* r) { r->clear_costs_sec(); }, "no costs_sec"},
      {[](v1::Record* r) { r->set_status(v1::MEASURE_STATUS_UNSPECIFIED); }, "status"},
      {[](v1::Record* r) { r->set_workload_key("conv2d-000000000000000000000000"); },
       "does not match"},
      {[](v1::Record* r) { r->set_job_id(77); }, "job_id 77 does not exist"},
      {[](v1::Record* r) { r->clear_workload(); }, "no workload"},
  };
  for (const Case& c : cases) {
    std::vector<v1::Record> bad = batch;
    c.mutate(&bad[1]);
    auto res = log->CommitRecords(bad);
    ASSERT_FALSE(res.ok()) << c.expect;
    EXPECT_TRUE(absl::IsInvalidArgument(res.status())) << res.status();
    EXPECT_NE(std::string(res.status().message()).find(c.expect), std::string::npos)
        << res.status();
    EXPECT_EQ(*log->CountRecords(), 0) << "a rejected batch left records behind";
  }
}

TEST(TuningLog, TopKIsAnIndexLookup) {
  TempDir dir;
  auto log = OpenOrDie(dir.File("t.db"));
  auto plan = log->ExplainTopK();
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NE(plan->find("USING INDEX records_best"), std::string::npos) << *plan;
  EXPECT_EQ(plan->find("SCAN r"), std::string::npos) << *plan;
  EXPECT_EQ(plan->find("USE TEMP B-TREE"), std::string::npos) << *plan;
}

// Many threads committing one record each, as the farm's result handlers
// do: every good record is stored (fewer transactions than records when
// they overlap), and the one bad record fails only its own caller.
// Another connection holds the write lock, so the first writer's transaction
// waits; every record that arrives meanwhile must go in one next transaction.
TEST(GroupCommitter, RecordsArrivingDuringACommitShareOneTransaction) {
  TempDir dir;
  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = dir.File("t.db");
  o.busy_timeout_ms = 600000;
  auto log = store::TuningLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  sqlite3* blocker = nullptr;
  ASSERT_EQ(sqlite3_open(o.path.c_str(), &blocker), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(blocker, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);

  store::GroupCommitter commits(**log);
  constexpr int kWriters = 12;
  std::vector<absl::Status> results(kWriters);
  std::vector<std::thread> writers;
  writers.emplace_back([&] {
    results[0] = commits.Commit(MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, 1));
  });
  // The first writer holds its record in a transaction that waits for the
  // lock; then the others arrive.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!commits.writing() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(commits.writing());
  for (int t = 1; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      results[t] = commits.Commit(MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, t + 1));
    });
  }
  while (commits.queued() < kWriters - 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(commits.queued(), kWriters - 1);
  EXPECT_EQ(commits.transactions(), 0);
  ASSERT_EQ(sqlite3_exec(blocker, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(blocker);
  for (auto& th : writers) th.join();
  for (int t = 0; t < kWriters; ++t) EXPECT_TRUE(results[t].ok()) << t << ": " << results[t];
  EXPECT_EQ(*(*log)->CountRecords(), kWriters);
  // The first record alone, then the eleven that waited, together.
  EXPECT_EQ(commits.transactions(), 2);
}

TEST(GroupCommitter, ConcurrentRecordsAndABadOneFailsAlone) {
  TempDir dir;
  auto log = OpenOrDie(dir.File("t.db"));
  store::GroupCommitter commits(*log);
  constexpr int kThreads = 8, kEach = 40;
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  std::string failure;
  std::mutex mu;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        v1::Record r = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5 * (1 + i), t * 1000 + i + 1);
        if (t == 3 && i == 17) r.set_job_id(77);  // no such job
        absl::Status s = commits.Commit(r);
        if (!s.ok()) {
          ++failed;
          std::lock_guard<std::mutex> l(mu);
          failure = std::string(s.message());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 1);
  EXPECT_NE(failure.find("job_id 77 does not exist"), std::string::npos) << failure;
  store::TuningLog::RecordQuery q;
  q.limit = 1000;
  EXPECT_EQ(log->ListRecords(q)->size(), size_t(kThreads * kEach - 1));
}

TEST(TuningLog, ListRecordsFiltersAndPages) {
  TempDir dir;
  auto log = OpenOrDie(dir.File("t.db"));
  std::vector<v1::Record> batch;
  for (int i = 1; i <= 10; ++i) batch.push_back(MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, i));
  for (int i = 1; i <= 5; ++i) batch.push_back(MakeRecord(Dense(4, 4, 4), "llvm", 1e-6, i));
  ASSERT_TRUE(log->CommitRecords(batch).ok());
  store::TuningLog::RecordQuery q;
  q.target_spec = "llvm";
  EXPECT_EQ(log->ListRecords(q)->size(), 5u);
  q = {};
  q.limit = 4;
  std::vector<int64_t> ids;
  while (true) {
    auto page = log->ListRecords(q);
    ASSERT_TRUE(page.ok());
    if (page->empty()) break;
    for (const auto& r : *page) ids.push_back(r.record_id());
    q.after_record_id = page->back().record_id();
  }
  EXPECT_EQ(ids.size(), 15u);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
}

TEST(TuningLog, JobsStoreTasksAndState) {
  TempDir dir;
  auto log = OpenOrDie(dir.File("t.db"));
  v1::JobSpec spec;
  spec.set_name("two tasks");
  spec.mutable_target()->set_spec("llvm -mcpu=skylake-avx512");
  spec.set_device_key("x86-avx512");
  auto* t1 = spec.add_tasks();
  *t1->mutable_workload() = Conv2d(8, 8, 8);
  auto* t2 = spec.add_tasks();
  *t2->mutable_workload() = Dense(4, 4, 4);
  t2->set_weight(2);
  auto* t3 = spec.add_tasks();  // same as t1: weights add up
  *t3->mutable_workload() = Conv2d(8, 8, 8);
  auto id = log->CreateJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  auto job = log->GetJob(*id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_QUEUED);
  ASSERT_EQ(job->tasks_size(), 2);
  EXPECT_EQ(job->tasks(0).weight(), 2);
  EXPECT_EQ(job->tasks(1).weight(), 2);
  EXPECT_NE(job->spec().seed(), 0u);
  EXPECT_EQ(job->spec().target().spec(), "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512");

  // Records of the job that ran count as its trials and give the task its
  // best cost; failed ones are counted apart.
  v1::Record r = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 4e-6, 1);
  r.set_job_id(*id);
  v1::Record failed = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 4e-6, 2);
  failed.set_job_id(*id);
  failed.set_status(v1::MEASURE_STATUS_RUNTIME_ERROR);
  failed.clear_costs_sec();
  failed.set_error("the runner died");
  ASSERT_TRUE(log->CommitRecords({r, failed}).ok());
  job = log->GetJob(*id);
  EXPECT_EQ(job->trials_done(), 1);
  EXPECT_EQ(job->failed_trials(), 1);
  EXPECT_EQ(job->tasks(0).trials(), 1);
  EXPECT_EQ(job->tasks(0).failed_trials(), 1);
  EXPECT_EQ(job->tasks(1).failed_trials(), 0);
  EXPECT_NEAR(job->tasks(0).best_cost_sec(), 4e-6, 1e-12);

  ASSERT_TRUE(log->SetJobState(*id, v1::JOB_STATE_CANCELLED, "by test").ok());
  EXPECT_EQ(log->ListJobs(v1::JOB_STATE_CANCELLED, 10)->size(), 1u);
  EXPECT_EQ(log->ListJobs(v1::JOB_STATE_QUEUED, 10)->size(), 0u);
  EXPECT_TRUE(absl::IsNotFound(log->GetJob(999).status()));
  EXPECT_TRUE(absl::IsNotFound(log->SetJobState(999, v1::JOB_STATE_FAILED, "")));

  // The submitting token's digest is kept with the job.
  EXPECT_EQ(*log->JobOwnerToken(*id), "");
  auto owned = log->CreateJob(spec, "ab12");
  ASSERT_TRUE(owned.ok()) << owned.status();
  EXPECT_EQ(*log->JobOwnerToken(*owned), "ab12");
  EXPECT_TRUE(absl::IsNotFound(log->JobOwnerToken(999).status()));

  spec.clear_device_key();
  EXPECT_TRUE(absl::IsInvalidArgument(log->CreateJob(spec).status()));
  spec.set_device_key("k");
  spec.set_onnx_model("onnx bytes");
  EXPECT_TRUE(absl::IsInvalidArgument(log->CreateJob(spec).status()));
}

TEST(TuningLog, DevicesUpsert) {
  TempDir dir;
  auto log = OpenOrDie(dir.File("t.db"));
  v1::Device d;
  d.set_device_id("orin-1");
  d.set_role(v1::ROLE_AGENT);
  d.set_device_key("jetson-orin-nano");
  d.mutable_capabilities()->set_cores(6);
  ASSERT_TRUE(log->UpsertDevice(d).ok());
  d.mutable_capabilities()->set_cores(8);
  ASSERT_TRUE(log->UpsertDevice(d).ok());
  auto all = log->ListDevices();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ(all->front().capabilities().cores(), 8);
}

// ---- bad files ----

TEST(TuningLog, GarbageFileIsNotADatabase) {
  TempDir dir;
  std::string path = dir.File("garbage.db");
  std::string junk;
  for (int i = 0; i < 8192; ++i) junk.push_back(static_cast<char>((i * 7919) % 251));
  testing::WriteFile(path, junk);
  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = path;
  auto log = store::TuningLog::Open(o);
  ASSERT_FALSE(log.ok());
  EXPECT_NE(std::string(log.status().message()).find("is not a tunefarm database"),
            std::string::npos)
      << log.status();
  EXPECT_EQ(testing::ReadFileOrEmpty(path), junk) << "the file was modified";
}

TEST(TuningLog, ForeignSqliteDatabaseIsRefused) {
  TempDir dir;
  std::string path = dir.File("other.db");
  RawExec(path, "CREATE TABLE photos (id INTEGER, path TEXT); INSERT INTO photos VALUES (1, 'x');");
  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = path;
  auto log = store::TuningLog::Open(o);
  ASSERT_FALSE(log.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(log.status()));
  EXPECT_NE(std::string(log.status().message()).find("another program"), std::string::npos);
  EXPECT_NE(std::string(log.status().message()).find("photos"), std::string::npos);
}

TEST(TuningLog, NewerSchemaIsRefused) {
  TempDir dir;
  std::string path = dir.File("t.db");
  { ASSERT_NE(OpenOrDie(path), nullptr); }
  RawExec(path, absl::StrCat("INSERT INTO schema_version VALUES (",
                              store::TuningLog::kSchemaVersion + 1, ", 0)"));
  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = path;
  auto log = store::TuningLog::Open(o);
  ASSERT_FALSE(log.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(log.status()));
  EXPECT_NE(std::string(log.status().message())
                .find(absl::StrCat("schema version ", store::TuningLog::kSchemaVersion + 1)),
            std::string::npos)
      << log.status();
}

TEST(TuningLog, CostModelsPerTargetNewestKept) {
  TempDir dir;
  auto log = OpenOrDie(dir.File("t.db"));
  ASSERT_NE(log, nullptr);
  EXPECT_TRUE(absl::IsNotFound(log->LatestCostModel(kTargetX86).status()));
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    store::TuningLog::StoredCostModel m;
    m.target_spec = kTargetX86;
    m.objective = "pack-sum";
    m.trained_on = 100 * i;
    m.bytes = std::string("model\0bytes", 11) + std::to_string(i);
    auto id = log->SaveCostModel(m);
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  // Spelled another way, the same canonical target.
  auto latest = log->LatestCostModel("llvm -mcpu=skylake-avx512 -mtriple=x86_64-linux-gnu");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->id, ids.back());
  EXPECT_EQ(latest->trained_on, 400);
  EXPECT_EQ(latest->bytes, std::string("model\0bytes4", 12));
  EXPECT_TRUE(absl::IsNotFound(log->LatestCostModel("llvm -mcpu=znver3").status()));
  store::TuningLog::StoredCostModel other;
  other.target_spec = "llvm -mcpu=znver3";
  other.objective = "rank";
  other.bytes = "x";
  ASSERT_TRUE(log->SaveCostModel(other).ok());
  EXPECT_EQ(log->LatestCostModel(kTargetX86)->id, ids.back());
  log.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.File("t.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT count(*) FROM cost_models", -1, &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), store::TuningLog::kCostModelsKept + 1);
  sqlite3_finalize(st);
  sqlite3_close(db);
  // Bad input stores nothing.
  log = OpenOrDie(dir.File("t.db"));
  store::TuningLog::StoredCostModel bad;
  bad.target_spec = "banana -arch=9";
  bad.objective = "pack-sum";
  bad.bytes = "x";
  EXPECT_FALSE(log->SaveCostModel(bad).ok());
  bad.target_spec = kTargetX86;
  bad.bytes.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(log->SaveCostModel(bad).status()));
  EXPECT_EQ(log->LatestCostModel(kTargetX86)->id, ids.back());
}

TEST(TuningLog, MigratesAVersion1File) {
  TempDir dir;
  std::string path = dir.File("t.db");
  { ASSERT_NE(OpenOrDie(path), nullptr); }
  // Back to what version 1 wrote: no cost_models or job_snapshots tables,
  // no devices.drained, owner or timings columns, no jobs.owner_token, no
  // records.confirmation columns, the first records_best index.
  RawExec(path,
          "DROP TABLE cost_models; DROP TABLE job_snapshots; "
          "ALTER TABLE devices DROP COLUMN drained; "
          "ALTER TABLE devices DROP COLUMN owner; "
          "ALTER TABLE devices DROP COLUMN timings_confirmed; "
          "ALTER TABLE devices DROP COLUMN timings_disputed; "
          "ALTER TABLE jobs DROP COLUMN owner_token; "
          "DROP INDEX records_best; "
          "ALTER TABLE records DROP COLUMN confirmation; "
          "ALTER TABLE records DROP COLUMN confirmed_by; "
          "ALTER TABLE records DROP COLUMN confirm_cost; "
          "CREATE INDEX records_best ON records(workload_id, target_id, mean_cost) "
          "WHERE status = 1; "
          "DELETE FROM schema_version WHERE version >= 2");
  auto log = OpenOrDie(path);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(*log->SchemaVersion(), store::TuningLog::kSchemaVersion);
  store::TuningLog::StoredCostModel m;
  m.target_spec = kTargetX86;
  m.objective = "pack-sum";
  m.bytes = "x";
  EXPECT_TRUE(log->SaveCostModel(m).ok());
  v1::JobSpec spec;
  spec.mutable_target()->set_spec(kTargetX86);
  spec.set_device_key("x86-avx512");
  *spec.add_tasks()->mutable_workload() = Dense(4, 4, 4);
  auto job = log->CreateJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(log->SaveJobSnapshot(*job, "state").ok());
  v1::Device d;
  d.set_device_id("board");
  d.set_role(v1::ROLE_AGENT);
  d.set_device_key("k");
  ASSERT_TRUE(log->UpsertDevice(d).ok());
  EXPECT_TRUE(absl::IsNotFound(log->SetDeviceDrained("other", true)));
  ASSERT_TRUE(log->SetDeviceDrained("board", true).ok());
  ASSERT_TRUE(log->UpsertDevice(d).ok());  // a new registration keeps it drained
  auto devices = log->ListDevices();
  ASSERT_TRUE(devices.ok() && devices->size() == 1);
  EXPECT_TRUE(devices->front().drained());
  ASSERT_TRUE(log->RemoveDevice("board").ok());
  EXPECT_TRUE(log->ListDevices()->empty());
}

// A job's search state is replaced on every save, belongs to an existing
// job, and survives reopening.
TEST(TuningLog, JobSnapshotsReplaceAndSurviveReopen) {
  TempDir dir;
  std::string path = dir.File("t.db");
  int64_t job = 0;
  {
    auto log = OpenOrDie(path);
    EXPECT_TRUE(absl::IsNotFound(log->LoadJobSnapshot(1).status()));
    v1::JobSpec spec;
    spec.mutable_target()->set_spec(kTargetX86);
    spec.set_device_key("x86-avx512");
    *spec.add_tasks()->mutable_workload() = Dense(4, 4, 4);
    auto id = log->CreateJob(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    job = *id;
    ASSERT_TRUE(log->SaveJobSnapshot(job, "first").ok());
    ASSERT_TRUE(log->SaveJobSnapshot(job, std::string("second\0bytes", 12)).ok());
    EXPECT_FALSE(log->SaveJobSnapshot(job + 100, "no such job").ok());
  }
  auto log = OpenOrDie(path);
  auto got = log->LoadJobSnapshot(job);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string("second\0bytes", 12));
}

TEST(TuningLog, CorruptPagesGiveAnErrorNotACrash) {
  TempDir dir;
  std::string path = dir.File("t.db");
  {
    auto log = OpenOrDie(path);
    std::vector<v1::Record> batch;
    for (int i = 1; i <= 300; ++i)
      batch.push_back(MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, i));
    ASSERT_TRUE(log->CommitRecords(batch).ok());
  }
  RawExec(path, "PRAGMA wal_checkpoint(TRUNCATE)");
  std::string bytes = testing::ReadFileOrEmpty(path);
  ASSERT_GT(bytes.size(), 16384u);
  // Scribble over everything after the first two pages.
  for (size_t i = 8192; i < bytes.size(); ++i) bytes[i] = static_cast<char>(0xA5 ^ (i & 0xff));
  testing::WriteFile(path, bytes);
  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = path;
  // The first two pages (header, schema) are intact, so the file opens; the
  // damage shows when the records are read.
  auto log = store::TuningLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  auto records = (*log)->ListRecords({});
  ASSERT_FALSE(records.ok());
  EXPECT_TRUE(absl::IsDataLoss(records.status())) << records.status();
  EXPECT_NE(std::string(records.status().message()).find("malformed"), std::string::npos)
      << records.status();
}

TEST(TuningLog, FullDiskLosesNothingCommitted) {
  TempDir dir;
  std::string path = dir.File("t.db");
  // Find how big the empty database is, then leave room for a little more.
  { ASSERT_NE(OpenOrDie(path), nullptr); }
  int64_t base_pages = 0;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "PRAGMA page_count", -1, &st, nullptr);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    base_pages = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  auto log = OpenOrDie(path, base_pages + 12);
  ASSERT_NE(log, nullptr);
  int64_t committed = 0;
  absl::Status failure;
  for (int b = 0; b < 1000 && failure.ok(); ++b) {
    std::vector<v1::Record> batch;
    for (int i = 0; i < 10; ++i) {
      v1::Record r = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, b * 10 + i + 1);
      r.set_error(std::string(200, 'e'));  // make records take space
      batch.push_back(r);
    }
    auto res = log->CommitRecords(batch);
    if (res.ok()) {
      committed += res->inserted;
    } else {
      failure = res.status();
    }
  }
  ASSERT_FALSE(failure.ok()) << "the page cap never filled";
  EXPECT_TRUE(absl::IsResourceExhausted(failure)) << failure;
  EXPECT_NE(std::string(failure.message()).find("none stored"), std::string::npos) << failure;
  EXPECT_NE(std::string(failure.message()).find("the disk is full"), std::string::npos) << failure;
  EXPECT_GT(committed, 0);
  EXPECT_EQ(*log->CountRecords(), committed);
  log.reset();
  // Reopened without the cap: everything acknowledged is there, file intact.
  auto reopened = OpenOrDie(path);
  EXPECT_EQ(*reopened->CountRecords(), committed);
  auto more = reopened->CommitRecords({MakeRecord(Dense(2, 2, 2), kTargetX86, 1e-6, 1)});
  EXPECT_TRUE(more.ok()) << more.status();
}

// A tunefarm database cut short (a copy that stopped, a full disk at the
// wrong moment) is called damaged, not "not a tunefarm database".
TEST(TuningLog, TruncatedDatabaseIsDamagedNotForeign) {
  TempDir dir;
  std::string path = dir.File("t.db");
  {
    auto log = OpenOrDie(path);
    std::vector<v1::Record> batch;
    for (int i = 1; i <= 200; ++i)
      batch.push_back(MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-5, i));
    ASSERT_TRUE(log->CommitRecords(batch).ok());
  }
  std::string bytes = testing::ReadFileOrEmpty(path);
  ASSERT_GT(bytes.size(), 16384u);
  testing::WriteFile(path, bytes.substr(0, 8192));
  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = path;
  auto log = store::TuningLog::Open(o);
  ASSERT_FALSE(log.ok());
  EXPECT_TRUE(absl::IsDataLoss(log.status())) << log.status();
  const std::string m(log.status().message());
  EXPECT_NE(m.find("is damaged: truncated or overwritten; restore it from a backup"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("not a tunefarm database"), std::string::npos) << m;
}

// What each storage failure says: the cause a user can act on.
TEST(SqliteStatus, NamesTheCause) {
  using store::internal::SqliteStatus;
  absl::Status ro = SqliteStatus(nullptr, SQLITE_READONLY, "insert", "/srv/farm.db");
  EXPECT_TRUE(absl::IsPermissionDenied(ro));
  EXPECT_NE(std::string(ro.message()).find("/srv/farm.db is read-only here"), std::string::npos)
      << ro;
  absl::Status open = SqliteStatus(nullptr, SQLITE_CANTOPEN, "open", "/nope/farm.db");
  EXPECT_NE(std::string(open.message()).find("a missing directory, or one this user cannot write"),
            std::string::npos)
      << open;
  absl::Status full = SqliteStatus(nullptr, SQLITE_FULL, "commit", "f.db");
  EXPECT_TRUE(absl::IsResourceExhausted(full));
  EXPECT_NE(std::string(full.message()).find("the disk is full"), std::string::npos) << full;
  absl::Status junk = SqliteStatus(nullptr, SQLITE_NOTADB, "prepare", "j.db");
  EXPECT_TRUE(absl::IsFailedPrecondition(junk));
  EXPECT_NE(std::string(junk.message()).find("j.db is not SQLite"), std::string::npos) << junk;
}

}  // namespace
}  // namespace tunefarm::server
