// tunefarm-bench models: end-to-end latency of whole models on this CPU,
// untuned (default schedules) vs tuned (a trial budget of the local search,
// all the model's tasks under the gradient task scheduler) vs ONNX Runtime
// (npm's onnxruntime-node, driven by bench/ort_run.js) in the same run, at
// 1 and 2 threads. Both packages' outputs are checked against ONNX Runtime's
// on the same inputs before any time is reported; without ONNX Runtime, or
// with a package that differs, nothing is timed and the bench exits 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "compiler/codegen/llvm_target.h"
#include "deploy/interpreter.h"
#include "deploy/package_build.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/npy.h"
#include "server/search/local_measurer.h"
#include "server/search/task.h"
#include "server/search/tuner.h"

namespace tunefarm::bench {
namespace {

namespace fs = std::filesystem;
using runner::GraphRuntime;

std::string CacheDir() {
  if (const char* c = getenv("TUNEFARM_CACHE")) return c;
  const char* home = getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/tunefarm";
}

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
};

}  // namespace

// Where the tuned build's time goes at `threads`: every step timed over 5
// profiled runs.
absl::StatusOr<runner::TimeShares> ProfiledShares(
    const v1::ModelPackage& pkg, int threads, const std::map<std::string, std::vector<float>>& in) {
  runner::GraphRuntime::Options o;
  o.threads = threads;
  o.profile = true;
  TF_ASSIGN_OR_RETURN(std::unique_ptr<runner::GraphRuntime> rt, runner::GraphRuntime::Load(pkg, o));
  std::vector<double> sum;
  for (int r = 0; r < 5; ++r) {
    TF_RETURN_IF_ERROR(rt->Run(in, nullptr));
    const std::vector<double>& sec = rt->StepSeconds();
    sum.resize(sec.size(), 0);
    for (size_t i = 0; i < sec.size(); ++i) sum[i] += sec[i];
  }
  return runner::SharesOf(pkg, sum);
}

int RunModelsBench(const std::vector<std::string>& args) {
  int trials = 300, repeat = 20, yolo = 640;
  std::vector<int> thread_list = {1, 2};
  std::string only, json_path;
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    const std::string& k = args[i];
    const std::string& v = args[i + 1];
    if (k == "--trials") {
      trials = std::stoi(v);
    } else if (k == "--repeat") {
      repeat = std::stoi(v);
    } else if (k == "--yolo-size") {
      yolo = std::stoi(v);
    } else if (k == "--only") {
      only = v;
    } else if (k == "--json") {
      json_path = v;
    } else if (k == "--threads") {
      thread_list.clear();
      for (absl::string_view t : absl::StrSplit(v, ','))
        thread_list.push_back(std::stoi(std::string(t)));
    } else {
      std::fprintf(stderr, "models: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  const fs::path tmp = fs::temp_directory_path() / absl::StrCat("tf-models-", getpid());
  fs::create_directories(tmp);
  {
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     std::string(TF_SOURCE_DIR) + "/tests/deploy/make_zoo.py",
                                     tmp.string(), "--yolo-size", std::to_string(yolo)};
    auto child = Subprocess::Start(argv, {false, ""});
    if (!child.ok() || !(*child)->Wait(absl::Minutes(5)).ok()) {
      std::fprintf(stderr, "models: make_zoo.py failed (python3-onnx installed?)\n");
      return 1;
    }
  }
  std::vector<ModelSpec> models = {
      {"resnet18", (tmp / "resnet18.onnx").string()},
      {"mobilenet_v2", (tmp / "mobilenet_v2.onnx").string()},
      {absl::StrCat("yolov5s_", yolo), (tmp / absl::StrCat("yolov5s_", yolo, ".onnx")).string()},
      {"blazeface_back_256", CacheDir() + "/models/blazeface_back_256.onnx"},
      // PaddleOCR v4 (scripts/fetch-models.sh): text detection (hard-swish
      // backbone, nearest Resize and transposed-convolution upsampling),
      // recognition (a sequence model: convolutions, then attention over 40
      // steps and a 6,625-class classifier) and the direction classifier.
      {"ppocr_det_v4", CacheDir() + "/models/ppocr_det_v4.onnx", {{"x", {1, 3, 640, 640}}}},
      {"ppocr_rec_v4", CacheDir() + "/models/ppocr_rec_v4.onnx", {{"x", {1, 3, 48, 320}}}},
      {"ppocr_cls_v2", CacheDir() + "/models/ppocr_cls_v2.onnx", {{"x", {1, 3, 48, 192}}}},
      // Silero VAD (audio): one 32 ms chunk at 16 kHz, the rate fixed.
      {"silero_vad",
       CacheDir() + "/models/silero_vad_op18_ifless.onnx",
       {{"input", {1, 512}}, {"state", {2, 1, 128}}},
       {{"sr", {16000}}}}};
  const bool have_ort =
      fs::exists(CacheDir() + "/ort/node_modules/onnxruntime-node") || getenv("ORT_NODE");
  if (!have_ort) {
    // Every timing here rests on an output check against ONNX Runtime.
    std::fprintf(stderr,
                 "tunefarm-bench: models: ONNX Runtime is not fetched (run "
                 "scripts/fetch-models.sh); nothing is timed unchecked\n");
    return 1;
  }
  bool failures = false;  // a package that differs from ONNX Runtime, or no check: exit 1
  const ir::Target host = codegen::HostTarget();
  std::string rows;
  std::printf("%-20s %3s %12s %12s %14s %8s %10s %10s  %s\n", "model", "thr", "untuned ms",
              "tuned ms", "onnxruntime ms", "trials", "speedup", "ORT/tuned", "tuned kernels");
  for (const ModelSpec& spec : models) {
    if (!only.empty() && spec.name.find(only) == std::string::npos) continue;
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
    // The layout `tunefarm build` would keep here: both untuned builds timed
    // against each other at the largest thread count.
    // (Where a build fails, the channels-last one alone, which says why.)
    v1::ModelPackage chosen;
    auto choice = deploy::ChooseLayoutOf(*model, host, {}, thread_list.back(), &chosen);
    absl::StatusOr<v1::ModelPackage> untuned =
        choice.ok() ? std::move(chosen) : deploy::BuildPackage(*model, host);
    const bool channels_last = !choice.ok() || choice->channels_last;
    if (!channels_last) {
      std::printf("%-20s layout nchw: nhwc/nchw %.2f untuned at %d threads\n", spec.name.c_str(),
                  choice->nhwc_over_nchw, thread_list.back());
    }
    auto ex = frontend::ExtractTasks(*model, frontend::ExtractOptionsFor(host, channels_last));
    if (!ex.ok()) return 1;
    if (!untuned.ok()) {
      std::printf("%-20s build failed: %s\n", spec.name.c_str(),
                  std::string(untuned.status().message()).c_str());
      continue;
    }
    // Tune every task of the model together (weights = occurrences).
    std::vector<search::Task> tasks;
    for (const frontend::ModelTask& t : ex->tasks) {
      auto task = search::Task::Make(t.workload, host, t.description, t.weight);
      if (!task.ok()) return 1;
      tasks.push_back(*std::move(task));
    }
    search::LocalMeasureOptions mo;
    mo.threads = thread_list.back();
    search::LocalMeasurer measurer(mo);
    search::TuneOptions to;
    to.max_trials = std::max<int>(trials, int(tasks.size()) * 2);
    to.seed = 1;
    search::Tuner tuner(tasks, &measurer, to);
    auto t0 = std::chrono::steady_clock::now();
    int failures = 0;
    std::string first_error;
    auto on_trial = [&](const search::Trial& t) {
      if (t.result.status != search::MeasureResult::Status::kOk) {
        if (failures++ == 0) first_error = t.result.error;
      }
    };
    if (absl::Status s = tuner.Run(on_trial); !s.ok()) {
      std::printf("%-20s tuning failed: %s\n", spec.name.c_str(), std::string(s.message()).c_str());
      continue;
    }
    const double tune_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (failures > 0) {
      std::printf("%-20s %d of %d trials failed; the first: %s\n", spec.name.c_str(), failures,
                  tuner.trials(), first_error.c_str());
    }
    deploy::BuildOptions bo;
    bo.compare_locally = false;
    bo.channels_last = channels_last;
    bo.choose = [&](const frontend::ModelTask& t) -> absl::StatusOr<deploy::KernelChoice> {
      deploy::KernelChoice c;
      for (size_t i = 0; i < tuner.tasks().size(); ++i) {
        if (tuner.tasks()[i].key != t.key) continue;
        const search::TaskHistory& h = tuner.history(int(i));
        c.default_sec = tuner.default_seconds(int(i));
        if (h.ok.empty() || h.ok.front().schedule.is_default) {
          c.why = "the default schedule measured best";
          return c;
        }
        c.tuned = true;
        c.schedule = ir::ToProto(h.ok.front().schedule);
        c.tuned_sec = h.ok.front().seconds;
        return c;
      }
      c.why = "not tuned";
      return c;
    };
    auto tuned = deploy::BuildPackage(*model, host, bo);
    // Never slower: tuned kernels that do not pay inside the model go back
    // to their default schedules.
    // Checked at every thread count the model is timed at: a kernel tuned
    // at one count may not pay at another.
    int reverted = 0;
    if (tuned.ok()) {
      absl::StatusOr<std::set<std::string>> slower = std::set<std::string>();
      for (int th : thread_list) {
        auto s = deploy::TunedKernelsNotFasterInModel(*untuned, *tuned, th);
        if (!s.ok()) {
          slower = s.status();
          break;
        }
        slower->insert(s->begin(), s->end());
      }
      if (slower.ok() && !slower->empty()) {
        reverted = int(slower->size());
        auto tuner_choice = bo.choose;
        bo.choose =
            [&, tuner_choice](const frontend::ModelTask& t) -> absl::StatusOr<deploy::KernelChoice> {
          if (!slower->count(t.key)) return tuner_choice(t);
          deploy::KernelChoice c;
          c.why = "the tuned kernel was not faster inside the model";
          return c;
        };
        tuned = deploy::BuildPackage(*model, host, bo);
      }
    }
    // The whole tuned build must beat the untuned one at every thread count
    // timed; else every tuned kernel goes back (the untuned build ships).
    bool whole_reverted = false;
    if (tuned.ok()) {
      int still_tuned = 0;
      for (const auto& k : tuned->kernels()) still_tuned += k.tuned();
      for (int th : thread_list) {
        if (still_tuned == 0 || whole_reverted) break;
        auto s = deploy::PairedSpeedup(*untuned, *tuned, th);
        if (!s.ok()) {
          tuned = s.status();
          break;
        }
        if (*s < 1.0) {
          std::printf("%-20s tuned build %.3fx of untuned as a whole at %d threads: reverted\n",
                      spec.name.c_str(), *s, th);
          whole_reverted = true;
          reverted += still_tuned;
          tuned = untuned;
        }
      }
    }
    if (!tuned.ok()) {
      std::printf("%-20s tuned build failed: %s\n", spec.name.c_str(),
                  std::string(tuned.status().message()).c_str());
      continue;
    }
    int tuned_kernels = 0;
    for (const auto& k : tuned->kernels()) tuned_kernels += k.tuned();
    std::map<std::string, std::vector<float>> in = deploy::RandomModelInputs(*model, 3);
    std::vector<std::string> input_flags;
    for (const auto& [name, v] : in) {
      const fs::path f = tmp / absl::StrCat(spec.name, "_in_", input_flags.size() / 2, ".npy");
      std::ofstream(f, std::ios::binary) << runner::WriteNpy(model->shapes.at(name), v);
      input_flags.push_back("--input");
      input_flags.push_back(absl::StrCat(name, "=", f.string()));
    }
    for (const auto& [name, values] : spec.values) {
      input_flags.push_back("--value");
      input_flags.push_back(absl::StrCat(name, "=", absl::StrJoin(values, ",")));
    }
    // Correctness first: both packages' outputs against ONNX Runtime's.
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
        absl::StatusOr<std::string> bytes = ReadFile((ort_out / runner::NpyFileName(o)).string());
        absl::StatusOr<runner::NpyArray> theirs =
            bytes.ok() ? runner::ParseNpy(*bytes) : bytes.status();
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
    const double tuned_err = worst_error(*tuned), untuned_err = worst_error(*untuned);
    const std::string check =
        absl::StrFormat("max error vs ONNX Runtime %.2g (untuned %.2g) of the output's range",
                        tuned_err, untuned_err);
    if (!(tuned_err < 1e-3) || !(untuned_err < 1e-3)) {
      std::printf("%-20s WRONG: a package differs from ONNX Runtime (%s); not timed\n",
                  spec.name.c_str(), check.c_str());
      failures = true;
      continue;
    }
    for (int th : thread_list) {
      auto times = deploy::TimePaired(*untuned, *tuned, th, repeat, &in);
      if (!times.ok()) return 1;
      const double* u = &times->a_seconds;
      const double* t = &times->b_seconds;
      double ort = 0;
      if (auto o = TimeOrt(spec.path, th, repeat, input_flags, ""); o.ok()) ort = *o;
      runner::TimeShares shares;
      if (auto p = ProfiledShares(*tuned, th, in); p.ok()) shares = *p;
      const double all = std::max(shares.total(), 1e-12);
      std::printf(
          "%-20s %3d %12.2f %12.2f %14s %8d %10.2f %10s  %d/%d, %d reverted (tuning %.0f s)\n",
          spec.name.c_str(), th, *u * 1e3, *t * 1e3,
          ort > 0 ? absl::StrFormat("%.2f", ort * 1e3).c_str() : "-", tuner.trials(),
          times->a_over_b,
          ort > 0 ? absl::StrFormat("%.2f", ort / *t).c_str() : "-", tuned_kernels,
          tuned->kernels_size(), reverted, tune_s);
      std::printf(
          "%-20s %3d time in tuned kernels %.0f%%, default kernels %.0f%%, native steps %.0f%%\n",
          spec.name.c_str(), th, 100 * shares.tuned / all, 100 * shares.default_kernels / all,
          100 * shares.native / all);
      absl::StrAppend(
          &rows, rows.empty() ? "" : ",\n  ",
          absl::StrFormat("{\"model\": \"%s\", \"layout\": \"%s\", \"threads\": %d, "
                          "\"untuned_ms\": %.3f, "
                          "\"tuned_ms\": %.3f, \"trials\": %d, \"onnxruntime_ms\": %s, "
                          "\"tuned_kernels\": %d, \"kernels\": %d, \"reverted\": %d, "
                          "\"speedup_paired\": %.4f, \"tuning_s\": %.1f, "
                          "\"share_tuned\": %.4f, \"share_default\": %.4f, "
                          "\"share_native\": %.4f, \"check\": \"%s\"}",
                          spec.name, channels_last ? "nhwc" : "nchw", th, *u * 1e3, *t * 1e3,
                          tuner.trials(), ort > 0 ? absl::StrFormat("%.3f", ort * 1e3) : "null",
                          tuned_kernels, tuned->kernels_size(), reverted, times->a_over_b, tune_s,
                          shares.tuned / all, shares.default_kernels / all, shares.native / all,
                          check));
    }
    std::printf("%-20s %s\n", "", check.c_str());
    std::fflush(stdout);
  }
  if (!json_path.empty()) std::ofstream(json_path) << "{\"rows\": [\n  " << rows << "\n]}\n";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return failures ? 1 : 0;
}

}  // namespace tunefarm::bench
