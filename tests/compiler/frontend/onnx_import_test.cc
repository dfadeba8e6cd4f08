// ONNX import and task extraction on models written by Debian's python3-onnx
// (tests/deploy/make_models.py): shapes, folding of shape subgraphs, fusion,
// weights and FLOPs checked by hand; old opset forms; every bad model a clear
// error; and a fuzzer over truncated and corrupted bytes.
#include "compiler/frontend/onnx_import.h"

#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "compiler/frontend/tasks.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::frontend {
namespace {

namespace v1 = ::tunefarm::v1;

class OnnxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    testing::CommandResult r = testing::RunCommand(
        {"/usr/bin/python3", std::string(TF_SOURCE_DIR) + "/tests/deploy/make_models.py",
         dir_->path()},
        dir_->path());
    ok_ = r.exit_code == 0;
    why_ = r.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override {
    if (!ok_) TF_SKIP("no-package") << "python3-onnx is not installed (/usr/bin/python3): " << why_;
  }
  static std::string Path(const std::string& name) { return dir_->File(name + ".onnx"); }
  static std::string Bytes(const std::string& name) {
    std::ifstream in(Path(name), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static std::string Error(const std::string& name, const ImportOptions& o = {}) {
    absl::StatusOr<Model> m = ImportOnnxFile(Path(name), o);
    return m.ok() ? "imported" : std::string(m.status().message());
  }

  static testing::TempDir* dir_;
  static bool ok_;
  static std::string why_;
};
testing::TempDir* OnnxTest::dir_ = nullptr;
bool OnnxTest::ok_ = false;
std::string OnnxTest::why_;

std::vector<v1::EpilogueKind> Epilogues(const ModelTask& t) {
  std::vector<v1::EpilogueKind> out;
  for (const v1::Epilogue& e : t.workload.epilogue()) out.push_back(e.kind());
  return out;
}

TEST_F(OnnxTest, SmallCnnShapesFoldingFusionAndWeights) {
  absl::StatusOr<Model> m = ImportOnnxFile(Path("tiny"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->opset, 13);
  EXPECT_EQ(m->shapes.at("p"), (std::vector<int64_t>{1, 16, 8, 8}));
  EXPECT_EQ(m->shapes.at("c5"), (std::vector<int64_t>{1, 32, 4, 4}));
  // Shape -> Gather -> Concat became the constant {1, -1}; Reshape gives 1x32.
  EXPECT_EQ(m->constants.at("newshape").ints, (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(m->shapes.at("f"), (std::vector<int64_t>{1, 32}));
  EXPECT_EQ(m->nodes.size(), 17u);  // 20 less the three folded
  EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{1, 10}));

  absl::StatusOr<TaskExtraction> ex = ExtractTasks(*m);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ(ex->tasks.size(), 6u);
  using E = v1::EpilogueKind;
  // The max pooling (16x16x16 in) is a kernel of its own; the global
  // pooling (512 elements) stays native.
  EXPECT_EQ(ex->tasks[3].workload.op(), v1::OP_KIND_POOL2D);
  EXPECT_EQ(ex->tasks[3].workload.pool2d().kind(), v1::POOL_KIND_MAX);
  EXPECT_EQ(ex->tasks[3].nodes, (std::vector<std::string>{"pool"}));
  std::vector<ModelTask> t = ex->tasks;
  t.erase(t.begin() + 3);
  // conv1 + its bias + BatchNormalization (folded into a bias) + Relu.
  EXPECT_EQ(Epilogues(t[0]), (std::vector<E>{v1::EPILOGUE_KIND_BIAS_ADD, v1::EPILOGUE_KIND_RELU}));
  EXPECT_EQ(t[0].nodes, (std::vector<std::string>{"conv1", "bn1", "relu1"}));
  EXPECT_EQ(t[0].flops, 2.0 * 16 * 16 * 16 * 3 * 3 * 3 + 2.0 * 16 * 16 * 16);
  // conv2 occurs twice (conv2, conv2_again): one task of weight 2.
  EXPECT_EQ(t[1].weight, 2);
  EXPECT_EQ(Epilogues(t[1]), (std::vector<E>{v1::EPILOGUE_KIND_RELU}));
  // The residual block's second conv takes the Add and the Relu.
  EXPECT_EQ(Epilogues(t[2]),
            (std::vector<E>{v1::EPILOGUE_KIND_RESIDUAL_ADD, v1::EPILOGUE_KIND_RELU}));
  // Strided conv with x * sigmoid(x) fused as SiLU.
  EXPECT_EQ(t[3].workload.conv2d().strides(0), 2);
  EXPECT_EQ(Epilogues(t[3]), (std::vector<E>{v1::EPILOGUE_KIND_SILU}));
  EXPECT_EQ(t[3].nodes, (std::vector<std::string>{"conv5", "sig5", "silu5"}));
  // Gemm with transB: a dense layer with its bias.
  EXPECT_EQ(t[4].workload.op(), v1::OP_KIND_DENSE);
  EXPECT_EQ(t[4].workload.inputs(1).shape(0), 10);
  EXPECT_EQ(Epilogues(t[4]), (std::vector<E>{v1::EPILOGUE_KIND_BIAS_ADD}));
  double weighted = 0;
  for (const ModelTask& task : ex->tasks) weighted += task.flops * task.weight;
  EXPECT_DOUBLE_EQ(ex->task_flops, weighted);
  // The tasks are nearly all of the model (the global pooling and the
  // reshape are not; a fused SiLU counts 4 per element, its nodes 2).
  EXPECT_NEAR(ex->task_flops / ex->model_flops, 1.0, 0.01);
}

TEST_F(OnnxTest, DynamicDimensionsNeedAShape) {
  EXPECT_EQ(Error("tiny_dynamic"), Path("tiny_dynamic") +
                                       ": input 'x' has dynamic dimension 0 ('N'); give its shape "
                                       "with --shape x=D1xD2x...");
  ImportOptions o;
  o.input_shapes["x"] = {4, 3, 16, 16};
  absl::StatusOr<Model> m = ImportOnnxFile(Path("tiny_dynamic"), o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{4, 10}));
  // The folded shape subgraph follows the batch given.
  EXPECT_EQ(m->constants.at("newshape").ints, (std::vector<int64_t>{4, -1}));
  ImportOptions wrong;
  wrong.input_shapes["images"] = {1, 3, 16, 16};
  EXPECT_TRUE(absl::StrContains(Error("tiny_dynamic", wrong), "'images', which is not an input"))
      << Error("tiny_dynamic", wrong);
  auto parsed = ParseShapeOverride("x=1x3x640x640");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->first, "x");
  EXPECT_EQ(parsed->second, (std::vector<int64_t>{1, 3, 640, 640}));
  // A zero-size dimension is a shape (a cache of no past tokens).
  parsed = ParseShapeOverride("past=1x0x4");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->second, (std::vector<int64_t>{1, 0, 4}));
  EXPECT_FALSE(ParseShapeOverride("x=1x-1").ok());
  EXPECT_FALSE(ParseShapeOverride("x=ax3").ok());
}

TEST_F(OnnxTest, OldOpsetFormsAndConv1d) {
  absl::StatusOr<Model> m = ImportOnnxFile(Path("opset9"));
  ASSERT_TRUE(m.ok()) << m.status();
  // Conv1d, pads 2 before and 1 after: (12 + 3 - 3) / 1 + 1 = 13.
  EXPECT_EQ(m->shapes.at("c"), (std::vector<int64_t>{1, 8, 13}));
  EXPECT_EQ(m->shapes.at("u"), (std::vector<int64_t>{1, 8, 1, 13}));
  EXPECT_EQ(m->shapes.at("up"), (std::vector<int64_t>{1, 8, 2, 26}));
  EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{1, 8, 2, 14}));
  absl::StatusOr<TaskExtraction> ex = ExtractTasks(*m);
  ASSERT_TRUE(ex.ok());
  ASSERT_EQ(ex->tasks.size(), 1u);
  const v1::Workload& w = ex->tasks[0].workload;
  EXPECT_EQ(w.inputs(0).shape(2), 1);  // as 2-D with H = 1
  EXPECT_EQ(w.conv2d().pads(1), 2);
  EXPECT_EQ(w.conv2d().pads(3), 1);
  EXPECT_EQ(Epilogues(ex->tasks[0]), (std::vector<v1::EpilogueKind>{v1::EPILOGUE_KIND_RELU6}));
}

TEST_F(OnnxTest, FormerlyUnsupportedOperatorsImport) {
  // TopK with k from a constant input: values and indices of the top 2.
  absl::StatusOr<Model> m = ImportOnnxFile(Path("topk"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{1, 2, 4, 2}));
  EXPECT_EQ(m->shapes.at("i"), (std::vector<int64_t>{1, 2, 4, 2}));
  // Log, GreaterOrEqual and And on a runtime input stay nodes.
  m = ImportOnnxFile(Path("many_unsupported"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->nodes.size(), 4u);
  EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{2, 3}));
}

TEST_F(OnnxTest, BadModelsAreClearErrors) {
  std::string e = Error("unsupported");
  EXPECT_TRUE(absl::StrContains(e, "unsupported operator 'Unique' (node 'the_unique', opset 13)"))
      << e;
  e = Error("control_flow");
  EXPECT_TRUE(absl::StrContains(e, "If node 'branch': its condition is only known at run time, "
                                   "so both branches run and their outputs must have the same "
                                   "shapes, but output 0 is 2 in then_branch and 4 in "
                                   "else_branch"))
      << e;
  EXPECT_EQ(Error("cycle"), Path("cycle") + ": the graph has a cycle through node 'a'");
  EXPECT_EQ(Error("opset19"), Path("opset19") + ": opset 19 is not supported (1 to 18)");
  EXPECT_EQ(Error("no_such_file"), "cannot read " + Path("no_such_file"));
  EXPECT_EQ(Error("string_init"),
            Path("string_init") + ": initializer 'labels': element type 8 is not supported "
                                  "(float, float16, bfloat16, double and integers are)");
  EXPECT_EQ(std::string(ImportOnnx("").status().message()),
            "not an ONNX model (the protobuf does not parse)");
}

// An input fixed to a value is a constant of the input's type and shape,
// no longer an input, and an If on it takes its branch; unfixed, both
// branches are imported (their values apart) and a Where selects; bad
// values are clear errors.
TEST_F(OnnxTest, FixedInputValuesResolveControlFlow) {
  {
    absl::StatusOr<Model> m = ImportOnnxFile(Path("rate_branch"));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->inputs, (std::vector<std::string>{"rate", "x"}));
    ASSERT_EQ(m->nodes.size(), 4u);
    EXPECT_EQ(m->nodes[0].op, "Equal");
    EXPECT_EQ(m->nodes[1].op, "Relu");
    EXPECT_EQ(m->nodes[2].op, "Neg");
    EXPECT_EQ(m->nodes[3].op, "Where");
    EXPECT_EQ(m->nodes[3].inputs, (std::vector<std::string>{"is16k", "by_rate/then/r",
                                                             "by_rate/else/n"}));
    EXPECT_EQ(m->nodes[3].outputs, std::vector<std::string>{"y"});
    EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{2, 3}));
  }
  for (double rate : {16000.0, 8000.0}) {
    ImportOptions o;
    o.input_values["rate"] = {rate};
    absl::StatusOr<Model> m = ImportOnnxFile(Path("rate_branch"), o);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->inputs, (std::vector<std::string>{"x"}));
    EXPECT_TRUE(m->constants.at("rate").is_int);
    EXPECT_TRUE(m->constants.at("rate").shape.empty());
    ASSERT_EQ(m->nodes.size(), 2u);  // the branch's op, then the If's output
    EXPECT_EQ(m->nodes[0].op, rate == 16000 ? "Relu" : "Neg");
    EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{2, 3}));
  }
  ImportOptions o;
  o.input_values["rate"] = {16000, 8000};
  EXPECT_TRUE(absl::StrContains(Error("rate_branch", o), "2 values for shape scalar (1 needed)"))
      << Error("rate_branch", o);
  o.input_values = {{"rate", {0.5}}};
  EXPECT_TRUE(absl::StrContains(Error("rate_branch", o), "0.5 is not an integer"))
      << Error("rate_branch", o);
  o.input_values = {{"rate", {1e300}}};
  EXPECT_TRUE(absl::StrContains(Error("rate_branch", o), "out of the integer range"))
      << Error("rate_branch", o);
  o.input_values = {{"sr", {1}}};
  EXPECT_TRUE(absl::StrContains(Error("rate_branch", o),
                                "--value names 'sr', which is not an input of the model (inputs: "
                                "rate, x)"))
      << Error("rate_branch", o);
  auto v = ParseValueOverride("mask=1,0,2.5");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->first, "mask");
  EXPECT_EQ(v->second, (std::vector<double>{1, 0, 2.5}));
  for (const char* bad : {"sr", "=1", "sr=", "sr=1,,2", "sr=x", "sr=inf"})
    EXPECT_FALSE(ParseValueOverride(bad).ok()) << bad;
}

// Truncations and random byte changes of a real model: an error or a model,
// never a crash or a hang.
TEST_F(OnnxTest, FuzzedBytesNeverCrash) {
  const std::string good = Bytes("tiny");
  ASSERT_GT(good.size(), 1000u);
  std::mt19937 rng(5);
  int imported = 0, refused = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string b = good;
    if (i % 3 == 0) {
      b.resize(rng() % good.size());
    } else {
      for (int k = 0, n = 1 + int(rng() % 8); k < n; ++k) b[rng() % b.size()] = char(rng());
    }
    absl::StatusOr<Model> m = ImportOnnx(b);
    if (m.ok()) {
      ++imported;
      (void)ExtractTasks(*m);
    } else {
      ++refused;
      EXPECT_FALSE(m.status().message().empty());
    }
  }
  EXPECT_GT(refused, 0);
  std::printf("fuzz: %d imported, %d refused\n", imported, refused);
}

}  // namespace
}  // namespace tunefarm::frontend
