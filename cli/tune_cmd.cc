#include "cli/tune_cmd.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/command_util.h"
#include "cli/flags.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "server/search/gpu_local_measurer.h"
#include "server/search/local_measurer.h"
#include "server/search/store_canon.h"
#include "server/search/tuner.h"
#include "server/search/warm_start.h"
#include "server/store/tuning_log.h"

namespace tunefarm::cli {
namespace {

namespace v1 = ::tunefarm::v1;

constexpr const char* kHelp =
    R"(usage: tunefarm tune --workload SPEC [--target T|host] [--trials N] [--seconds S]
                     [--early-stop N] [--strategy evolutionary|random] [--threads N] [--batch N] [--seed N]
                     [--db FILE] [--load-model FILE] [--save-model FILE]

Tunes one workload on this machine: schedules are compiled here, run in a
child process, checked against a reference on random inputs and timed (a
cuda target on this machine's GPU: NVRTC builds, CUDA-event timings). Every
result is stored in the log database (default tunefarm.db) as it arrives.
Records already in the database for this workload and target are never
measured again, and every record for the target trains the cost model from
the start (warm start). The cost model of the last run on the target is
stored in the database too: it ranks the next run's first batch, and is
retrained on everything after it.

  --trials    measurements, the default schedule included (default 64;
              0 with --seconds: as many as the wall time allows)
  --seconds   wall-time budget (default: none)
  --early-stop  stop once N trials in a row found nothing better (default: never)
  --strategy  evolutionary (default: cost-model guided) or random
  --threads   kernel threads (default 1; CPU targets)
  --load-model  start from the cost model in FILE instead of the database's
  --save-model  also write the final cost model to FILE
)";

}  // namespace

int RunTune(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Flags> parsed =
      ParseFlags(args,
                 FlagSpec{{"workload", "target", "trials", "seconds", "strategy", "threads", "batch",
                           "seed", "db", "save_model", "load_model", "early_stop"},
                          {}},
                 "tune");
  if (!parsed.ok()) return Fail(err, 2, std::string(parsed.status().message()));
  if (parsed->help()) {
    out << kHelp;
    return 0;
  }
  if (!parsed->positional().empty()) {
    return Fail(err, 2, absl::StrCat("tune: unexpected argument '", parsed->positional()[0], "'"));
  }
  // Every flag's value, or its default.
  std::map<std::string, std::string> flags = {
      {"target", "host"},    {"trials", "64"}, {"strategy", "evolutionary"},
      {"threads", "1"},      {"batch", "16"},  {"seed", "1"},
      {"db", "tunefarm.db"}, {"seconds", "0"}, {"early_stop", "0"}};
  for (const auto& [name, values] : parsed->given()) flags[name] = values.back();
  if (!flags.count("workload")) return Fail(err, 2, "tune needs --workload");
  auto workload = ir::ParseWorkloadSpec(flags["workload"]);
  if (!workload.ok()) return Fail(err, 2, std::string(workload.status().message()));
  absl::StatusOr<ir::Target> parsed_target = ParseTargetFlag(flags["target"]);
  if (!parsed_target.ok()) return Fail(err, 2, std::string(parsed_target.status().message()));
  const ir::Target target = *parsed_target;
  if (target.is_gpu()) {
    if (absl::Status s = search::GpuLocalMeasurer::Check(target); !s.ok()) {
      return Fail(err, 1,
                  absl::StrCat("tune runs kernels on this machine: ", s.message(),
                               "; a job submitted to a farm (tunefarm submit) tunes ",
                               target.arch(), " on a device agent with that GPU"));
    }
  } else {
    if (target.arch() != codegen::HostTarget().arch()) {
      return Fail(err, 1,
                  absl::StrCat("tune runs kernels on this machine (", codegen::HostTarget().arch(),
                               "); ", target.arch(), " needs a device agent"));
    }
    if (absl::Status s = codegen::CheckLLVMTarget(target); !s.ok())
      return Fail(err, 2, std::string(s.message()));
  }
  int64_t trials = 0, threads = 0, batch = 0, seed = 0, early_stop = 0;
  double seconds = 0;
  if (!absl::SimpleAtod(flags["seconds"], &seconds) || seconds < 0)
    return Fail(err, 2, "--seconds needs a number of seconds");
  if (!absl::SimpleAtoi(flags["trials"], &trials) || trials < 0 || (trials == 0 && seconds <= 0))
    return Fail(err, 2, "--trials needs a positive number (or 0 with --seconds)");
  if (!absl::SimpleAtoi(flags["early_stop"], &early_stop) || early_stop < 0)
    return Fail(err, 2, "--early-stop needs a number of trials");
  if (!absl::SimpleAtoi(flags["threads"], &threads) || threads < 1)
    return Fail(err, 2, "--threads needs a positive number");
  if (!absl::SimpleAtoi(flags["batch"], &batch) || batch < 1)
    return Fail(err, 2, "--batch needs a positive number");
  if (!absl::SimpleAtoi(flags["seed"], &seed)) return Fail(err, 2, "--seed needs a number");
  auto strategy = search::ParseStrategy(flags["strategy"]);
  if (!strategy.ok()) return Fail(err, 2, std::string(strategy.status().message()));

  auto task = search::Task::Make(*workload, target, flags["workload"]);
  if (!task.ok()) return Fail(err, 1, std::string(task.status().message()));
  store::TuningLog::Options lo;
  lo.canon = search::CompilerCanon();
  lo.path = flags["db"];
  auto log = store::TuningLog::Open(lo);
  if (!log.ok()) return Fail(err, 1, std::string(log.status().message()));

  search::LocalMeasureOptions mo;
  mo.threads = int(threads);
  std::unique_ptr<search::Measurer> measurer;
  if (target.is_gpu()) {
    search::GpuLocalMeasureOptions go;
    go.input_seed = uint64_t(seed);
    measurer = std::make_unique<search::GpuLocalMeasurer>(go);
  } else {
    measurer = std::make_unique<search::LocalMeasurer>(mo);
  }
  search::TuneOptions o;
  o.strategy = *strategy;
  o.max_trials =
      trials > 0 ? int(std::min<int64_t>(trials, search::kNoTrialLimit)) : search::kNoTrialLimit;
  o.max_seconds = seconds;
  o.early_stop_trials = int(std::min<int64_t>(early_stop, search::kNoTrialLimit));
  o.batch = int(batch);
  o.seed = uint64_t(seed);
  search::Tuner tuner({*task}, measurer.get(), o);

  // Warm start: this workload's records are history; the target's others train the model.
  const std::string spec = target.ToString();
  auto warm = search::WarmStart(**log, target, spec, {{task->key, 0}}, tuner);
  if (!warm.ok()) return Fail(err, 1, std::string(warm.status().message()));
  // The starting model: a file named by the user, else the database's newest for the target.
  std::string model_from;
  if (flags.count("load_model")) {
    std::ifstream f(flags["load_model"], std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f.good() && !f.eof())
      return Fail(err, 1, absl::StrCat("cannot read ", flags["load_model"]));
    auto m = cost_model::CostModel::Deserialize(bytes);
    if (!m.ok()) return Fail(err, 1, absl::StrCat(flags["load_model"], ": ", m.status().message()));
    tuner.SetInitialModel(*std::move(m));
    model_from = flags["load_model"];
  } else {
    auto from = search::StartFromStoredModel(**log, spec, tuner);
    if (!from.ok()) return Fail(err, 1, std::string(from.status().message()));
    if (from->loaded) {
      model_from = from->note;
    } else if (!from->note.empty()) {
      out << from->note << "\n";
    }
  }
  tuner.SeedFromOtherWorkloads();
  out << absl::StrFormat(
      "tuning %s on %s: %s, %s; %d earlier records of this workload, %d of others%s\n",
      flags["workload"], spec,
      trials > 0 ? absl::StrCat(trials, " trials") : absl::StrCat(seconds, " s of trials"),
      search::StrategyName(*strategy), warm->history, warm->transfer,
      tuner.seeds(0) > 0
          ? absl::StrCat(" (", tuner.seeds(0), " schedules of similar workloads to start from)")
          : "");
  if (!model_from.empty()) out << "cost model: " << model_from << "\n";
  v1::Fingerprint fp;
  if (target.is_gpu()) fp = search::GpuLocalMeasurer::MachineFingerprint();
  fp.set_compiler(absl::StrCat("tunefarm ", TUNEFARM_VERSION, " LLVM ", codegen::LLVMVersion()));
  absl::Status store_error;
  double best = 0;
  absl::Status s = tuner.Run([&](const search::Trial& t) {
    v1::Record r = search::RecordOfTrial(*task, spec, t);
    if (t.result.status == search::MeasureResult::Status::kOk)
      best = std::max(best, task->flops / t.result.seconds * 1e-9);
    *r.mutable_fingerprint() = fp;
    auto c = (*log)->CommitRecords({r});
    if (!c.ok() && store_error.ok()) store_error = c.status();
    if ((t.index + 1) % o.batch == 0 || t.index + 1 == o.max_trials) {
      out << absl::StrFormat("  trial %d  best %.1f GFLOP/s  (%.0f s)\n", t.index + 1, best,
                             t.elapsed_s);
      out.flush();
    }
  });
  if (!store_error.ok())
    return Fail(err, 1, absl::StrCat("storing records: ", store_error.message()));
  if (!s.ok()) return Fail(err, 1, std::string(s.message()));
  const search::TaskHistory& h = tuner.history(0);
  if (h.ok.empty()) return Fail(err, 1, "no candidate ran successfully");
  double def = tuner.default_seconds(0);
  out << absl::StrFormat("best %.1f GFLOP/s (%.3f ms)", task->flops / h.best_seconds() * 1e-9,
                         h.best_seconds() * 1e3);
  if (def > 0)
    out << absl::StrFormat(", default schedule %.1f GFLOP/s: %.2fx", task->flops / def * 1e-9,
                           def / h.best_seconds());
  out << "\n";
  // Serialized once, for the file and the database.
  std::string bytes;
  if (flags.count("save_model") && tuner.model().trained()) {
    absl::StatusOr<std::string> s = tuner.model().Serialize();
    if (!s.ok()) return Fail(err, 1, std::string(s.status().message()));
    bytes = *std::move(s);
  }
  if (absl::Status m = search::StoreModel(**log, spec, tuner, bytes); !m.ok())
    return Fail(err, 1, std::string(m.message()));
  if (flags.count("save_model")) {
    std::ofstream f(flags["save_model"], std::ios::binary);
    if (bytes.empty() || !(f << bytes)) {
      return Fail(err, 1,
                  bytes.empty() ? "--save-model: no cost model was trained (too few records)"
                                : absl::StrCat("cannot write ", flags["save_model"]));
    }
  }
  return 0;
}

}  // namespace tunefarm::cli
