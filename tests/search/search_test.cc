// The task scheduler on synthetic tasks, the policies' no-repeat guarantee,
// and a short real tuning run on this machine through the local measurer.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/codegen/nvrtc_info.h"
#include "compiler/schedule/gpu_tiling.h"
#include "search/space/gpu_sketch.h"
#include "compiler/schedule/schedule.h"
#include "compiler/ir/schedule_hash.h"
#include "compiler/schedule/tiling.h"
#include "search/space/cpu_sketch.h"
#include "compiler/ir/workload_spec.h"
#include "gtest/gtest.h"
#include "tests/testing/tiling.h"
#include "search/local_measurer.h"
#include "search/policy.h"
#include "search/task_scheduler.h"
#include "search/tuner.h"
#include "tests/testing/skip.h"

namespace tunefarm {
namespace {

namespace v1 = ::tunefarm::v1;
using search::MeasureResult;
using testing::Space;
using testing::Tiling;

// Another workload's decisions fitted to `dag`, in wire form; empty when they do not fit.
std::vector<int64_t> Fit(const ir::ComputeDAG& dag, const ir::Target& target,
                         const std::vector<int64_t>& other) {
  std::optional<schedule::CpuTiling> t = search::space::CpuSketch(dag, target).Fit(other);
  return t ? t->Encode() : std::vector<int64_t>{};
}

TEST(TaskScheduler, WarmUpThenGradientThenEarlyStop) {
  // Task 1 weighs 5x; task 2 never improves and stops after 3 rounds.
  search::TaskSchedulerOptions o;
  o.early_stop_rounds = 3;
  search::TaskScheduler s({1, 5, 1}, o);
  std::vector<double> best = {1.0, 1.0, 1.0};
  std::vector<int> picks;
  for (int round = 0; round < 40; ++round) {
    int t = s.Next();
    if (t < 0) break;
    picks.push_back(t);
    if (t != 2) best[t] *= 0.97;  // tasks 0 and 1 keep improving a little
    s.Update(t, best[t]);
  }
  ASSERT_GE(picks.size(), 3u);
  EXPECT_EQ(picks[0], 0);
  EXPECT_EQ(picks[1], 1);
  EXPECT_EQ(picks[2], 2);
  int n1 = int(std::count(picks.begin(), picks.end(), 1));
  int n0 = int(std::count(picks.begin(), picks.end(), 0));
  EXPECT_GT(n1, 2 * n0) << "the heavier task should get most rounds";
  EXPECT_TRUE(s.stopped(2));
  EXPECT_LE(s.rounds(2), 1 + o.early_stop_rounds);
  // Stopping everything ends the run.
  s.Stop(0);
  s.Stop(1);
  EXPECT_EQ(s.Next(), -1);
}

// A task whose every candidate fails (nothing valid after its rounds)
// stops after failed_rounds instead of taking every round as "unknown".
TEST(TaskScheduler, TaskWithNothingValidStops) {
  search::TaskSchedulerOptions o;
  o.failed_rounds = 4;
  search::TaskScheduler s({1, 1}, o);
  std::vector<int> picks;
  double best = 1.0;
  for (int round = 0; round < 30; ++round) {
    const int t = s.Next();
    if (t < 0) break;
    picks.push_back(t);
    if (t == 1) best *= 0.99;
    s.Update(t, t == 0 ? 0.0 : best);
  }
  EXPECT_TRUE(s.stopped(0));
  EXPECT_EQ(s.rounds(0), 4);
  EXPECT_EQ(std::count(picks.begin(), picks.end(), 1), 30 - 4);
}

// The warm-up round goes to the tasks where the model's time is first:
// unknown latencies (nothing valid measured), then weight x latency.
TEST(TaskScheduler, WarmUpGoesToTheHeaviestTasksFirst) {
  search::TaskScheduler s({1, 1, 4, 1});
  s.SetInitialLatency(0, 1e-3);
  s.SetInitialLatency(1, 10e-3);
  s.SetInitialLatency(2, 3e-3);  // x4: 12 ms of the model's time
  // Task 3's default did not run: unknown, so first.
  std::vector<int> picks;
  for (int i = 0; i < 4; ++i) {
    picks.push_back(s.Next());
    s.Update(picks.back(), 1e-3);
  }
  EXPECT_EQ(picks, (std::vector<int>{3, 2, 1, 0}));
}

TEST(TaskScheduler, TaskWithNothingValidGoesFirst) {
  search::TaskScheduler s({1, 1});
  s.Update(0, 0.5);
  s.Update(1, 0);  // nothing valid yet
  EXPECT_EQ(s.Next(), 1);
}

search::Task MakeTask(const std::string& spec, const ir::Target& target = codegen::HostTarget()) {
  auto w = ir::ParseWorkloadSpec(spec);
  EXPECT_TRUE(w.ok()) << w.status();
  auto t = search::Task::Make(*w, target, spec);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// How many sketch decisions two schedules of the same decision length differ in.
int DecisionsApart(const schedule::Trace& a, const schedule::Trace& b) {
  EXPECT_EQ(a.decisions.size(), b.decisions.size());
  int diff = 0;
  for (size_t i = 0; i < std::min(a.decisions.size(), b.decisions.size()); ++i)
    diff += a.decisions[i] != b.decisions[i];
  return diff;
}

// A fixed target for the policy tests that measure nothing: their counts
// depend on the space, which depends on the vector width.
ir::Target Avx2Target() {
  return *ir::Target::Parse("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell -num-cores=2");
}

TEST(SearchPolicy, NeverProposesAMeasuredSchedule) {
  search::Task task = MakeTask("matmul(M=16,N=32,K=8)");
  for (auto strategy : {search::Strategy::kRandom, search::Strategy::kEvolutionary}) {
    search::SearchPolicy policy(strategy, {}, 5);
    search::TaskHistory history;
    MeasureResult ok;
    ok.seconds = 1e-3;
    std::set<std::string> seen;
    for (int round = 0; round < 6; ++round) {
      std::vector<schedule::Trace> batch = policy.Propose(task, history, nullptr, 12);
      EXPECT_FALSE(batch.empty());
      for (const schedule::Trace& s : batch) {
        std::string h = schedule::TraceHash(s);
        EXPECT_TRUE(seen.insert(h).second) << "proposed twice";
        EXPECT_FALSE(history.measured.count(h));
        ok.seconds *= 0.99;
        history.Add(s, ok);
      }
    }
    EXPECT_EQ(history.trials, int(seen.size()));
  }
}

// On a cuda target both strategies propose GPU sketches only: the tiling
// sketch (mutations of the measured best once there are any) and the fused
// one, each within the target's launch limits; a candidate past them is
// dropped before measurement with the reason. A few are built with NVRTC.
TEST(SearchPolicy, ProposesGpuSchedulesWithinTheTargetsLimits) {
  // A small block limit and 6 KiB of shared memory, so some samples exceed them.
  ir::Target t = *ir::Target::Parse(
      "cuda -arch=sm_87 -max-threads-per-block=256 -max-shared-memory-per-block=6144");
  const std::vector<std::string> archs = codegen::NvrtcSupportedArchs();
  const bool nvrtc = codegen::HaveNvrtc();
  if (nvrtc) ASSERT_NE(std::find(archs.begin(), archs.end(), "sm_87"), archs.end());
  int built = 0;
  int64_t rejected = 0;
  for (const char* spec :
       {"conv2d_nchw(N=1,C=64,H=14,W=14,K=64,R=3,S=3,pad=1)", "matmul(M=128,N=128,K=128)"}) {
    auto w = ir::ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok());
    auto task = search::Task::Make(*w, t, spec);
    ASSERT_TRUE(task.ok()) << task.status();
    for (auto strategy : {search::Strategy::kRandom, search::Strategy::kEvolutionary}) {
      search::SearchPolicy policy(strategy, {}, 3);
      search::TaskHistory history;
      std::set<std::string> seen;
      int tiled = 0, mutated = 0;
      for (int round = 0; round < 3; ++round) {
        std::vector<schedule::Trace> batch = policy.Propose(*task, history, nullptr, 16);
        ASSERT_EQ(batch.size(), 16u) << spec;
        for (const schedule::Trace& s : batch) {
          EXPECT_TRUE(s.sketch_id == schedule::kGpuTilingSketchId || s.sketch_id == schedule::kGpuFusedSketchId)
              << s.sketch_id;
          absl::Status launch = schedule::CheckGpuLaunch(task->dag, t, s);
          EXPECT_TRUE(launch.ok()) << spec << ": " << launch;
          EXPECT_TRUE(seen.insert(schedule::TraceHash(s)).second) << "proposed twice";
          tiled += s.sketch_id == schedule::kGpuTilingSketchId;
          // One decision away from a measured tiled schedule: a mutation.
          for (const auto& e : history.ok) {
            if (e.schedule.decisions.size() != s.decisions.size()) continue;
            if (DecisionsApart(e.schedule, s) == 1) {
              ++mutated;
              break;
            }
          }
          if (nvrtc && built < 6 && round == 0) {
            auto st = schedule::ScheduleState::Replay(task->dag, s, t);
            ASSERT_TRUE(st.ok());
            auto program = codegen::EmitCuda(st->dag(), schedule::Lower(*st), t);
            ASSERT_TRUE(program.ok()) << program.status();
            auto a = codegen::CompileCuda(*program, t);
            EXPECT_TRUE(a.ok()) << a.status();
            ++built;
          }
          // Time from the decisions, so the measured best has a shape.
          MeasureResult r;
          r.seconds = 1e-3 * (1 + s.decisions.size() + (s.decisions.size() ? s.decisions[0] : 0));
          history.Add(s, r);
        }
      }
      EXPECT_GT(tiled, 24) << spec;
      if (strategy == search::Strategy::kEvolutionary) EXPECT_GT(mutated, 0) << spec;
      rejected += policy.rejected();
      if (policy.rejected() > 0) {
        EXPECT_TRUE(absl::StrContains(policy.last_rejection(), "shared memory") ||
                    absl::StrContains(policy.last_rejection(), "threads"))
            << policy.last_rejection();
      }
    }
  }
  EXPECT_GT(rejected, 0) << "6 KiB of shared memory should turn some candidates away";
  if (!nvrtc) TF_SKIP("no-cuda-toolkit") << "the proposals were not built with NVRTC";
  EXPECT_EQ(built, 6);
}

// A float16 or tf32 product on sm_80 and newer is searched in the
// tensor-core sketch: most proposals are its schedules (the rest the GPU's
// random ones), every one within the target's limits, mutations of the
// measured best among them (tf32 ones never with ldmatrix); the same
// product on sm_75 never gets one.
TEST(SearchPolicy, Float16AndTf32ProductsSearchTheTensorCoreSketch) {
  for (const std::string arch_dtype : {"sm_90 float16", "sm_75 float16", "sm_90 tf32"}) {
    const std::string arch = arch_dtype.substr(0, 5), dtype = arch_dtype.substr(6);
    const ir::Target t = *ir::Target::Parse("cuda -arch=" + arch);
    const std::string spec = "matmul(M=256,N=192,K=128,dtype=" + dtype + ")";
    auto task = search::Task::Make(*ir::ParseWorkloadSpec(spec), t, spec);
    ASSERT_TRUE(task.ok()) << task.status();
    search::SearchPolicy policy(search::Strategy::kEvolutionary, {}, 7);
    search::TaskHistory history;
    int tensor_core = 0, mutated = 0, proposed = 0, wgmma = 0;
    for (int round = 0; round < 3; ++round) {
      for (const schedule::Trace& s : policy.Propose(*task, history, nullptr, 16)) {
        ++proposed;
        EXPECT_TRUE(schedule::CheckGpuLaunch(task->dag, t, s).ok()) << arch;
        if (s.sketch_id == ir::kGpuTensorCoreSketchId) {
          ++tensor_core;
          if (dtype == "tf32") EXPECT_EQ(s.decisions.at(7), 0) << "ldmatrix";
          wgmma += s.decisions.size() == 10;  // sm_90's warpgroup products
          for (const auto& e : history.ok) {
            if (e.schedule.sketch_id == s.sketch_id &&
                e.schedule.decisions.size() == s.decisions.size() &&
                DecisionsApart(e.schedule, s) == 1) {
              ++mutated;
              break;
            }
          }
        }
        MeasureResult r;
        r.seconds = 1e-3 * (1 + (s.decisions.empty() ? 9 : s.decisions[0]));
        history.Add(s, r);
      }
    }
    EXPECT_EQ(proposed, 48) << arch_dtype;
    if (arch == "sm_90") {
      EXPECT_GT(tensor_core, 24);
      EXPECT_GT(mutated, 0);
      if (dtype == "float16") EXPECT_GT(wgmma, 4);
      if (dtype == "tf32") EXPECT_EQ(wgmma, 0);
    } else {
      EXPECT_EQ(tensor_core, 0);
    }
  }
}

TEST(SearchPolicy, BatchesAreSpreadAndStallsAreCounted) {
  search::Task task = MakeTask("conv2d_nchw(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)");
  search::EvolutionOptions eo;
  search::SearchPolicy policy(search::Strategy::kEvolutionary, eo, 11);
  search::TaskHistory history;
  MeasureResult r;
  r.seconds = 1e-3;
  // Parents to mutate, each one a new best: no stall.
  for (const schedule::Trace& s : policy.Propose(task, history, nullptr, 16)) {
    r.seconds *= 0.9;
    history.Add(s, r);
  }
  EXPECT_EQ(history.last_improvement, history.trials);
  const int n = 12;
  const int chosen = n - int(std::round(n * eo.epsilon));  // the rest is random
  std::vector<schedule::Trace> batch = policy.Propose(task, history, nullptr, n);
  ASSERT_EQ(int(batch.size()), n);
  // The chosen part: sketch decision vectors at least min_distance apart
  // (a population of 128 always has that many).
  for (int a = 0; a < chosen; ++a) {
    for (int b = a + 1; b < chosen; ++b) {
      const auto& da = batch[a].decisions;
      const auto& db = batch[b].decisions;
      if (da.empty() || db.empty() || da.size() != db.size()) continue;
      EXPECT_GE(DecisionsApart(batch[a], batch[b]), eo.min_distance)
          << "candidates " << a << " and " << b;
      // Nor the same tiles unrolled or padded another way.
      EXPECT_NE(Space(task.dag).TilingStructure(Tiling(task.dag, {da.begin(), da.end()})).Encode(),
                Space(task.dag).TilingStructure(Tiling(task.dag, {db.begin(), db.end()})).Encode())
          << "candidates " << a << " and " << b;
    }
  }
  // Slower results do not move the last improvement; a 0.5% gain is not one.
  const int best_at = history.last_improvement;
  for (const schedule::Trace& s : batch) {
    MeasureResult slow;
    slow.seconds = history.best_seconds() * (s.decisions.empty() ? 2.0 : 0.995);
    history.Add(s, slow);
  }
  EXPECT_EQ(history.last_improvement, best_at);
  MeasureResult failed;
  failed.status = MeasureResult::Status::kTimeout;
  history.Add(batch[0], failed);
  EXPECT_EQ(history.last_improvement, best_at);

  // Two batches without a new best: a stall. Half the batch is exploration,
  // and half of that the best schedule with one decision changed, right
  // after the model's choices.
  for (const schedule::Trace& s : policy.Propose(task, history, nullptr, n)) {
    MeasureResult slow;
    slow.seconds = history.best_seconds() * 1.5;
    history.Add(s, slow);
  }
  ASSERT_GE(history.trials - history.last_improvement, 2 * n);
  schedule::Trace best;  // the best tiling-sketch schedule: the one mutated
  for (const auto& e : history.ok) {
    if (e.schedule.sketch_id == schedule::kTilingSketchId && !e.schedule.decisions.empty()) {
      best = e.schedule;
      break;
    }
  }
  ASSERT_FALSE(best.decisions.empty());
  const int n_random = int(std::round(n * eo.stalled_epsilon));
  const int neighbours = int(std::round(n_random * eo.stalled_neighbors));
  ASSERT_GT(neighbours, 0);
  std::vector<schedule::Trace> stalled = policy.Propose(task, history, nullptr, n);
  ASSERT_EQ(int(stalled.size()), n);
  for (int i = n - n_random; i < n - n_random + neighbours; ++i) {
    ASSERT_EQ(stalled[i].decisions.size(), best.decisions.size()) << "candidate " << i;
    EXPECT_EQ(DecisionsApart(stalled[i], best), 1)
        << "candidate " << i << " is not a neighbour of the best";
    EXPECT_EQ(history.measured.count(schedule::TraceHash(stalled[i])), 0u);
  }
}

// A model that scores one tile shape far above the others still gets a
// candidate of every stratum (tile shape, packed or not) into each batch,
// the model's own choice among them, so the run learns what the others do
// on its workload; once a stratum has enough trials and runs far below the
// best, the model's favourites take its place.
TEST(SearchPolicy, EveryBatchMeasuresEachStratumUntilItIsJudged) {
  search::Task task = MakeTask("matmul(M=64,N=64,K=64)", Avx2Target());
  std::mt19937_64 rng(9);
  std::vector<cost_model::ProgramFeatures> programs;
  std::vector<float> labels;
  std::map<int, int> sampled;
  for (int i = 0; i < 120; ++i) {
    std::vector<int64_t> d = Space(task.dag, task.target).SampleTiling(rng).Encode();
    auto s = schedule::BuildTiledSchedule(task.dag, task.target, d);
    ASSERT_TRUE(s.ok()) << s.status();
    auto f = search::FeaturesOf(task, *s);
    ASSERT_TRUE(f.ok()) << f.status();
    int shape = Space(task.dag).TileShape(Tiling(task.dag, d));
    ++sampled[Space(task.dag).TilingStratum(Tiling(task.dag, d))];
    programs.push_back(*std::move(f));
    labels.push_back(shape == 0 ? 1.0f : 0.05f);
  }
  ASSERT_EQ(sampled.size(), size_t(search::space::kTilingStrata));
  std::vector<cost_model::Sample> samples;
  for (size_t i = 0; i < programs.size(); ++i) samples.push_back({&programs[i], labels[i], 0});
  cost_model::CostModel model(cost_model::Objective::kRegression);
  ASSERT_TRUE(model.Train(samples).ok());
  search::EvolutionOptions eo;
  eo.epsilon = 0;  // every candidate chosen by the model
  eo.stalled_epsilon = 0;  // also once the best stops improving (round 3)
  eo.stratum_trials = 2;
  search::SearchPolicy policy(search::Strategy::kEvolutionary, eo, 4);
  search::TaskHistory history;
  for (int round = 0; round < 4; ++round) {
    std::map<int, int> strata;
    int favourite = 0, other_tiles = 0;
    for (const schedule::Trace& s : policy.Propose(task, history, &model, 12)) {
      // Register tiles run 10x faster than the rest on this "device".
      MeasureResult r;
      r.seconds = 1e-2;
      if (s.sketch_id == schedule::kTilingSketchId) {
        std::vector<int64_t> d(s.decisions.begin(), s.decisions.end());
        ++strata[Space(task.dag).TilingStratum(Tiling(task.dag, d))];
        const bool register_tile = Space(task.dag).TileShape(Tiling(task.dag, d)) == 0;
        favourite += register_tile;
        other_tiles += !register_tile;
        if (register_tile) r.seconds = 1e-3;
      }
      history.Add(s, r);
    }
    if (round < 2) {
      // Every stratum, and the model's favourite still fills most of the
      // batch (at most 8: four picks go to the other tile shapes).
      EXPECT_EQ(strata.size(), size_t(search::space::kTilingStrata)) << "round " << round;
      EXPECT_GE(favourite, 7) << "round " << round;
    } else if (round == 2) {
      // Two trials each at a tenth of the best: judged. Each judged stratum
      // gets the best moved into it once (four other tile shapes).
      EXPECT_LE(other_tiles, 4 + 2) << "round " << round;
      EXPECT_GE(favourite, 6) << "round " << round;
    } else {
      // Then the favourite takes over (another tile may still come in on its
      // score; forced picks would be one per other stratum, four).
      EXPECT_LE(other_tiles, 2) << "round " << round;
      EXPECT_GE(favourite, 6) << "round " << round;
    }
  }
}

// Once the task's best improves, every stratum judged before that gets the
// new best moved into it: the same register tile with that stratum's
// shape and packing, measured in the next batch.
TEST(SearchPolicy, JudgedStrataGetTheNewBestMovedIntoThem) {
  search::Task task = MakeTask("matmul(M=1024,N=1024,K=1024)");
  search::EvolutionOptions eo;
  eo.epsilon = 0;
  search::SearchPolicy policy(search::Strategy::kEvolutionary, eo, 6);
  search::TaskHistory history;
  std::mt19937_64 rng(8);
  MeasureResult slow;
  slow.seconds = 1e-1;
  // Every stratum judged: stratum_trials trials each, all 100x slower than the best below.
  std::vector<int> count(search::space::kTilingStrata, 0);
  int full = 0;
  for (int i = 0; i < 5000 && full < search::space::kTilingStrata; ++i) {
    std::vector<int64_t> d = Space(task.dag, task.target).SampleTiling(rng).Encode();
    int k = Space(task.dag).TilingStratum(Tiling(task.dag, d));
    if (count[k] >= eo.stratum_trials) continue;
    auto s = schedule::BuildTiledSchedule(task.dag, task.target, d);
    if (!s.ok() || history.measured.count(schedule::TraceHash(*s))) continue;
    history.Add(*s, slow);
    full += ++count[k] == eo.stratum_trials;
  }
  ASSERT_EQ(full, search::space::kTilingStrata);
  // The new best: a packed register tile 4x32 along n, 100x faster.
  std::vector<int64_t> best = Space(task.dag, task.target).SampleTiling(rng).Encode();
  best[1] = 1;  // vector axis n
  best[4] = 1;  // packed
  for (int a = 0; a < 2; ++a) {
    best[5 + 4 * a] = best[5 + 4 * a + 1] = 1;  // no S1/S2 tiles: the register shape
    best[5 + 4 * a + 2] = a == 0 ? 4 : 32;
  }
  const int best_stratum = Space(task.dag).TilingStratum(Tiling(task.dag, best));
  ASSERT_EQ(best_stratum, search::space::kTilingShapes);  // register, packed
  MeasureResult fast;
  fast.seconds = 1e-3;
  history.Add(*schedule::BuildTiledSchedule(task.dag, task.target, best), fast);
  // A random sample lands in every stratum after the new best: it says
  // nothing of the best's tiles there, so the moves are still owed.
  std::vector<bool> sampled(search::space::kTilingStrata, false);
  for (int i = 0; i < 5000 && std::count(sampled.begin(), sampled.end(), false) > 0; ++i) {
    std::vector<int64_t> d = Space(task.dag, task.target).SampleTiling(rng).Encode();
    int k = Space(task.dag).TilingStratum(Tiling(task.dag, d));
    auto s = schedule::BuildTiledSchedule(task.dag, task.target, d);
    if (sampled[k] || !s.ok() || history.measured.count(schedule::TraceHash(*s))) continue;
    history.Add(*s, slow);
    sampled[k] = true;
  }
  // The batch opens with the moves of the best, one per other stratum: its
  // vector axis and register tile there.
  std::vector<schedule::Trace> batch = policy.Propose(task, history, nullptr, 16);
  ASSERT_GE(batch.size(), size_t(search::space::kTilingStrata));
  std::set<int> paired;
  for (int i = 0; i < search::space::kTilingStrata - 1; ++i) {
    std::vector<int64_t> d(batch[i].decisions.begin(), batch[i].decisions.end());
    ASSERT_EQ(d.size(), best.size()) << "schedule " << i;
    EXPECT_TRUE(d[1] == best[1] && d[7] == best[7] && d[11] == best[11])
        << "schedule " << i << " is not a move of the best";
    paired.insert(Space(task.dag).TilingStratum(Tiling(task.dag, d)));
  }
  for (int k = 0; k < search::space::kTilingStrata; ++k) {
    if (k == best_stratum) continue;
    EXPECT_TRUE(paired.count(k)) << "stratum " << k << " got no move of the new best";
  }
  // Measured (and slower): the same best is not moved again. The next batch
  // opens with the one stratum still open, the best's own.
  for (const schedule::Trace& s : batch) history.Add(s, slow);
  batch = policy.Propose(task, history, nullptr, 16);
  ASSERT_FALSE(batch.empty());
  EXPECT_EQ(Space(task.dag).TilingStratum(
                Tiling(task.dag, {batch[0].decisions.begin(), batch[0].decisions.end()})),
            best_stratum)
      << "the same best was moved again";
}

// Plain-primitive schedules (outside the tiling sketch) come into the
// batches until they have been tried as often as a stratum is and none
// runs near the best; then every proposal is a sketch schedule.
TEST(SearchPolicy, PlainSchedulesStopOnceJudged) {
  search::Task task = MakeTask("matmul(M=256,N=256,K=256)");
  search::EvolutionOptions eo;
  search::SearchPolicy policy(search::Strategy::kEvolutionary, eo, 13);
  search::TaskHistory history;
  int plain_before = 0;
  MeasureResult ok, failed;
  ok.seconds = 1e-3;
  failed.status = MeasureResult::Status::kTimeout;
  for (int round = 0; round < 8 && history.plain_trials < eo.stratum_trials; ++round) {
    for (const schedule::Trace& s : policy.Propose(task, history, nullptr, 16)) {
      plain_before += s.decisions.empty();
      history.Add(s, s.decisions.empty() ? failed : ok);
    }
  }
  ASSERT_GE(plain_before, eo.stratum_trials);
  EXPECT_EQ(history.plain_trials, plain_before);
  for (int round = 0; round < 3; ++round) {
    for (const schedule::Trace& s : policy.Propose(task, history, nullptr, 16)) {
      EXPECT_FALSE(s.decisions.empty()) << "round " << round << ": a plain schedule";
      history.Add(s, ok);
    }
  }
}

// A task with nothing measured opens its batch with the transferred
// schedules (other workloads' best, fitted), in order and unranked, and
// stops using them once it has a measured sketch schedule of its own.
TEST(SearchPolicy, NewTaskOpensWithTransferredSchedules) {
  search::Task task = MakeTask("conv2d_nchw(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)");
  search::Task other = MakeTask("conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1)");
  std::mt19937_64 rng(21);
  std::vector<std::vector<int64_t>> seeds;
  std::vector<std::string> hashes;
  while (seeds.size() < 8) {
    std::vector<int64_t> d =
        Fit(task.dag, task.target, Space(other.dag, other.target).SampleTiling(rng).Encode());
    auto s = schedule::BuildTiledSchedule(task.dag, task.target, d);
    if (!s.ok() || std::count(hashes.begin(), hashes.end(), schedule::TraceHash(*s))) continue;
    seeds.push_back(d);
    hashes.push_back(schedule::TraceHash(*s));
  }
  search::EvolutionOptions eo;
  eo.transferred = 4;
  search::SearchPolicy policy(search::Strategy::kEvolutionary, eo, 5);
  policy.SetTransferred(task.key, seeds);
  search::TaskHistory history;
  // The first seed was measured already (it failed): the next four open the batch.
  MeasureResult failed;
  failed.status = MeasureResult::Status::kTimeout;
  history.Add(*schedule::BuildTiledSchedule(task.dag, task.target, seeds[0]), failed);
  std::vector<schedule::Trace> batch = policy.Propose(task, history, nullptr, 12);
  ASSERT_EQ(batch.size(), 12u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(schedule::TraceHash(batch[i]), hashes[i + 1]) << i;
  auto seeds_in = [&](const std::vector<schedule::Trace>& b) {
    int n = 0;
    for (const schedule::Trace& s : b) n += std::count(hashes.begin(), hashes.end(), schedule::TraceHash(s));
    return n;
  };
  EXPECT_EQ(seeds_in(batch), 4) << "at most `transferred` seeds";
  // With schedules of its own measured, the task's own best are the parents
  // (three seeds are left).
  MeasureResult ok;
  ok.seconds = 1e-4;
  for (const schedule::Trace& s : batch) history.Add(s, ok);
  EXPECT_EQ(seeds_in(policy.Propose(task, history, nullptr, 12)), 0);
  // Random search opens with the same seeds (so the two compare from the
  // same start), then draws at random.
  search::SearchPolicy random(search::Strategy::kRandom, eo, 5);
  random.SetTransferred(task.key, seeds);
  search::TaskHistory fresh;
  fresh.Add(*schedule::BuildTiledSchedule(task.dag, task.target, seeds[0]), failed);
  std::vector<schedule::Trace> drawn = random.Propose(task, fresh, nullptr, 12);
  ASSERT_EQ(drawn.size(), 12u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(schedule::TraceHash(drawn[i]), hashes[i + 1]) << i;
  EXPECT_EQ(seeds_in(drawn), 4);
  EXPECT_EQ(seeds_in(random.Propose(task, history, nullptr, 12)), 0) << "the task has its own";
  // Off: no seed in the batch.
  eo.transferred = 0;
  search::SearchPolicy off(search::Strategy::kEvolutionary, eo, 5);
  off.SetTransferred(task.key, seeds);
  std::vector<schedule::Trace> plain = off.Propose(task, search::TaskHistory(), nullptr, 12);
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(seeds_in(plain), 0);
}

TEST(Sketch, TilingStructureIgnoresUnrollingAndPadding) {
  search::Task task = MakeTask("conv2d_nchw(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)");
  std::mt19937_64 rng(5);
  const search::space::CpuSketch space = Space(task.dag);
  const schedule::CpuTiling d = space.SampleTiling(rng);
  schedule::CpuTiling cosmetic = d, tiles = d;
  cosmetic.pad_pass = !cosmetic.pad_pass;
  cosmetic.unroll_tile = !cosmetic.unroll_tile;
  cosmetic.pragma = cosmetic.pragma == 2 ? 3 : 2;
  cosmetic.spatial[0].unroll = !cosmetic.spatial[0].unroll;
  tiles.spatial[0].s3 += 1;
  EXPECT_EQ(space.TilingStructure(d), space.TilingStructure(cosmetic));
  EXPECT_NE(space.TilingStructure(d), space.TilingStructure(tiles));
  // Decisions of another layout are not decisions of this sketch at all.
  EXPECT_FALSE(schedule::CpuTiling::Decode(space.nest(), std::vector<int64_t>{1, 2, 3}).has_value());
}

TEST(Sketch, MutationsChangeOneDecisionAndStillBuild) {
  search::Task task = MakeTask("conv2d_nchw(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)");
  std::mt19937_64 rng(3);
  int built = 0, differ = 0;
  for (int i = 0; i < 50; ++i) {
    std::vector<int64_t> d = Space(task.dag, task.target).SampleTiling(rng).Encode();
    std::vector<int64_t> m =
        Space(task.dag, task.target).MutateTiling(Tiling(task.dag, d), rng).Encode();
    differ += m != d;
    auto s = schedule::BuildTiledSchedule(task.dag, task.target, m);
    if (!s.ok()) continue;
    ++built;
    EXPECT_EQ(std::vector<int64_t>(s->decisions.begin(), s->decisions.end()), m);
    EXPECT_TRUE(schedule::ScheduleState::Replay(task.dag, *s, task.target).ok());
  }
  EXPECT_GE(differ, 45);
  EXPECT_GE(built, 45);
  EXPECT_FALSE(schedule::BuildTiledSchedule(task.dag, task.target, std::vector<int64_t>{1, 2, 3}).ok());
}

// A move into another stratum keeps the register tile and vector axis,
// builds, and lands in the stratum asked for whenever the workload allows
// it (GEMM 1024: every shape, packed or not, along n).
TEST(Sketch, MovesKeepTheRegisterTileAndLandInTheStratum) {
  search::Task task = MakeTask("matmul(M=1024,N=1024,K=1024)");
  std::mt19937_64 rng(12);
  int landed = 0, tried = 0;
  for (int i = 0; i < 30; ++i) {
    std::vector<int64_t> d = Space(task.dag, task.target).SampleTiling(rng).Encode();
    d[1] = 1;  // vectorized along n (where packing copies b)
    if (d[5 + 4 + 2] < 2) d[5 + 4 + 2] = 16;
    for (int k = 0; k < search::space::kTilingStrata; ++k) {
      std::vector<int64_t> m =
          Space(task.dag, task.target).MoveTiling(Tiling(task.dag, d), k, rng).Encode();
      ++tried;
      landed += Space(task.dag).TilingStratum(Tiling(task.dag, m)) == k;
      EXPECT_TRUE(schedule::BuildTiledSchedule(task.dag, task.target, m).ok());
      EXPECT_EQ(m[1], d[1]);
      EXPECT_EQ(m[5 + 2], d[5 + 2]);          // register tile along m
      EXPECT_EQ(m[5 + 4 + 2], d[5 + 4 + 2]);  // and along n
      EXPECT_EQ(m[4] != 0, k >= search::space::kTilingShapes);
    }
  }
  EXPECT_GE(landed, tried * 9 / 10);
}

// Another workload's decisions fitted to this one, by hand: each tile
// clamped to its axis and moved to a divisor within half of it (the vector
// tile only clamped), reduction steps likewise, the placement kept when in
// range and reset when not; another layout fits nothing.
TEST(Sketch, FittedDecisionsClampTilesToDivisorsAndBuild) {
  search::Task task = MakeTask("conv2d_nchw(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)");
  // Fixed: padding pass, vector axis k, unroll tile, pragma, pack; then
  // (S1, S2, S3, consumer unroll) for n, k, h, w; steps for c, r, s; the
  // compute location and the parallel loops. As for a K32 H14 C16 layer.
  const std::vector<int64_t> theirs = {1,  1, 1, 2, 1,            //
                                       1,  1, 1, 1, 1, 1, 32, 1,  // n; k: 32-wide vector tile
                                       1,  2, 7, 1, 1, 1, 14, 1,  // h 2x7; w 14
                                       16, 3, 1, 0, 4};
  const std::vector<int64_t> fitted = Fit(task.dag, task.target, theirs);
  const std::vector<int64_t> want = {1, 1, 1, 2, 1,                       //
                                     1, 1, 1, 1, 1, 1, 16, 1,            // k: clamped to 16
                                     1, 2, 5, 1, 1, 1, 10, 1,            // h 7 -> 5; w 14 -> 10
                                     8, 3, 1, 0, 4};                     // c 16 -> 8
  EXPECT_EQ(fitted, want);
  auto built = schedule::BuildTiledSchedule(task.dag, task.target, fitted);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_TRUE(schedule::ScheduleState::Replay(task.dag, *built, task.target).ok());
  // h 4 -> 2 (a divisor within half); an out-of-range placement -> default.
  std::vector<int64_t> odd = theirs;
  odd[5 + 4 * 2 + 2] = 4;
  odd[24] = 7;
  const std::vector<int64_t> odd_fit = Fit(task.dag, task.target, odd);
  ASSERT_EQ(odd_fit.size(), want.size());
  EXPECT_EQ(odd_fit[5 + 4 * 2 + 2], 2);
  EXPECT_EQ(odd_fit[24], 0);
  EXPECT_EQ(odd_fit[25], 4);
  // The vector tile keeps its lanes: 16 of K20's channels, where a divisor
  // within half would be 10.
  search::Task k20 = MakeTask("conv2d_nchw(N=1,C=8,H=10,W=10,K=20,R=3,S=3,pad=1)");
  std::vector<int64_t> lanes16 = theirs;
  lanes16[5 + 4 + 2] = 16;
  EXPECT_EQ(Fit(k20.dag, k20.target, lanes16)[5 + 4 + 2], 16);
  EXPECT_EQ(Fit(k20.dag, k20.target, theirs)[5 + 4 + 2], 20);
  // A GEMM's layout (2 spatial axes, 1 reduction) does not fit a convolution.
  search::Task gemm = MakeTask("matmul(M=64,N=64,K=64)");
  std::mt19937_64 rng(2);
  EXPECT_TRUE(Fit(task.dag, task.target, Space(gemm.dag, gemm.target).SampleTiling(rng).Encode())
                  .empty());
}

TEST(LocalMeasurer, BadScheduleIsABuildErrorWithTheReason) {
  search::Task task = MakeTask("matmul(M=8,N=8,K=8)");
  schedule::Trace bad;
  bad.steps.push_back(schedule::SplitStep{0, 0, {}});  // no lengths
  search::LocalMeasurer m;
  std::vector<MeasureResult> r = m.Measure(task, {bad, schedule::DefaultSchedule(task.dag, task.target)});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].status, MeasureResult::Status::kBuildError);
  EXPECT_NE(r[0].error.find("no split lengths"), std::string::npos) << r[0].error;
  EXPECT_EQ(r[1].status, MeasureResult::Status::kOk) << r[1].error;
  EXPECT_GT(r[1].seconds, 0);
}

TEST(Tuner, ShortRealRunMeasuresEachCandidateOnce) {
  // Two workloads whose default schedule has no register tile (a dense
  // convolution's default is the hand-written register-tiled schedule, and
  // a depthwise one needs more than a few trials to beat its default).
  std::vector<search::Task> tasks = {MakeTask("matmul(M=256,N=256,K=256)"),
                                     MakeTask("matmul(M=96,N=384,K=128)")};
  search::LocalMeasureOptions mo;
  mo.min_repeat_ms = 2;
  mo.repeats = 3;
  search::LocalMeasurer measurer(mo);
  search::TuneOptions o;
  o.max_trials = 40;
  o.batch = 8;
  o.evolution.population = 48;
  o.evolution.generations = 2;
  search::Tuner tuner(tasks, &measurer, o);
  std::vector<std::set<std::string>> hashes(tasks.size());
  std::vector<int> tuned_ok(tasks.size(), 0);
  int trials = 0, ok = 0;
  absl::Status s = tuner.Run([&](const search::Trial& t) {
    EXPECT_EQ(t.index, trials++);
    EXPECT_TRUE(hashes[t.task].insert(schedule::TraceHash(t.schedule)).second) << "measured twice";
    if (t.index < int(tasks.size())) {
      EXPECT_TRUE(t.schedule.is_default);
    }
    ok += t.result.status == MeasureResult::Status::kOk;
    tuned_ok[t.task] += !t.schedule.is_default && t.result.status == MeasureResult::Status::kOk;
    // Everything the local path builds is correct: no wrong result, ever.
    EXPECT_NE(t.result.status, MeasureResult::Status::kWrongResult) << t.result.error;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(trials, o.max_trials);
  EXPECT_EQ(tuner.trials(), o.max_trials);
  EXPECT_GT(ok, o.max_trials / 2);
  EXPECT_TRUE(tuner.model().trained());
  for (size_t t = 0; t < tasks.size(); ++t) {
    ASSERT_GT(tuner.default_seconds(t), 0);
    double best = tuner.history(t).best_seconds();
    // Searched schedules of every task were built, checked and timed. Whether
    // they beat the default is a timing, for the benches (a loaded machine
    // once timed the best of 17 at exactly the default's time).
    EXPECT_GT(tuned_ok[t], 5) << tasks[t].name;
    EXPECT_GT(best, 0) << tasks[t].name;
    std::printf("%s: default %.1f GFLOP/s, best of %d trials %.1f GFLOP/s\n", tasks[t].name.c_str(),
                tasks[t].flops / tuner.default_seconds(t) * 1e-9, tuner.history(t).trials,
                tasks[t].flops / best * 1e-9);
  }
}

// The measurer of a run, watched: which cost model the tuner held when each
// batch was handed over.
class WatchedMeasurer : public search::Measurer {
 public:
  explicit WatchedMeasurer(search::Measurer* real) : real_(real) {}
  std::vector<MeasureResult> Measure(const search::Task& task,
                                     const std::vector<schedule::Trace>& schedules) override {
    if (tuner != nullptr) models.push_back(&tuner->model());
    return real_->Measure(task, schedules);
  }
  const search::Tuner* tuner = nullptr;
  std::vector<const cost_model::CostModel*> models;

 private:
  search::Measurer* real_;
};

search::LocalMeasurer QuickMeasurer() {
  search::LocalMeasureOptions mo;
  mo.min_repeat_ms = 1;
  mo.repeats = 2;
  return search::LocalMeasurer(mo);
}

// A stored model (the database's newest for the target) ranks the first
// batch as it is, though the run starts with records enough to train one;
// the model is retrained after that batch.
TEST(Tuner, StoredModelRanksTheFirstBatch) {
  std::vector<search::Task> tasks = {MakeTask("matmul(M=32,N=32,K=32)")};
  search::LocalMeasurer local = QuickMeasurer();
  search::TuneOptions o;
  o.max_trials = 1 + 16;
  o.batch = 8;
  o.min_train_records = 8;
  o.evolution.population = 32;
  o.evolution.generations = 1;
  std::vector<search::Trial> trials;
  search::Tuner first(tasks, &local, o);
  ASSERT_TRUE(first.Run([&](const search::Trial& t) { trials.push_back(t); }).ok());
  ASSERT_TRUE(first.model().trained());
  auto bytes = first.model().Serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  for (bool with_stored_model : {true, false}) {
    WatchedMeasurer watched(&local);
    o.max_trials = 8;
    search::Tuner second(tasks, &watched, o);
    watched.tuner = &second;
    for (const search::Trial& t : trials) second.AddHistory(0, t.schedule, t.result);
    const cost_model::CostModel* stored = nullptr;
    if (with_stored_model) {
      auto model = cost_model::CostModel::Deserialize(*bytes);
      ASSERT_TRUE(model.ok()) << model.status();
      stored = model->get();
      second.SetInitialModel(*std::move(model));
      EXPECT_EQ(second.model_trained_on(), 0);  // not trained by this run: not stored again
    }
    ASSERT_TRUE(second.Run().ok());
    ASSERT_EQ(watched.models.size(), 1u);  // the default is in the history: one batch
    if (with_stored_model) {
      EXPECT_EQ(watched.models[0], stored) << "the stored model was replaced before it ranked";
    } else {
      EXPECT_TRUE(watched.models[0]->trained()) << "17 records: a model before the first batch";
    }
    EXPECT_NE(&second.model(), stored);  // retrained after the batch
    EXPECT_TRUE(second.model().trained());
    EXPECT_EQ(second.model_trained_on(), int64_t(second.measured().size()));
  }
}

// Records of other workloads seed a new task: the best schedule of each
// workload of the same operator and loop layout, nearer workloads first,
// then each one's second best, fitted; a third best and other operators
// are not used.
TEST(Tuner, NewTaskStartsFromTheBestOfSimilarWorkloads) {
  search::Task mine = MakeTask("conv2d_nchw(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)");
  search::Task near = MakeTask("conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1)");
  search::Task far = MakeTask("conv2d_nchw(N=1,C=64,H=28,W=28,K=64,R=3,S=3,pad=1)");
  search::Task gemm = MakeTask("matmul(M=64,N=64,K=64)");
  // The same loop counts, but other loops (NHWC orders them n, y, x, k) or
  // other reads (depthwise): never seeds, though nearer than `near`.
  search::Task nhwc = MakeTask("conv2d_nhwc(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)");
  search::Task dw = MakeTask("depthwise_conv2d_nchw(N=1,C=16,H=10,W=10,R=3,S=3,pad=1)");
  std::mt19937_64 rng(8);
  auto sample = [&](const search::Task& t) {
    return *schedule::BuildTiledSchedule(t.dag, t.target,
                                   Space(t.dag, t.target).SampleTiling(rng).Encode());
  };
  auto fitted = [&](const schedule::Trace& s) {
    auto b = schedule::BuildTiledSchedule(
        mine.dag, mine.target,
        Fit(mine.dag, mine.target, {s.decisions.begin(), s.decisions.end()}));
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? schedule::TraceHash(*b) : std::string();
  };
  const schedule::Trace near1 = sample(near), near2 = sample(near), near3 = sample(near);
  const schedule::Trace far1 = sample(far);
  const std::vector<std::string> want = {fitted(near1), fitted(far1), fitted(near2)};
  ASSERT_EQ(std::set<std::string>(want.begin(), want.end()).size(), 3u);
  ASSERT_NE(fitted(near3), want[2]);

  search::LocalMeasurer local = QuickMeasurer();
  search::TuneOptions o;
  o.measure_default = false;
  o.max_trials = 8;
  o.batch = 8;
  o.evolution.population = 16;
  o.evolution.generations = 1;
  std::vector<std::string> seen;
  for (bool similar : {true, false}) {
    search::Tuner tuner({mine}, &local, o);
    // Out of order: the tuner keeps each workload's best two.
    tuner.AddTransferRecord(near, near3, 3e-4);
    tuner.AddTransferRecord(near, near2, 2e-4);
    tuner.AddTransferRecord(gemm, sample(gemm), 1e-5);
    tuner.AddTransferRecord(nhwc, sample(nhwc), 1e-5);
    tuner.AddTransferRecord(dw, sample(dw), 1e-5);
    tuner.AddTransferRecord(near, near2, 1.5e-4);  // measured again: one place
    if (similar) {
      tuner.AddTransferRecord(near, near1, 1e-4);
      tuner.AddTransferRecord(far, far1, 1e-4);
    }
    seen.clear();
    ASSERT_TRUE(
        tuner.Run([&](const search::Trial& t) { seen.push_back(schedule::TraceHash(t.schedule)); }).ok());
    ASSERT_EQ(seen.size(), 8u);
    EXPECT_EQ(tuner.seeds(0), similar ? 3 : 2);
    if (similar) {
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(seen[i], want[i]) << "trial " << i;
      EXPECT_EQ(std::count(seen.begin(), seen.end(), fitted(near3)), 0) << "a third best";
    } else {
      // Only `near` left: its best two, best first (near2 once).
      EXPECT_EQ(seen[0], fitted(near2));
      EXPECT_EQ(seen[1], fitted(near3));
    }
  }
}

// Budgets: a per-task limit that counts a resumed job's earlier trials; a
// run without a trial limit that ends at its wall time, which counts the
// restored run's time; early stop once a task finds nothing better.
// After the defaults, a run's first batch goes to the task whose default
// takes the longest (the model's time is there), not to the first task.
TEST(Tuner, FirstBatchGoesWhereTheModelsTimeIs) {
  std::vector<search::Task> tasks = {MakeTask("matmul(M=8,N=8,K=8)"),
                                     MakeTask("matmul(M=128,N=128,K=128)")};
  search::LocalMeasurer local = QuickMeasurer();
  search::TuneOptions o;
  o.max_trials = 2 + 4;  // the two defaults and one batch
  o.batch = 4;
  o.evolution.population = 16;
  o.evolution.generations = 1;
  std::vector<int> order;
  search::Tuner tuner(tasks, &local, o);
  ASSERT_TRUE(tuner.Run([&](const search::Trial& t) { order.push_back(t.task); }).ok());
  ASSERT_EQ(order.size(), 6u);
  EXPECT_EQ(order[0], 0);  // the defaults, in task order
  EXPECT_EQ(order[1], 1);
  ASSERT_GT(tuner.history(1).best_seconds(), tuner.history(0).best_seconds());
  for (size_t i = 2; i < order.size(); ++i) EXPECT_EQ(order[i], 1) << "trial " << i;
}

TEST(Tuner, PerTaskLimitsWallTimeAndEarlyStop) {
  std::vector<search::Task> tasks = {MakeTask("matmul(M=16,N=32,K=8)"),
                                     MakeTask("matmul(M=8,N=24,K=16)")};
  search::LocalMeasurer local = QuickMeasurer();
  search::TuneOptions o;
  o.max_trials = search::kNoTrialLimit;
  o.max_trials_per_task = 10;
  o.batch = 4;
  o.evolution.population = 16;
  o.evolution.generations = 1;
  std::map<int, int> per_task;
  {
    search::Tuner tuner(tasks, &local, o);
    tuner.AddEarlierTrials(0, 4);
    ASSERT_TRUE(tuner.Run([&](const search::Trial& t) { ++per_task[t.task]; }).ok());
    EXPECT_EQ(per_task[0], 6);
    EXPECT_EQ(per_task[1], 10);
    EXPECT_EQ(tuner.task_trials(0), 10);
    EXPECT_EQ(tuner.trials(), 16);
    EXPECT_EQ(tuner.end(), search::Tuner::End::kTasksDone);
  }

  // Wall time only: the run stops at the first check past it.
  o.max_trials_per_task = 0;
  o.max_seconds = 0.5;
  v1::SearchSnapshot snap;
  {
    search::Tuner tuner(tasks, &local, o);
    ASSERT_TRUE(tuner.Run().ok());
    EXPECT_EQ(tuner.end(), search::Tuner::End::kSeconds);
    EXPECT_GT(tuner.trials(), 0);
    EXPECT_GE(tuner.seconds(), 0.5);
    auto s = tuner.Snapshot();
    ASSERT_TRUE(s.ok()) << s.status();
    snap = *s;
    EXPECT_GE(snap.seconds(), 0.5);
  }
  // Resumed with that time spent: nothing is left to measure.
  {
    search::Tuner tuner(tasks, &local, o);
    ASSERT_TRUE(tuner.Restore(snap).ok());
    ASSERT_TRUE(tuner.Run().ok());
    EXPECT_EQ(tuner.trials(), 0);
    EXPECT_EQ(tuner.end(), search::Tuner::End::kSeconds);
  }

  // Early stop: one task; it ends when a whole batch (4 trials) finds
  // nothing better than the best before it, long before 200 trials.
  o.max_seconds = 0;
  o.max_trials = 200;
  o.early_stop_trials = 4;
  std::vector<double> seconds;
  search::Tuner tuner({tasks[0]}, &local, o);
  ASSERT_TRUE(tuner
                  .Run([&](const search::Trial& t) {
                    seconds.push_back(t.result.status == MeasureResult::Status::kOk
                                          ? t.result.seconds
                                          : std::numeric_limits<double>::infinity());
                  })
                  .ok());
  EXPECT_EQ(tuner.end(), search::Tuner::End::kTasksDone);
  ASSERT_GE(seconds.size(), 5u);
  const double before_last = *std::min_element(seconds.begin(), seconds.end() - 4);
  EXPECT_EQ(*std::min_element(seconds.begin(), seconds.end()), before_last);
}

// Exact resume: a run is interrupted after its second batch; a new tuner
// given what the database would hold (the measured records and the saved
// snapshot) proposes exactly the third batch the uninterrupted run measured.
// The second run's measurer replays the first run's real measurements (the
// records), so both see the same numbers.
class ReplayMeasurer : public search::Measurer {
 public:
  explicit ReplayMeasurer(std::map<std::string, MeasureResult> results)
      : results_(std::move(results)) {}
  std::vector<MeasureResult> Measure(const search::Task&,
                                     const std::vector<schedule::Trace>& schedules) override {
    std::vector<MeasureResult> out;
    for (const schedule::Trace& s : schedules) {
      auto it = results_.find(schedule::TraceHash(s));
      MeasureResult r;
      r.status = MeasureResult::Status::kRuntimeError;
      r.error = "not measured by the first run";
      out.push_back(it != results_.end() ? it->second : r);
    }
    return out;
  }

 private:
  std::map<std::string, MeasureResult> results_;
};

TEST(Tuner, ResumedRunProposesWhatTheInterruptedOneWould) {
  std::vector<search::Task> tasks = {MakeTask("matmul(M=32,N=48,K=64)")};
  search::LocalMeasureOptions mo;
  mo.min_repeat_ms = 2;
  mo.repeats = 3;
  search::LocalMeasurer measurer(mo);
  search::TuneOptions o;
  o.max_trials = 1 + 3 * 16;  // the default, then three batches
  o.batch = 16;
  o.evolution.population = 64;
  o.evolution.generations = 2;
  o.seed = 11;
  std::vector<search::Trial> trials;
  std::optional<v1::SearchSnapshot> after_two;
  int batches = 0;
  search::Tuner* first_ptr = nullptr;
  o.on_batch = [&] {
    if (++batches == 2) {
      auto snap = first_ptr->Snapshot();
      ASSERT_TRUE(snap.ok()) << snap.status();
      after_two = *snap;
    }
  };
  search::Tuner first(tasks, &measurer, o);
  first_ptr = &first;
  ASSERT_TRUE(first.Run([&](const search::Trial& t) { trials.push_back(t); }).ok());
  ASSERT_EQ(trials.size(), size_t(o.max_trials));
  ASSERT_TRUE(after_two.has_value());
  EXPECT_FALSE(after_two->cost_model().empty());  // 33 records: the model was trained
  EXPECT_EQ(after_two->trials(), 33);
  // The moves of the best the policy paired are part of the saved state.
  EXPECT_EQ(after_two->tasks(0).paired_at_size(), search::space::kTilingStrata);

  // The resumed run: the first 33 records, the snapshot, a fresh seed.
  std::map<std::string, MeasureResult> measured;
  for (const search::Trial& t : trials) measured[schedule::TraceHash(t.schedule)] = t.result;
  ReplayMeasurer replay(measured);
  search::TuneOptions o2 = o;
  o2.on_batch = nullptr;
  o2.seed = 999;
  o2.max_trials = 16;
  search::Tuner second(tasks, &replay, o2);
  for (int i = 0; i < 33; ++i) second.AddHistory(0, trials[i].schedule, trials[i].result);
  ASSERT_TRUE(second.Restore(*after_two).ok());
  std::vector<std::string> proposed;
  ASSERT_TRUE(
      second.Run([&](const search::Trial& t) { proposed.push_back(schedule::TraceHash(t.schedule)); })
          .ok());
  ASSERT_EQ(proposed.size(), 16u);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(proposed[i], schedule::TraceHash(trials[33 + i].schedule)) << "trial " << 33 + i;
  }

  // A snapshot of another job's shape is refused, not half-applied.
  v1::SearchSnapshot wrong = *after_two;
  wrong.add_tasks();
  search::Tuner third(tasks, &replay, o2);
  EXPECT_FALSE(third.Restore(wrong).ok());
  wrong = *after_two;
  wrong.set_rng_state("not a state");
  EXPECT_FALSE(third.Restore(wrong).ok());
  wrong = *after_two;
  wrong.mutable_tasks(0)->add_paired_at(-7);
  EXPECT_FALSE(third.Restore(wrong).ok());
}

// A measurer whose every result is scripted: all fail (runtime error) or all
// run in 1 ms. It notes what it was asked to measure.
class ScriptedMeasurer : public search::Measurer {
 public:
  bool fail = true;
  std::vector<schedule::Trace> asked;
  std::vector<MeasureResult> Measure(const search::Task&,
                                     const std::vector<schedule::Trace>& schedules) override {
    std::vector<MeasureResult> out;
    for (const schedule::Trace& s : schedules) {
      asked.push_back(s);
      MeasureResult r;
      if (fail) {
        r.status = MeasureResult::Status::kRuntimeError;
        r.error = "the board is broken";
      } else {
        r.seconds = 1e-3;
      }
      out.push_back(r);
    }
    return out;
  }
};

// A job's rules (failed_trials_count off): failed trials spend no budget,
// a run stops at max_attempts, and a later run measures the earlier run's
// failed schedules again, the failed default schedule first.
TEST(Tuner, FailedTrialsSpendNoBudgetAndAreMeasuredAgain) {
  const std::vector<search::Task> tasks = {MakeTask("matmul(M=16,N=32,K=8)")};
  search::TuneOptions o;
  o.strategy = search::Strategy::kRandom;
  o.max_trials = 4;
  o.batch = 4;
  ScriptedMeasurer broken;
  {
    // Counted as before: four failures spend the budget.
    search::Tuner counted(tasks, &broken, o);
    ASSERT_TRUE(counted.Run().ok());
    EXPECT_EQ(counted.trials(), 4);
    EXPECT_EQ(counted.end(), search::Tuner::End::kTrials);
  }
  o.failed_trials_count = false;
  o.max_attempts = 8;
  broken.asked.clear();
  search::Tuner first(tasks, &broken, o);
  ASSERT_TRUE(first.Run().ok());
  EXPECT_EQ(first.trials(), 8);
  EXPECT_EQ(first.ok_trials(), 0);
  EXPECT_EQ(first.end(), search::Tuner::End::kAttempts);
  EXPECT_EQ(first.default_seconds(0), 0);
  ASSERT_EQ(broken.asked.size(), 8u);
  EXPECT_TRUE(broken.asked[0].is_default);

  // The board mended: a second run given the first's records as history
  // and its other failures to retry measures the default (failed before:
  // measured again, a retry or not), then the retries, and the budget's
  // four trials are spent on them.
  ScriptedMeasurer mended;
  mended.fail = false;
  search::Tuner second(tasks, &mended, o);
  MeasureResult failure;
  failure.status = MeasureResult::Status::kRuntimeError;
  for (const schedule::Trace& s : broken.asked) {
    second.AddHistory(0, s, failure);
    if (!s.is_default) second.AddRetry(0, s);
  }
  ASSERT_TRUE(second.Run().ok());
  EXPECT_EQ(second.ok_trials(), 4);
  EXPECT_EQ(second.trials(), 4);
  EXPECT_EQ(second.end(), search::Tuner::End::kTrials);
  EXPECT_GT(second.default_seconds(0), 0);
  ASSERT_EQ(mended.asked.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(schedule::TraceHash(mended.asked[i]), schedule::TraceHash(broken.asked[i])) << i;
}

}  // namespace
}  // namespace tunefarm
