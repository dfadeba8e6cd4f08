#include "cli/model_cmd.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/command_util.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "compiler/codegen/llvm_target.h"
#include "deploy/graph_runtime.h"
#include "deploy/npy.h"
#include "deploy/onnx_import.h"
#include "deploy/package_build.h"
#include "server/tuning_log.h"

namespace tunefarm::cli {
namespace {

constexpr const char* kBuildHelp =
    R"(usage: tunefarm build MODEL.onnx -o MODEL.tfpkg [--target T|host] [--db FILE]
                      [--shape NAME=D1xD2x...]... [--untuned] [--threads N]

Builds a whole model for one target: every task is compiled with its best
record in the log database (--db, default tunefarm.db) for the target, or
with its default schedule where there is none; the tuned kernel is used only
where it measured faster than the default schedule on the same device (when
no default-schedule time is stored and the target is this machine, both are
timed here with --threads). BatchNorm and bias adds are folded into the
weights, weights are packed for the kernels, and intermediates share one
statically planned arena. The package runs with `tunefarm run`.

  --untuned         default schedules only (ignores the database)
  --no-model-check  skip timing tuned kernels inside the model (host targets)
)";

constexpr const char* kRunHelp =
    R"(usage: tunefarm run MODEL.tfpkg [--input NAME=FILE.npy]... [--seed N] [--threads N]
                    [--repeat N] [--output-dir DIR] [--profile] [--json]

Runs a built model on this machine. Inputs come from .npy files (float32 or
float64, C order); inputs not given are filled with seeded uniform random
values in [-1, 1). Prints each output's shape and statistics; --output-dir
writes OUTPUT.npy files; --repeat N runs N more times and prints the median
latency; --profile prints the time of every step.
)";

struct Flags {
  std::string positional;
  std::map<std::string, std::vector<std::string>> values;
  std::vector<std::string> switches;
};

// Parses `--name value`, `--name=value`, switches and one positional argument.
bool ParseFlags(const std::vector<std::string>& args, const std::vector<std::string>& with_value,
                const std::vector<std::string>& switches, const std::string& cmd, Flags* f,
                std::string* error) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "-o") a = "--output";
    if (a.rfind("--", 0) != 0) {
      if (!f->positional.empty()) {
        *error = absl::StrCat(cmd, ": unexpected argument '", a, "'");
        return false;
      }
      f->positional = a;
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (std::find(switches.begin(), switches.end(), name) != switches.end() &&
        eq == std::string::npos) {
      f->switches.push_back(name);
      continue;
    }
    if (std::find(with_value.begin(), with_value.end(), name) == with_value.end()) {
      *error = absl::StrCat(cmd, ": unknown flag --", name, " (see --help)");
      return false;
    }
    if (eq == std::string::npos) {
      if (i + 1 >= args.size()) {
        *error = absl::StrCat("--", name, " needs a value");
        return false;
      }
      value = args[++i];
    }
    f->values[name].push_back(value);
  }
  return true;
}

bool Has(const Flags& f, const std::string& sw) {
  return std::find(f.switches.begin(), f.switches.end(), sw) != f.switches.end();
}
std::string Value(const Flags& f, const std::string& name, const std::string& fallback) {
  auto it = f.values.find(name);
  return it == f.values.end() ? fallback : it->second.back();
}

double Mean(const v1::Record& r) {
  double s = 0;
  for (double c : r.costs_sec()) s += c;
  return r.costs_sec_size() ? s / r.costs_sec_size() : 0;
}

// Picks a task's kernel from the log database: the best record for the
// target, compared with the default schedule's record on the same device.
absl::StatusOr<deploy::KernelChoice> ChooseFromLog(server::TuningLog* log,
                                                   const std::string& target_spec,
                                                   const deploy::ModelTask& task) {
  deploy::KernelChoice c;
  TF_ASSIGN_OR_RETURN(std::vector<v1::Record> best, log->TopK(task.key, target_spec, 1));
  if (best.empty()) {
    c.why = "no records for this target";
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
  server::TuningLog::RecordQuery q;
  q.workload_key = task.key;
  q.target_spec = target_spec;
  q.status = v1::MEASURE_STATUS_OK;
  q.limit = 500;
  for (;;) {
    TF_ASSIGN_OR_RETURN(std::vector<v1::Record> page, log->ListRecords(q));
    for (const v1::Record& r : page) {
      if (r.schedule().is_default() && r.device_key() == b.device_key() &&
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

}  // namespace

int RunBuild(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      out << kBuildHelp;
      return 0;
    }
  }
  Flags f;
  std::string error;
  if (!ParseFlags(args, {"output", "target", "db", "shape", "threads"},
                  {"untuned", "no-model-check"}, "build", &f, &error))
    return Fail(err, 2, error);
  if (f.positional.empty()) return Fail(err, 2, "build needs a model file (MODEL.onnx)");
  const std::string output = Value(f, "output", "");
  if (output.empty()) return Fail(err, 2, "build needs -o MODEL.tfpkg");
  absl::StatusOr<ir::Target> target = ParseTargetFlag(Value(f, "target", "host"));
  if (!target.ok()) return Fail(err, 2, std::string(target.status().message()));
  int64_t threads = 1;
  if (!absl::SimpleAtoi(Value(f, "threads", "1"), &threads) || threads < 1 || threads > 256)
    return Fail(err, 2, "--threads needs a number from 1 to 256");
  deploy::ImportOptions io;
  if (f.values.count("shape")) {
    for (const std::string& s : f.values.at("shape")) {
      auto o = deploy::ParseShapeOverride(s);
      if (!o.ok()) return Fail(err, 2, std::string(o.status().message()));
      io.input_shapes[o->first] = o->second;
    }
  }
  absl::StatusOr<std::string> bytes = ReadFile(f.positional);
  if (!bytes.ok()) return Fail(err, 1, std::string(bytes.status().message()));
  absl::StatusOr<deploy::Model> model = deploy::ImportOnnx(*bytes, io);
  if (!model.ok()) return Fail(err, 1, absl::StrCat(f.positional, ": ", model.status().message()));
  deploy::BuildOptions bo;
  bo.model_name = std::filesystem::path(f.positional).filename().string();
  bo.model_sha256 = Sha256Hex(*bytes);
  bo.threads = int(threads);
  std::unique_ptr<server::TuningLog> log;
  if (!Has(f, "untuned")) {
    server::TuningLog::Options lo;
    lo.path = Value(f, "db", "tunefarm.db");
    if (!std::filesystem::exists(lo.path))
      return Fail(err, 1,
                  absl::StrCat("no log database at ", lo.path, " (--untuned builds without one)"));
    auto opened = server::TuningLog::Open(lo);
    if (!opened.ok()) return Fail(err, 1, std::string(opened.status().message()));
    log = *std::move(opened);
    const std::string spec = target->ToString();
    server::TuningLog* l = log.get();
    bo.choose = [l, spec](const deploy::ModelTask& t) { return ChooseFromLog(l, spec, t); };
  }
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<v1::ModelPackage> pkg = deploy::BuildPackage(*model, *target, bo);
  if (!pkg.ok()) return Fail(err, 1, absl::StrCat(f.positional, ": ", pkg.status().message()));
  int tuned_kernels = 0;
  for (const auto& k : pkg->kernels()) tuned_kernels += k.tuned();
  // On this machine, tuned kernels must also pay inside the model.
  if (tuned_kernels > 0 && !Has(f, "no-model-check") &&
      target->ToString() == codegen::HostTarget().ToString()) {
    deploy::BuildOptions plain = bo;
    plain.choose = nullptr;
    absl::StatusOr<v1::ModelPackage> untuned = deploy::BuildPackage(*model, *target, plain);
    if (!untuned.ok()) return Fail(err, 1, std::string(untuned.status().message()));
    auto slower = deploy::TunedKernelsNotFasterInModel(*untuned, *pkg, int(threads));
    if (!slower.ok()) return Fail(err, 1, std::string(slower.status().message()));
    if (!slower->empty()) {
      auto from_log = bo.choose;
      bo.choose = [&,
                   from_log](const deploy::ModelTask& t) -> absl::StatusOr<deploy::KernelChoice> {
        if (!slower->count(t.key)) return from_log(t);
        deploy::KernelChoice c;
        c.why = "the tuned kernel was not faster inside the model (timed here)";
        return c;
      };
      pkg = deploy::BuildPackage(*model, *target, bo);
      if (!pkg.ok()) return Fail(err, 1, absl::StrCat(f.positional, ": ", pkg.status().message()));
    }
  }
  std::string serialized;
  if (!pkg->SerializeToString(&serialized)) return Fail(err, 1, "the package does not serialize");
  {
    const std::string tmp = output + ".tmp";
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    o.write(serialized.data(), std::streamsize(serialized.size()));
    o.close();
    if (!o) return Fail(err, 1, absl::StrCat("cannot write ", output));
    std::error_code ec;
    std::filesystem::rename(tmp, output, ec);
    if (ec) return Fail(err, 1, absl::StrCat("cannot write ", output, ": ", ec.message()));
  }
  int tuned = 0, kernel_steps = 0, native_steps = 0;
  for (const auto& k : pkg->kernels()) tuned += k.tuned();
  for (const auto& s : pkg->steps()) (s.has_kernel() ? kernel_steps : native_steps)++;
  int64_t weights = 0;
  for (const auto& c : pkg->constants()) weights += int64_t(c.f32().size() + 8 * c.i64_size());
  out << absl::StrFormat(
      "%s: %d kernels (%d tuned, %d default), %d kernel steps, %d native steps; weights %.1f MB, "
      "arena %.1f MB; built in %.1f s\n",
      output, pkg->kernels_size(), tuned, pkg->kernels_size() - tuned, kernel_steps, native_steps,
      weights / 1e6, pkg->arena_bytes() / 1e6,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  for (const auto& k : pkg->kernels()) {
    out << absl::StrFormat("  %-8s %-60s %s\n", k.tuned() ? "tuned" : "default", k.description(),
                           k.choice());
  }
  return 0;
}

int RunModel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      out << kRunHelp;
      return 0;
    }
  }
  Flags f;
  std::string error;
  if (!ParseFlags(args, {"input", "seed", "threads", "repeat", "output-dir"}, {"profile", "json"},
                  "run", &f, &error))
    return Fail(err, 2, error);
  if (f.positional.empty()) return Fail(err, 2, "run needs a package file (MODEL.tfpkg)");
  int64_t threads = 1, repeat = 0, seed = 1;
  if (!absl::SimpleAtoi(Value(f, "threads", "1"), &threads) || threads < 1 || threads > 256)
    return Fail(err, 2, "--threads needs a number from 1 to 256");
  if (!absl::SimpleAtoi(Value(f, "repeat", "0"), &repeat) || repeat < 0)
    return Fail(err, 2, "--repeat needs a number >= 0");
  if (!absl::SimpleAtoi(Value(f, "seed", "1"), &seed)) return Fail(err, 2, "--seed needs a number");
  absl::StatusOr<v1::ModelPackage> pkg = deploy::GraphRuntime::ReadPackage(f.positional);
  if (!pkg.ok()) return Fail(err, 1, std::string(pkg.status().message()));
  deploy::GraphRuntime::Options ro;
  ro.threads = int(threads);
  ro.profile = Has(f, "profile");
  absl::StatusOr<std::unique_ptr<deploy::GraphRuntime>> rt = deploy::GraphRuntime::Load(*pkg, ro);
  if (!rt.ok()) return Fail(err, 1, absl::StrCat(f.positional, ": ", rt.status().message()));
  std::map<std::string, std::vector<float>> inputs;
  if (f.values.count("input")) {
    for (const std::string& spec : f.values.at("input")) {
      const size_t eq = spec.find('=');
      std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
      const std::string file = eq == std::string::npos ? spec : spec.substr(eq + 1);
      if (name.empty()) {
        if (pkg->inputs_size() != 1)
          return Fail(err, 2, "--input needs NAME=FILE.npy (the model has several inputs)");
        name = pkg->inputs(0);
      }
      if (std::find(pkg->inputs().begin(), pkg->inputs().end(), name) == pkg->inputs().end())
        return Fail(err, 2, absl::StrCat("'", name, "' is not an input of the model"));
      absl::StatusOr<std::string> bytes = ReadFile(file);
      if (!bytes.ok()) return Fail(err, 1, std::string(bytes.status().message()));
      absl::StatusOr<deploy::NpyArray> a = deploy::ParseNpy(*bytes);
      if (!a.ok()) return Fail(err, 1, absl::StrCat(file, ": ", a.status().message()));
      if (a->shape != (*rt)->Shape(name)) {
        std::string want;
        for (int64_t d : (*rt)->Shape(name)) absl::StrAppend(&want, want.empty() ? "" : "x", d);
        return Fail(err, 1, absl::StrCat(file, ": input '", name, "' needs shape ", want));
      }
      inputs[name] = std::move(a->data);
    }
  }
  std::mt19937_64 rng{static_cast<uint64_t>(seed)};
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const std::string& name : pkg->inputs()) {
    if (inputs.count(name)) continue;
    int64_t n = 1;
    for (int64_t d : (*rt)->Shape(name)) n *= d;
    std::vector<float>& v = inputs[name];
    v.resize(size_t(n));
    for (float& x : v) x = u(rng);
  }
  std::map<std::string, std::vector<float>> outputs;
  auto t0 = std::chrono::steady_clock::now();
  if (absl::Status s = (*rt)->Run(inputs, &outputs); !s.ok())
    return Fail(err, 1, std::string(s.message()));
  const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> lat;
  for (int64_t r = 0; r < repeat; ++r) {
    auto t = std::chrono::steady_clock::now();
    if (absl::Status s = (*rt)->Run(inputs, nullptr); !s.ok())
      return Fail(err, 1, std::string(s.message()));
    lat.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  std::sort(lat.begin(), lat.end());
  const double median = lat.empty() ? first : lat[lat.size() / 2];
  const std::string dir = Value(f, "output-dir", "");
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    for (const auto& [name, v] : outputs) {
      std::ofstream o(std::filesystem::path(dir) / deploy::NpyFileName(name), std::ios::binary);
      const std::string bytes = deploy::WriteNpy((*rt)->Shape(name), v);
      o.write(bytes.data(), std::streamsize(bytes.size()));
      if (!o) return Fail(err, 1, absl::StrCat("cannot write into ", dir));
    }
  }
  const bool json = Has(f, "json");
  if (json)
    out << "{\"package\": \"" << f.positional << "\", \"threads\": " << threads
        << absl::StrFormat(", \"latency_ms\": %.4f, \"runs\": %d", median * 1e3,
                           lat.empty() ? 1 : lat.size())
        << ", \"outputs\": [";
  bool firsto = true;
  for (const std::string& name : pkg->outputs()) {
    const std::vector<float>& v = outputs[name];
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    for (float x : v) {
      mn = std::min(mn, double(x));
      mx = std::max(mx, double(x));
      sum += x;
    }
    std::string shape;
    for (int64_t d : (*rt)->Shape(name)) absl::StrAppend(&shape, shape.empty() ? "" : "x", d);
    const double mean = v.empty() ? 0 : sum / double(v.size());
    if (json) {
      out << (firsto ? "" : ", ")
          << absl::StrFormat(
                 "{\"name\": \"%s\", \"shape\": \"%s\", \"min\": %g, \"max\": %g, "
                 "\"mean\": %g}",
                 name, shape, mn, mx, mean);
    } else {
      out << absl::StrFormat("%s %s: min %g max %g mean %g; first:", name, shape, mn, mx, mean);
      for (size_t i = 0; i < std::min<size_t>(5, v.size()); ++i) out << " " << v[i];
      out << "\n";
    }
    firsto = false;
  }
  if (json) {
    out << "]}\n";
  } else {
    out << absl::StrFormat("latency %.3f ms (%s, %d thread%s)\n", median * 1e3,
                           lat.empty() ? "one run" : absl::StrCat("median of ", lat.size()),
                           threads, threads == 1 ? "" : "s");
  }
  if (ro.profile && !json) {
    const auto& sec = (*rt)->StepSeconds();
    for (size_t s = 0; s < sec.size(); ++s)
      out << absl::StrFormat("  %4d %9.3f ms  %s\n", s, sec[s] * 1e3, (*rt)->StepLabel(int(s)));
  }
  return 0;
}

}  // namespace tunefarm::cli
