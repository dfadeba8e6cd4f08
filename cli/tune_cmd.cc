#include "cli/tune_cmd.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/command_util.h"
#include "cli/flags.h"
#include "cli/model_cmd.h"
#include "common/status_macros.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "deploy/package_build.h"
#include "search/gpu_local_measurer.h"
#include "search/local_measurer.h"
#include "search/store_canon.h"
#include "search/tuner.h"
#include "search/session.h"
#include "store/tuning_log.h"

namespace tunefarm::cli {
namespace {

namespace v1 = ::tunefarm::v1;

constexpr const char* kHelp =
    R"(usage: tunefarm tune --workload SPEC [--target T|host] [--trials N] [--seconds S]
                     [--early-stop N] [--strategy evolutionary|random] [--threads N] [--batch N] [--seed N]
                     [--flush-cache] [--db FILE] [--load-model FILE] [--save-model FILE]
       tunefarm tune MODEL.onnx [--shape NAME=D1xD2x...]... [--value NAME=V,...]...
                     [--layout nchw|nhwc] [--precision fp32|fp16|bf16|tf32] [-o MODEL.tfpkg] [same flags]

Tunes one workload, or every task of a model, on this machine, with no
server to start: schedules are compiled here, run in a child process,
checked against a reference on random inputs and timed (a cuda target on
this machine's GPU: NVRTC builds, CUDA-event timings). Every result is
stored in the log database (default tunefarm.db) as it arrives. Records
already in the database for these workloads and the target are never
measured again, and every record for the target trains the cost model from
the start (warm start): a second run continues the first. The cost model of
the last run on the target is stored in the database too: it ranks the next
run's first batch, and is retrained on everything after it.

A model's tasks are the ones `tunefarm tasks` lists. The budget goes first
to each task's default schedule, then to the tasks where the model's time
is (weight x latency, and how fast each improves). With -o the package is
built at the end from the database, as `tunefarm build` does.

  --trials    measurements, the default schedules included (default 64 for
              a workload, 32 per task for a model, none for a model given
              --seconds; 0 with --seconds: as many as the wall time allows)
  --seconds   wall-time budget (default: none)
  --early-stop  stop a task once N trials in a row found nothing better
              (default: never)
  --strategy  evolutionary (default: cost-model guided) or random
  --threads   kernel threads (default 1; CPU targets): records are stored
              under the target with -num-cores=N, so each thread count is
              tuned on its own; the package is built for this count too
  --flush-cache  write over the last-level cache before every timed run, so
              weights and inputs come from memory as they do inside a model
              (CPU targets; each run is then timed alone)
  --shape     a model input's shape, for inputs with dynamic dimensions
  --value     fixes a model input to constant values, NAME=V1,V2,... (as
              `tunefarm build --value`)
  --layout    nhwc or nchw: the activation layout of the model's tasks and
              package (default for this machine: the layout the database
              has records of for the model, else the one whose untuned
              build runs faster here; `tunefarm build --layout`)
  --precision fp16, bf16 or tf32 (cuda targets; bf16 and tf32 on sm_80 and
              newer): tune the model's tasks in that precision, the ones
              `tunefarm build --precision` builds (default fp32)
  -o          write the tuned model's package (with a model)
  --load-model  start from the cost model in FILE instead of the database's
  --save-model  also write the final cost model to FILE
)";

// The model's tasks (as `tunefarm tasks` finds them) on `target`, each with
// its weight; a task is named by its spec where the syntax can say it.
absl::StatusOr<std::vector<search::Task>> ModelTasks(const std::string& path,
                                                     const std::vector<std::string>& shapes,
                                                     const std::vector<std::string>& values,
                                                     const ir::Target& target,
                                                     std::optional<bool> channels_last,
                                                     v1::DType precision) {
  TF_ASSIGN_OR_RETURN(frontend::ImportOptions io, ImportOverrides(shapes, values));
  TF_ASSIGN_OR_RETURN(frontend::Model model, frontend::ImportOnnxFile(path, io));
  TF_ASSIGN_OR_RETURN(
      frontend::TaskExtraction ex,
      frontend::ExtractTasks(model, frontend::ExtractOptionsFor(target, channels_last, precision)));
  if (ex.tasks.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no tunable tasks"));
  std::vector<search::Task> tasks;
  for (const frontend::ModelTask& t : ex.tasks) {
    absl::StatusOr<std::string> spec = ir::FormatWorkloadSpec(t.workload);
    TF_ASSIGN_OR_RETURN(search::Task task, search::Task::Make(t.workload, target,
                                                              spec.ok() ? *spec : t.key, t.weight));
    tasks.push_back(std::move(task));
  }
  return tasks;
}

// Whether to tune `path` channels-last on this machine: the layout an
// earlier run tuned (its tasks of that layout alone have records for the
// target), else the one whose untuned build runs faster here, both builds
// timed against each other (deploy::ChooseLayout).
absl::StatusOr<bool> LayoutHere(const std::string& path, const std::vector<std::string>& shapes,
                                const std::vector<std::string>& values, const ir::Target& target,
                                int threads, store::TuningLog* log, std::ostream& out) {
  TF_ASSIGN_OR_RETURN(frontend::ImportOptions io, ImportOverrides(shapes, values));
  TF_ASSIGN_OR_RETURN(frontend::Model model, frontend::ImportOnnxFile(path, io));
  TF_ASSIGN_OR_RETURN(std::optional<bool> tuned, TunedLayout(model, target, log));
  if (tuned.has_value()) {
    out << "layout " << (*tuned ? "nhwc" : "nchw")
        << ": the one this database has records of (--layout picks one)\n";
    return *tuned;
  }
  deploy::BuildOptions bo;
  bo.threads = threads;
  TF_ASSIGN_OR_RETURN(deploy::LayoutChoice c, deploy::ChooseLayoutOf(model, target, bo, threads));
  if (c.nhwc_seconds > 0) {
    out << absl::StrFormat(
        "layout %s: untuned nhwc %.3f ms, nchw %.3f ms, nhwc/nchw %.2f (timed here)\n",
        c.channels_last ? "nhwc" : "nchw", c.nhwc_seconds * 1e3, c.nchw_seconds * 1e3,
        c.nhwc_over_nchw);
  }
  return c.channels_last;
}

// The model's time from each task's best (else default) time, times its
// weight; `timed` counts the tasks that have one.
double ModelSeconds(const search::Tuner& tuner, bool best, int* timed) {
  double sum = 0;
  *timed = 0;
  for (size_t i = 0; i < tuner.tasks().size(); ++i) {
    const search::TaskHistory& h = tuner.history(int(i));
    double sec = tuner.default_seconds(int(i));
    if (best && !h.ok.empty() && (sec <= 0 || h.best_seconds() < sec)) sec = h.best_seconds();
    if (sec <= 0) continue;
    sum += tuner.tasks()[i].weight * sec;
    ++*timed;
  }
  return sum;
}

// One line per task of a model run: its time before and after, its trials.
void PrintTaskTable(const search::Tuner& tuner, std::ostream& out) {
  out << absl::StrFormat("%3s %6s %10s %10s %7s %6s  %s\n", "#", "weight", "default_ms", "best_ms",
                         "speedup", "trials", "task");
  for (size_t i = 0; i < tuner.tasks().size(); ++i) {
    const search::TaskHistory& h = tuner.history(int(i));
    const double def = tuner.default_seconds(int(i));
    const double best = h.ok.empty() ? 0 : h.best_seconds();
    auto ms = [](double s) { return s > 0 ? absl::StrFormat("%.4f", s * 1e3) : std::string("-"); };
    out << absl::StrFormat("%3d %6.0f %10s %10s %7s %6d  %s\n", i + 1, tuner.tasks()[i].weight,
                           ms(def), ms(best),
                           def > 0 && best > 0 ? absl::StrFormat("%.2fx", def / best) : "-",
                           h.trials, tuner.tasks()[i].name);
  }
}

// What `tune` prints as the session goes: what it starts from, then a line
// per batch (a workload's best GFLOP/s, or a model's time).
class TuneProgress : public search::SessionObserver {
 public:
  TuneProgress(std::string what, bool model, const search::TuneOptions& o, int64_t trials,
               double seconds, bool flushed, std::ostream& out)
      : what_(std::move(what)), model_(model), batch_(o.batch), max_trials_(o.max_trials),
        strategy_(o.strategy), trials_(trials), seconds_(seconds), flushed_(flushed), out_(out) {}

  void OnStart(const search::Tuner& tuner, const search::SessionStart& start) override {
    if (!start.model_loaded && !start.model_note.empty()) out_ << start.model_note << "\n";
    out_ << absl::StrFormat(
        "tuning %s on %s: %s, %s; %d earlier records of %s, %d of others%s\n", what_,
        tuner.tasks().front().target.ToString(),
        trials_ > 0 ? absl::StrCat(trials_, " trials") : absl::StrCat(seconds_, " s of trials"),
        search::StrategyName(strategy_), start.warm.history, model_ ? "its tasks" : "this workload",
        start.warm.transfer,
        start.seeds > 0
            ? absl::StrCat(" (", start.seeds, " schedules of similar workloads to start from)")
            : "");
    if (start.model_loaded) out_ << "cost model: " << start.model_note << "\n";
    if (flushed_) out_ << "timing: the cache is flushed before every run\n";
  }

  void OnTrial(const search::Tuner& tuner, const search::Trial& t) override {
    const search::Task& task = tuner.tasks()[t.task];
    if (!model_ && t.result.status == search::MeasureResult::Status::kOk)
      best_ = std::max(best_, task.flops / t.result.seconds * 1e-9);
    if ((t.index + 1) % batch_ != 0 && t.index + 1 != max_trials_) return;
    if (model_) {
      const int n_tasks = int(tuner.tasks().size());
      int timed = 0, timed_def = 0;
      const double now = ModelSeconds(tuner, true, &timed);
      const double def = ModelSeconds(tuner, false, &timed_def);
      out_ << absl::StrFormat("  trial %d  tasks' time %.3f ms", t.index + 1, now * 1e3);
      if (timed < n_tasks) out_ << absl::StrFormat(" (%d of %d tasks timed)", timed, n_tasks);
      if (timed_def == n_tasks) out_ << absl::StrFormat(", defaults %.3f ms", def * 1e3);
      out_ << absl::StrFormat("  (%.0f s)\n", t.elapsed_s);
    } else {
      out_ << absl::StrFormat("  trial %d  best %.1f GFLOP/s  (%.0f s)\n", t.index + 1, best_,
                              t.elapsed_s);
    }
    out_.flush();
  }

 private:
  const std::string what_;
  const bool model_;
  const int batch_, max_trials_;
  const search::Strategy strategy_;
  const int64_t trials_;
  const double seconds_;
  const bool flushed_;
  std::ostream& out_;
  double best_ = 0;  // GFLOP/s, a workload's
};

// The command line, checked: every flag's value or its default.
struct TuneArgs {
  Flags parsed;
  std::map<std::string, std::string> flags;
  std::string model_path;  // empty: --workload
  ir::Target target;
  int64_t threads = 0, trials = 0, batch = 0, seed = 0, early_stop = 0;
  double seconds = 0;
  search::Strategy strategy = search::Strategy::kEvolutionary;
  bool model() const { return !model_path.empty(); }
};

// RunTune's steps return the exit code to stop with, or nothing to go on.

// Whether this machine can run `target`'s kernels.
std::optional<int> CheckTuneTarget(const ir::Target& target, std::ostream& err) {
  if (target.is_gpu()) {
    if (absl::Status s = search::GpuLocalMeasurer::Check(target); !s.ok()) {
      return Fail(err, 1,
                  absl::StrCat("tune runs kernels on this machine: ", s.message(),
                               "; a job submitted to a farm (tunefarm submit) tunes ",
                               target.arch(), " on a device agent with that GPU"));
    }
    return std::nullopt;
  }
  if (target.arch() != codegen::HostTarget().arch()) {
    return Fail(err, 1,
                absl::StrCat("tune runs kernels on this machine (", codegen::HostTarget().arch(),
                             "); ", target.arch(), " needs a device agent"));
  }
  if (absl::Status s = codegen::CheckLLVMTarget(target); !s.ok())
    return Fail(err, 2, std::string(s.message()));
  return std::nullopt;
}

std::optional<int> ParseTuneArgs(const std::vector<std::string>& args, std::ostream& out,
                                 std::ostream& err, TuneArgs* a) {
  absl::StatusOr<Flags> parsed =
      ParseFlags(args,
                 FlagSpec{{"workload", "target", "trials", "seconds", "strategy", "threads",
                           "batch", "seed", "db", "save_model", "load_model", "early_stop", "shape",
                           "value", "output", "layout", "precision"},
                          {"flush_cache"}},
                 "tune");
  if (!parsed.ok()) return Fail(err, 2, std::string(parsed.status().message()));
  if (parsed->help()) {
    out << kHelp;
    return 0;
  }
  if (parsed->positional().size() > 1) {
    return Fail(err, 2, absl::StrCat("tune: unexpected argument '", parsed->positional()[1], "'"));
  }
  a->parsed = *std::move(parsed);
  a->model_path = a->parsed.positional().empty() ? "" : a->parsed.positional()[0];
  std::map<std::string, std::string>& flags = a->flags;
  flags = {{"target", "host"},    {"trials", "64"}, {"strategy", "evolutionary"},
           {"threads", "1"},      {"batch", "16"},  {"seed", "1"},
           {"db", "tunefarm.db"}, {"seconds", "0"}, {"early_stop", "0"}};
  for (const auto& [name, values] : a->parsed.given()) flags[name] = values.back();
  if (!a->model() && !flags.count("workload"))
    return Fail(err, 2, "tune needs --workload SPEC or a model file (MODEL.onnx)");
  if (a->model() && flags.count("workload"))
    return Fail(err, 2, "tune takes --workload or a model file, not both");
  if (!a->model() && (flags.count("output") || flags.count("shape") || flags.count("value") ||
                      flags.count("precision"))) {
    return Fail(err, 2,
                "-o, --shape, --value and --precision are for a model: tunefarm tune MODEL.onnx "
                "... (a workload spec says dtype=float16 or dtype=bfloat16 itself)");
  }
  if (!absl::SimpleAtoi(flags["threads"], &a->threads) || a->threads < 1 || a->threads > 256)
    return Fail(err, 2, "--threads needs a number from 1 to 256");
  absl::StatusOr<ir::Target> target = TargetForThreads(flags["target"], int(a->threads));
  if (!target.ok()) return Fail(err, 2, std::string(target.status().message()));
  a->target = *target;
  if (std::optional<int> code = CheckTuneTarget(a->target, err)) return *code;
  if (!absl::SimpleAtod(flags["seconds"], &a->seconds) || a->seconds < 0)
    return Fail(err, 2, "--seconds needs a number of seconds");
  if (!absl::SimpleAtoi(flags["trials"], &a->trials) || a->trials < 0 ||
      (a->trials == 0 && a->seconds <= 0))
    return Fail(err, 2, "--trials needs a positive number (or 0 with --seconds)");
  if (!absl::SimpleAtoi(flags["early_stop"], &a->early_stop) || a->early_stop < 0)
    return Fail(err, 2, "--early-stop needs a number of trials");
  if (!absl::SimpleAtoi(flags["batch"], &a->batch) || a->batch < 1)
    return Fail(err, 2, "--batch needs a positive number");
  if (!absl::SimpleAtoi(flags["seed"], &a->seed)) return Fail(err, 2, "--seed needs a number");
  absl::StatusOr<search::Strategy> strategy = search::ParseStrategy(flags["strategy"]);
  if (!strategy.ok()) return Fail(err, 2, std::string(strategy.status().message()));
  a->strategy = *strategy;
  return std::nullopt;
}

// The tasks: the workload, or the model's (in the layout --layout names,
// else the one chosen here); a model's default budget is 32 trials per
// task, or the wall time alone.
std::optional<int> TasksToTune(TuneArgs& a, store::TuningLog* log, std::ostream& out,
                               std::ostream& err, std::vector<search::Task>* tasks) {
  if (!a.model()) {
    auto workload = ir::ParseWorkloadSpec(a.flags["workload"]);
    if (!workload.ok()) return Fail(err, 2, std::string(workload.status().message()));
    if (absl::Status fits = ir::CheckWorkloadTarget(*workload, a.target); !fits.ok())
      return Fail(err, 2, std::string(fits.message()));
    auto task = search::Task::Make(*workload, a.target, a.flags["workload"]);
    if (!task.ok()) return Fail(err, 1, std::string(task.status().message()));
    tasks->push_back(*std::move(task));
    return std::nullopt;
  }
  std::vector<std::string> shapes;
  if (a.parsed.Has("shape")) shapes = a.parsed.All("shape");
  absl::StatusOr<std::optional<bool>> channels_last = ParseLayoutFlag(a.parsed.Get("layout", ""));
  if (!channels_last.ok()) return Fail(err, 2, std::string(channels_last.status().message()));
  std::optional<bool> layout = *channels_last;
  absl::StatusOr<v1::DType> precision = ParsePrecisionFlag(a.parsed.Get("precision", ""), a.target);
  if (!precision.ok()) return Fail(err, 2, std::string(precision.status().message()));
  ir::Target host = codegen::HostTarget();
  host.num_cores = a.target.num_cores;
  if (!layout.has_value() && !a.target.is_gpu() && a.target.ToString() == host.ToString()) {
    // No --layout: the tasks of the layout whose untuned build runs faster
    // here (`build` compares the tuned build with the other layout's).
    absl::StatusOr<bool> chosen = LayoutHere(a.model_path, shapes, a.parsed.All("value"), a.target,
                                             int(a.threads), log, out);
    if (!chosen.ok()) return Fail(err, 1, std::string(chosen.status().message()));
    layout = *chosen;
  }
  auto model_tasks =
      ModelTasks(a.model_path, shapes, a.parsed.All("value"), a.target, layout, *precision);
  if (!model_tasks.ok()) return Fail(err, 1, std::string(model_tasks.status().message()));
  *tasks = *std::move(model_tasks);
  if (!a.parsed.given().count("trials"))
    a.trials = a.seconds > 0 ? 0 : 32 * int64_t(tasks->size());
  return std::nullopt;
}

std::unique_ptr<search::Measurer> MeasurerFor(const TuneArgs& a) {
  if (a.target.is_gpu()) {
    search::GpuLocalMeasureOptions go;
    go.input_seed = uint64_t(a.seed);
    return std::make_unique<search::GpuLocalMeasurer>(go);
  }
  search::LocalMeasureOptions mo;
  mo.threads = int(a.threads);
  mo.flush_cache = a.parsed.Has("flush_cache");
  return std::make_unique<search::LocalMeasurer>(mo);
}

// The session's options: the search's, the log, the starting model (a file
// named by the user, else the database's newest for the target) and the
// fingerprint each record carries.
std::optional<int> SessionOptionsFor(TuneArgs& a, store::TuningLog* log, std::ostream& err,
                                     search::SessionOptions* so) {
  search::TuneOptions& o = so->tune;
  o.strategy = a.strategy;
  o.max_trials = a.trials > 0 ? int(std::min<int64_t>(a.trials, search::kNoTrialLimit))
                              : search::kNoTrialLimit;
  o.max_seconds = a.seconds;
  o.early_stop_trials = int(std::min<int64_t>(a.early_stop, search::kNoTrialLimit));
  o.batch = int(a.batch);
  o.seed = uint64_t(a.seed);
  // Measured here, a task's failures are its candidates' own: one with
  // nothing valid after 4 rounds stops instead of taking every round.
  o.scheduler.failed_rounds = 4;
  so->log = log;
  if (a.flags.count("load_model")) {
    const std::string& path = a.flags["load_model"];
    std::ifstream f(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof()) return Fail(err, 1, absl::StrCat("cannot read ", path));
    auto m = cost_model::CostModel::Deserialize(bytes);
    if (!m.ok()) return Fail(err, 1, absl::StrCat(path, ": ", m.status().message()));
    so->given_model = *std::move(m);
    so->given_name = path;
  }
  if (a.target.is_gpu()) so->source.fingerprint = search::GpuLocalMeasurer::MachineFingerprint();
  so->source.fingerprint.set_compiler(
      absl::StrCat("tunefarm ", TUNEFARM_VERSION, " LLVM ", codegen::LLVMVersion()));
  return std::nullopt;
}

// The run's outcome: a model's task table and time, or a workload's best.
std::optional<int> PrintOutcome(const search::Tuner& tuner, bool model, std::ostream& out,
                                std::ostream& err) {
  if (!model) {
    const search::TaskHistory& h = tuner.history(0);
    if (h.ok.empty()) return Fail(err, 1, "no candidate ran successfully");
    const search::Task& task = tuner.tasks()[0];
    double def = tuner.default_seconds(0);
    out << absl::StrFormat("best %.1f GFLOP/s (%.3f ms)", task.flops / h.best_seconds() * 1e-9,
                           h.best_seconds() * 1e3);
    if (def > 0)
      out << absl::StrFormat(", default schedule %.1f GFLOP/s: %.2fx", task.flops / def * 1e-9,
                             def / h.best_seconds());
    out << "\n";
    return std::nullopt;
  }
  const int n_tasks = int(tuner.tasks().size());
  PrintTaskTable(tuner, out);
  out << absl::StrFormat("trials this run: %d\n", tuner.trials());
  int timed_best = 0, timed_def = 0;
  const double now = ModelSeconds(tuner, true, &timed_best);
  const double def = ModelSeconds(tuner, false, &timed_def);
  if (timed_best == 0) return Fail(err, 1, "no candidate of any task ran successfully");
  out << absl::StrFormat("tasks' time (weight x best): %.3f ms", now * 1e3);
  if (timed_def == n_tasks && def > 0)
    out << absl::StrFormat(", with default schedules %.3f ms: %.2fx", def * 1e3, def / now);
  if (timed_best < n_tasks) out << " (" << n_tasks - timed_best << " tasks not timed)";
  out << "\n";
  return std::nullopt;
}

// --save-model: the final cost model to `path`.
std::optional<int> SaveModel(const search::Tuner& tuner, const std::string& path,
                             std::ostream& err) {
  std::string bytes;
  if (tuner.model().trained()) {
    absl::StatusOr<std::string> s = tuner.model().Serialize();
    if (!s.ok()) return Fail(err, 1, std::string(s.status().message()));
    bytes = *std::move(s);
  }
  std::ofstream f(path, std::ios::binary);
  if (bytes.empty() || !(f << bytes)) {
    return Fail(err, 1,
                bytes.empty() ? "--save-model: no cost model was trained (too few records)"
                              : absl::StrCat("cannot write ", path));
  }
  return std::nullopt;
}

// -o: the package, from the database: the same choice `tunefarm build` makes.
int BuildTunedPackage(TuneArgs& a, std::ostream& out, std::ostream& err) {
  std::vector<std::string> build = {a.model_path,      "-o",   a.flags["output"],
                                    "--target",        a.flags["target"],
                                    "--db",            a.flags["db"],
                                    "--threads",       a.flags["threads"]};
  for (const std::string& shape : a.parsed.All("shape")) build.push_back("--shape=" + shape);
  for (const std::string& value : a.parsed.All("value")) build.push_back("--value=" + value);
  if (a.parsed.Has("layout")) build.push_back("--layout=" + a.parsed.Get("layout", ""));
  if (a.parsed.Has("precision")) build.push_back("--precision=" + a.parsed.Get("precision", ""));
  return RunBuild(build, out, err);
}

}  // namespace

int RunTune(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  TuneArgs a;
  if (std::optional<int> code = ParseTuneArgs(args, out, err, &a)) return *code;
  store::TuningLog::Options lo;
  lo.canon = search::CompilerCanon();
  lo.path = a.flags["db"];
  auto log = store::TuningLog::Open(lo);
  if (!log.ok()) return Fail(err, 1, std::string(log.status().message()));
  std::vector<search::Task> tasks;
  if (std::optional<int> code = TasksToTune(a, log->get(), out, err, &tasks)) return *code;

  std::unique_ptr<search::Measurer> measurer = MeasurerFor(a);
  search::SessionOptions so;
  if (std::optional<int> code = SessionOptionsFor(a, log->get(), err, &so)) return *code;
  const int n_tasks = int(tasks.size());
  TuneProgress progress(
      a.model() ? absl::StrCat(a.model_path, " (", n_tasks, " tasks)") : a.flags["workload"],
      a.model(), so.tune, a.trials, a.seconds, a.parsed.Has("flush_cache") && !a.target.is_gpu(),
      out);
  search::Session session(std::move(tasks), measurer.get(), std::move(so));
  absl::StatusOr<search::SessionEnd> ended = session.Run(&progress);
  if (!ended.ok()) return Fail(err, 1, std::string(ended.status().message()));
  if (!ended->records.ok())
    return Fail(err, 1, absl::StrCat("storing records: ", ended->records.message()));
  if (!ended->run.ok()) return Fail(err, 1, std::string(ended->run.message()));
  if (std::optional<int> code = PrintOutcome(session.tuner(), a.model(), out, err)) return *code;
  if (!ended->model.ok()) return Fail(err, 1, std::string(ended->model.message()));
  if (a.flags.count("save_model")) {
    if (std::optional<int> code = SaveModel(session.tuner(), a.flags["save_model"], err))
      return *code;
  }
  if (!a.model() || !a.flags.count("output")) return 0;
  log->reset();  // `build` opens the database itself
  return BuildTunedPackage(a, out, err);
}

}  // namespace tunefarm::cli
