// tunefarm-bench still runs and writes the JSON the issue specifies. No
// timing is asserted (this machine is shared and noisy): only that every
// field is there and every number is a number.
#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "device_agent/runtime/capabilities.h"
#include "gtest/gtest.h"
#include "search/gpu_local_measurer.h"
#include "tests/deploy/ort_runner.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

TEST(BenchSmoke, KernelsWritesRowsWithEveryField) {
  testing::TempDir dir;
  std::string json = dir.File("bench.json");
  testing::CommandResult r =
      testing::RunCommand({testing::BinPath("tunefarm-bench"), "kernels", "--samples", "2",
                           "--threads", "1", "--only", "gemm_512", "--json", json},
                          dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "gemm_512")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "WRONG")) << r.out;
  std::string text = testing::ReadFileOrEmpty(json);
  for (const char* field :
       {"\"workload\": \"gemm_512\"", "\"threads\": 1", "\"default_gflops\": ",
        "\"sampled_best_gflops\": ", "\"onednn_gflops\": ", "\"openblas_gflops\": ",
        "\"handwritten_gflops\": null", "\"peak_gflops\": ", "\"compile_ms_median\": ",
        "\"errors\": []"}) {
    EXPECT_TRUE(absl::StrContains(text, field)) << field << " missing in\n" << text;
  }
  EXPECT_FALSE(absl::StrContains(text, "\"default_gflops\": null")) << text;
  EXPECT_FALSE(absl::StrContains(text, "\"onednn_gflops\": null")) << text;
}

// Whether this machine's GPU can run the GPU benches: OK, or why not.
absl::Status GpuUsable(const v1::Capabilities& caps) {
  if (!caps.has_gpu()) return absl::FailedPreconditionError("no GPU on this machine");
  return search::GpuLocalMeasurer::Check(*ir::Target::Parse(runtime::LocalCudaTarget(caps)));
}

// A GPU bench where the GPU is not usable: exit 1, one line saying why.
void ExpectOneLineWhyNot(const testing::CommandResult& r, const absl::Status& usable) {
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, std::string(usable.message()))) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// The GPU kernels bench: rows with every field on a machine with a GPU;
// elsewhere one line saying why it cannot run, exit code 1.
TEST(BenchSmoke, GpuKernelsRunOrSayWhyNot) {
  testing::TempDir dir;
  std::string json = dir.File("gpu.json");
  testing::CommandResult r =
      testing::RunCommand({testing::BinPath("tunefarm-bench"), "kernels", "--target", "cuda",
                           "--samples", "2", "--only", "gemm_1024", "--json", json},
                          dir.path());
  v1::Capabilities caps = runtime::DetectCapabilities();
  absl::Status usable = GpuUsable(caps);
  if (!usable.ok()) {
    ExpectOneLineWhyNot(r, usable);
    if (!caps.has_gpu()) TF_SKIP("no-gpu") << usable;
    TF_SKIP("gpu-unusable") << usable;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::string text = testing::ReadFileOrEmpty(json);
  for (const char* field :
       {"\"workload\": \"gemm_1024\"", "\"default_gflops\": ", "\"sampled_best_gflops\": ",
        "\"sampled_best\": {\"sketch_id\": ", "\"library_gflops\": ", "\"library\": \"cublas\""}) {
    EXPECT_TRUE(absl::StrContains(text, field)) << field << " missing in\n" << text;
  }
  EXPECT_FALSE(absl::StrContains(text, "\"default_gflops\": null")) << text;
  EXPECT_FALSE(absl::StrContains(text, "\"library_gflops\": null")) << text;
}

// gpu-models: on a GPU, a row per precision for ResNet-18 with the untuned
// and tuned latencies and cuDNN's layer sum (checked against the float64
// interpreter before it is timed); without one, one line saying why, exit 1.
TEST(BenchSmoke, GpuModelsRunOrSayWhyNot) {
  testing::TempDir dir;
  std::string json = dir.File("gpu-models.json");
  v1::Capabilities caps = runtime::DetectCapabilities();
  absl::Status usable = GpuUsable(caps);
  std::vector<std::string> cmd = {testing::BinPath("tunefarm-bench"),
                                  "gpu-models",
                                  "--only",
                                  "resnet18",
                                  "--trials",
                                  "24",
                                  "--repeat",
                                  "5",
                                  "--json",
                                  json};
  testing::CommandResult r = testing::RunCommand(cmd, dir.path());
  if (!usable.ok()) {
    ExpectOneLineWhyNot(r, usable);
    if (!caps.has_gpu()) TF_SKIP("no-gpu") << usable;
    TF_SKIP("gpu-unusable") << usable;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const std::string text = testing::ReadFileOrEmpty(json);
  for (const char* field : {"\"model\": \"resnet18\", \"precision\": \"fp32\"",
                            "\"model\": \"resnet18\", \"precision\": \"fp16\"",
                            "\"library_sum_ms\": ", "\"untuned_over_tuned\": "}) {
    EXPECT_TRUE(absl::StrContains(text, field)) << field << " missing in\n" << text;
  }
}

// The search bench: a row per strategy, budget and seed with the fields the
// issue names, and with --run-to the same 90% line looked for over the
// whole runs. A run that got there within the budget got there at the same
// trial; one that did not needs more than the budget. The finals are each
// run's best within the largest budget.
// Every native-operator case runs, is checked against oneDNN and has both rates.
TEST(BenchSmoke, NativeOpsAgainstOneDnn) {
  testing::TempDir dir;
  testing::CommandResult r =
      testing::RunCommand({testing::BinPath("tunefarm-bench"), "native"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "WRONG")) << r.out;
  const std::regex row(
      "^[a-z -]+ +(Add|Mul|Div|Max|Relu|Sigmoid) +[0-9x .]+ +\\d+ +([0-9.]+) +([0-9.]+) "
      "+([0-9.]+)$");
  int rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    ++rows;
    EXPECT_GT(std::stod(m[2]), 0) << line;
    EXPECT_GT(std::stod(m[3]), 0) << line;
  }
  EXPECT_EQ(rows, 9) << r.out;
}

// The models bench drives `tunefarm tune MODEL.onnx -o` and `build
// --untuned` per thread count and checks both packages against ONNX
// Runtime before it times them.
TEST(BenchSmoke, ModelsTunesEachThreadCountAndChecksAgainstOrt) {
  if (absl::Status s = testing::OrtAvailable(); !s.ok()) TF_SKIP("no-models") << s.message();
  const std::string model = testing::ModelCache() + "/models/ppocr_cls_v2.onnx";
  if (!std::filesystem::exists(model))
    TF_SKIP("no-models") << model << " missing: run scripts/fetch-models.sh";
  testing::TempDir dir;
  const std::string json = dir.File("models.json");
  testing::CommandResult r = testing::RunCommand(
      {testing::BinPath("tunefarm-bench"), "models", "--only", "ppocr_cls", "--trials", "6",
       "--threads", "1", "--repeat", "3", "--db-dir", dir.File("dbs"), "--json", json},
      dir.path(), absl::Minutes(15));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "WRONG")) << r.out;
  const std::string text = testing::ReadFileOrEmpty(json);
  const std::regex row(
      "\"model\": \"ppocr_cls_v2\", \"layout\": \"(NCHW|NHWC)\", \"threads\": 1, "
      "\"untuned_layout\": \"(NCHW|NHWC)\", \"untuned_ms\": [0-9.]+, \"tuned_ms\": [0-9.]+, "
      "\"trials\": ([0-9]+), "
      "\"onnxruntime_ms\": [0-9.]+, \"tuned_over_onnxruntime\": [0-9.]+, \"rounds\": 3, "
      ".*\"check\": \"max error vs ONNX Runtime");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, row)) << text;
  EXPECT_EQ(std::stoi(m[3]), 6) << text;
  // When the tasks' time is first within 5% of its end: null where no
  // progress line had every task timed, else within the tune's wall time.
  std::smatch w;
  ASSERT_TRUE(std::regex_search(
      text, w, std::regex("\"tuning_s\": ([0-9.]+), \"tasks_within_5pct_s\": (null|[0-9]+)")))
      << text;
  if (w[2] != "null") EXPECT_LE(std::stod(w[2]), std::stod(w[1])) << text;
  // The summary after the last model: the geomean and the worst model.
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex("1 thread\\(s\\): tuned/ONNX Runtime geomean [0-9.]+ over 1 model\\(s\\), "
                        "worst ppocr_cls_v2 [0-9.]+")))
      << r.out;
  // The tuning run's database stays where --db-dir says: its records are
  // what the package was built from.
  EXPECT_TRUE(std::filesystem::exists(dir.File("dbs/ppocr_cls_v2-t1.db"))) << r.out;
}

// --help prints the usage and runs nothing; a bad flag of the models bench,
// or an --only that selects no model, is one line and exit 2 before
// anything is tuned or timed.
TEST(BenchSmoke, HelpAndBadModelsFlagsRunNothing) {
  testing::TempDir dir;
  const std::string bench = testing::BinPath("tunefarm-bench");
  for (const char* sub : {"models", "kernels", "search"}) {
    testing::CommandResult help = testing::RunCommand({bench, sub, "--help"}, dir.path());
    EXPECT_EQ(help.exit_code, 0) << sub << ": " << help.err;
    EXPECT_TRUE(absl::StrContains(help.out, "usage: tunefarm-bench")) << sub << ": " << help.out;
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--repeat", "x"}, "bad value 'x' for --repeat"},
      {{"--threads", "1,0"}, "bad value '1,0' for --threads"},
      {{"--seconds", "-5"}, "bad value '-5' for --seconds"},
      {{"--only", "resnet18", "--seconds"}, "--seconds needs a value"},
      {{"--frobnicate", "1"}, "unknown flag --frobnicate"},
      {{"--repeat", "3", "--frobnicate"}, "unknown flag --frobnicate"},
      {{"--only", "no_such_model"}, "--only no_such_model matches no model (resnet18, "},
  };
  for (const auto& [flags, why] : bad) {
    std::vector<std::string> argv = {bench, "models"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    testing::CommandResult r = testing::RunCommand(argv, dir.path());
    EXPECT_EQ(r.exit_code, 2) << why << ": " << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, why)) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(BenchSmoke, SearchWritesRowsAndWholeRunFigures) {
  testing::TempDir dir;
  std::string json = dir.File("search.json"), svg = dir.File("search.svg");
  testing::CommandResult r =
      testing::RunCommand({testing::BinPath("tunefarm-bench"), "search", "--only", "mbv2_dw",
                           "--seeds", "1", "--budgets", "8,16", "--run-to", "40", "--json", json,
                           "--svg", svg},
                          dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::string text = testing::ReadFileOrEmpty(json);
  const std::regex row(
      "\"workload\": \"mbv2_dw_c144_h56\", \"strategy\": \"(\\w+)\", \"trials\": (\\d+), "
      "\"seed\": 0, \"threads\": 1, .*"
      "\"best_gflops\": [0-9.]+, \"trials_to_90pct\": (null|\\d+), \"default_gflops\": [0-9.]+");
  const std::regex whole(
      "\"strategy\": \"(\\w+)\", \"trials\": (\\d+), \"seed\": 0, \"run_to\": (\\d+), "
      "\"trials_to_90pct_of_budget_best\": (null|\\d+)");
  const std::regex final_row("\"seed\": 0, \"trials\": (\\d+), \"tuning_minutes\"");
  std::map<std::pair<std::string, int>, std::string> within, beyond;
  int finals = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, whole)) {
      EXPECT_GE(std::stoi(m[3]), 40) << line;
      beyond[{m[1].str(), std::stoi(m[2])}] = m[4].str();
    } else if (std::regex_search(line, m, row)) {
      within[{m[1].str(), std::stoi(m[2])}] = m[3].str();
    } else if (std::regex_search(line, m, final_row)) {
      EXPECT_EQ(std::stoi(m[1]), 16) << line;
      ++finals;
    }
  }
  EXPECT_EQ(within.size(), 4u) << text;
  EXPECT_EQ(beyond.size(), 4u) << text;
  EXPECT_EQ(finals, 4) << text;  // 2 strategies x 1 and 2 threads
  for (const auto& [key, to90] : within) {
    ASSERT_TRUE(beyond.count(key)) << key.first << " " << key.second << " has no whole-run row";
    const std::string& b = beyond[key];
    if (to90 != "null") {
      EXPECT_EQ(b, to90) << key.first << " at budget " << key.second;
    } else if (b != "null") {
      EXPECT_GT(std::stoi(b), key.second) << key.first << " at budget " << key.second;
    }
  }

  // The cost model's quality on held-out records, per objective, and what
  // scoring a fresh candidate costs end to end.
  const std::regex model_row(
      "\"objective\": \"([a-z-]+)\", .*\"pairwise_accuracy\": ([0-9.]+), \"recall_at_10\": "
      "([0-9.]+), .*\"candidates_scored_per_s\": ([0-9.]+)");
  std::set<std::string> objectives;
  std::istringstream model_lines(text);
  for (std::string line; std::getline(model_lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, model_row)) continue;
    objectives.insert(m[1].str());
    EXPECT_LE(std::stod(m[2]), 1.0) << line;
    EXPECT_LE(std::stod(m[3]), 1.0) << line;
    EXPECT_GT(std::stod(m[4]), 0) << line;
  }
  EXPECT_EQ(objectives.size(), 3u) << text;

  // The plot: one panel, a best-so-far curve per strategy over the 40 trials.
  const std::string plot = testing::ReadFileOrEmpty(svg);
  EXPECT_TRUE(absl::StartsWith(plot, "<svg ") && absl::EndsWith(plot, "</svg>\n")) << plot;
  EXPECT_TRUE(absl::StrContains(plot, ">mbv2_dw_c144_h56</text>")) << plot;
  const std::regex curve("<polyline [^>]*points='([^']*)'");
  int curves = 0;
  for (std::sregex_iterator it(plot.begin(), plot.end(), curve), end; it != end; ++it) {
    ++curves;
    const std::string pts = (*it)[1].str();
    EXPECT_EQ(std::count(pts.begin(), pts.end(), ','), 40) << pts;
  }
  EXPECT_EQ(curves, 2) << plot;
}

}  // namespace
}  // namespace tunefarm
