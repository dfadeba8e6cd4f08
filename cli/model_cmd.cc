#include "cli/model_cmd.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/command_util.h"
#include "cli/flags.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/frontend/onnx_import.h"
#include "deploy/package_build.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/model_run.h"
#include "device_agent/runtime/npy.h"
#include "proto/client.h"
#include "proto/kernel_signature.h"
#include "proto/protocol.h"
#include "search/store_canon.h"
#include "store/tuning_log.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm::cli {
namespace {

constexpr const char* kBuildHelp =
    R"(usage: tunefarm build MODEL.onnx -o MODEL.tfpkg [--target T|host] [--db FILE]
                      [--shape NAME=D1xD2x...]... [--value NAME=V,...]...
                      [--untuned] [--threads N] [--layout nchw|nhwc] [--data-movers kernels|native]
                      [--precision fp32|fp16|bf16|tf32]

Builds a whole model for one target: every task is compiled with its best
record in the log database (--db, default tunefarm.db) for the target, or
with its default schedule where there is none; the tuned kernel is used only
where it measured faster than the default schedule on the same device (when
no default-schedule time is stored and the target is this machine, both are
timed here with --threads). BatchNorm and bias adds are folded into the
weights, weights are packed for the kernels, and intermediates share one
statically planned arena. The package runs with `tunefarm run`.

  --untuned         default schedules only (ignores the database)
  --value           fixes an input to constant values (e.g. an audio model's
                    sample rate, --value sr=16000): the package no longer
                    has that input, and control flow on it is resolved
  --no-model-check  skip timing tuned kernels and layouts inside the model
                    (host targets)
  --threads         the thread count the package is for (default 1): records
                    are those of the target at -num-cores=N (what `tune
                    --threads N` stores), kernels are compared at it, and the
                    package records it for `run`
  --data-movers     kernels (default): Transpose, Concat, Slice, Pad, nearest
                    Resize and the other operators that only move elements
                    run as generated kernels, each on its default schedule;
                    native: they run as the runtime's own operators (a CUDA
                    package needs kernels)
  --layout          the activation layout: nhwc makes convolutions whose
                    output channels are multiples of 8 (4 with NEON; dense
                    ones with a spatial kernel only from 28x28 output
                    pixels, or 14x14 where Winograd takes them), and the
                    pooling and elementwise kernels after them, channels-last
                    kernels, with Transpose steps where the layouts meet;
                    nchw keeps the model's layout. Default for this machine:
                    both are built (each with its records) and timed against
                    each other, and nchw is kept where it is 2% faster; for
                    other CPU targets or with --no-model-check, the layout
                    the database has records of (where one alone has them),
                    else nhwc; for CUDA nchw. Tasks differ by layout (`tune`
                    says which it tuned)
  --precision       fp32 (default), fp16 or bf16 (cuda targets; bf16 on
                    sm_80 and newer): every kernel, value and weight in
                    float16 or bfloat16, each kernel computing in float32
                    between its 16-bit loads and stores; inputs and outputs
                    stay float32 for `run`. The records used are those of
                    the 16-bit tasks (`tune --precision fp16`). tf32 (cuda,
                    sm_80 and newer): float32 values, every product's
                    factors rounded to TF32 on tensor cores
)";

constexpr const char* kRunHelp =
    R"(usage: tunefarm run MODEL.tfpkg [--input NAME=FILE.npy]... [--seed N] [--threads N]
                    [--repeat N] [--time-limit SEC] [--output-dir DIR] [--profile] [--json]
       tunefarm [--server=HOST:PORT] run MODEL.tfpkg --device-key KEY [--seed N]
                    [--threads N] [--repeat N] [--time-limit SEC] [--output-dir DIR] [--json]

Runs a built model on this machine, in a confined child process (the
tunefarm-model-runner an agent uses: a kernel that crashes or hangs is an
error, not a crash of this command). Inputs come from .npy files (float32 or
float64, C order); inputs not given are filled with seeded uniform random
values in [-1, 1). Prints each output's shape and statistics; --output-dir
writes OUTPUT.npy files; --repeat N runs N more times and prints the median
latency; --profile prints the time of every step: its median over the
timed runs after the first (a warm-up), 20 of them unless --repeat says
how many (fewer, at least 3, where 20 would take over 5 s). A run past
--time-limit (load and runs together, default 300 s) is stopped.

With --device-key the package goes through the server to a connected agent
of that key and runs there in a child process of the agent's (end-to-end
timing on the board): one untimed run, then --repeat timed runs (default 10);
the outputs come back (seeded inputs, the same --seed gives the same inputs
as a local run). --threads 0 uses every core of the board.

--threads defaults to the count the package was built for (`build
--threads`, 1 for packages that do not record it); another count runs, with
a note that the kernels were chosen at the package's.
)";

// ParseFlags, with at most one positional argument (the model or package file).
absl::StatusOr<Flags> ParseWithOneFile(const std::vector<std::string>& args, const FlagSpec& spec,
                                       const std::string& cmd) {
  absl::StatusOr<Flags> f = ParseFlags(args, spec, cmd);
  if (f.ok() && f->positional().size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(cmd, ": unexpected argument '", f->positional()[1], "'"));
  }
  return f;
}

double Mean(const v1::Record& r) {
  double s = 0;
  for (double c : r.costs_sec()) s += c;
  return r.costs_sec_size() ? s / r.costs_sec_size() : 0;
}

// Picks a task's kernel from the log database: the best record for the
// target, compared with the default schedule's record on the same device.
absl::StatusOr<deploy::KernelChoice> ChooseFromLog(store::TuningLog* log,
                                                   const std::string& target_spec,
                                                   const frontend::ModelTask& task) {
  deploy::KernelChoice c;
  TF_ASSIGN_OR_RETURN(std::vector<v1::Record> best, log->TopK(task.key, target_spec, 1));
  if (best.empty()) {
    c.why = absl::StrCat("no records for this target (", target_spec, ")");
    return c;
  }
  const v1::Record& b = best[0];
  if (b.schedule().is_default()) {
    c.why = absl::StrCat("the default schedule is the best record (", b.record_id(), ")");
    c.default_sec = Mean(b);
    return c;
  }
  c.tuned = true;
  c.schedule = b.schedule();
  c.record_id = b.record_id();
  c.tuned_sec = Mean(b);
  store::TuningLog::RecordQuery q;
  q.workload_key = task.key;
  q.target_spec = target_spec;
  q.status = v1::MEASURE_STATUS_OK;
  q.limit = 500;
  for (;;) {
    TF_ASSIGN_OR_RETURN(std::vector<v1::Record> page, log->ListRecords(q));
    for (const v1::Record& r : page) {
      // Only timings that rank (not pending or disputed).
      if (r.schedule().is_default() && r.device_key() == b.device_key() &&
          r.confirmation() < v1::CONFIRMATION_PENDING &&
          (c.default_sec == 0 || Mean(r) < c.default_sec))
        c.default_sec = Mean(r);
    }
    if (int(page.size()) < q.limit) break;
    q.after_record_id = page.back().record_id();
  }
  c.why = c.default_sec > 0
              ? absl::StrFormat("record %d: %.3g ms vs default %.3g ms on %s", b.record_id(),
                                c.tuned_sec * 1e3, c.default_sec * 1e3, b.device_key())
              : absl::StrCat("record ", b.record_id());
  return c;
}

struct ModelOutput {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::string ShortStatus(v1::MeasureStatus s) {
  std::string n = v1::MeasureStatus_Name(s);
  if (n.rfind("MEASURE_STATUS_", 0) == 0) n = n.substr(15);
  return absl::AsciiStrToLower(n);
}

// --time-limit of `run` (default 300 s), or nullopt after the error line.
std::optional<double> ParseTimeLimit(const Flags& f, std::ostream& err) {
  double limit = 0;
  if (!absl::SimpleAtod(f.Get("time_limit", "300"), &limit) || !(limit > 0) || limit > 86400) {
    Fail(err, 2, "--time-limit needs seconds, more than 0 and at most 86400");
    return std::nullopt;
  }
  return limit;
}

// A model run's outputs, in the package's order, as `run` reports them.
std::vector<ModelOutput> OutputsOf(const v1::ModelRunResult& r) {
  std::vector<ModelOutput> outs;
  for (const v1::PackageTensor& t : r.outputs()) {
    ModelOutput o{t.name(), {t.shape().begin(), t.shape().end()}, {}};
    o.values.resize(t.f32().size() / 4);
    std::memcpy(o.values.data(), t.f32().data(), o.values.size() * 4);
    outs.push_back(std::move(o));
  }
  return outs;
}

// What `run` prints, here or from an agent (`where` names the board; empty:
// this machine): each output's statistics, the median latency; --output-dir
// writes the outputs as .npy files. Returns the exit code.
int ReportRun(const Flags& f, const std::string& package, int threads, double first,
              std::vector<double> lat, const std::vector<ModelOutput>& outputs,
              const std::string& where, std::ostream& out, std::ostream& err) {
  std::sort(lat.begin(), lat.end());
  const double median = lat.empty() ? first : lat[lat.size() / 2];
  const std::string dir = f.Get("output_dir", "");
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    for (const ModelOutput& o : outputs) {
      std::ofstream file(std::filesystem::path(dir) / runtime::NpyFileName(o.name),
                         std::ios::binary);
      const std::string bytes = runtime::WriteNpy(o.shape, o.values);
      file.write(bytes.data(), std::streamsize(bytes.size()));
      if (!file) return Fail(err, 1, absl::StrCat("cannot write into ", dir));
    }
  }
  const bool json = f.Has("json");
  if (json) {
    out << "{\"package\": " << JsonQuote(package) << ", \"threads\": " << threads
        << absl::StrFormat(", \"latency_ms\": %.4f, \"runs\": %d", median * 1e3,
                           lat.empty() ? 1 : lat.size());
    if (!where.empty()) {
      out << ", \"device\": " << JsonQuote(where) << ", \"latencies_ms\": [";
      for (size_t i = 0; i < lat.size(); ++i) out << (i ? ", " : "") << lat[i] * 1e3;
      out << "]";
    }
    out << ", \"outputs\": [";
  }
  bool firsto = true;
  for (const ModelOutput& o : outputs) {
    const std::vector<float>& v = o.values;
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    for (float x : v) {
      mn = std::min(mn, double(x));
      mx = std::max(mx, double(x));
      sum += x;
    }
    std::string shape;
    for (int64_t d : o.shape) absl::StrAppend(&shape, shape.empty() ? "" : "x", d);
    const double mean = v.empty() ? 0 : sum / double(v.size());
    // A zero-size output has no range: nulls in JSON.
    auto stat = [&](double x) {
      return v.empty() ? std::string("null") : absl::StrFormat("%g", x);
    };
    if (json) {
      out << (firsto ? "" : ", ")
          << absl::StrFormat(
                 "{\"name\": %s, \"shape\": \"%s\", \"min\": %s, \"max\": %s, "
                 "\"mean\": %s}",
                 JsonQuote(o.name), shape, stat(mn), stat(mx), stat(mean));
    } else if (v.empty()) {
      out << absl::StrFormat("%s %s: empty (no values)\n", o.name, shape);
    } else {
      out << absl::StrFormat("%s %s: min %g max %g mean %g; first:", o.name, shape, mn, mx, mean);
      for (size_t i = 0; i < std::min<size_t>(5, v.size()); ++i) out << " " << v[i];
      out << "\n";
    }
    firsto = false;
  }
  if (json) {
    out << "]}\n";
  } else {
    out << absl::StrFormat("latency %.3f ms (%s, %d thread%s%s)\n", median * 1e3,
                           lat.empty() ? "one run" : absl::StrCat("median of ", lat.size()),
                           threads, threads == 1 ? "" : "s",
                           where.empty() ? "" : absl::StrCat(", on ", where));
  }
  return 0;
}

// The thread count to run `pkg` at: --threads when given (with a note when
// it is not the count the package was built for), else the package's.
int RunThreads(const Flags& f, int64_t given, const v1::ModelPackage& pkg,
               const std::string& path, std::ostream& err) {
  if (!f.Has("threads")) return pkg.threads() > 0 ? pkg.threads() : int(given);
  if (pkg.threads() > 0 && given != pkg.threads()) {
    err << "tunefarm: note: " << path << " was built for " << pkg.threads() << " thread"
        << (pkg.threads() == 1 ? "" : "s")
        << " (its kernels were chosen and timed at that count); running at "
        << (given == 0 ? std::string("every core of the board") : absl::StrCat(given))
        << (given == 0 ? "" : absl::StrCat(" (tunefarm build --threads ", given, " builds for it)"))
        << "\n";
  }
  return int(given);
}

// BuildPackage, and where `check` (this machine is the target) the
// never-slower rule: tuned kernels that do not pay inside the model go back
// to their default schedules, and then a tuned build that does not beat the
// untuned one as a whole is replaced by it.
absl::StatusOr<v1::ModelPackage> BuildChecked(const frontend::Model& model,
                                              const ir::Target& target, deploy::BuildOptions bo,
                                              int threads, bool check) {
  TF_ASSIGN_OR_RETURN(v1::ModelPackage pkg, deploy::BuildPackage(model, target, bo));
  int tuned_kernels = 0;
  for (const auto& k : pkg.kernels()) tuned_kernels += k.tuned();
  if (tuned_kernels == 0 || !check) return pkg;
  deploy::BuildOptions plain = bo;
  plain.choose = nullptr;
  TF_ASSIGN_OR_RETURN(v1::ModelPackage untuned, deploy::BuildPackage(model, target, plain));
  TF_ASSIGN_OR_RETURN(std::set<std::string> slower,
                      deploy::TunedKernelsNotFasterInModel(untuned, pkg, threads));
  if (!slower.empty()) {
    auto from_log = bo.choose;
    bo.choose = [&slower,
                 from_log](const frontend::ModelTask& t) -> absl::StatusOr<deploy::KernelChoice> {
      if (!slower.count(t.key)) return from_log(t);
      deploy::KernelChoice c;
      c.why = "the tuned kernel was not faster inside the model (timed here)";
      return c;
    };
    TF_ASSIGN_OR_RETURN(pkg, deploy::BuildPackage(model, target, bo));
  }
  // And the tuned build as a whole must beat the untuned one.
  int still_tuned = 0;
  for (const auto& k : pkg.kernels()) still_tuned += k.tuned();
  if (still_tuned == 0) return pkg;
  TF_ASSIGN_OR_RETURN(double speedup, deploy::PairedSpeedup(untuned, pkg, threads));
  if (speedup >= 1.0) return pkg;
  bo.choose = [](const frontend::ModelTask&) -> absl::StatusOr<deploy::KernelChoice> {
    deploy::KernelChoice c;
    c.why = "the tuned build was not faster than the untuned one as a whole (timed here)";
    return c;
  };
  return deploy::BuildPackage(model, target, bo);
}

// --profile without --repeat: the warm runs it times (the first run is the
// warm-up): kProfileRuns, or as many as fit in kProfileSeconds, at least
// kProfileMinRuns. A cold run's time is mostly first-touch page faults and
// cold caches, not the kernels.
constexpr int64_t kProfileRuns = 20;
constexpr int64_t kProfileMinRuns = 3;
constexpr double kProfileSeconds = 5;

// A build's flags, checked, and the model they name, imported.
struct BuildRequest {
  std::string model_path;  // the positional MODEL.onnx
  std::string output;      // -o
  int64_t threads = 1;
  ir::Target target;
  frontend::Model model;
  deploy::BuildOptions bo;         // all but `choose` (set once the log is open)
  std::optional<std::string> db;   // the log database; none with --untuned
  bool model_check = true;         // false with --no-model-check
};

// Parses build's flags and imports the model they name into `r`. Returns the
// exit code when the command ends here (0 after --help, 2 bad usage, 1 an
// unreadable or unsupported model), else nullopt.
std::optional<int> ParseBuild(const std::vector<std::string>& args, std::ostream& out,
                              std::ostream& err, BuildRequest* r) {
  absl::StatusOr<Flags> parsed =
      ParseWithOneFile(args,
                       FlagSpec{{"output", "target", "db", "shape", "value", "threads", "layout",
                                 "data_movers", "precision"},
                                {"untuned", "no_model_check"}},
                       "build");
  if (!parsed.ok()) return Fail(err, 2, std::string(parsed.status().message()));
  const Flags& f = *parsed;
  if (f.help()) {
    out << kBuildHelp;
    return 0;
  }
  if (f.positional().empty()) return Fail(err, 2, "build needs a model file (MODEL.onnx)");
  r->model_path = f.positional()[0];
  r->output = f.Get("output", "");
  if (r->output.empty()) return Fail(err, 2, "build needs -o MODEL.tfpkg");
  if (!absl::SimpleAtoi(f.Get("threads", "1"), &r->threads) || r->threads < 1 || r->threads > 256)
    return Fail(err, 2, "--threads needs a number from 1 to 256");
  absl::StatusOr<ir::Target> target = TargetForThreads(f.Get("target", "host"), int(r->threads));
  if (!target.ok()) return Fail(err, 2, std::string(target.status().message()));
  r->target = *target;
  absl::StatusOr<frontend::ImportOptions> io = ImportOverrides(f.All("shape"), f.All("value"));
  if (!io.ok()) return Fail(err, 2, std::string(io.status().message()));
  absl::StatusOr<std::string> bytes = ReadFile(r->model_path);
  if (!bytes.ok()) return Fail(err, 1, std::string(bytes.status().message()));
  absl::StatusOr<frontend::Model> model = frontend::ImportOnnx(*bytes, *io);
  if (!model.ok()) return Fail(err, 1, absl::StrCat(r->model_path, ": ", model.status().message()));
  r->model = *std::move(model);
  deploy::BuildOptions& bo = r->bo;
  bo.model_name = std::filesystem::path(r->model_path).filename().string();
  bo.model_sha256 = Sha256Hex(*bytes);
  bo.threads = int(r->threads);
  absl::StatusOr<std::optional<bool>> channels_last = ParseLayoutFlag(f.Get("layout", ""));
  if (!channels_last.ok()) return Fail(err, 2, std::string(channels_last.status().message()));
  bo.channels_last = *channels_last;
  absl::StatusOr<v1::DType> precision = ParsePrecisionFlag(f.Get("precision", ""), r->target);
  if (!precision.ok()) return Fail(err, 2, std::string(precision.status().message()));
  bo.precision = *precision;
  if (const std::string movers = f.Get("data_movers", "kernels"); movers == "native") {
    bo.rearrange_kernels = false;
  } else if (movers != "kernels") {
    return Fail(err, 2, "--data-movers takes kernels or native");
  }
  if (!f.Has("untuned")) r->db = f.Get("db", "tunefarm.db");
  r->model_check = !f.Has("no_model_check");
  return std::nullopt;
}

// Opens r's log database (none with --untuned) into `log`, and has r->bo
// choose each kernel from it. Returns the exit code (1) on failure, else nullopt.
std::optional<int> OpenBuildLog(BuildRequest* r, std::unique_ptr<store::TuningLog>* log,
                                std::ostream& err) {
  if (!r->db) return std::nullopt;
  store::TuningLog::Options lo;
  lo.canon = search::CompilerCanon();
  lo.path = *r->db;
  if (!std::filesystem::exists(lo.path))
    return Fail(err, 1,
                absl::StrCat("no log database at ", lo.path, " (--untuned builds without one)"));
  auto opened = store::TuningLog::Open(lo);
  if (!opened.ok()) return Fail(err, 1, std::string(opened.status().message()));
  *log = *std::move(opened);
  const std::string spec = r->target.ToString();
  store::TuningLog* l = log->get();
  r->bo.choose = [l, spec](const frontend::ModelTask& t) { return ChooseFromLog(l, spec, t); };
  return std::nullopt;
}

// With no --layout on this machine: builds both layouts (each checked) into
// `pkg` and keeps the one that runs faster here, saying so in `layout_line`.
// Returns the exit code (1) when the timing fails; a failed build is left in *pkg.
std::optional<int> BuildFasterLayout(const BuildRequest& r, const deploy::BuildOptions& bo,
                                     std::ostream& err, absl::StatusOr<v1::ModelPackage>* pkg,
                                     std::string* layout_line) {
  const int threads = int(r.threads);
  deploy::BuildOptions nhwc = bo, nchw = bo;
  nhwc.channels_last = true;
  nchw.channels_last = false;
  *pkg = BuildChecked(r.model, r.target, nhwc, threads, true);
  absl::StatusOr<v1::ModelPackage> other = BuildChecked(r.model, r.target, nchw, threads, true);
  if (pkg->ok() && !other.ok()) *pkg = other.status();
  if (!pkg->ok()) return std::nullopt;
  absl::StatusOr<deploy::LayoutChoice> choice = deploy::ChooseLayout(**pkg, *other, threads);
  if (!choice.ok()) return Fail(err, 1, std::string(choice.status().message()));
  if (!choice->channels_last) *pkg = *std::move(other);
  if (choice->nhwc_seconds > 0) {
    *layout_line = absl::StrFormat(
        "layout %s: nhwc %.3f ms, nchw %.3f ms, nhwc/nchw %.2f (median of 9 paired runs "
        "here at %d thread%s; --layout picks one)\n",
        choice->channels_last ? "nhwc" : "nchw", choice->nhwc_seconds * 1e3,
        choice->nchw_seconds * 1e3, choice->nhwc_over_nchw, threads, threads == 1 ? "" : "s");
  }
  return std::nullopt;
}

// Builds r's package into `out_pkg` in the layout --layout names, else the
// one the database has records of, else (this machine) the faster one;
// `layout_line` says which when chosen here. Returns the exit code (1) on failure, else nullopt.
std::optional<int> BuildInLayout(const BuildRequest& r, store::TuningLog* log, std::ostream& err,
                                 v1::ModelPackage* out_pkg, std::string* layout_line) {
  deploy::BuildOptions bo = r.bo;
  ir::Target host = codegen::HostTarget();
  host.num_cores = r.target.num_cores;
  const bool here = r.model_check && r.target.ToString() == host.ToString();
  absl::StatusOr<v1::ModelPackage> pkg;
  if (!bo.channels_last.has_value() && log != nullptr && !(here && !r.target.is_gpu())) {
    // Not timed here: the layout the records were tuned in, if only one.
    absl::StatusOr<std::optional<bool>> tuned = TunedLayout(r.model, r.target, log, bo.precision);
    if (!tuned.ok()) return Fail(err, 1, std::string(tuned.status().message()));
    if (tuned->has_value()) {
      bo.channels_last = **tuned;
      *layout_line = absl::StrCat("layout ", **tuned ? "nhwc" : "nchw",
                                  ": the one this database has records of (--layout picks one)\n");
    }
  }
  if (here && !bo.channels_last.has_value() && !r.target.is_gpu()) {
    // No --layout: the layout that runs faster here, each built as it would be.
    if (std::optional<int> code = BuildFasterLayout(r, bo, err, &pkg, layout_line)) return *code;
  } else {
    pkg = BuildChecked(r.model, r.target, bo, int(r.threads), here);
  }
  if (!pkg.ok()) return Fail(err, 1, absl::StrCat(r.model_path, ": ", pkg.status().message()));
  *out_pkg = *std::move(pkg);
  return std::nullopt;
}

// Writes `pkg` to `output` (through a temporary file renamed into place).
// Returns the exit code (1) on failure, else nullopt.
std::optional<int> WritePackage(const v1::ModelPackage& pkg, const std::string& output,
                                std::ostream& err) {
  std::string serialized;
  if (!pkg.SerializeToString(&serialized)) return Fail(err, 1, "the package does not serialize");
  const std::string tmp = output + ".tmp";
  std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
  o.write(serialized.data(), std::streamsize(serialized.size()));
  o.close();
  if (!o) return Fail(err, 1, absl::StrCat("cannot write ", output));
  std::error_code ec;
  std::filesystem::rename(tmp, output, ec);
  if (ec) return Fail(err, 1, absl::StrCat("cannot write ", output, ": ", ec.message()));
  return std::nullopt;
}

// Prints what build made: the package's counts and sizes, the time since
// `t0`, `layout_line`, and each kernel's choice.
void PrintBuildSummary(const v1::ModelPackage& pkg, const std::string& output,
                       std::chrono::steady_clock::time_point t0, const std::string& layout_line,
                       std::ostream& out) {
  int tuned = 0, movers = 0, kernel_steps = 0, native_steps = 0, views = 0;
  int tf32 = 0;
  for (const auto& k : pkg.kernels()) {
    tuned += k.tuned();
    movers += k.workload().op() == v1::OP_KIND_REARRANGE;
    tf32 += k.workload().tf32();
  }
  for (const auto& s : pkg.steps()) {
    (s.has_kernel() ? kernel_steps : native_steps)++;
    views += s.has_node() && s.node().view();
  }
  int64_t weights = 0;
  for (const auto& c : pkg.constants())
    weights += int64_t(c.f32().size() + c.f16().size() + 8 * c.i64_size());
  const int tasks = pkg.kernels_size() - movers;
  const bool half = pkg.precision() == v1::DTYPE_FLOAT16 || pkg.precision() == v1::DTYPE_BFLOAT16;
  const char* dtype = DTypeWord(pkg.precision());
  out << absl::StrFormat(
      "%s: %d task kernels (%d tuned, %d default%s) and %d data movers, %d kernel steps, %d "
      "native steps (%d of them views); weights %.1f MB%s, arena %.1f MB%s; built in %.1f s\n",
      output, tasks, tuned, tasks - tuned, tf32 > 0 ? absl::StrCat("; ", tf32, " in tf32") : "",
      movers, kernel_steps, native_steps, views, weights / 1e6,
      half ? absl::StrCat(" in ", dtype) : "", pkg.arena_bytes() / 1e6,
      half ? absl::StrCat(" of ", dtype, " values") : "",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  out << layout_line;
  for (const auto& k : pkg.kernels()) {
    out << absl::StrFormat("  %-8s %-60s %s\n", k.tuned() ? "tuned" : "default", k.description(),
                           k.choice());
  }
}

}  // namespace

int RunBuild(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  BuildRequest r;
  if (std::optional<int> code = ParseBuild(args, out, err, &r)) return *code;
  std::unique_ptr<store::TuningLog> log;
  if (std::optional<int> code = OpenBuildLog(&r, &log, err)) return *code;
  auto t0 = std::chrono::steady_clock::now();
  v1::ModelPackage pkg;
  std::string layout_line;
  if (std::optional<int> code = BuildInLayout(r, log.get(), err, &pkg, &layout_line)) return *code;
  if (std::optional<int> code = WritePackage(pkg, r.output, err)) return *code;
  PrintBuildSummary(pkg, r.output, t0, layout_line, out);
  return 0;
}

namespace {

// --input NAME=FILE.npy (NAME may be left out where the model has one
// input) into `req`, each checked against the package's input. Returns the
// exit code when the command ends here, else nullopt.
std::optional<int> AddInputFiles(const Flags& f, const v1::ModelPackage& pkg,
                                 v1::ModelRunRequest* req, std::ostream& err) {
  for (const std::string& spec : f.All("input")) {
    const size_t eq = spec.find('=');
    std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
    const std::string file = eq == std::string::npos ? spec : spec.substr(eq + 1);
    if (name.empty()) {
      if (pkg.inputs_size() != 1)
        return Fail(err, 2, "--input needs NAME=FILE.npy (the model has several inputs)");
      name = pkg.inputs(0);
    }
    if (std::find(pkg.inputs().begin(), pkg.inputs().end(), name) == pkg.inputs().end())
      return Fail(err, 2, absl::StrCat("'", name, "' is not an input of the model"));
    absl::StatusOr<std::string> bytes = ReadFile(file);
    if (!bytes.ok()) return Fail(err, 1, std::string(bytes.status().message()));
    absl::StatusOr<runtime::NpyArray> a = runtime::ParseNpy(*bytes);
    if (!a.ok()) return Fail(err, 1, absl::StrCat(file, ": ", a.status().message()));
    const std::vector<int64_t> want = runtime::ValueShape(pkg, name);
    if (a->shape != want) {
      return Fail(err, 1, absl::StrCat(file, ": input '", name, "' needs shape ",
                                       absl::StrJoin(want, "x")));
    }
    runtime::SetModelInputs(pkg, {{name, std::move(a->data)}}, req);
  }
  return std::nullopt;
}

// --profile's table: each step's time and label, then the shares of tuned
// kernels, default kernels and native steps.
void PrintProfile(const v1::ModelPackage& pkg, const std::vector<double>& step_sec, size_t runs,
                  std::ostream& out) {
  out << (runs == 0 ? std::string("profile: the first run alone (cold: page faults and cold "
                                  "caches; --repeat N times N warm runs)\n")
                    : absl::StrFormat("profile: each step's median over %d runs after a "
                                      "warm-up run\n",
                                      runs));
  for (size_t s = 0; s < step_sec.size() && int(s) < pkg.steps_size(); ++s)
    out << absl::StrFormat("  %4d %10.4f ms  %s\n", s, step_sec[s] * 1e3,
                           runtime::StepLabel(pkg, int(s)));
  const runtime::TimeShares t = runtime::SharesOf(pkg, step_sec);
  const std::vector<int64_t> pct =
      ApportionShares({t.tuned, t.default_kernels, t.native, t.layout}, 100);
  out << absl::StrFormat(
      "time: tuned kernels %.3f ms (%d%%), default kernels %.3f ms (%d%%), native steps "
      "%.3f ms (%d%%), layout flips %.3f ms (%d%%)\n",
      t.tuned * 1e3, pct[0], t.default_kernels * 1e3, pct[1], t.native * 1e3, pct[2],
      t.layout * 1e3, pct[3]);
}

}  // namespace

int RunModel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Flags> parsed = ParseWithOneFile(
      args,
      FlagSpec{{"input", "seed", "threads", "repeat", "time_limit", "output_dir"},
               {"profile", "json"}},
      "run");
  if (!parsed.ok()) return Fail(err, 2, std::string(parsed.status().message()));
  const Flags& f = *parsed;
  if (f.help()) {
    out << kRunHelp;
    return 0;
  }
  if (f.positional().empty()) return Fail(err, 2, "run needs a package file (MODEL.tfpkg)");
  const std::string& path = f.positional()[0];
  int64_t threads = 1, repeat = 0, seed = 1;
  if (!absl::SimpleAtoi(f.Get("threads", "1"), &threads) || threads < 1 || threads > 256)
    return Fail(err, 2, "--threads needs a number from 1 to 256");
  if (!absl::SimpleAtoi(f.Get("repeat", "0"), &repeat) || repeat < 0 || repeat > kMaxModelRepeats)
    return Fail(err, 2, absl::StrCat("--repeat needs a number from 0 to ", kMaxModelRepeats));
  if (!absl::SimpleAtoi(f.Get("seed", "1"), &seed)) return Fail(err, 2, "--seed needs a number");
  std::optional<double> time_limit = ParseTimeLimit(f, err);
  if (!time_limit) return 2;
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return Fail(err, 1, std::string(bytes.status().message()));
  absl::StatusOr<v1::ModelPackage> pkg = runtime::GraphRuntime::ParsePackage(*bytes, path);
  if (!pkg.ok()) return Fail(err, 1, std::string(pkg.status().message()));
  threads = RunThreads(f, threads, *pkg, path, err);

  // Measured as an agent measures it (runtime::MeasureModel: a confined
  // child), so a kernel that crashes takes only that process down.
  v1::ModelRunRequest req;
  req.set_package(std::move(*bytes));
  req.set_threads(int32_t(threads));
  req.set_input_seed(uint64_t(seed));
  req.set_return_outputs(true);
  req.set_time_limit_s(*time_limit);
  req.set_profile(f.Has("profile"));
  if (f.Has("profile") && !f.Has("repeat")) {
    req.set_repeats(kProfileRuns);
    req.set_min_repeats(kProfileMinRuns);
    req.set_max_run_s(kProfileSeconds);
  } else {
    req.set_repeats(int32_t(repeat));
    req.set_first_run_only(repeat == 0);
  }
  if (std::optional<int> code = AddInputFiles(f, *pkg, &req, err)) return *code;
  const v1::ModelRunResult r = runtime::MeasureModel(req);
  if (absl::Status s = runtime::ModelRunStatus(r); !s.ok())
    return Fail(err, 1, absl::StrCat(path, ": ", s.message()));
  std::vector<double> lat(r.latencies_sec().begin(), r.latencies_sec().end());
  if (int code = ReportRun(f, path, int(threads), r.first_run_sec(), lat, OutputsOf(r), "", out, err))
    return code;
  if (f.Has("profile") && !f.Has("json"))
    PrintProfile(*pkg, {r.step_sec().begin(), r.step_sec().end()}, lat.size(), out);
  return 0;
}

bool RunsOnAgent(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a.rfind("--device-key", 0) == 0 || a.rfind("--device_key", 0) == 0) return true;
  }
  return false;
}

int RunModelOnAgent(const ClientOptions& client, absl::Duration timeout,
                    const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Flags> parsed = ParseWithOneFile(
      args,
      FlagSpec{{"device_key", "seed", "threads", "repeat", "output_dir", "time_limit"}, {"json"}},
      "run");
  if (!parsed.ok()) {
    return Fail(err, 2, absl::StrCat(parsed.status().message(),
                                     " (on an agent: --input and --profile are local only)"));
  }
  const Flags& f = *parsed;
  if (f.help()) {
    out << kRunHelp;
    return 0;
  }
  if (f.positional().empty()) return Fail(err, 2, "run needs a package file (MODEL.tfpkg)");
  const std::string key = f.Get("device_key", "");
  if (key.empty()) return Fail(err, 2, "--device-key needs the key of the agents to run on");
  int64_t threads = 1, repeat = 10, seed = 1;
  if (!absl::SimpleAtoi(f.Get("threads", "1"), &threads) || threads < 0 || threads > 256)
    return Fail(err, 2, "--threads needs a number from 0 (every core) to 256");
  if (!absl::SimpleAtoi(f.Get("repeat", "10"), &repeat) || repeat < 1 || repeat > 1000)
    return Fail(err, 2, "--repeat needs a number from 1 to 1000 on an agent");
  if (!absl::SimpleAtoi(f.Get("seed", "1"), &seed)) return Fail(err, 2, "--seed needs a number");
  std::optional<double> time_limit = ParseTimeLimit(f, err);
  if (!time_limit) return 2;
  absl::StatusOr<std::string> bytes = ReadFile(f.positional()[0]);
  if (!bytes.ok()) return Fail(err, 1, std::string(bytes.status().message()));
  absl::StatusOr<v1::ModelPackage> pkg = runtime::GraphRuntime::ParsePackage(*bytes, f.positional()[0]);
  if (!pkg.ok()) return Fail(err, 1, std::string(pkg.status().message()));
  threads = RunThreads(f, threads, *pkg, f.positional()[0], err);

  v1::RunModelRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_device_key(key);
  v1::ModelRunRequest* run = req.mutable_run();
  run->set_package(std::move(*bytes));
  run->set_threads(int32_t(threads));
  run->set_repeats(int32_t(repeat));
  run->set_input_seed(uint64_t(seed));
  run->set_return_outputs(true);
  run->set_time_limit_s(*time_limit);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeChannel(client);
  if (!channel.ok()) return Fail(err, 2, std::string(channel.status().message()));
  auto stub = v1::TuningService::NewStub(*channel);
  // The run may wait behind the measurement the agent is doing, then takes
  // up to its time limit there.
  auto ctx = MakeContext(client, timeout + absl::Seconds(*time_limit));
  v1::RunModelResponse resp;
  grpc::Status st = stub->RunModel(ctx.get(), req, &resp);
  if (!st.ok()) {
    RpcError e = DescribeRpcError(st, client.server);
    return Fail(err, e.code, e.message);
  }
  const v1::ModelRunResult& r = resp.result();
  if (r.status() != v1::MEASURE_STATUS_OK) {
    return Fail(err, 1,
                absl::StrCat("on ", r.device_id().empty() ? key : r.device_id(), ": ",
                             ShortStatus(r.status()), ": ", r.error()));
  }
  std::vector<double> lat(r.latencies_sec().begin(), r.latencies_sec().end());
  return ReportRun(f, f.positional()[0], r.threads(), lat.empty() ? 0 : lat[0], lat, OutputsOf(r),
                   absl::StrCat(r.device_id(), " (", key, ")"), out, err);
}

}  // namespace tunefarm::cli
