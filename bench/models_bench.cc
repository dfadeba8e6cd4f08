// tunefarm-bench models: end-to-end latency of whole models on this CPU,
// per thread count: untuned (`tunefarm build --untuned`) vs tuned (`tunefarm
// tune MODEL.onnx -o` with a wall-time or trial budget, at that thread count)
// vs ONNX Runtime (npm's onnxruntime-node, driven by bench/ort_run.js) in the
// same run. Both packages' outputs are checked against ONNX Runtime's
// on the same inputs before any time is reported; without ONNX Runtime, or
// with a package that differs, nothing is timed and the bench exits 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/anchors.h"
#include "bench/bench_util.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "deploy/interpreter.h"
#include "deploy/package_build.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/model_run.h"
#include "device_agent/runtime/model_timing.h"
#include "device_agent/runtime/npy.h"

namespace tunefarm::bench {
namespace {

namespace fs = std::filesystem;
using runtime::GraphRuntime;

// ONNX Runtime through node: latency (s) and, with out_dir, its outputs;
// `opt` is its graphOptimizationLevel.
absl::StatusOr<double> TimeOrt(const std::string& model, int threads, int repeat,
                               const std::vector<std::string>& input_flags,
                               const std::string& out_dir, const std::string& opt = "all") {
  std::vector<std::string> argv = {"/usr/bin/env",
                                   "node",
                                   std::string(TF_SOURCE_DIR) + "/bench/ort_run.js",
                                   model,
                                   "--threads",
                                   std::to_string(threads),
                                   "--repeat",
                                   std::to_string(repeat)};
  argv.insert(argv.end(), input_flags.begin(), input_flags.end());
  argv.insert(argv.end(), {"--opt", opt});
  if (!out_dir.empty()) {
    argv.push_back("--out");
    argv.push_back(out_dir);
  }
  TF_ASSIGN_OR_RETURN(auto child, Subprocess::Start(argv));
  std::string line;
  absl::Status s = child->ReadLine(&line, absl::Minutes(10));
  TF_ASSIGN_OR_RETURN(int rc, child->Wait(absl::Seconds(30)));
  if (!s.ok() || rc != 0) return absl::InternalError("ort_run.js failed (see its stderr)");
  const size_t at = line.find("\"latency_ms\":");
  double ms = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtod(line.substr(at + 13, line.find(',', at) - at - 13), &ms))
    return absl::InternalError(absl::StrCat("ort_run.js printed: ", line));
  return ms / 1e3;
}

struct ModelSpec {
  std::string name;
  std::string path;
  std::map<std::string, std::vector<int64_t>> shapes;  // inputs with dynamic dimensions
  std::map<std::string, std::vector<double>> values;   // inputs fixed to values
  bool generated = false;                              // written by tests/deploy/make_zoo.py
};

}  // namespace

// Where the tuned build's time goes at `threads`: each step's median over
// `runs` profiled runs after one that is not counted (a first run's page
// faults would otherwise weigh on a model of microseconds), measured in a
// confined child (runtime::MeasureModel).
absl::StatusOr<runtime::TimeShares> ProfiledShares(
    const v1::ModelPackage& pkg, int threads, int runs,
    const std::map<std::string, std::vector<float>>& in) {
  v1::ModelRunRequest req;
  req.set_package(pkg.SerializeAsString());
  req.set_threads(threads);
  req.set_repeats(runs);
  req.set_profile(true);
  runtime::SetModelInputs(pkg, in, &req);
  const v1::ModelRunResult r = runtime::MeasureModel(req);
  TF_RETURN_IF_ERROR(runtime::ModelRunStatus(r));
  return runtime::SharesOf(pkg, {r.step_sec().begin(), r.step_sec().end()});
}

namespace {

// What `models` was asked for on the command line.
struct ModelsOptions {
  int trials = 0, repeat = 20, yolo = 640;
  double seconds = 1200;  // 0 where a trial budget replaces it
  std::vector<int> thread_list = {1, 2};
  std::string only, json_path, db_dir;
};

// Reads `args` into `o`, as ReadFlags does: 0, or 2 after one line on stderr.
int ParseModelsArgs(const std::vector<std::string>& args, ModelsOptions* o) {
  const int flags = ReadFlags(
      "models", args,
      {{"--trials",
        [&](const std::string& v) { return absl::SimpleAtoi(v, &o->trials) && o->trials >= 0; }},
       {"--seconds",
        [&](const std::string& v) { return absl::SimpleAtod(v, &o->seconds) && o->seconds > 0; }},
       {"--repeat",
        [&](const std::string& v) { return absl::SimpleAtoi(v, &o->repeat) && o->repeat > 0; }},
       {"--yolo-size",
        [&](const std::string& v) { return absl::SimpleAtoi(v, &o->yolo) && o->yolo > 0; }},
       {"--only", TextFlag(&o->only)},
       {"--json", TextFlag(&o->json_path)},
       {"--db-dir", TextFlag(&o->db_dir)},
       {"--threads", [&](const std::string& v) {
          o->thread_list.clear();
          for (absl::string_view t : absl::StrSplit(v, ',')) {
            int n = 0;
            if (!absl::SimpleAtoi(t, &n) || n <= 0) return false;
            o->thread_list.push_back(n);
          }
          return true;
        }}});
  if (flags != 0) return flags;
  if (o->trials > 0) o->seconds = 0;  // a trial budget replaces the wall-time one
  return 0;
}

// The models the bench knows, in the order they are run: make_zoo.py's
// (written to `tmp`, YOLO at `yolo` pixels), then those of the model cache.
std::vector<ModelSpec> KnownModels(const fs::path& tmp, int yolo) {
  return {
      {"resnet18", (tmp / "resnet18.onnx").string(), {}, {}, true},
      {"mobilenet_v2", (tmp / "mobilenet_v2.onnx").string(), {}, {}, true},
      {absl::StrCat("yolov5s_", yolo),
       (tmp / absl::StrCat("yolov5s_", yolo, ".onnx")).string(),
       {},
       {},
       true},
      {"blazeface_back_256", CacheDir() + "/models/blazeface_back_256.onnx"},
      // PaddleOCR v4 (scripts/fetch-models.sh): text detection (hard-swish
      // backbone, nearest Resize and transposed-convolution upsampling),
      // recognition (a sequence model: convolutions, then attention over 40
      // steps and a 6,625-class classifier) and the direction classifier (v2).
      {"ppocr_det_v4", CacheDir() + "/models/ppocr_det_v4.onnx", {{"x", {1, 3, 640, 640}}}},
      {"ppocr_rec_v4", CacheDir() + "/models/ppocr_rec_v4.onnx", {{"x", {1, 3, 48, 320}}}},
      {"ppocr_cls_v2", CacheDir() + "/models/ppocr_cls_v2.onnx", {{"x", {1, 3, 48, 192}}}},
      // Silero VAD (audio): one 32 ms chunk at 16 kHz, the rate fixed.
      {"silero_vad",
       CacheDir() + "/models/silero_vad_op18_ifless.onnx",
       {{"input", {1, 512}}, {"state", {2, 1, 128}}},
       {{"sr", {16000}}}},
      // Silero VAD as released: v5 (its 16 and 8 kHz models under an If
      // on the rate, fixed here), its 16 kHz export at opset 15, and v4
      // (an LSTM state of h and c) as openWakeWord ships it.
      {"silero_vad_v5",
       CacheDir() + "/models/silero_vad_v5.onnx",
       {{"input", {1, 512}}, {"state", {2, 1, 128}}},
       {{"sr", {16000}}}},
      {"silero_vad_16k_op15",
       CacheDir() + "/models/silero_vad_16k_op15.onnx",
       {{"input", {1, 512}}, {"state", {2, 1, 128}}},
       {{"sr", {16000}}}},
      {"silero_vad_v4",
       CacheDir() + "/models/silero_vad_v4.onnx",
       {{"input", {1, 512}}, {"h", {2, 1, 64}}, {"c", {2, 1, 64}}},
       {{"sr", {16000}}}},
      {"blazeface_front_128", CacheDir() + "/models/blazeface_front_128.onnx"},
      // Face analysis (faceplugin, PyTorch exports at opset 9): a DenseNet-121
      // expression classifier (62 concatenations, BatchNorm + ReLU before
      // each convolution), a squeeze-excitation PRelu liveness network with
      // pruned channel counts, a MobileFaceNet-style PRelu embedding, a
      // ShuffleNetV2 head-pose network (5-D channel shuffles), an RFB face
      // detector, SSR-Net age and gender regressors, a landmark regressor
      // and an eye-state classifier.
      {"fr_expression", CacheDir() + "/models/fr_expression.onnx"},
      {"fr_liveness", CacheDir() + "/models/fr_liveness.onnx"},
      {"fr_feature", CacheDir() + "/models/fr_feature.onnx"},
      {"fr_pose", CacheDir() + "/models/fr_pose.onnx"},
      {"fr_detect", CacheDir() + "/models/fr_detect.onnx"},
      {"fr_age", CacheDir() + "/models/fr_age.onnx"},
      {"fr_gender", CacheDir() + "/models/fr_gender.onnx"},
      {"fr_landmark", CacheDir() + "/models/fr_landmark.onnx"},
      {"fr_eye", CacheDir() + "/models/fr_eye.onnx"},
      // openWakeWord's front end: the mel spectrogram of 110 ms of 16 kHz
      // audio (STFT as convolutions) and the speech embedding of 76 frames
      // (tf2onnx, NHWC input).
      {"oww_mel", CacheDir() + "/models/oww_melspectrogram.onnx", {{"input", {1, 1760}}}},
      {"oww_embedding", CacheDir() + "/models/oww_embedding.onnx", {{"input_1", {1, 76, 32, 1}}}},
      // Its wake-word classifiers: MLPs of three Gemm layers over 16-34
      // embedding frames, some with a LayerNorm written out (ReduceMean,
      // Sub, Pow, Sqrt, Div).
      {"oww_alexa", CacheDir() + "/models/oww_alexa.onnx"},
      {"oww_hey_jarvis", CacheDir() + "/models/oww_hey_jarvis.onnx"},
      {"oww_hey_mycroft", CacheDir() + "/models/oww_hey_mycroft.onnx"},
      {"oww_hey_rhasspy", CacheDir() + "/models/oww_hey_rhasspy.onnx"},
      {"oww_timer", CacheDir() + "/models/oww_timer.onnx"},
      {"oww_weather", CacheDir() + "/models/oww_weather.onnx"},
      // M-LSD line detectors (tf2onnx, MobileNetV2 backbone, NHWC RGBA
      // input). Their `scores` keep a value where it equals its 3x3 local
      // maximum, so an ulp can flip an element (AllowedError).
      {"mlsd_320_tiny", CacheDir() + "/models/mlsd_320_tiny.onnx"},
      {"mlsd_512_large", CacheDir() + "/models/mlsd_512_large.onnx"}};
}

// An imported model ready to build, check and time: its flags as a user
// gives them to `tunefarm tune` and `build`, its random inputs (also as .npy
// files, ort_run.js's `input_flags`) and where ONNX Runtime's outputs go.
struct PreparedModel {
  const ModelSpec& spec;
  frontend::Model model;
  std::vector<std::string> model_flags;
  std::map<std::string, std::vector<float>> in;
  std::vector<std::string> input_flags;
  fs::path ort_out;
  // The largest OutputError between ONNX Runtime's outputs at
  // graphOptimizationLevel `all` (ort_out) and `disabled`: how far two
  // right builds of the model may differ on these inputs.
  double ort_spread = 0;
};

// The outputs' allowed error against ONNX Runtime: 1e-3 of the output's
// range, or twice ONNX Runtime's own spread where that is more (a build
// within the spread of the unoptimized one is within twice it of the
// optimized one). An output that flips on an ulp (a value kept where it
// equals its local maximum) differs by more than rounding between any two
// builds, ONNX Runtime's among them.
double AllowedError(const PreparedModel& m) { return std::max(1e-3, 2 * m.ort_spread); }

// Builds the flags and the inputs of `model` (spec's), writing the inputs
// to `tmp` as .npy files.
PreparedModel PrepareModel(const ModelSpec& spec, frontend::Model model, const fs::path& tmp) {
  PreparedModel m{spec, std::move(model), {}, {}, {}, tmp / (spec.name + "_ort"), 0};
  for (const auto& [name, dims] : spec.shapes)
    m.model_flags.push_back(absl::StrCat("--shape=", name, "=", absl::StrJoin(dims, "x")));
  for (const auto& [name, values] : spec.values)
    m.model_flags.push_back(absl::StrCat("--value=", name, "=", absl::StrJoin(values, ",")));
  m.in = deploy::RandomModelInputs(m.model, 3);
  for (const auto& [name, v] : m.in) {
    const fs::path f = tmp / absl::StrCat(spec.name, "_in_", m.input_flags.size() / 2, ".npy");
    std::ofstream(f, std::ios::binary) << runtime::WriteNpy(m.model.shapes.at(name), v);
    m.input_flags.push_back("--input");
    m.input_flags.push_back(absl::StrCat(name, "=", f.string()));
  }
  for (const auto& [name, values] : spec.values) {
    m.input_flags.push_back("--value");
    m.input_flags.push_back(absl::StrCat(name, "=", absl::StrJoin(values, ",")));
  }
  return m;
}

// The largest error of `ours` against ONNX Runtime's outputs in `dir`,
// each relative to that output's range; infinite where an output is
// missing.
double WorstErrorVsOrt(std::map<std::string, std::vector<float>>& ours, const fs::path& dir,
                       const PreparedModel& m) {
  double worst = 0;
  for (const std::string& o : m.model.outputs) {
    absl::StatusOr<std::string> bytes = ReadFile((dir / runtime::NpyFileName(o)).string());
    absl::StatusOr<runtime::NpyArray> theirs =
        bytes.ok() ? runtime::ParseNpy(*bytes) : bytes.status();
    if (!theirs.ok()) return double(INFINITY);
    // Relative to the output's largest |value|, but at least 0.01: ONNX
    // Runtime's sigmoid is exactly 0 below about -16 (true value 1e-7),
    // which a saturated probability map would show as a large error.
    worst = std::max(worst, runtime::OutputError(theirs->data, ours[o]));
  }
  return worst;
}

// WorstErrorVsOrt of `pkg`'s outputs against m.ort_out; infinite where the
// run fails.
double WorstErrorVsOrt(const v1::ModelPackage& pkg, const PreparedModel& m) {
  absl::StatusOr<std::map<std::string, std::vector<float>>> run = runtime::RunModelOnce(pkg, m.in);
  if (!run.ok()) return double(INFINITY);
  return WorstErrorVsOrt(*run, m.ort_out, m);
}

// ONNX Runtime's spread (PreparedModel::ort_spread): its unoptimized run's
// outputs against m.ort_out; infinite where that run fails.
double OrtSpread(const PreparedModel& m) {
  const fs::path dir = m.ort_out.string() + "_noopt";
  if (!TimeOrt(m.spec.path, 1, 1, m.input_flags, dir.string(), "disabled").ok())
    return double(INFINITY);
  std::map<std::string, std::vector<float>> unoptimized;
  for (const std::string& o : m.model.outputs) {
    absl::StatusOr<std::string> bytes = ReadFile((dir / runtime::NpyFileName(o)).string());
    absl::StatusOr<runtime::NpyArray> a = bytes.ok() ? runtime::ParseNpy(*bytes) : bytes.status();
    if (!a.ok()) return double(INFINITY);
    unoptimized[o] = std::move(a->data);
  }
  return WorstErrorVsOrt(unoptimized, m.ort_out, m);
}

// Where one thread count's builds of a model go, under --db-dir.
struct ModelPaths {
  std::string base;  // "NAME-tTHREADS"
  fs::path untuned, tuned;
};

// What `tunefarm tune MODEL.onnx` reported: its wall time, its trials, and
// the seconds into the search after which the tasks' time (weight x best
// of every task, printed once every task is timed) first came within 5% of
// where it ended; -1 when no progress line had every task timed.
struct TuneOutcome {
  double wall_s = 0;
  int trials = 0;
  double within_5pct_s = -1;
};

// The progress lines of `tune MODEL.onnx` ("  trial N  tasks' time X ms
// ...  (T s)", the ones without "tasks timed") as (T, X) pairs; the
// first pair within 5% of the last.
double WithinFivePercent(const std::vector<std::string>& lines) {
  std::vector<std::pair<double, double>> curve;
  for (const std::string& l : lines) {
    if (!absl::StrContains(l, "tasks' time ") || absl::StrContains(l, "tasks timed") ||
        !absl::StartsWith(absl::StripLeadingAsciiWhitespace(l), "trial "))
      continue;
    double ms = 0, sec = 0;
    const size_t at = l.find("tasks' time ") + 12;
    const size_t open = l.rfind('(');
    if (!absl::SimpleAtod(l.substr(at, l.find(' ', at) - at), &ms) || open == std::string::npos ||
        !absl::SimpleAtod(l.substr(open + 1, l.find(' ', open) - open - 1), &sec))
      continue;
    curve.emplace_back(sec, ms);
  }
  if (curve.empty()) return -1;
  const double last = curve.back().second;
  for (const auto& [sec, ms] : curve)
    if (ms <= 1.05 * last) return sec;
  return curve.back().first;
}

// Runs `tunefarm build --untuned` and `tunefarm tune MODEL.onnx -o` at `th`
// threads, as a user does. What the tune reported, or nullopt after a line
// saying which step failed.
std::optional<TuneOutcome> BuildAndTune(const PreparedModel& m, int th,
                                                   const ModelsOptions& o, const fs::path& keep,
                                                   const ModelPaths& p) {
  const ModelSpec& spec = m.spec;
  std::vector<std::string> build = {"build",
                                    spec.path,
                                    "--untuned",
                                    "--threads",
                                    std::to_string(th),
                                    "-o",
                                    p.untuned.string()};
  build.insert(build.end(), m.model_flags.begin(), m.model_flags.end());
  if (absl::Status s =
          RunTunefarm(build, keep / (p.base + "-untuned.log"), absl::Hours(1), nullptr);
      !s.ok()) {
    std::printf("%-20s %3d untuned build failed: %s\n", spec.name.c_str(), th,
                std::string(s.message()).c_str());
    return std::nullopt;
  }
  std::vector<std::string> tune = {"tune",      spec.path,
                                   "--threads", std::to_string(th),
                                   "--db",      (keep / (p.base + ".db")).string(),
                                   "-o",        p.tuned.string()};
  if (o.trials > 0) {
    tune.insert(tune.end(), {"--trials", std::to_string(o.trials)});
  } else {
    tune.insert(tune.end(), {"--seconds", absl::StrCat(o.seconds)});
  }
  tune.insert(tune.end(), m.model_flags.begin(), m.model_flags.end());
  std::vector<std::string> lines;
  const auto t0 = std::chrono::steady_clock::now();
  // The wall-time budget plus the build's checks at the end.
  const absl::Duration limit = absl::Seconds(o.seconds) + absl::Hours(2);
  if (absl::Status s = RunTunefarm(tune, keep / (p.base + "-tune.log"), limit, &lines); !s.ok()) {
    std::printf("%-20s %3d tuning failed: %s\n", spec.name.c_str(), th,
                std::string(s.message()).c_str());
    return std::nullopt;
  }
  // The tune command's wall time: its layout choice, the trials and the
  // package build with its checks.
  const double tune_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  TuneOutcome out;
  out.wall_s = tune_s;
  for (const std::string& l : lines) {
    if (absl::StartsWith(l, "trials this run: ")) (void)absl::SimpleAtoi(l.substr(17), &out.trials);
  }
  out.within_5pct_s = WithinFivePercent(lines);
  return out;
}

// What was measured for a model at one thread count: a line of the table
// and a row of the JSON.
// Rounds of (both packages paired, then ONNX Runtime) per model and thread
// count.
constexpr int kTimingRounds = 3;

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct ModelRow {
  std::string layout, untuned_layout, check;
  double untuned_s = 0, tuned_s = 0, speedup = 0, tune_s = 0;
  double within_5pct_s = -1;  // TuneOutcome's
  double ort_s = 0;     // 0: ONNX Runtime did not run
  double over_ort = 0;  // tuned / ONNX Runtime, the median over the rounds
  int trials = 0, tuned_kernels = 0, kernels = 0, reverted = 0;
  runtime::TimeShares shares;
};

// Prints `r`'s two lines and appends its JSON row to `rows`.
void ReportModelRow(const std::string& name, int th, const ModelRow& r, std::string* rows) {
  const double u = r.untuned_s, t = r.tuned_s, ort = r.ort_s;
  const double all = std::max(r.shares.total(), 1e-12);
  std::printf(
      "%-20s %3d %6s %12.2f %12.2f %14s %8d %10.2f %10s  %d/%d, %d reverted (tuning %.0f s%s)\n",
      name.c_str(), th, r.layout.c_str(), u * 1e3, t * 1e3,
      ort > 0 ? absl::StrFormat("%.2f", ort * 1e3).c_str() : "-", r.trials, r.speedup,
      ort > 0 ? absl::StrFormat("%.2f", 1 / r.over_ort).c_str() : "-", r.tuned_kernels, r.kernels,
      r.reverted, r.tune_s,
      r.within_5pct_s >= 0 ? absl::StrFormat(", tasks within 5%% after %.0f s", r.within_5pct_s).c_str()
                           : "");
  std::printf(
      "%-20s %3d time in tuned kernels %.0f%%, default kernels %.0f%%, native steps %.0f%%, "
      "layout flips %.0f%%; %s\n",
      name.c_str(), th, 100 * r.shares.tuned / all, 100 * r.shares.default_kernels / all,
      100 * r.shares.native / all, 100 * r.shares.layout / all, r.check.c_str());
  std::fflush(stdout);
  absl::StrAppend(
      rows, rows->empty() ? "" : ",\n  ",
      absl::StrFormat("{\"model\": \"%s\", \"layout\": \"%s\", \"threads\": %d, "
                      "\"untuned_layout\": \"%s\", \"untuned_ms\": %.3f, "
                      "\"tuned_ms\": %.3f, \"trials\": %d, \"onnxruntime_ms\": %s, "
                      "\"tuned_over_onnxruntime\": %s, \"rounds\": %d, "
                      "\"tuned_kernels\": %d, \"kernels\": %d, \"reverted\": %d, "
                      "\"speedup_paired\": %.4f, \"tuning_s\": %.1f, "
                      "\"tasks_within_5pct_s\": %s, "
                      "\"share_tuned\": %.4f, \"share_default\": %.4f, "
                      "\"share_native\": %.4f, \"share_layout\": %.4f, \"check\": \"%s\"}",
                      name, r.layout, th, r.untuned_layout, u * 1e3, t * 1e3, r.trials,
                      ort > 0 ? absl::StrFormat("%.3f", ort * 1e3) : "null",
                      ort > 0 ? absl::StrFormat("%.4f", r.over_ort) : "null", kTimingRounds,
                      r.tuned_kernels,
                      r.kernels, r.reverted, r.speedup, r.tune_s,
                      r.within_5pct_s >= 0 ? absl::StrFormat("%.0f", r.within_5pct_s) : "null",
                      r.shares.tuned / all,
                      r.shares.default_kernels / all, r.shares.native / all,
                      r.shares.layout / all, r.check));
}

// tuned/ONNX Runtime latency of each model timed, per thread count.
using RatiosByThreads = std::map<int, std::vector<std::pair<std::string, double>>>;

// After the last model: per thread count, the geomean of tuned/ORT over the
// models timed and the worst of them.
void PrintSummary(const RatiosByThreads& ratios) {
  for (const auto& [th, rs] : ratios) {
    if (rs.empty()) continue;
    double log_sum = 0;
    const std::pair<std::string, double>* worst = &rs[0];
    for (const auto& r : rs) {
      log_sum += std::log(r.second);
      if (r.second > worst->second) worst = &r;
    }
    std::printf("%d thread(s): tuned/ONNX Runtime geomean %.2f over %zu model(s), worst %s %.2f\n",
                th, std::exp(log_sum / double(rs.size())), rs.size(), worst->first.c_str(),
                worst->second);
  }
}

// One thread count of a model: its two builds, checked against ONNX Runtime,
// then timed against each other, beside ONNX Runtime and with the tuned
// build's time shares. False, after a line saying why, where a step failed
// or a package differs (then nothing is timed).
bool BenchModelAtThreads(const PreparedModel& m, int th, const ModelsOptions& o,
                         const fs::path& keep, std::string* rows, RatiosByThreads* ratios) {
  // Each thread count is its own pair of builds, as a user makes them:
  // `build --untuned` and `tune MODEL.onnx -o` (tasks tuned at this
  // count, the package built from the database with the build's
  // never-slower checks and its layout choice).
  const ModelSpec& spec = m.spec;
  ModelPaths p;
  p.base = absl::StrCat(spec.name, "-t", th);
  p.untuned = keep / (p.base + "-untuned.tfpkg");
  p.tuned = keep / (p.base + ".tfpkg");
  std::optional<TuneOutcome> tuning = BuildAndTune(m, th, o, keep, p);
  if (!tuning) return false;
  ModelRow r;
  r.tune_s = tuning->wall_s;
  r.trials = tuning->trials;
  r.within_5pct_s = tuning->within_5pct_s;
  auto untuned = GraphRuntime::ReadPackage(p.untuned.string());
  auto tuned = GraphRuntime::ReadPackage(p.tuned.string());
  if (!untuned.ok() || !tuned.ok()) {
    std::printf("%-20s %3d %s\n", spec.name.c_str(), th,
                std::string((untuned.ok() ? tuned : untuned).status().message()).c_str());
    return false;
  }
  for (const auto& k : tuned->kernels()) {
    r.tuned_kernels += k.tuned();
    // Tuned kernels the build's never-slower checks sent back to their
    // default schedules: each alone, or all of them as a whole.
    r.reverted += absl::StrContains(k.choice(), "not faster");
  }
  r.kernels = tuned->kernels_size();
  const double tuned_err = WorstErrorVsOrt(*tuned, m), untuned_err = WorstErrorVsOrt(*untuned, m);
  r.check = absl::StrFormat(
      "max error vs ONNX Runtime %.2g (untuned %.2g) of the output's range; ONNX Runtime's own "
      "spread %.2g",
      tuned_err, untuned_err, m.ort_spread);
  if (!(tuned_err <= AllowedError(m)) || !(untuned_err <= AllowedError(m))) {
    std::printf("%-20s %3d WRONG: a package differs from ONNX Runtime (%s); not timed\n",
                spec.name.c_str(), th, r.check.c_str());
    return false;
  }
  // The packages and ONNX Runtime in alternating rounds, each side's time
  // and tuned/ORT the medians over the rounds: a VM's speed shifts between
  // runs (its neighbours, where its cores sit) by more than the
  // differences measured, and one round of each side can fall on either
  // side of a shift.
  std::vector<double> untuned_s, tuned_s, speedup, ort_s, over_ort;
  int runs = 0;
  for (int round = 0; round < kTimingRounds; ++round) {
    auto times = deploy::TimePaired(*untuned, *tuned, th, o.repeat, &m.in);
    if (!times.ok()) {
      std::printf("%-20s %3d timing failed: %s\n", spec.name.c_str(), th,
                  std::string(times.status().message()).c_str());
      return false;
    }
    untuned_s.push_back(times->a_seconds);
    tuned_s.push_back(times->b_seconds);
    speedup.push_back(times->a_over_b);
    runs = times->runs;  // ONNX Runtime gets as many
    if (auto ort = TimeOrt(spec.path, th, runs, m.input_flags, ""); ort.ok()) {
      ort_s.push_back(*ort);
      over_ort.push_back(times->b_seconds / *ort);
    }
  }
  r.untuned_s = MedianOf(untuned_s), r.tuned_s = MedianOf(tuned_s), r.speedup = MedianOf(speedup);
  if (!ort_s.empty()) r.ort_s = MedianOf(ort_s), r.over_ort = MedianOf(over_ort);
  if (auto sh = ProfiledShares(*tuned, th, std::max(5, runs / 4), m.in); sh.ok()) r.shares = *sh;
  auto layout_of = [](const v1::ModelPackage& pkg) {
    return pkg.layout().empty() ? std::string("NCHW") : pkg.layout();
  };
  r.layout = layout_of(*tuned), r.untuned_layout = layout_of(*untuned);
  ReportModelRow(spec.name, th, r, rows);
  if (r.ort_s > 0) (*ratios)[th].emplace_back(spec.name, r.over_ort);
  return true;
}

// One model at every thread count of `o`: imported, its inputs written to
// `tmp` and run through ONNX Runtime, then each thread count benched. True
// where something failed that makes the bench exit 1.
bool BenchModel(const ModelSpec& spec, const ModelsOptions& o, const fs::path& tmp,
                const fs::path& keep, std::string* rows, RatiosByThreads* ratios) {
  if (!fs::exists(spec.path)) {
    std::printf("%-20s skipped: %s missing (scripts/fetch-models.sh)\n", spec.name.c_str(),
                spec.path.c_str());
    return false;
  }
  frontend::ImportOptions io;
  io.input_shapes = spec.shapes;
  io.input_values = spec.values;
  auto model = frontend::ImportOnnxFile(spec.path, io);
  if (!model.ok()) {
    std::printf("%-20s import failed: %s\n", spec.name.c_str(),
                std::string(model.status().message()).c_str());
    return false;
  }
  PreparedModel m = PrepareModel(spec, *std::move(model), tmp);
  // Correctness first: every package's outputs against ONNX Runtime's.
  if (!TimeOrt(spec.path, 1, 1, m.input_flags, m.ort_out.string()).ok()) {
    std::printf("%-20s ONNX Runtime did not run the model: nothing to check against, not timed\n",
                spec.name.c_str());
    return true;
  }
  m.ort_spread = OrtSpread(m);
  if (!std::isfinite(m.ort_spread)) {
    std::printf("%-20s ONNX Runtime did not run the model unoptimized: no tolerance, not timed\n",
                spec.name.c_str());
    return true;
  }
  bool failures = false;
  for (int th : o.thread_list) {
    if (!BenchModelAtThreads(m, th, o, keep, rows, ratios)) failures = true;
  }
  return failures;
}

// Writes make_zoo.py's models to `tmp` (YOLO at `yolo` pixels); false after
// a line on stderr where it fails.
bool WriteZoo(const fs::path& tmp, int yolo) {
  std::vector<std::string> argv = {"/usr/bin/python3",
                                   std::string(TF_SOURCE_DIR) + "/tests/deploy/make_zoo.py",
                                   tmp.string(), "--yolo-size", std::to_string(yolo)};
  auto child = Subprocess::Start(argv, {false, ""});
  absl::StatusOr<int> rc = child.ok() ? (*child)->Wait(absl::Minutes(5)) : child.status();
  if (!rc.ok() || *rc != 0) {
    std::fprintf(stderr, "models: make_zoo.py failed (python3-onnx installed?)\n");
    return false;
  }
  return true;
}

}  // namespace

int RunModelsBench(const std::vector<std::string>& args) {
  ModelsOptions o;
  if (const int flags = ParseModelsArgs(args, &o); flags != 0) return flags;
  {
    const std::vector<ModelSpec> known = KnownModels(fs::path(), o.yolo);
    if (std::none_of(known.begin(), known.end(),
                     [&](const ModelSpec& m) { return Selected(m.name, o.only); })) {
      std::string names;
      for (const ModelSpec& m : known) absl::StrAppend(&names, names.empty() ? "" : ", ", m.name);
      std::fprintf(stderr, "tunefarm-bench: models: --only %s matches no model (%s)\n",
                   o.only.c_str(), names.c_str());
      return 2;
    }
  }
  // Rows appear as they are measured, also through a pipe.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const bool have_ort =
      fs::exists(CacheDir() + "/ort/node_modules/onnxruntime-node") || getenv("ORT_NODE");
  if (!have_ort) {
    // Every timing here rests on an output check against ONNX Runtime.
    std::fprintf(stderr,
                 "tunefarm-bench: models: ONNX Runtime is not fetched (run "
                 "scripts/fetch-models.sh); nothing is timed unchecked\n");
    return 1;
  }
  const fs::path tmp = fs::temp_directory_path() / absl::StrCat("tf-models-", getpid());
  fs::create_directories(tmp);
  const fs::path keep = o.db_dir.empty() ? tmp : fs::path(o.db_dir);
  std::error_code made;
  fs::create_directories(keep, made);
  if (made) {
    std::fprintf(stderr, "tunefarm-bench: models: --db-dir %s: %s\n", o.db_dir.c_str(),
                 made.message().c_str());
    fs::remove_all(tmp, made);
    return 2;
  }
  const std::vector<ModelSpec> models = KnownModels(tmp, o.yolo);
  auto selected = [&](const ModelSpec& m) { return Selected(m.name, o.only); };
  if (std::any_of(models.begin(), models.end(),
                  [&](const ModelSpec& m) { return m.generated && selected(m); }) &&
      !WriteZoo(tmp, o.yolo)) {
    fs::remove_all(tmp, made);
    return 1;
  }
  bool failures = false;  // a package that differs from ONNX Runtime, or no check: exit 1
  std::string rows;
  std::printf("budget per model and thread count: %s of `tunefarm tune MODEL.onnx`\n",
              o.trials > 0 ? absl::StrCat(o.trials, " trials").c_str()
                           : absl::StrCat(o.seconds, " s").c_str());
  std::printf("%-20s %3s %6s %12s %12s %14s %8s %10s %10s  %s\n", "model", "thr", "layout",
              "untuned ms", "tuned ms", "onnxruntime ms", "trials", "speedup", "ORT/tuned",
              "tuned kernels");
  RatiosByThreads ratios;
  for (const ModelSpec& spec : models) {
    if (selected(spec) && BenchModel(spec, o, tmp, keep, &rows, &ratios)) failures = true;
  }
  PrintSummary(ratios);
  if (!o.json_path.empty()) std::ofstream(o.json_path) << "{\"rows\": [\n  " << rows << "\n]}\n";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return failures ? 1 : 0;
}

}  // namespace tunefarm::bench
