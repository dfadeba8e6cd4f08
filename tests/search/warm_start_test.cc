#include "search/session.h"
#include "search/warm_start.h"

#include <random>

#include "compiler/ir/workload_spec.h"
#include "search/space/random_schedule.h"
#include "compiler/schedule/schedule.h"
#include "gtest/gtest.h"
#include "search/store_canon.h"
#include "tests/server/test_records.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::server {
namespace {

using ::tunefarm::testing::Dense;
using ::tunefarm::testing::kTargetX86;
using ::tunefarm::testing::TempDir;

// Measures nothing: these tests only look at what the warm start fed in.
class NoMeasurer : public search::Measurer {
 public:
  std::vector<search::MeasureResult> Measure(const search::Task&,
                                             const std::vector<schedule::Trace>& s) override {
    ADD_FAILURE() << "warm start measured " << s.size() << " schedules";
    return std::vector<search::MeasureResult>(s.size());
  }
};

// A record of `task` with schedule `s`, as a local run stores it.
v1::Record Stored(const search::Task& task, const schedule::Trace& s, search::MeasureResult r) {
  return search::RecordOf(task, kTargetX86, schedule::ToProto(s), r);
}

// One record maker for local and farm results: what the source says wins
// over the result (a farm's status, every repeat's time), else the result.
TEST(RecordOf, LocalAndFarmResultsMakeTheSameKindOfRecord) {
  auto w = ir::ParseWorkloadSpec("matmul(M=8,N=8,K=8)");
  ASSERT_TRUE(w.ok());
  auto task = search::Task::Make(*w, *ir::Target::Parse(kTargetX86));
  ASSERT_TRUE(task.ok());
  search::MeasureResult ok;
  ok.status = search::MeasureResult::Status::kOk;
  ok.seconds = 2e-6;
  ok.compile_ms = 30;
  const v1::Record local = search::RecordOf(*task, kTargetX86, v1::Schedule(), ok);
  EXPECT_EQ(local.device_key(), "local");
  EXPECT_EQ(local.status(), v1::MEASURE_STATUS_OK);
  ASSERT_EQ(local.costs_sec_size(), 1);
  EXPECT_DOUBLE_EQ(local.costs_sec(0), 2e-6);
  EXPECT_DOUBLE_EQ(local.build_sec(), 0.03);
  EXPECT_GT(local.timestamp_unix_ms(), 0);

  search::RecordSource farm;
  farm.job_id = 7;
  farm.device_key = "jetson-orin";
  farm.device_id = "orin-01";
  farm.costs = {1e-6, 3e-6, 2e-6};
  farm.build_sec = 0.5;
  farm.confirmation = v1::CONFIRMATION_PENDING;
  const v1::Record remote = search::RecordOf(*task, kTargetX86, v1::Schedule(), ok, farm);
  EXPECT_EQ(remote.job_id(), 7);
  EXPECT_EQ(remote.device_id(), "orin-01");
  EXPECT_EQ(remote.costs_sec_size(), 3);
  EXPECT_DOUBLE_EQ(remote.build_sec(), 0.5);
  EXPECT_EQ(remote.confirmation(), v1::CONFIRMATION_PENDING);

  search::MeasureResult failed;
  failed.status = search::MeasureResult::Status::kRuntimeError;
  failed.error = "kernel process killed by signal 11";
  farm.status = v1::MEASURE_STATUS_TIMEOUT;  // the agent's word for it
  const v1::Record lost = search::RecordOf(*task, kTargetX86, v1::Schedule(), failed, farm);
  EXPECT_EQ(lost.status(), v1::MEASURE_STATUS_TIMEOUT);
  EXPECT_EQ(lost.costs_sec_size(), 0);
  EXPECT_EQ(lost.error(), failed.error);
}

TEST(WarmStart, OwnRecordsAreHistoryOthersTrainTheModelAndKeepFilters) {
  TempDir dir;
  store::TuningLog::Options lo;
  lo.canon = search::CompilerCanon();
  lo.path = dir.File("warm.db");
  auto log = store::TuningLog::Open(lo);
  ASSERT_TRUE(log.ok()) << log.status();
  ir::Target target = *ir::Target::Parse(kTargetX86);
  search::Task mine = *search::Task::Make(Dense(32, 32, 32), target, "mine");
  search::Task other = *search::Task::Make(Dense(48, 32, 64), target, "other");
  search::Task held_out = *search::Task::Make(Dense(16, 64, 32), target, "held out");

  std::mt19937_64 rng(3);
  std::vector<v1::Record> records;
  auto add = [&](const search::Task& t, int n, bool fail_one) {
    for (int i = 0; i < n; ++i) {
      search::MeasureResult r;
      r.seconds = 1e-4 * (i + 1);
      if (fail_one && i == 0) {
        r.status = search::MeasureResult::Status::kWrongResult;
        r.error = "element 3: 1.5 vs 2";
      }
      records.push_back(Stored(t, search::space::RandomSchedule(t.dag, target, rng), r));
    }
  };
  add(mine, 3, true);
  add(other, 5, true);
  add(held_out, 4, false);
  ASSERT_TRUE((*log)->CommitRecords(records).ok());

  search::TuneOptions o;
  o.strategy = search::Strategy::kEvolutionary;
  NoMeasurer none;
  search::Tuner tuner({mine}, &none, o);
  auto counts = search::WarmStart(**log, target, kTargetX86, {{mine.key, 0}}, tuner,
                          [&](const v1::Record& r) { return r.workload_key() != held_out.key; });
  ASSERT_TRUE(counts.ok()) << counts.status();
  // Own: all three, the failed one too (never measured again); other: its
  // four successes; held out: refused.
  EXPECT_EQ(counts->history, 3);
  EXPECT_EQ(counts->transfer, 4);
  EXPECT_EQ(counts->skipped, 4);
  const search::TaskHistory& h = tuner.history(0);
  EXPECT_EQ(h.measured.size(), 3u);
  ASSERT_EQ(h.ok.size(), 2u);
  EXPECT_DOUBLE_EQ(h.best_seconds(), 2e-4);
  int transfer_rows = 0;
  for (const auto& m : tuner.measured()) transfer_rows += m.task < 0;
  EXPECT_EQ(transfer_rows, 4);

  // Without a filter the held-out workload trains the model too.
  search::Tuner all({mine}, &none, o);
  auto everything = search::WarmStart(**log, target, kTargetX86, {{mine.key, 0}}, all);
  ASSERT_TRUE(everything.ok());
  EXPECT_EQ(everything->transfer, 8);
  EXPECT_EQ(everything->skipped, 0);
}

TEST(WarmStart, RecordRoundTripKeepsTheOutcome) {
  ir::Target target = *ir::Target::Parse(kTargetX86);
  search::Task t = *search::Task::Make(Dense(8, 8, 8), target, "t");
  search::MeasureResult ok;
  ok.seconds = 2.5e-5;
  ok.compile_ms = 40;
  v1::Record r = Stored(t, schedule::DefaultSchedule(t.dag, target), ok);
  EXPECT_EQ(r.status(), v1::MEASURE_STATUS_OK);
  EXPECT_DOUBLE_EQ(r.build_sec(), 0.04);
  search::MeasureResult back = search::ResultFromRecord(r);
  EXPECT_EQ(back.status, search::MeasureResult::Status::kOk);
  EXPECT_DOUBLE_EQ(back.seconds, 2.5e-5);

  search::MeasureResult late;
  late.status = search::MeasureResult::Status::kTimeout;
  late.error = "stopped after 0.30 s";
  v1::Record rt = Stored(t, schedule::DefaultSchedule(t.dag, target), late);
  EXPECT_EQ(rt.status(), v1::MEASURE_STATUS_TIMEOUT);
  EXPECT_EQ(rt.costs_sec_size(), 0);
  search::MeasureResult lost = search::ResultFromRecord(rt);
  EXPECT_NE(lost.status, search::MeasureResult::Status::kOk);
  EXPECT_EQ(lost.error, "stopped after 0.30 s");
}

}  // namespace
}  // namespace tunefarm::server
