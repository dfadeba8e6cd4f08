// tunefarm-bench gpu-models: whole models on this machine's GPU, per
// precision (fp32, fp16, and bf16 and tf32 where the arch has them) and
// layout (--layout: nchw, the default for CUDA, and/or nhwc): the untuned CUDA
// package (`tunefarm build --untuned --target cuda`) against the tuned one
// (`tunefarm tune MODEL.onnx --target cuda -o`, a trial budget), timed
// against each other in paired runs, beside the sum of cuDNN's
// (convolutions) and cuBLAS's (dense layers) best times for the same
// layers in the same dtype and layout, each measured alone in this run and counted as
// often as the model has it. Both packages' outputs are checked against the
// float64 interpreter first (float32 within 1e-4, 16-bit and tf32 within
// their model tolerance of each output's range); a package that differs is
// reported and not timed. Packages run in a confined child
// (runtime::MeasureModel). A package's latency is GraphRuntime::Run's: the
// input copied up, the captured CUDA graph, the outputs copied back; the
// library sum counts the layers' kernels only (no pooling, no elementwise
// nodes, no copies), so it is the harder of the two to beat. The models are
// tests/deploy/make_zoo.py's, written here, or those of --model-dir
// (resnet18.onnx, mobilenet_v2.onnx: where there is no python3-onnx).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/cuda_references.h"
#include "common/float16.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/reference.h"
#include "deploy/interpreter.h"
#include "deploy/package_build.h"
#include "device_agent/runtime/capabilities.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/model_run.h"
#include "proto/kernel_signature.h"
#include "search/gpu_local_measurer.h"

namespace tunefarm::bench {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::tunefarm::v1;
using runtime::GraphRuntime;

// The largest |ours - reference| of any output, relative to that output's
// largest |reference|; infinite where a value is not finite or a run fails.
double WorstError(const v1::ModelPackage& pkg, const frontend::Model& model,
                  const std::map<std::string, std::vector<float>>& in,
                  const deploy::Values<double>& ref) {
  absl::StatusOr<std::map<std::string, std::vector<float>>> run = runtime::RunModelOnce(pkg, in);
  if (!run.ok()) return INFINITY;
  std::map<std::string, std::vector<float>>& ours = *run;
  double worst = 0;
  for (const std::string& o : model.outputs) {
    const std::vector<double>& r = ref.at(o);
    if (ours[o].size() != r.size()) return INFINITY;
    double err = 0, scale = 1e-6;
    for (size_t i = 0; i < r.size(); ++i) {
      const double d = std::fabs(double(ours[o][i]) - r[i]);
      if (!(d <= err)) err = std::isnan(d) ? INFINITY : d;
      scale = std::max(scale, std::fabs(r[i]));
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

// cuDNN's and cuBLAS's best times for the model's convolutions and dense
// layers (each task without its epilogue, times its weight); `counted`
// gets how many tasks had a library to time, `flops` their share.
struct LibrarySum {
  double seconds = 0;
  int counted = 0, tasks = 0;
  double share = 0;  // of the tasks' FLOPs
};
absl::StatusOr<LibrarySum> TimeLibraries(const frontend::Model& model, const ir::Target& target,
                                         v1::DType precision, bool channels_last) {
  TF_ASSIGN_OR_RETURN(
      frontend::TaskExtraction ex,
      frontend::ExtractTasks(model, frontend::ExtractOptionsFor(target, channels_last, precision)));
  LibrarySum sum;
  double counted_flops = 0, all_flops = 0;
  for (const frontend::ModelTask& t : ex.tasks) {
    ++sum.tasks;
    all_flops += t.flops * t.weight;
    v1::Workload w = t.workload;
    w.clear_epilogue();
    if (w.op() != v1::OP_KIND_CONV2D && w.op() != v1::OP_KIND_DENSE && w.op() != v1::OP_KIND_MATMUL)
      continue;
    TF_ASSIGN_OR_RETURN(ir::ComputeDAG dag, ir::BuildComputeDAG(w));
    absl::StatusOr<GpuReferenceRun> run = RunCudaReference(w, ir::RandomInputs(dag, 1));
    if (absl::IsNotFound(run.status())) continue;
    if (!run.ok()) return run.status();
    sum.seconds += run->seconds * t.weight;
    ++sum.counted;
    counted_flops += t.flops * t.weight;
  }
  sum.share = all_flops > 0 ? counted_flops / all_flops : 0;
  return sum;
}

// What `gpu-models` was asked for on the command line.
struct GpuModelsOptions {
  int trials = 0, repeat = 50;  // trials 0: tune's default budget
  std::vector<std::string> precisions = {"fp32", "fp16"}, layouts = {"nchw"};
  std::string only, json_path, db_dir, model_dir;
};

// Reads `args` into `o`, as ReadFlags does: 0, or 2 after one line on stderr.
int ParseGpuModelsArgs(const std::vector<std::string>& args, GpuModelsOptions* o) {
  return ReadFlags(
      "gpu-models", args,
      {{"--trials",
        [&](const std::string& v) { return absl::SimpleAtoi(v, &o->trials) && o->trials > 0; }},
       {"--repeat",
        [&](const std::string& v) { return absl::SimpleAtoi(v, &o->repeat) && o->repeat > 0; }},
       {"--precision",
        [&](const std::string& v) {
          o->precisions = absl::StrSplit(v, ',');
          return absl::c_all_of(o->precisions, [](const std::string& p) {
            return frontend::PrecisionNamed(p).has_value();
          });
        }},
       {"--layout",
        [&](const std::string& v) {
          o->layouts = absl::StrSplit(v, ',');
          return absl::c_all_of(
              o->layouts, [](const std::string& l) { return l == "nchw" || l == "nhwc"; });
        }},
       {"--only", TextFlag(&o->only)},
       {"--json", TextFlag(&o->json_path)},
       {"--db-dir", TextFlag(&o->db_dir)},
       {"--model-dir", TextFlag(&o->model_dir)}});
}

// This machine's GPU as a target the bench can measure on (`spec` gets its
// spec), with cuBLAS/cuDNN to compare with; nullopt after one line on stderr.
std::optional<ir::Target> UsableGpuTarget(const v1::Capabilities& caps, std::string* spec) {
  if (!caps.has_gpu()) {
    std::fprintf(stderr, "tunefarm-bench: gpu-models: no GPU on this machine\n");
    return std::nullopt;
  }
  *spec = runtime::LocalCudaTarget(caps);
  absl::StatusOr<ir::Target> target = ir::Target::Parse(*spec);
  if (!target.ok()) {
    std::fprintf(stderr, "tunefarm-bench: gpu-models: %s\n",
                 std::string(target.status().message()).c_str());
    return std::nullopt;
  }
  if (absl::Status s = search::GpuLocalMeasurer::Check(*target); !s.ok()) {
    std::fprintf(stderr, "tunefarm-bench: gpu-models: %s\n", std::string(s.message()).c_str());
    return std::nullopt;
  }
  if (!HaveCudaReferences()) {
    std::fprintf(stderr, "tunefarm-bench: this build has no cuBLAS/cuDNN to compare with\n");
    return std::nullopt;
  }
  return *std::move(target);
}

// Where the bench runs: the GPU target, the options and the folders (`tmp`
// for make_zoo.py's models, `keep` for packages, databases and logs).
struct GpuBenchContext {
  const GpuModelsOptions& o;
  const ir::Target& target;
  const std::string& spec;
  fs::path tmp, keep;
};

// A model imported for the bench, its random inputs and the float64
// interpreter's outputs on them.
struct GpuModel {
  const char* name;
  std::string path;
  frontend::Model model;
  std::map<std::string, std::vector<float>> in;
  deploy::Values<double> ref;
};

// `tunefarm build --untuned` and `tunefarm tune` of `m` for one precision
// and layout, named `base` under ctx.keep; the untuned and tuned packages.
absl::StatusOr<std::pair<v1::ModelPackage, v1::ModelPackage>> BuildAndTuneGpu(
    const GpuBenchContext& ctx, const GpuModel& m, const std::string& precision,
    const std::string& layout, const std::string& base) {
  const fs::path untuned_path = ctx.keep / (base + "-untuned.tfpkg"),
                 tuned_path = ctx.keep / (base + ".tfpkg");
  std::vector<std::string> build = {
      "build",   m.path, "--untuned",           "--target", ctx.spec, "--precision",
      precision, "-o",   untuned_path.string(), "--layout", layout};
  std::vector<std::string> tune = {"tune",        m.path,
                                   "--target",    ctx.spec,
                                   "--precision", precision,
                                   "--layout",    layout,
                                   "--db",        (ctx.keep / (base + ".db")).string(),
                                   "-o",          tuned_path.string()};
  if (ctx.o.trials > 0) tune.insert(tune.end(), {"--trials", std::to_string(ctx.o.trials)});
  absl::Status s = RunTunefarm(build, ctx.keep / (base + "-untuned.log"), absl::Hours(1), nullptr);
  if (s.ok()) s = RunTunefarm(tune, ctx.keep / (base + "-tune.log"), absl::Hours(3), nullptr);
  absl::StatusOr<v1::ModelPackage> untuned =
      s.ok() ? GraphRuntime::ReadPackage(untuned_path.string()) : s;
  absl::StatusOr<v1::ModelPackage> tuned =
      untuned.ok() ? GraphRuntime::ReadPackage(tuned_path.string()) : untuned.status();
  if (!tuned.ok()) return tuned.status();
  return std::pair{*std::move(untuned), *std::move(tuned)};
}

// One precision in one layout of `m`: both packages built, checked against
// the float64 interpreter, then timed against each other and beside the
// libraries' layer sum; the table line printed and the JSON row appended.
// False after a line saying why where a step failed or a package is wrong;
// true also where the arch lacks the precision (skipped, with a line).
bool BenchGpuVariant(const GpuBenchContext& ctx, const GpuModel& m, const std::string& precision,
                     const std::string& layout, std::string* rows) {
  const char* name = m.name;
  const std::string label = layout == "nchw" ? precision : precision + "/" + layout;
  const v1::DType dtype = *frontend::PrecisionNamed(precision);
  const std::optional<HalfKind> half = HalfKindOf(dtype);
  if (absl::Status fits = frontend::CheckPrecision(dtype, ctx.target); !fits.ok()) {
    std::printf("%-14s %9s skipped: %s\n", name, label.c_str(),
                std::string(fits.message()).c_str());
    return true;
  }
  const std::string base = absl::StrCat(name, "-", precision, "-", layout);
  auto built = BuildAndTuneGpu(ctx, m, precision, layout, base);
  if (!built.ok()) {
    std::printf("%-14s %9s %s\n", name, label.c_str(),
                std::string(built.status().message()).c_str());
    return false;
  }
  const v1::ModelPackage& untuned = built->first;
  const v1::ModelPackage& tuned = built->second;
  const double tolerance = ModelTolerance(half, dtype == v1::DTYPE_TF32);
  const double err = std::max(WorstError(untuned, m.model, m.in, m.ref),
                              WorstError(tuned, m.model, m.in, m.ref));
  if (!(err < tolerance)) {
    std::printf(
        "%-14s %9s WRONG: max error %.3g of an output's range (tolerance %.3g); "
        "not timed\n",
        name, label.c_str(), err, tolerance);
    return false;
  }
  absl::StatusOr<deploy::PairedTiming> t =
      deploy::TimePaired(untuned, tuned, 1, ctx.o.repeat, &m.in);
  absl::StatusOr<LibrarySum> lib = TimeLibraries(m.model, ctx.target, dtype, layout == "nhwc");
  if (!t.ok() || !lib.ok()) {
    std::printf("%-14s %9s timing failed: %s\n", name, label.c_str(),
                std::string((t.ok() ? lib.status() : t.status()).message()).c_str());
    return false;
  }
  int tuned_kernels = 0;
  for (const v1::PackageKernel& k : tuned.kernels()) tuned_kernels += k.tuned();
  std::printf("%-14s %9s %11.3f %9.3f %7.2fx %10.3f %7.2fx %5d of %-4d %10.2g  %d of %d\n", name,
              label.c_str(), t->a_seconds * 1e3, t->b_seconds * 1e3, t->a_over_b,
              lib->seconds * 1e3, lib->seconds / t->b_seconds, lib->counted, lib->tasks, err,
              tuned_kernels, tuned.kernels_size());
  absl::StrAppend(
      rows, rows->empty() ? "" : ",\n",
      absl::StrFormat(
          "  {\"model\": \"%s\", \"precision\": \"%s\", \"layout\": \"%s\", "
          "\"untuned_ms\": %.4f, "
          "\"tuned_ms\": %.4f, \"untuned_over_tuned\": %.3f, \"library_sum_ms\": %.4f, "
          "\"library_layers\": %d, \"tasks\": %d, \"library_flop_share\": %.3f, "
          "\"library_over_tuned\": %.3f, \"max_error\": %.3g, \"tuned_kernels\": %d}",
          name, precision, layout, t->a_seconds * 1e3, t->b_seconds * 1e3, t->a_over_b,
          lib->seconds * 1e3, lib->counted, lib->tasks, lib->share, lib->seconds / t->b_seconds,
          err, tuned_kernels));
  return true;
}

// Model `name` (from --model-dir, else ctx.tmp) in each precision and
// layout of `variants`. True where something failed that makes the bench
// exit 1; a model --model-dir lacks is passed over.
bool BenchGpuModel(const GpuBenchContext& ctx, const char* name,
                   const std::vector<std::pair<std::string, std::string>>& variants,
                   std::string* rows) {
  const std::string& model_dir = ctx.o.model_dir;
  const std::string path =
      ((model_dir.empty() ? ctx.tmp : fs::path(model_dir)) / (std::string(name) + ".onnx"))
          .string();
  if (!model_dir.empty() && !fs::exists(path)) return false;  // not carried
  absl::StatusOr<frontend::Model> model = frontend::ImportOnnxFile(path);
  if (!model.ok()) {
    std::printf("%-14s import failed: %s\n", name, std::string(model.status().message()).c_str());
    return true;
  }
  GpuModel m{name, path, *std::move(model), {}, {}};
  m.in = deploy::RandomModelInputs(m.model, 3);
  deploy::Values<double> in64;
  for (const auto& [k, v] : m.in) in64[k].assign(v.begin(), v.end());
  absl::StatusOr<deploy::Values<double>> ref = deploy::Interpret(m.model, in64);
  if (!ref.ok()) {
    std::printf("%-14s reference failed: %s\n", name, std::string(ref.status().message()).c_str());
    return true;
  }
  m.ref = *std::move(ref);
  bool failures = false;
  for (const auto& [precision, layout] : variants) {
    if (!BenchGpuVariant(ctx, m, precision, layout, rows)) failures = true;
  }
  return failures;
}

// Writes make_zoo.py's models (YOLO at 160 pixels) to `tmp`; false after
// a line on stderr where it fails.
bool WriteGpuZoo(const fs::path& tmp) {
  auto child = Subprocess::Start(
      {"/usr/bin/python3", std::string(TF_SOURCE_DIR) + "/tests/deploy/make_zoo.py", tmp.string(),
       "--yolo-size", "160"},
      {false, ""});
  absl::StatusOr<int> rc = child.ok() ? (*child)->Wait(absl::Minutes(5)) : child.status();
  if (!rc.ok() || *rc != 0) {
    std::fprintf(stderr,
                 "tunefarm-bench: gpu-models: make_zoo.py failed (python3-onnx? --model-dir "
                 "takes models written elsewhere)\n");
    return false;
  }
  return true;
}

}  // namespace

int RunGpuModelsBench(const std::vector<std::string>& args) {
  GpuModelsOptions o;
  if (const int flags = ParseGpuModelsArgs(args, &o); flags != 0) return flags;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  v1::Capabilities caps = runtime::DetectCapabilities();
  std::string spec;
  const std::optional<ir::Target> target = UsableGpuTarget(caps, &spec);
  if (!target) return 1;
  const fs::path tmp = fs::temp_directory_path() / absl::StrCat("tf-gpu-models-", getpid());
  std::error_code ec;
  fs::create_directories(tmp, ec);
  const fs::path keep = o.db_dir.empty() ? tmp : fs::path(o.db_dir);
  fs::create_directories(keep, ec);
  if (o.model_dir.empty() && !WriteGpuZoo(tmp)) {
    fs::remove_all(tmp, ec);
    return 1;
  }
  std::printf("target: %s   GPU: %s   driver: CUDA %s   tune budget: %s\n",
              target->ToString().c_str(), caps.gpu_name().c_str(),
              caps.fingerprint().cuda_driver().c_str(),
              o.trials > 0 ? absl::StrCat(o.trials, " trials").c_str() : "tune's default");
  // Each precision in each layout, named "fp16" (NCHW) or "fp16/nhwc".
  std::vector<std::pair<std::string, std::string>> variants;
  for (const std::string& p : o.precisions) {
    for (const std::string& l : o.layouts) variants.push_back({p, l});
  }
  std::printf("%-14s %9s %11s %9s %8s %10s %8s %12s %10s  %s\n", "model", "prec", "untuned ms",
              "tuned ms", "speedup", "lib sum ms", "lib/tun", "lib layers", "max err",
              "tuned kernels");
  const GpuBenchContext ctx{o, *target, spec, tmp, keep};
  bool failures = false;
  std::string rows;
  for (const char* name : {"resnet18", "mobilenet_v2"}) {
    if (!o.only.empty() && std::string(name).find(o.only) == std::string::npos) continue;
    if (BenchGpuModel(ctx, name, variants, &rows)) failures = true;
  }
  std::printf(
      "speedup: untuned/tuned, median of %d paired runs; lib sum: cuDNN/cuBLAS best per layer, "
      "layers alone (no epilogue, pooling or copies), times their occurrences; lib/tun above 1: "
      "the tuned package beats the libraries' layer sum\n",
      o.repeat);
  if (!o.json_path.empty()) {
    std::ofstream(o.json_path) << "{\"target\": \"" << target->ToString() << "\", \"gpu\": \""
                               << caps.gpu_name() << "\", \"rows\": [\n"
                               << rows << "\n]}\n";
  }
  fs::remove_all(tmp, ec);
  return failures ? 1 : 0;
}

}  // namespace tunefarm::bench
