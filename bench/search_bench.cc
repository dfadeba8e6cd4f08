// tunefarm-bench search: random vs evolutionary+XGBoost search on anchor
// workloads, same measurement budgets, several seeds, on this machine (the
// local measurer: LLVM build, forked run, output checked, median timing).
// Prints best GFLOP/s per budget, trials to reach 90% of the best value seen
// by either strategy, the ratio to oneDNN measured in the same run, trials
// per minute, and the cost model's quality per objective on held-out
// records; writes JSON rows and an SVG plot of best-so-far against trials.
// Both strategies start alike: cold, or with --warm-db FILE both warm
// from the same pool (random search opens with the same transferred
// seeds). FILE is created or topped up by the same command: the pool's
// workloads measured at random to --pool-trials records each, so
// `tunefarm-bench search --warm-db pool.db` builds the database it reads.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/anchors.h"
#include "bench/references.h"
#include "common/status_macros.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/reference.h"
#include "compiler/schedule/schedule.h"
#include "compiler/ir/schedule_hash.h"
#include "compiler/schedule/tiling.h"
#include "search/space/cpu_sketch.h"
#include "compiler/ir/workload_spec.h"
#include "cost_model/xgb_model.h"
#include "search/local_measurer.h"
#include "search/policy.h"
#include "search/store_canon.h"
#include "search/tuner.h"
#include "search/session.h"
#include "store/tuning_log.h"

namespace tunefarm::bench {
namespace {

namespace v1 = ::tunefarm::v1;

// The search issue's subset of the kernel anchors.
const char* const kSearchAnchors[] = {"gemm_1024", "resnet_c64_h56_3x3", "resnet_c128_h28_3x3",
                                      "mbv2_dw_c144_h56"};

struct Run {
  std::string workload, strategy;
  uint64_t seed;
  std::vector<double> best_so_far;  // GFLOP/s after each trial
  double minutes = 0;
  double budget_minutes = 0;  // up to the largest budget
  std::vector<search::Tuner::MeasuredProgram> measured;
  std::optional<schedule::Trace> best;               // the fastest schedule within the largest budget
  std::vector<search::TaskHistory::Entry> ok;  // every successful measurement
  int64_t warm = 0;                            // records of other workloads it started from
};

// What the database of a farm that has tuned other layers before holds
// (--warm-db): the kernel anchors outside the search set, and more
// MobileNetV2 depthwise layers. None of them is a benchmarked workload.
std::vector<std::pair<std::string, std::string>> PoolWorkloads() {
  std::vector<std::pair<std::string, std::string>> pool;
  for (const Anchor& a : KernelAnchors()) {
    if (std::none_of(std::begin(kSearchAnchors), std::end(kSearchAnchors),
                     [&](const char* n) { return std::string(n) == a.name; }))
      pool.push_back({a.name, a.spec});
  }
  pool.push_back({"mbv2_dw_c32_h112", "depthwise_conv2d_nchw(N=1,C=32,H=112,W=112,R=3,S=3,pad=1)"});
  pool.push_back({"mbv2_dw_c192_h28", "depthwise_conv2d_nchw(N=1,C=192,H=28,W=28,R=3,S=3,pad=1)"});
  pool.push_back({"mbv2_dw_c384_h14", "depthwise_conv2d_nchw(N=1,C=384,H=14,W=14,R=3,S=3,pad=1)"});
  pool.push_back({"mbv2_dw_c960_h7", "depthwise_conv2d_nchw(N=1,C=960,H=7,W=7,R=3,S=3,pad=1)"});
  return pool;
}

// Tops up the pool in `log` to `trials` records per workload (random
// search on this machine, as `tunefarm tune --strategy random --db` does);
// returns the pool's workload keys.
absl::StatusOr<std::set<std::string>> FillPool(store::TuningLog& log, const ir::Target& target,
                                               int trials, int threads) {
  std::set<std::string> keys;
  const std::string spec = target.ToString();
  for (const auto& [name, text] : PoolWorkloads()) {
    absl::StatusOr<v1::Workload> w = ir::ParseWorkloadSpec(text);
    if (!w.ok()) return w.status();
    absl::StatusOr<search::Task> task = search::Task::Make(*w, target, name);
    if (!task.ok()) return task.status();
    keys.insert(task->key);
    search::LocalMeasureOptions mo;
    mo.threads = threads;
    search::LocalMeasurer measurer(mo);
    const std::string key = task->key;
    store::TuningLog::RecordQuery q;
    q.workload_key = key;
    q.target_spec = spec;
    q.limit = trials;
    TF_ASSIGN_OR_RETURN(std::vector<v1::Record> have, log.ListRecords(q));
    search::TuneOptions o;
    o.strategy = search::Strategy::kRandom;
    o.measure_default = false;
    o.seed = 500;
    o.max_trials = trials - int(have.size());
    if (o.max_trials <= 0) continue;
    std::printf("pool: %-28s %zu records, measuring %d more\n", name.c_str(), have.size(),
                o.max_trials);
    std::fflush(stdout);
    // The stored records are history: a top-up never measures them again.
    search::SessionOptions so;
    so.tune = o;
    so.log = &log;
    so.keep_record = [&](const v1::Record& r) { return r.workload_key() == key; };
    so.store_model = false;
    search::Session fill({*task}, &measurer, std::move(so));
    TF_ASSIGN_OR_RETURN(search::SessionEnd end, fill.Run());
    TF_RETURN_IF_ERROR(end.run);
    TF_RETURN_IF_ERROR(end.records);
  }
  return keys;
}

// Rounds of the final timing; each kernel's median round counts.
constexpr int kFinalRounds = 3;

// How the finals are timed: ours through the local measurer, the library
// in this process, both as the median of kFinalRepeats repeats after the
// same warm-up, the repeats together at least kFinalMs long.
constexpr int kFinalRepeats = 9;
constexpr double kFinalMs = 50;

Timing FinalTiming() {
  Timing t;
  t.repeats = kFinalRepeats;
  t.min_ms = kFinalMs / kFinalRepeats;
  t.warmup_ms = search::LocalMeasureOptions().warmup_ms;
  return t;
}

// GFLOP/s of `schedules` on `threads` kernel threads, timed after tuning
// (nothing else of ours running); NaN where a schedule fails.
std::vector<double> TimeSchedules(const search::Task& task, const std::vector<schedule::Trace>& schedules,
                                  int threads) {
  search::LocalMeasureOptions mo;
  mo.threads = threads;
  mo.repeats = kFinalRepeats;
  mo.min_repeat_ms = kFinalMs;
  search::LocalMeasurer measurer(mo);
  std::vector<double> out;
  for (const search::MeasureResult& r : measurer.Measure(task, schedules)) {
    if (r.status != search::MeasureResult::Status::kOk)
      std::printf("  (%d threads: %s)\n", threads, r.error.c_str());
    out.push_back(r.status == search::MeasureResult::Status::kOk ? task.flops / r.seconds * 1e-9
                                                                 : NAN);
  }
  return out;
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view p : absl::StrSplit(s, ',')) {
    int v = 0;
    if (absl::SimpleAtoi(p, &v) && v > 0) out.push_back(v);
  }
  return out;
}

std::string Num(double v) { return std::isnan(v) ? "null" : absl::StrFormat("%.2f", v); }

// Best-so-far curves, mean over seeds per strategy, one panel per workload.
void WriteSvg(const std::string& path, const std::vector<Run>& runs,
              const std::map<std::string, double>& onednn) {
  std::vector<std::string> names;
  for (const Run& r : runs) {
    if (std::find(names.begin(), names.end(), r.workload) == names.end())
      names.push_back(r.workload);
  }
  const int pw = 420, ph = 260, pad = 50;
  std::ofstream f(path);
  f << absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' "
      "font-size='11'>\n",
      pw * 2, ph * int((names.size() + 1) / 2));
  for (size_t w = 0; w < names.size(); ++w) {
    int ox = int(w % 2) * pw, oy = int(w / 2) * ph;
    double ymax = 1, xmax = 1;
    std::map<std::string, std::vector<double>> mean;
    std::map<std::string, int> count;
    for (const Run& r : runs) {
      if (r.workload != names[w]) continue;
      auto& m = mean[r.strategy];
      if (m.size() < r.best_so_far.size()) m.resize(r.best_so_far.size(), 0);
      for (size_t i = 0; i < r.best_so_far.size(); ++i) m[i] += r.best_so_far[i];
      ++count[r.strategy];
    }
    for (auto& [s, m] : mean) {
      for (double& v : m) v /= count[s];
      for (double v : m) ymax = std::max(ymax, v);
      xmax = std::max(xmax, double(m.size()));
    }
    auto dn = onednn.find(names[w]);
    if (dn != onednn.end()) ymax = std::max(ymax, dn->second);
    ymax *= 1.1;
    auto X = [&](double x) { return ox + pad + (pw - 2 * pad) * x / xmax; };
    auto Y = [&](double y) { return oy + ph - pad + -(ph - 2 * pad) * y / ymax; };
    f << absl::StrFormat("<text x='%d' y='%d' font-weight='bold'>%s</text>\n", ox + pad, oy + 20,
                         names[w]);
    f << absl::StrFormat("<line x1='%f' y1='%f' x2='%f' y2='%f' stroke='black'/>\n", X(0), Y(0),
                         X(xmax), Y(0));
    f << absl::StrFormat("<line x1='%f' y1='%f' x2='%f' y2='%f' stroke='black'/>\n", X(0), Y(0),
                         X(0), Y(ymax));
    f << absl::StrFormat("<text x='%f' y='%f'>trials (%d)</text>\n", X(xmax) - 60, Y(0) + 25,
                         int(xmax));
    f << absl::StrFormat("<text x='%f' y='%f'>GFLOP/s (max %.0f)</text>\n", X(0) - 40, Y(ymax) - 5,
                         ymax);
    const char* colors[] = {"#d62728", "#1f77b4"};
    int c = 0;
    for (auto& [s, m] : mean) {
      std::string pts;
      for (size_t i = 0; i < m.size(); ++i)
        absl::StrAppend(&pts, absl::StrFormat("%.1f,%.1f ", X(i + 1), Y(m[i])));
      f << absl::StrFormat("<polyline fill='none' stroke='%s' stroke-width='2' points='%s'/>\n",
                           colors[c % 2], pts);
      f << absl::StrFormat("<text x='%f' y='%f' fill='%s'>%s</text>\n", X(xmax) - 90,
                           Y(0) - 15 - 14 * c, colors[c % 2], s);
      ++c;
    }
    if (dn != onednn.end()) {
      f << absl::StrFormat(
          "<line x1='%f' y1='%f' x2='%f' y2='%f' stroke='gray' stroke-dasharray='4'/>\n", X(0),
          Y(dn->second), X(xmax), Y(dn->second));
      f << absl::StrFormat("<text x='%f' y='%f' fill='gray'>oneDNN %.0f</text>\n", X(0) + 5,
                           Y(dn->second) - 4, dn->second);
    }
  }
  f << "</svg>\n";
}

// The CPU tile shape of a schedule of the tiling sketch, -1 for any other.
int TileShapeOf(const search::Task& task, const schedule::Trace& s) {
  if (s.sketch_id != schedule::kTilingSketchId || task.target.is_gpu()) return -1;
  const search::space::CpuSketch sketch(task.dag, task.target);
  std::optional<schedule::CpuTiling> t = schedule::CpuTiling::Decode(sketch.nest(), s.decisions);
  return t ? sketch.TileShape(*t) : -1;
}

// A schedule's sketch decisions as text, for the logs.
std::string DecisionsText(const schedule::Trace& s) {
  return s.decisions.empty() ? "not a sketch" : absl::StrJoin(s.decisions, ",");
}

struct SearchBenchOptions {
  std::vector<int> budgets = {64, 128, 256, 512};
  int seeds = 3, threads = 1;
  int min_train = search::TuneOptions().min_train_records;
  std::string warm_db;
  int pool_trials = 128;
  int run_to = 0;  // --run-to: every run goes on to this many trials
  search::EvolutionOptions evolution;
  std::string only;
  std::string json_path, svg_path;
  bool trace = false;
  // --from-default: every run measures the default first, as `tunefarm
  // tune` does (a default of the tiling sketch is then a mutation parent).
  bool from_default = false;
  cost_model::Objective objective = cost_model::Objective::kRegression;  // docs/benchmarks-history.md
  std::vector<search::Strategy> strategies = {search::Strategy::kRandom,
                                              search::Strategy::kEvolutionary};
  int max_trials() const { return budgets.back(); }
};

// The options of `args`; false (with a message) on a bad one.
bool ParseSearchBenchArgs(const std::vector<std::string>& args, SearchBenchOptions* o) {
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() { return i + 1 < args.size() ? args[++i] : std::string(); };
    if (args[i] == "--budgets")
      o->budgets = ParseList(value());
    else if (args[i] == "--seeds")
      o->seeds = std::max(1, std::atoi(value().c_str()));
    else if (args[i] == "--threads")
      o->threads = std::max(1, std::atoi(value().c_str()));
    else if (args[i] == "--only")
      o->only = value();
    else if (args[i] == "--warm-db")
      o->warm_db = value();
    else if (args[i] == "--run-to")
      o->run_to = std::max(0, std::atoi(value().c_str()));
    else if (args[i] == "--pool-trials")
      o->pool_trials = std::max(1, std::atoi(value().c_str()));
    else if (args[i] == "--population")
      o->evolution.population = std::max(1, std::atoi(value().c_str()));
    else if (args[i] == "--generations")
      o->evolution.generations = std::max(0, std::atoi(value().c_str()));
    else if (args[i] == "--epsilon")
      o->evolution.epsilon = std::clamp(std::atof(value().c_str()), 0.0, 1.0);
    else if (args[i] == "--stalled-neighbors")
      o->evolution.stalled_neighbors = std::clamp(std::atof(value().c_str()), 0.0, 1.0);
    else if (args[i] == "--transferred")
      o->evolution.transferred = std::max(0, std::atoi(value().c_str()));
    else if (args[i] == "--min-train")
      o->min_train = std::max(1, std::atoi(value().c_str()));
    else if (args[i] == "--json")
      o->json_path = value();
    else if (args[i] == "--trace")
      o->trace = true;
    else if (args[i] == "--from-default")
      o->from_default = true;
    else if (args[i] == "--svg")
      o->svg_path = value();
    else if (args[i] == "--objective") {
      auto obj = cost_model::ParseObjective(value());
      if (!obj.ok()) {
        std::fprintf(stderr, "tunefarm-bench search: %s\n",
                     std::string(obj.status().message()).c_str());
        return false;
      }
      o->objective = *obj;
    } else if (args[i] == "--strategies") {
      o->strategies.clear();
      for (absl::string_view n : absl::StrSplit(value(), ',')) {
        auto st = search::ParseStrategy(n);
        if (!st.ok()) {
          std::fprintf(stderr, "tunefarm-bench search: %s\n",
                       std::string(st.status().message()).c_str());
          return false;
        }
        o->strategies.push_back(*st);
      }
    } else {
      std::fprintf(stderr, "tunefarm-bench search: unknown argument %s\n", args[i].c_str());
      return false;
    }
  }
  if (o->budgets.empty()) return false;
  std::sort(o->budgets.begin(), o->budgets.end());
  return true;
}

// The warm-start pool (--warm-db): its records of other workloads.
struct Pool {
  std::unique_ptr<store::TuningLog> log;  // null: cold runs
  std::set<std::string> keys;
};

// One search run of `strategy` on `task` from `seed`, printed as it ends.
absl::StatusOr<Run> TuneOnce(const char* name, const search::Task& task,
                             search::Strategy strategy, int seed, const SearchBenchOptions& opts,
                             const Pool& pool) {
  const int max_trials = opts.max_trials();
  search::LocalMeasureOptions mo;
  mo.threads = opts.threads;
  search::LocalMeasurer measurer(mo);
  search::TuneOptions o;
  o.strategy = strategy;
  o.objective = opts.objective;
  o.min_train_records = opts.min_train;
  o.evolution = opts.evolution;
  // Past the largest budget (--run-to) a run only tells how many
  // trials it needs to reach what the budgets' best runs reached.
  o.max_trials = std::max(max_trials, opts.run_to);
  o.seed = 1000 + seed;
  // The default schedule is not a trial here unless --from-default: the
  // strategies are compared on what they find themselves (it is timed
  // separately).
  o.measure_default = opts.from_default;
  // As a job starts from the database, every run with --warm-db starts
  // from the pool: both strategies open with the same transferred seeds
  // (the fitted bests of similar pool workloads), and its records train
  // the evolutionary run's cost model from the first batch (random search
  // has no model). Without it both start cold. Nothing is stored.
  search::SessionOptions so;
  so.tune = o;
  if (pool.log != nullptr) {
    so.log = pool.log.get();
    so.keep_record = [&](const v1::Record& r) { return pool.keys.count(r.workload_key()) > 0; };
  }
  so.stored_model = false;
  so.commit_records = false;
  so.store_model = false;
  search::Session session({task}, &measurer, std::move(so));
  const search::Tuner& tuner = session.tuner();
  Run run{name, search::StrategyName(strategy), uint64_t(seed), {}, 0, 0, {}, {}, {}, 0};
  double best = 0;
  auto t0 = std::chrono::steady_clock::now();
  search::TrialObserver observer([&](const search::Trial& t) {
    if (t.result.status == search::MeasureResult::Status::kOk) {
      double g = task.flops / t.result.seconds * 1e-9;
      if (g > best && int(run.best_so_far.size()) < max_trials) run.best = t.schedule;
      best = std::max(best, g);
    }
    run.best_so_far.push_back(best);
    if (int(run.best_so_far.size()) <= max_trials)
      run.budget_minutes =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 60;
    if (opts.trace) {
      const schedule::Trace& s = t.schedule;
      std::printf("  trial %3d  %7.1f GFLOP/s  shape %d  [%s]\n", t.index,
                  t.result.status == search::MeasureResult::Status::kOk
                      ? task.flops / t.result.seconds * 1e-9
                      : 0.0,
                  TileShapeOf(task, s), DecisionsText(s).c_str());
    }
  });
  absl::StatusOr<search::SessionEnd> ended = session.Run(&observer);
  if (!ended.ok()) return ended.status();
  run.warm = session.start().warm.transfer;
  const absl::Status& s = ended->run;
  run.minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 60;
  if (!s.ok())
    std::printf("%s %s seed %d: %s\n", name, run.strategy.c_str(), seed, s.ToString().c_str());
  run.measured.clear();
  for (const auto& m : tuner.measured()) {
    if (m.task >= 0) run.measured.push_back(m);  // this workload's own programs
  }
  run.ok = tuner.history(0).ok;
  std::printf("%-22s %-12s seed %d: best %.1f GFLOP/s after %zu trials, %.1f trials/min%s\n",
              name, run.strategy.c_str(), seed, best, run.best_so_far.size(),
              double(run.best_so_far.size()) / std::max(1e-9, run.minutes),
              run.warm > 0
                  ? absl::StrCat(", warm from ", run.warm, " records of other workloads").c_str()
                  : "");
  // Best so far at every 16 trials: where a slow start shows.
  std::string curve;
  for (size_t i = 15; i < run.best_so_far.size(); i += 16)
    absl::StrAppend(&curve, curve.empty() ? "" : " ", int(std::round(run.best_so_far[i])));
  std::printf("%-22s %-12s seed %d: best every 16 trials: %s\n", name, run.strategy.c_str(), seed,
              curve.c_str());
  // The fastest schedules' sketch decisions: where the run ended up.
  for (size_t i = 0; i < std::min<size_t>(3, run.ok.size()); ++i) {
    const schedule::Trace& b = run.ok[i].schedule;
    std::printf("%-22s %-12s seed %d: #%zu %.1f GFLOP/s, decisions [%s]\n", name,
                run.strategy.c_str(), seed, i + 1, task.flops / run.ok[i].seconds * 1e-9,
                DecisionsText(b).c_str());
  }
  std::fflush(stdout);
  return run;
}

// The JSON rows the bench writes (--json).
struct SearchBenchRows {
  std::vector<std::string> rows, finals, run_to, models;
};

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? NAN : s / v.size();
}

// Per budget: each run's best within it and the trials it took to reach 90%
// of the best either strategy reached (over the whole runs too, with --run-to).
void PrintBudgets(const char* name, const std::vector<Run*>& mine, double default_g,
                  const SearchBenchOptions& opts, SearchBenchRows* out) {
  // Best-so-far is the best of many measurements: it is compared between
  // strategies only; the ratios to the library are in the finals, where
  // both sides are timed the same way.
  std::printf("\n%-22s %-12s %4s %6s %9s %9s\n", "workload", "strategy", "seed", "trials", "best",
              "to_90%");
  auto best_at = [](const Run* r, int b) {
    return r->best_so_far.empty() ? 0.0
                                  : r->best_so_far[std::min<size_t>(b, r->best_so_far.size()) - 1];
  };
  for (int b : opts.budgets) {
    // 90% of the best value either strategy reached within this budget.
    double top = 0;
    for (Run* r : mine) top = std::max(top, best_at(r, b));
    std::map<std::string, std::vector<double>> to90_by_strategy;
    for (Run* r : mine) {
      int to90 = -1;
      for (size_t i = 0; i < r->best_so_far.size() && int(i) < b; ++i) {
        if (r->best_so_far[i] >= 0.9 * top) {
          to90 = int(i) + 1;
          break;
        }
      }
      // A run that never got there counts as needing the whole budget.
      to90_by_strategy[r->strategy].push_back(to90 > 0 ? to90 : b);
      double best = best_at(r, b);
      std::printf("%-22s %-12s %4llu %6d %9.1f %9s\n", name, r->strategy.c_str(),
                  static_cast<unsigned long long>(r->seed), b, best,
                  to90 > 0 ? std::to_string(to90).c_str() : "-");
      out->rows.push_back(absl::StrCat(
          "{\"workload\": \"", name, "\", \"strategy\": \"", r->strategy, "\", \"trials\": ", b,
          ", \"seed\": ", r->seed, ", \"threads\": ", opts.threads,
          ", \"warm_records\": ", r->warm, ", \"best_gflops\": ", Num(best),
          ", \"trials_to_90pct\": ", to90 > 0 ? std::to_string(to90) : "null",
          ", \"default_gflops\": ", Num(default_g), ", \"trials_per_minute\": ",
          Num(double(r->best_so_far.size()) / std::max(1e-9, r->minutes)), "}"));
    }
    double ev = Mean(to90_by_strategy["evolutionary"]), rn = Mean(to90_by_strategy["random"]);
    std::printf(
        "%-22s budget %d: mean trials to 90%% of %.1f: evolutionary %.1f, random %.1f "
        "(ratio %.2f)\n",
        name, b, 0.9 * top, ev, rn, ev / rn);
    if (opts.run_to <= b) continue;
    // The same 90% line, looked for over the whole runs: a run that never
    // got there within the budget needs more than the budget, and here
    // shows how many more (one that never got there at all counts as its
    // length).
    std::map<std::string, std::vector<double>> beyond;
    for (Run* r : mine) {
      size_t i = 0;
      while (i < r->best_so_far.size() && r->best_so_far[i] < 0.9 * top) ++i;
      beyond[r->strategy].push_back(double(i < r->best_so_far.size() ? i + 1 : i));
      std::printf("%-22s %-12s %4llu %6d trials to 90%% of the budget's best, run to %zu: %s\n",
                  name, r->strategy.c_str(), static_cast<unsigned long long>(r->seed), b,
                  r->best_so_far.size(),
                  i < r->best_so_far.size() ? std::to_string(i + 1).c_str() : "never");
      out->run_to.push_back(absl::StrCat(
          "{\"workload\": \"", name, "\", \"strategy\": \"", r->strategy, "\", \"trials\": ", b,
          ", \"seed\": ", r->seed, ", \"run_to\": ", r->best_so_far.size(),
          ", \"trials_to_90pct_of_budget_best\": ",
          i < r->best_so_far.size() ? std::to_string(i + 1) : "null", "}"));
    }
    double evb = Mean(beyond["evolutionary"]), rnb = Mean(beyond["random"]);
    std::printf(
        "%-22s budget %d, runs to %d: mean trials to 90%% of %.1f: evolutionary %.1f, "
        "random %.1f (ratio %.2f)\n",
        name, b, opts.run_to, 0.9 * top, evb, rnb, evb / rnb);
  }
}

// The final kernels (the default and each run's best) on 1 and 2 threads
// beside the library, all timed now, the median of kFinalRounds rounds,
// each timing every kernel and then the library: a slow spell of this VM
// lowers one round, not one kernel's figure.
void PrintFinals(const char* name, const search::Task& task, const v1::Workload& w,
                 const std::vector<std::vector<float>>& inputs, bool library_ok,
                 const std::vector<Run*>& mine, const SearchBenchOptions& opts,
                 SearchBenchRows* out) {
  std::vector<schedule::Trace> finals = {schedule::DefaultSchedule(task.dag, task.target)};
  std::vector<Run*> with_best;
  for (Run* r : mine) {
    if (r->best) {
      finals.push_back(*r->best);
      with_best.push_back(r);
    }
  }
  for (int th : {1, 2}) {
    std::vector<std::vector<double>> rounds(finals.size());
    std::vector<double> ref_rounds;
    for (int round = 0; round < kFinalRounds; ++round) {
      std::vector<double> gr = TimeSchedules(task, finals, th);
      for (size_t i = 0; i < gr.size() && i < rounds.size(); ++i) rounds[i].push_back(gr[i]);
      std::optional<ReferenceRun> ref = RunOneDnn(w, inputs, th, FinalTiming());
      if (!ref) ref = RunOpenBlas(w, inputs, th, FinalTiming());
      if (ref && library_ok) ref_rounds.push_back(task.flops / ref->seconds * 1e-9);
    }
    // The median round (NaN: a kernel that failed to run counts as lowest).
    auto median = [](std::vector<double> v) {
      if (v.empty()) return double(NAN);
      for (double& x : v) x = std::isnan(x) ? -1 : x;
      std::sort(v.begin(), v.end());
      const double m = v[v.size() / 2];
      return m < 0 ? double(NAN) : m;
    };
    std::vector<double> g;
    for (const std::vector<double>& r : rounds) g.push_back(median(r));
    const double ref_g = median(ref_rounds);
    std::printf("%-22s %d thread(s): oneDNN %.1f GFLOP/s, default %.1f (%sx)\n", name, th, ref_g,
                g[0], Num(g[0] / ref_g).c_str());
    for (size_t i = 0; i < with_best.size(); ++i) {
      const Run* r = with_best[i];
      std::printf(
          "%-22s %d thread(s): %-12s seed %llu best %.1f GFLOP/s (%sx oneDNN), tuned in "
          "%.1f min\n",
          name, th, r->strategy.c_str(), static_cast<unsigned long long>(r->seed), g[i + 1],
          Num(g[i + 1] / ref_g).c_str(), r->budget_minutes);
      out->finals.push_back(absl::StrCat(
          "{\"workload\": \"", name, "\", \"strategy\": \"", r->strategy, "\", \"seed\": ",
          r->seed, ", \"trials\": ", std::min<size_t>(opts.max_trials(), r->best_so_far.size()),
          ", \"tuning_minutes\": ", Num(r->budget_minutes), ", \"threads\": ", th,
          ", \"gflops\": ", Num(g[i + 1]), ", \"default_gflops\": ", Num(g[0]),
          ", \"onednn_gflops\": ", Num(ref_g), "}"));
    }
  }
}

// The cost model's quality per objective: trained on 70% of this
// workload's measured programs (all runs), tested on the rest; and what
// the search pays per candidate it ranks.
void PrintModelQuality(const char* name, const search::Task& task, const std::vector<Run*>& mine,
                       SearchBenchRows* out) {
  std::vector<const search::Tuner::MeasuredProgram*> all;
  for (Run* r : mine) {
    for (const auto& m : r->measured) all.push_back(&m);
  }
  std::shuffle(all.begin(), all.end(), std::mt19937_64(11));
  double best_s = INFINITY;
  for (const auto* m : all) {
    if (m->seconds > 0) best_s = std::min(best_s, m->seconds);
  }
  size_t cut = all.size() * 7 / 10;
  std::vector<cost_model::Sample> train, test;
  for (size_t i = 0; i < all.size(); ++i) {
    float label = all[i]->seconds > 0 ? float(best_s / all[i]->seconds) : 0.0f;
    (i < cut ? train : test).push_back({&all[i]->features, label, 0});
  }
  // What the search pays per candidate it ranks: the schedule built from
  // fresh sketch decisions, replayed and lowered, and its features (the
  // same for every objective, so timed once), then the prediction; on one
  // core.
  std::mt19937_64 rng(5);
  std::vector<cost_model::ProgramFeatures> fresh;
  const search::space::CpuSketch sketch(task.dag, task.target);
  auto f0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 512; ++i) {
    auto sched = schedule::BuildTiledSchedule(task.dag, task.target, sketch.SampleTiling(rng));
    if (!sched.ok()) continue;
    auto f = search::FeaturesOf(task, *sched);
    if (f.ok()) fresh.push_back(*std::move(f));
  }
  const double feature_secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
  std::vector<const cost_model::ProgramFeatures*> fresh_ps;
  for (const auto& f : fresh) fresh_ps.push_back(&f);
  for (auto obj : {cost_model::Objective::kPackSum, cost_model::Objective::kPairwiseRank,
                   cost_model::Objective::kRegression}) {
    cost_model::CostModel model(obj);
    if (train.empty() || test.empty() || !model.Train(train).ok()) continue;
    std::vector<const cost_model::ProgramFeatures*> ps;
    for (const auto& s : test) ps.push_back(s.features);
    auto t0 = std::chrono::steady_clock::now();
    auto scores = model.Predict(ps);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!scores.ok()) continue;
    cost_model::ModelQuality q = cost_model::EvaluateModel(*scores, test, 10);
    auto p0 = std::chrono::steady_clock::now();
    auto fresh_scores = model.Predict(fresh_ps);
    const double predict_secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
    const double scored_per_s =
        fresh_scores.ok() ? double(fresh.size()) / std::max(1e-9, feature_secs + predict_secs)
                          : NAN;
    const double predictions_per_s = double(ps.size()) / std::max(1e-9, secs);
    std::printf(
        "model %-10s on %-22s train %zu test %zu: pairwise accuracy %.3f, recall@10 %.2f, %.0f "
        "predictions/s, %.0f candidates scored/s (built, lowered, features, predicted)\n",
        cost_model::ObjectiveName(obj), name, train.size(), test.size(), q.pairwise_accuracy,
        q.recall_at_k, predictions_per_s, scored_per_s);
    out->models.push_back(absl::StrCat(
        "{\"workload\": \"", name, "\", \"objective\": \"", cost_model::ObjectiveName(obj),
        "\", \"train\": ", train.size(), ", \"test\": ", test.size(),
        ", \"pairwise_accuracy\": ", absl::StrFormat("%.4f", q.pairwise_accuracy),
        ", \"recall_at_10\": ", absl::StrFormat("%.3f", q.recall_at_k),
        ", \"predictions_per_s\": ", Num(predictions_per_s),
        ", \"candidates_scored_per_s\": ", Num(scored_per_s), "}"));
  }
}

void WriteSearchJson(const std::string& path, const ir::Target& target,
                     const SearchBenchRows& rows) {
  std::ofstream f(path);
  auto section = [&](const char* key, const std::vector<std::string>& r, const char* after) {
    f << "\"" << key << "\": [\n";
    for (size_t i = 0; i < r.size(); ++i) f << "  " << r[i] << (i + 1 < r.size() ? ",\n" : "\n");
    f << after;
  };
  f << "{\"target\": \"" << target.ToString() << "\", ";
  section("rows", rows.rows, "], ");
  section("finals", rows.finals, "], ");
  section("run_to", rows.run_to, "], ");
  section("models", rows.models, "]}\n");
}

bool IsSearchAnchor(const Anchor& a) {
  return std::find_if(std::begin(kSearchAnchors), std::end(kSearchAnchors), [&](const char* n) {
           return std::string(n) == a.name;
         }) != std::end(kSearchAnchors);
}

}  // namespace

int RunSearchBench(const std::vector<std::string>& args) {
  SearchBenchOptions opts;
  if (!ParseSearchBenchArgs(args, &opts)) return 2;
  ir::Target target = codegen::HostTarget();
  std::printf(
      "target: %s   threads: %d   budgets: %s   seeds: %d   objective: %s   warm start: %s\n",
      target.ToString().c_str(), opts.threads, absl::StrJoin(opts.budgets, ",").c_str(),
      opts.seeds, cost_model::ObjectiveName(opts.objective),
      opts.warm_db.empty() ? "none (both strategies cold)"
                           : absl::StrCat(opts.warm_db, " (both strategies warm)").c_str());
  Pool pool;
  if (!opts.warm_db.empty()) {
    store::TuningLog::Options lo;
    lo.canon = search::CompilerCanon();
    lo.path = opts.warm_db;
    absl::StatusOr<std::unique_ptr<store::TuningLog>> opened = store::TuningLog::Open(lo);
    absl::StatusOr<std::set<std::string>> keys =
        opened.ok() ? FillPool(**opened, target, opts.pool_trials, opts.threads)
                    : absl::StatusOr<std::set<std::string>>(opened.status());
    if (!keys.ok()) {
      std::fprintf(stderr, "tunefarm-bench search: %s: %s\n", opts.warm_db.c_str(),
                   std::string(keys.status().message()).c_str());
      return 1;
    }
    pool.log = *std::move(opened);
    pool.keys = *std::move(keys);
  }
  std::vector<Run> runs;
  std::map<std::string, double> onednn;
  SearchBenchRows rows;
  bool library_wrong = false;  // exit 1: a reference library gave a wrong output
  for (const Anchor& a : KernelAnchors()) {
    if (!IsSearchAnchor(a) || !Selected(a.name, opts.only)) continue;
    v1::Workload w = *ir::ParseWorkloadSpec(a.spec);
    search::Task task = *search::Task::Make(w, target, a.name);
    double default_g = NAN;
    {
      search::LocalMeasureOptions mo;
      mo.threads = opts.threads;
      search::LocalMeasurer measurer(mo);
      auto r = measurer.Measure(task, {schedule::DefaultSchedule(task.dag, target)});
      if (r[0].status == search::MeasureResult::Status::kOk)
        default_g = task.flops / r[0].seconds * 1e-9;
      std::printf("%-22s default schedule: %.1f GFLOP/s\n", a.name, default_g);
    }
    // Seed by seed, the strategies one after the other: this VM slows for
    // minutes at a time, and a slow spell then falls on both strategies.
    for (int seed = 0; seed < opts.seeds; ++seed) {
      for (search::Strategy strategy : opts.strategies) {
        absl::StatusOr<Run> run = TuneOnce(a.name, task, strategy, seed, opts, pool);
        if (!run.ok()) {
          std::fprintf(stderr, "tunefarm-bench search: %s: %s\n", opts.warm_db.c_str(),
                       std::string(run.status().message()).c_str());
          return 1;
        }
        runs.push_back(*std::move(run));
      }
    }
    std::vector<Run*> mine;
    for (Run& r : runs) {
      if (r.workload == a.name) mine.push_back(&r);
    }
    // oneDNN on the same workload, after tuning (no threads of its own during our runs).
    std::vector<std::vector<float>> inputs = ir::RandomInputs(task.dag, 7);
    std::optional<ReferenceRun> dnn = RunOneDnn(w, inputs, opts.threads, FinalTiming());
    if (!dnn) dnn = RunOpenBlas(w, inputs, opts.threads, FinalTiming());
    // The library's output against the float64 reference: a wrong library is no baseline.
    if (dnn) {
      absl::StatusOr<std::vector<double>> want = ir::EvaluateReference(task.dag, inputs);
      const double err =
          want.ok() ? MaxRelError(dnn->output.data(), dnn->output.size(), *want) : INFINITY;
      if (!(err <= 1e-3)) {
        std::printf("%-22s the library's output is wrong (max relative error %g): no ratios\n",
                    a.name, err);
        library_wrong = true;
        dnn.reset();
      }
    }
    onednn[a.name] = dnn ? task.flops / dnn->seconds * 1e-9 : NAN;
    PrintBudgets(a.name, mine, default_g, opts, &rows);
    PrintFinals(a.name, task, w, inputs, dnn.has_value(), mine, opts, &rows);
    PrintModelQuality(a.name, task, mine, &rows);
    std::printf("\n");
    std::fflush(stdout);
  }
  if (!opts.json_path.empty()) WriteSearchJson(opts.json_path, target, rows);
  if (!opts.svg_path.empty()) WriteSvg(opts.svg_path, runs, onednn);
  return library_wrong ? 1 : 0;
}

}  // namespace tunefarm::bench
