#include "proto/tuning_curves.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/job_progress.h"
#include "proto/svg_chart.h"

namespace tunefarm {
namespace {

// A job of `n` tasks with workload keys "a", "b", ... and weights 1, 2, ...
v1::Job JobOfTasks(int n) {
  v1::Job j;
  j.set_job_id(7);
  for (int i = 0; i < n; ++i) {
    v1::Task* t = j.add_tasks();
    t->set_task_id(i + 1);
    t->set_workload_key(std::string(1, char('a' + i)));
    t->set_weight(i + 1);
    t->set_flops(1e9);
  }
  return j;
}

v1::Record Rec(int64_t id, const std::string& key, v1::MeasureStatus status, double sec,
               v1::Confirmation confirmation = v1::CONFIRMATION_NOT_NEEDED) {
  v1::Record r;
  r.set_record_id(id);
  r.set_workload_key(key);
  r.set_status(status);
  r.set_timestamp_unix_ms(1'000'000 + id * 6000);  // a trial every 0.1 minute
  if (status == v1::MEASURE_STATUS_OK) {
    r.add_costs_sec(sec * 0.9);
    r.add_costs_sec(sec * 1.1);
  }
  r.set_confirmation(confirmation);
  return r;
}

constexpr v1::MeasureStatus kOk = v1::MEASURE_STATUS_OK;

void ExpectNeverRises(const std::vector<TuningCurves::Point>& pts) {
  for (size_t i = 1; i < pts.size(); ++i) {
    EXPECT_LE(pts[i].y, pts[i - 1].y) << "the model's time rises at point " << i;
    EXPECT_GE(pts[i].x, pts[i - 1].x) << "time runs backwards at point " << i;
  }
}

// Summed over the tasks timed so far, the model's time would rise as each
// task gets its first time; drawn from when every task has one, it falls.
TEST(TuningCurves, ModelTimeStartsOnceEveryTaskHasATimeAndNeverRises) {
  const v1::Job job = JobOfTasks(3);
  std::vector<v1::Record> records = {
      Rec(1, "a", kOk, 1e-3),
      Rec(2, "a", kOk, 0.5e-3),
      Rec(3, "b", v1::MEASURE_STATUS_COMPILE_ERROR, 0),
      Rec(4, "b", kOk, 2e-3),
      Rec(5, "c", kOk, 3e-3),  // every task has a time from here
      Rec(6, "a", kOk, 0.4e-3),
      Rec(7, "c", kOk, 5e-3),                               // slower: no change
      Rec(8, "b", kOk, 0.1e-3, v1::CONFIRMATION_PENDING),   // does not rank yet
      Rec(9, "c", kOk, 0.1e-3, v1::CONFIRMATION_DISPUTED),  // never ranks
      Rec(10, "b", v1::MEASURE_STATUS_TIMEOUT, 0),
      Rec(11, "b", kOk, 1.5e-3, v1::CONFIRMATION_CONFIRMED),
  };
  std::reverse(records.begin(), records.end());  // any order: sorted by record id
  const TuningCurves c = CurvesOf(job, records);
  ASSERT_EQ(c.model_ms.size(), 7u);
  EXPECT_NEAR(c.model_ms.front().y, 1 * 0.5 + 2 * 2.0 + 3 * 3.0, 1e-9);
  EXPECT_NEAR(c.model_ms.front().x, 0.4, 1e-9);  // record 5, 4 trials after the first
  EXPECT_NEAR(c.model_ms.back().y, 1 * 0.4 + 2 * 1.5 + 3 * 3.0, 1e-9);
  ExpectNeverRises(c.model_ms);
  // A point per trial of each task, failed ones included.
  ASSERT_EQ(c.by_trial.size(), 3u);
  EXPECT_EQ(c.by_trial[0].size(), 3u);
  EXPECT_EQ(c.by_trial[1].size(), 5u);
  EXPECT_EQ(c.by_trial[2].size(), 3u);
  EXPECT_EQ(c.by_trial[1][0].y, 0);                          // failed before any time
  EXPECT_NEAR(c.by_trial[1][3].y, 1e9 / 2e-3 * 1e-9, 1e-6);  // the pending one moved nothing
}

TEST(TuningCurves, NoModelTimeUntilEveryTaskHasOne) {
  const v1::Job job = JobOfTasks(2);
  const TuningCurves c =
      CurvesOf(job, {Rec(1, "a", kOk, 1e-3), Rec(2, "b", v1::MEASURE_STATUS_RUNTIME_ERROR, 0)});
  EXPECT_TRUE(c.model_ms.empty());
  EXPECT_EQ(c.by_trial[0].size(), 1u);
  EXPECT_EQ(c.by_trial[1].size(), 1u);
}

// Random logs: whatever the statuses, confirmations and costs, the curve
// begins at the first record after which every task has a ranking time,
// ends at the sum of the tasks' best times, and never rises.
TEST(TuningCurves, ModelTimeNeverRisesOnRandomLogs) {
  std::mt19937_64 rng(12345);
  const v1::MeasureStatus statuses[] = {kOk, kOk, kOk, v1::MEASURE_STATUS_COMPILE_ERROR,
                                        v1::MEASURE_STATUS_TIMEOUT};
  const v1::Confirmation confirmations[] = {
      v1::CONFIRMATION_NOT_NEEDED, v1::CONFIRMATION_SINGLE_DEVICE, v1::CONFIRMATION_CONFIRMED,
      v1::CONFIRMATION_PENDING, v1::CONFIRMATION_DISPUTED};
  for (int round = 0; round < 200; ++round) {
    const int tasks = 1 + int(rng() % 4);
    const v1::Job job = JobOfTasks(tasks);
    std::vector<v1::Record> records;
    const int n = 1 + int(rng() % 40);
    for (int i = 1; i <= n; ++i) {
      records.push_back(Rec(i, std::string(1, char('a' + rng() % tasks)), statuses[rng() % 5],
                            1e-4 * double(1 + rng() % 1000), confirmations[rng() % 5]));
    }
    std::vector<double> best(size_t(tasks), 0);
    int first = -1;  // index of the record after which every task ranks
    for (int i = 0; i < n; ++i) {
      const v1::Record& r = records[size_t(i)];
      double& b = best[size_t(r.workload_key()[0] - 'a')];
      if (Ranks(r) && (b == 0 || MeanCostSec(r) < b)) b = MeanCostSec(r);
      if (first < 0 && std::count(best.begin(), best.end(), 0.0) == 0) first = i;
    }
    std::shuffle(records.begin(), records.end(), rng);
    const TuningCurves c = CurvesOf(job, records);
    SCOPED_TRACE(::testing::Message() << "round " << round);
    ExpectNeverRises(c.model_ms);
    if (first < 0) {
      EXPECT_TRUE(c.model_ms.empty());
      continue;
    }
    ASSERT_EQ(c.model_ms.size(), size_t(n - first));
    double model = 0;
    for (int t = 0; t < tasks; ++t) model += (t + 1) * best[size_t(t)];
    EXPECT_NEAR(c.model_ms.back().y, model * 1e3, 1e-9);
  }
}

TEST(JobProgress, RateAndTimeLeftToTheBudget) {
  v1::Job job = JobOfTasks(3);
  job.mutable_spec()->mutable_budget()->set_max_trials(100);
  job.set_trials_done(40);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.mutable_tasks(0)->set_best_cost_sec(1e-3);
  job.mutable_tasks(2)->set_best_cost_sec(2e-3);
  JobProgress p = ProgressOf(job, 20, 2.0);
  EXPECT_EQ(p.tasks, 3);
  EXPECT_EQ(p.tasks_with_best, 2);
  EXPECT_NEAR(p.model_best_sec, 1 * 1e-3 + 3 * 2e-3, 1e-12);
  EXPECT_DOUBLE_EQ(p.trials_per_minute, 10);
  EXPECT_DOUBLE_EQ(p.eta_sec, 60.0 / 10 * 60);
  // No rate without trials or time; no time left for a job that is not running.
  EXPECT_EQ(ProgressOf(job, 0, 2.0).trials_per_minute, 0);
  EXPECT_EQ(ProgressOf(job, 5, 0).trials_per_minute, 0);
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(ProgressOf(job, 20, 2.0).eta_sec, 0);
  EXPECT_DOUBLE_EQ(ProgressOf(job, 20, 2.0).trials_per_minute, 10);
  // A budget per task counts for every task.
  job.mutable_spec()->mutable_budget()->set_max_trials(0);
  job.mutable_spec()->mutable_budget()->set_max_trials_per_task(10);
  EXPECT_EQ(TrialBudget(job), 30);
  job.mutable_spec()->mutable_budget()->set_max_trials_per_task(0);
  EXPECT_EQ(TrialBudget(job), 0);
}

TEST(SvgChart, TicksAreRoundNumbersFromZeroPastTheData) {
  EXPECT_EQ(NiceTicks(7.3, 4), (std::vector<double>{0, 2, 4, 6, 8}));
  EXPECT_EQ(NiceTicks(100, 5), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  for (double max : {0.0, 1e-7, 0.27, 3.0, 12.5, 999.0, 123456.0}) {
    const std::vector<double> t = NiceTicks(max, 5);
    ASSERT_GE(t.size(), 2u) << max;
    EXPECT_EQ(t.front(), 0) << max;
    EXPECT_GE(t.back(), max) << max;
    EXPECT_LE(t.size(), 12u) << max;
  }
}

TEST(SvgChart, LongTitlesWrapThenEndWithAnEllipsis) {
  const std::string title =
      "#3 conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1,dil=1,groups=1)+bias+relu x2";
  const std::vector<std::string> lines = WrapTitle(title, 30, 2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_LE(lines[0].size(), 30u) << lines[0];
  EXPECT_EQ(lines[0].back(), ',') << "breaks after a comma: " << lines[0];
  EXPECT_LE(lines[1].size(), 29u + std::string("…").size()) << lines[1];
  EXPECT_EQ(lines[1].substr(lines[1].size() - 3), "…");
  EXPECT_EQ(WrapTitle("#1 matmul x1", 30, 2), std::vector<std::string>{"#1 matmul x1"});
  // Three lines' worth fits in three.
  const std::vector<std::string> three = WrapTitle(title, 40, 3);
  ASSERT_EQ(three.size(), 3u);
  auto no_spaces = [](std::string s) {
    s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
    return s;
  };
  EXPECT_EQ(no_spaces(three[0] + three[1] + three[2]), no_spaces(title));
  for (const std::string& line : three) EXPECT_LE(line.size(), 40u) << line;
  // A multi-byte character is never cut in half.
  const std::vector<std::string> utf8 = WrapTitle("ééééééééééééééééééééé", 7, 1);
  ASSERT_EQ(utf8.size(), 1u);
  EXPECT_EQ(utf8[0], "ééé…");
}

TEST(SvgChart, NumberedTicksOneCurveAndEscapedText) {
  SvgChart c;
  c.title = "job <b>&'x'\"";
  c.x_label = "minutes";
  c.y_label = "ms";
  c.points = {{0, 5}, {1, 4}, {2.5, 3}};
  c.width = 300;
  c.height = 200;
  const std::string svg = SvgChartElement(c);
  EXPECT_EQ(svg.find("<b>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("job &lt;b&gt;&amp;&#39;x&#39;&quot;"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">2.5</text>"), std::string::npos) << "x ticks 0, 0.5, ..., 2.5: " << svg;
  EXPECT_NE(svg.find(">6</text>"), std::string::npos) << "y ticks 0, 2, 4, 6: " << svg;
  size_t curves = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1))
    ++curves;
  EXPECT_EQ(curves, 1u) << svg;
  c.points.clear();
  const std::string empty = SvgChartElement(c);
  EXPECT_EQ(empty.find("<polyline"), std::string::npos) << empty;
  EXPECT_NE(empty.find(">no data yet</text>"), std::string::npos) << empty;
}

}  // namespace
}  // namespace tunefarm
