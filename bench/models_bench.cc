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

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "deploy/interpreter.h"
#include "deploy/package_build.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/model_timing.h"
#include "device_agent/runtime/npy.h"

namespace tunefarm::bench {
namespace {

namespace fs = std::filesystem;
using runtime::GraphRuntime;

// ONNX Runtime through node: latency (s) and, with out_dir, its outputs.
absl::StatusOr<double> TimeOrt(const std::string& model, int threads, int repeat,
                               const std::vector<std::string>& input_flags,
                               const std::string& out_dir) {
  std::vector<std::string> argv = {"/usr/bin/env",
                                   "node",
                                   std::string(TF_SOURCE_DIR) + "/bench/ort_run.js",
                                   model,
                                   "--threads",
                                   std::to_string(threads),
                                   "--repeat",
                                   std::to_string(repeat)};
  argv.insert(argv.end(), input_flags.begin(), input_flags.end());
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
// faults would otherwise weigh on a model of microseconds).
absl::StatusOr<runtime::TimeShares> ProfiledShares(
    const v1::ModelPackage& pkg, int threads, int runs,
    const std::map<std::string, std::vector<float>>& in) {
  runtime::GraphRuntime::Options o;
  o.threads = threads;
  o.profile = true;
  TF_ASSIGN_OR_RETURN(std::unique_ptr<runtime::GraphRuntime> rt, runtime::GraphRuntime::Load(pkg, o));
  TF_RETURN_IF_ERROR(rt->Run(in, nullptr));
  runtime::ModelRunCount count;
  count.runs = count.min_runs = runs;
  TF_ASSIGN_OR_RETURN(runtime::ModelTimes t, runtime::TimeModel(*rt, in, count));
  return runtime::SharesOf(pkg, t.step_seconds);
}

int RunModelsBench(const std::vector<std::string>& args) {
  int trials = 0, repeat = 20, yolo = 640;
  double seconds = 1200;
  std::vector<int> thread_list = {1, 2};
  std::string only, json_path, db_dir;
  const int flags = ReadFlags(
      "models", args,
      {{"--trials",
        [&](const std::string& v) { return absl::SimpleAtoi(v, &trials) && trials >= 0; }},
       {"--seconds",
        [&](const std::string& v) { return absl::SimpleAtod(v, &seconds) && seconds > 0; }},
       {"--repeat",
        [&](const std::string& v) { return absl::SimpleAtoi(v, &repeat) && repeat > 0; }},
       {"--yolo-size",
        [&](const std::string& v) { return absl::SimpleAtoi(v, &yolo) && yolo > 0; }},
       {"--only", TextFlag(&only)},
       {"--json", TextFlag(&json_path)},
       {"--db-dir", TextFlag(&db_dir)},
       {"--threads", [&](const std::string& v) {
          thread_list.clear();
          for (absl::string_view t : absl::StrSplit(v, ',')) {
            int n = 0;
            if (!absl::SimpleAtoi(t, &n) || n <= 0) return false;
            thread_list.push_back(n);
          }
          return true;
        }}});
  if (flags != 0) return flags;
  if (trials > 0) seconds = 0;  // a trial budget replaces the wall-time one
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
  const fs::path keep = db_dir.empty() ? tmp : fs::path(db_dir);
  std::error_code made;
  fs::create_directories(keep, made);
  if (made) {
    std::fprintf(stderr, "tunefarm-bench: models: --db-dir %s: %s\n", db_dir.c_str(),
                 made.message().c_str());
    fs::remove_all(tmp, made);
    return 2;
  }
  std::vector<ModelSpec> models = {
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
       {{"sr", {16000}}}}};
  auto selected = [&](const ModelSpec& m) {
    return only.empty() || m.name.find(only) != std::string::npos;
  };
  if (std::any_of(models.begin(), models.end(),
                  [&](const ModelSpec& m) { return m.generated && selected(m); })) {
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     std::string(TF_SOURCE_DIR) + "/tests/deploy/make_zoo.py",
                                     tmp.string(), "--yolo-size", std::to_string(yolo)};
    auto child = Subprocess::Start(argv, {false, ""});
    absl::StatusOr<int> rc = child.ok() ? (*child)->Wait(absl::Minutes(5)) : child.status();
    if (!rc.ok() || *rc != 0) {
      std::fprintf(stderr, "models: make_zoo.py failed (python3-onnx installed?)\n");
      fs::remove_all(tmp, made);
      return 1;
    }
  }
  bool failures = false;  // a package that differs from ONNX Runtime, or no check: exit 1
  std::string rows;
  std::printf(
      "budget per model and thread count: %s of `tunefarm tune MODEL.onnx`\n",
      trials > 0 ? absl::StrCat(trials, " trials").c_str() : absl::StrCat(seconds, " s").c_str());
  std::printf("%-20s %3s %6s %12s %12s %14s %8s %10s %10s  %s\n", "model", "thr", "layout",
              "untuned ms", "tuned ms", "onnxruntime ms", "trials", "speedup", "ORT/tuned",
              "tuned kernels");
  for (const ModelSpec& spec : models) {
    if (!selected(spec)) continue;
    if (!fs::exists(spec.path)) {
      std::printf("%-20s skipped: %s missing (scripts/fetch-models.sh)\n", spec.name.c_str(),
                  spec.path.c_str());
      continue;
    }
    frontend::ImportOptions io;
    io.input_shapes = spec.shapes;
    io.input_values = spec.values;
    auto model = frontend::ImportOnnxFile(spec.path, io);
    if (!model.ok()) {
      std::printf("%-20s import failed: %s\n", spec.name.c_str(),
                  std::string(model.status().message()).c_str());
      continue;
    }
    // The model's flags, as a user gives them to `tunefarm tune` and `build`.
    std::vector<std::string> model_flags;
    for (const auto& [name, dims] : spec.shapes)
      model_flags.push_back(absl::StrCat("--shape=", name, "=", absl::StrJoin(dims, "x")));
    for (const auto& [name, values] : spec.values)
      model_flags.push_back(absl::StrCat("--value=", name, "=", absl::StrJoin(values, ",")));
    std::map<std::string, std::vector<float>> in = deploy::RandomModelInputs(*model, 3);
    std::vector<std::string> input_flags;
    for (const auto& [name, v] : in) {
      const fs::path f = tmp / absl::StrCat(spec.name, "_in_", input_flags.size() / 2, ".npy");
      std::ofstream(f, std::ios::binary) << runtime::WriteNpy(model->shapes.at(name), v);
      input_flags.push_back("--input");
      input_flags.push_back(absl::StrCat(name, "=", f.string()));
    }
    for (const auto& [name, values] : spec.values) {
      input_flags.push_back("--value");
      input_flags.push_back(absl::StrCat(name, "=", absl::StrJoin(values, ",")));
    }
    // Correctness first: every package's outputs against ONNX Runtime's.
    const fs::path ort_out = tmp / (spec.name + "_ort");
    if (!TimeOrt(spec.path, 1, 1, input_flags, ort_out.string()).ok()) {
      std::printf("%-20s ONNX Runtime did not run the model: nothing to check against, not timed\n",
                  spec.name.c_str());
      failures = true;
      continue;
    }
    auto worst_error = [&](const v1::ModelPackage& pkg) {
      std::map<std::string, std::vector<float>> ours;
      auto rt = GraphRuntime::Load(pkg, {});
      if (!rt.ok() || !(*rt)->Run(in, &ours).ok()) return double(INFINITY);
      double worst = 0;
      for (const std::string& o : model->outputs) {
        absl::StatusOr<std::string> bytes = ReadFile((ort_out / runtime::NpyFileName(o)).string());
        absl::StatusOr<runtime::NpyArray> theirs =
            bytes.ok() ? runtime::ParseNpy(*bytes) : bytes.status();
        if (!theirs.ok() || theirs->data.size() != ours[o].size()) return double(INFINITY);
        // Relative to the output's largest |value|, but at least 0.01: ONNX
        // Runtime's sigmoid is exactly 0 below about -16 (true value 1e-7),
        // which a saturated probability map would show as a large error.
        double err = 0, scale = 0.01;
        for (size_t i = 0; i < ours[o].size(); ++i) {
          const double d = std::fabs(ours[o][i] - theirs->data[i]);
          if (!(d <= err)) err = std::isnan(d) ? INFINITY : d;
          scale = std::max(scale, double(std::fabs(theirs->data[i])));
        }
        worst = std::max(worst, err / scale);
      }
      return worst;
    };
    for (int th : thread_list) {
      // Each thread count is its own pair of builds, as a user makes them:
      // `build --untuned` and `tune MODEL.onnx -o` (tasks tuned at this
      // count, the package built from the database with the build's
      // never-slower checks and its layout choice).
      const std::string base = absl::StrCat(spec.name, "-t", th);
      const fs::path untuned_path = keep / (base + "-untuned.tfpkg"),
                     tuned_path = keep / (base + ".tfpkg");
      std::vector<std::string> build = {"build",
                                        spec.path,
                                        "--untuned",
                                        "--threads",
                                        std::to_string(th),
                                        "-o",
                                        untuned_path.string()};
      build.insert(build.end(), model_flags.begin(), model_flags.end());
      if (absl::Status s =
              RunTunefarm(build, keep / (base + "-untuned.log"), absl::Hours(1), nullptr);
          !s.ok()) {
        std::printf("%-20s %3d untuned build failed: %s\n", spec.name.c_str(), th,
                    std::string(s.message()).c_str());
        failures = true;
        continue;
      }
      std::vector<std::string> tune = {"tune",      spec.path,
                                       "--threads", std::to_string(th),
                                       "--db",      (keep / (base + ".db")).string(),
                                       "-o",        tuned_path.string()};
      if (trials > 0) {
        tune.insert(tune.end(), {"--trials", std::to_string(trials)});
      } else {
        tune.insert(tune.end(), {"--seconds", absl::StrCat(seconds)});
      }
      tune.insert(tune.end(), model_flags.begin(), model_flags.end());
      std::vector<std::string> lines;
      const auto t0 = std::chrono::steady_clock::now();
      // The wall-time budget plus the build's checks at the end.
      const absl::Duration limit = absl::Seconds(seconds) + absl::Hours(2);
      if (absl::Status s = RunTunefarm(tune, keep / (base + "-tune.log"), limit, &lines); !s.ok()) {
        std::printf("%-20s %3d tuning failed: %s\n", spec.name.c_str(), th,
                    std::string(s.message()).c_str());
        failures = true;
        continue;
      }
      // The tune command's wall time: its layout choice, the trials and the
      // package build with its checks.
      const double tune_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      int tuned_trials = 0;  // tune's "trials this run: N"
      for (const std::string& l : lines) {
        if (absl::StartsWith(l, "trials this run: "))
          (void)absl::SimpleAtoi(l.substr(17), &tuned_trials);
      }
      auto untuned = GraphRuntime::ReadPackage(untuned_path.string());
      auto tuned = GraphRuntime::ReadPackage(tuned_path.string());
      if (!untuned.ok() || !tuned.ok()) {
        std::printf("%-20s %3d %s\n", spec.name.c_str(), th,
                    std::string((untuned.ok() ? tuned : untuned).status().message()).c_str());
        failures = true;
        continue;
      }
      int tuned_kernels = 0, reverted = 0;
      for (const auto& k : tuned->kernels()) {
        tuned_kernels += k.tuned();
        // Tuned kernels the build's never-slower checks sent back to their
        // default schedules: each alone, or all of them as a whole.
        reverted += absl::StrContains(k.choice(), "not faster");
      }
      const double tuned_err = worst_error(*tuned), untuned_err = worst_error(*untuned);
      const std::string check =
          absl::StrFormat("max error vs ONNX Runtime %.2g (untuned %.2g) of the output's range",
                          tuned_err, untuned_err);
      if (!(tuned_err < 1e-3) || !(untuned_err < 1e-3)) {
        std::printf("%-20s %3d WRONG: a package differs from ONNX Runtime (%s); not timed\n",
                    spec.name.c_str(), th, check.c_str());
        failures = true;
        continue;
      }
      auto times = deploy::TimePaired(*untuned, *tuned, th, repeat, &in);
      if (!times.ok()) {
        std::printf("%-20s %3d timing failed: %s\n", spec.name.c_str(), th,
                    std::string(times.status().message()).c_str());
        failures = true;
        continue;
      }
      const double u = times->a_seconds, t = times->b_seconds;
      const int runs = times->runs;  // ONNX Runtime gets as many
      double ort = 0;
      if (auto o = TimeOrt(spec.path, th, runs, input_flags, ""); o.ok()) ort = *o;
      runtime::TimeShares shares;
      if (auto p = ProfiledShares(*tuned, th, std::max(5, runs / 4), in); p.ok()) shares = *p;
      const double all = std::max(shares.total(), 1e-12);
      auto layout_of = [](const v1::ModelPackage& p) {
        return p.layout().empty() ? std::string("NCHW") : p.layout();
      };
      const std::string layout = layout_of(*tuned), untuned_layout = layout_of(*untuned);
      std::printf(
          "%-20s %3d %6s %12.2f %12.2f %14s %8d %10.2f %10s  %d/%d, %d reverted (tuning %.0f s)\n",
          spec.name.c_str(), th, layout.c_str(), u * 1e3, t * 1e3,
          ort > 0 ? absl::StrFormat("%.2f", ort * 1e3).c_str() : "-", tuned_trials, times->a_over_b,
          ort > 0 ? absl::StrFormat("%.2f", ort / t).c_str() : "-", tuned_kernels,
          tuned->kernels_size(), reverted, tune_s);
      std::printf(
          "%-20s %3d time in tuned kernels %.0f%%, default kernels %.0f%%, native steps %.0f%%; "
          "%s\n",
          spec.name.c_str(), th, 100 * shares.tuned / all, 100 * shares.default_kernels / all,
          100 * shares.native / all, check.c_str());
      std::fflush(stdout);
      absl::StrAppend(
          &rows, rows.empty() ? "" : ",\n  ",
          absl::StrFormat("{\"model\": \"%s\", \"layout\": \"%s\", \"threads\": %d, "
                          "\"untuned_layout\": \"%s\", \"untuned_ms\": %.3f, "
                          "\"tuned_ms\": %.3f, \"trials\": %d, \"onnxruntime_ms\": %s, "
                          "\"tuned_kernels\": %d, \"kernels\": %d, \"reverted\": %d, "
                          "\"speedup_paired\": %.4f, \"tuning_s\": %.1f, "
                          "\"share_tuned\": %.4f, \"share_default\": %.4f, "
                          "\"share_native\": %.4f, \"check\": \"%s\"}",
                          spec.name, layout, th, untuned_layout, u * 1e3, t * 1e3, tuned_trials,
                          ort > 0 ? absl::StrFormat("%.3f", ort * 1e3) : "null", tuned_kernels,
                          tuned->kernels_size(), reverted, times->a_over_b, tune_s,
                          shares.tuned / all, shares.default_kernels / all, shares.native / all,
                          check));
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << "{\"rows\": [\n  " << rows << "\n]}\n";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return failures ? 1 : 0;
}

}  // namespace tunefarm::bench
