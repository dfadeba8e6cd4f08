// Whole-model build and the graph runtime: ResNet-18, MobileNetV2 and a
// YOLOv5s-shaped network written by python3-onnx (tests/deploy/make_zoo.py,
// random weights) are built with default schedules and run on random inputs;
// every value the package materialises is compared with a float64 run of the
// imported model, node by node, and the outputs with ONNX Runtime. Also: the never-slower rule, the memory plan,
// bad packages, .npy files, and the CLI (build, run).
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/float16.h"
#include "common/status_macros.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/codegen/nvrtc_info.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "deploy/interpreter.h"
#include "deploy/package_build.h"
#include "device_agent/runtime/cuda_driver.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/model_run.h"
#include "device_agent/runtime/npy.h"
#include "gtest/gtest.h"
#include "proto/kernel_signature.h"
#include "search/space/random_schedule.h"
#include "tests/deploy/gpu_package_sim.h"
#include "tests/deploy/ort_runner.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::deploy {

using frontend::ExtractTasks;
using frontend::ImportOnnxFile;
using frontend::Model;
using frontend::ModelTask;
using frontend::TaskExtraction;

using runtime::GraphRuntime;
using runtime::NpyArray;
using runtime::ParseNpy;
using runtime::WriteNpy;
namespace {

namespace v1 = ::tunefarm::v1;

class GraphTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const std::string src = std::string(TF_SOURCE_DIR) + "/tests/deploy/";
    testing::CommandResult a = testing::RunCommand(
        {"/usr/bin/python3", src + "make_zoo.py", dir_->path(), "--yolo-size", "160"},
        dir_->path());
    testing::CommandResult b = testing::RunCommand(
        {"/usr/bin/python3", src + "make_models.py", dir_->path()}, dir_->path());
    ok_ = a.exit_code == 0 && b.exit_code == 0;
    why_ = a.err + b.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override {
    if (!ok_) TF_SKIP("no-package") << "python3-onnx is not installed (/usr/bin/python3): " << why_;
  }
  static Model Import(const std::string& name) {
    absl::StatusOr<Model> m = ImportOnnxFile(dir_->File(name + ".onnx"));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : Model();
  }

  static testing::TempDir* dir_;
  static bool ok_;
  static std::string why_;
};
testing::TempDir* GraphTest::dir_ = nullptr;
bool GraphTest::ok_ = false;
std::string GraphTest::why_;

// Largest |a - ref| over a tensor, relative to the tensor's largest |ref|.
double RelError(const std::vector<float>& a, const std::vector<double>& ref) {
  double err = 0, scale = 1e-6;
  if (a.size() != ref.size()) return INFINITY;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double(a[i]) - ref[i]);
    if (!(d <= err)) err = std::isnan(d) ? INFINITY : d;
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return err / scale;
}

double Largest(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The workload specs of the model's tasks in order, those of `op` only when
// it is set; an extraction error or a task whose spec cannot be written
// fails the test.
std::vector<std::string> TaskSpecs(const Model& m, v1::OpKind op = v1::OP_KIND_UNSPECIFIED,
                                   const frontend::ExtractOptions& options = {}) {
  absl::StatusOr<TaskExtraction> ex = ExtractTasks(m, options);
  EXPECT_TRUE(ex.ok()) << ex.status();
  std::vector<std::string> specs;
  if (!ex.ok()) return specs;
  for (const ModelTask& t : ex->tasks) {
    if (op != v1::OP_KIND_UNSPECIFIED && t.workload.op() != op) continue;
    absl::StatusOr<std::string> spec = ir::FormatWorkloadSpec(t.workload);
    EXPECT_TRUE(spec.ok()) << t.description << ": " << spec.status();
    if (spec.ok()) specs.push_back(*spec);
  }
  return specs;
}

// The float64 interpreter's values of `model` on float32 inputs.
absl::StatusOr<Values<double>> InterpretFloat32(const Model& model, const Values<float>& in) {
  Values<double> in64;
  for (const auto& [k, v] : in) in64[k].assign(v.begin(), v.end());
  return Interpret(model, in64);
}

// Builds `model` (default schedules unless `options` choose), runs the
// package with every value kept and checks each value against the float64
// interpreter; given the model's file, its outputs are also checked against
// ONNX Runtime (a reference that is not ours), or the test is reported as
// skipped where ONNX Runtime is not fetched. Returns the number of values
// compared with the interpreter.
int CheckAgainstReference(const Model& model, const BuildOptions& options,
                          v1::ModelPackage* built = nullptr, const std::string& onnx_path = "") {
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(model, codegen::HostTarget(), options);
  EXPECT_TRUE(pkg.ok()) << pkg.status();
  if (!pkg.ok()) return 0;
  if (built) *built = *pkg;
  GraphRuntime::Options ro;
  ro.threads = 2;
  ro.keep_values = true;
  auto rt = GraphRuntime::Load(*pkg, ro);
  EXPECT_TRUE(rt.ok()) << rt.status();
  if (!rt.ok()) return 0;
  Values<float> in = RandomModelInputs(model, 11);
  std::map<std::string, std::vector<float>> out;
  absl::Status s = (*rt)->Run(in, &out);
  EXPECT_TRUE(s.ok()) << s;
  absl::StatusOr<Values<double>> ref = InterpretFloat32(model, in);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return 0;
  int compared = 0;
  for (const v1::PackageValue& v : pkg->values()) {
    // A channels-last value (NAME@nhwc) against the reference's NAME
    // permuted to NHWC.
    const bool nhwc = absl::EndsWith(v.name(), "@nhwc");
    const std::string name = nhwc ? v.name().substr(0, v.name().size() - 5) : v.name();
    auto r = ref->find(name);
    if (r == ref->end()) continue;
    std::vector<double> want = r->second;
    if (nhwc) {
      const std::vector<int64_t>& s = model.shapes.at(name);
      EXPECT_EQ(s.size(), 4u) << v.name();
      if (s.size() != 4) continue;
      const int64_t c = s[1], hw = s[2] * s[3];
      for (int64_t b = 0; b < s[0]; ++b)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t p = 0; p < hw; ++p)
            want[size_t((b * hw + p) * c + ch)] = r->second[size_t((b * c + ch) * hw + p)];
    }
    absl::StatusOr<std::vector<float>> got = (*rt)->Value(v.name());
    EXPECT_TRUE(got.ok());
    EXPECT_LT(RelError(*got, want), 2e-4) << "value " << v.name();
    ++compared;
  }
  // The same package on its planned arena gives the same outputs.
  ro.keep_values = false;
  auto arena = GraphRuntime::Load(*pkg, ro);
  EXPECT_TRUE(arena.ok()) << arena.status();
  std::map<std::string, std::vector<float>> out2;
  EXPECT_TRUE((*arena)->Run(in, &out2).ok());
  for (const std::string& o : model.outputs) {
    EXPECT_LT(RelError(out2[o], ref->at(o)), 2e-4) << "output " << o << " on the arena";
    EXPECT_EQ(out2[o], out[o]) << "output " << o << " differs between arena and separate buffers";
  }
  if (!onnx_path.empty()) {
    if (absl::Status ort = testing::OrtAvailable(); !ort.ok()) {
      TF_SKIP_NOTE("no-models") << "outputs not compared with ONNX Runtime: " << ort.message();
      return compared;
    }
    testing::TempDir scratch;
    auto theirs = testing::RunOrt(onnx_path, in, model.shapes, model.outputs, scratch.path());
    EXPECT_TRUE(theirs.ok()) << theirs.status();
    if (theirs.ok()) {
      for (const std::string& o : model.outputs)
        EXPECT_LT(testing::MaxOutputError(out, *theirs, {o}), 1e-4)
            << "output " << o << " against ONNX Runtime";
    }
  }
  return compared;
}

// Builds in the model's own layout (NCHW), whatever the target's default.
BuildOptions Nchw() {
  BuildOptions o;
  o.channels_last = false;
  return o;
}

// Builds channels-last, whatever the target's default.
BuildOptions Nhwc() {
  BuildOptions o;
  o.channels_last = true;
  return o;
}

// Task extraction channels-last with 8-lane channel vectors (AVX2's).
frontend::ExtractOptions ChannelsLast8() {
  frontend::ExtractOptions o;
  o.channels_last = true;
  o.lanes = 8;
  return o;
}

TEST_F(GraphTest, ResNet18MatchesTheFloat64Reference) {
  Model m = Import("resnet18");
  v1::ModelPackage pkg;
  int compared = CheckAgainstReference(m, Nchw(), &pkg, dir_->File("resnet18.onnx"));
  // Kernels write the fused values (conv+bn+relu, ..., add+relu, the
  // poolings): 23 steps and the flatten and output values between them.
  EXPECT_GE(compared, 23);
  EXPECT_EQ(pkg.kernels_size(), 21);
  int kernel_steps = 0;
  for (const auto& s : pkg.steps()) kernel_steps += s.has_kernel();
  EXPECT_EQ(kernel_steps, 23);  // 20 convolutions (BN folded), 2 poolings, the dense layer
  // The arena is far smaller than the sum of the values it holds.
  int64_t total = 0;
  for (const auto& v : pkg.values()) {
    int64_t n = 4;
    for (int64_t d : v.shape()) n *= d;
    total += n;
  }
  EXPECT_LT(pkg.arena_bytes(), total / 2);
}

TEST_F(GraphTest, MobileNetV2MatchesTheFloat64Reference) {
  EXPECT_GE(CheckAgainstReference(Import("mobilenet_v2"), Nchw(), nullptr,
                                  dir_->File("mobilenet_v2.onnx")),
            50);
}

TEST_F(GraphTest, YoloShapedNetworkMatchesTheFloat64Reference) {
  Model m = Import("yolov5s_160");
  ASSERT_EQ(m.outputs.size(), 3u);
  EXPECT_GE(CheckAgainstReference(m, {}, nullptr, dir_->File("yolov5s_160.onnx")), 60);
}

// Channels-last builds (the default on CPU targets): convolutions (and the
// pooling and elementwise kernels after them) are NHWC kernels, weights
// HWIO, per-channel program inputs permuted; dense convolutions with a
// spatial kernel under 28x28 output pixels stay NCHW unless Winograd takes
// them; Transpose steps only where the layouts meet (ResNet-18: the input,
// and around the downsampling of the NCHW stages). Every value against the float64 interpreter
// (channels-last ones permuted), outputs against ONNX Runtime.
TEST_F(GraphTest, ChannelsLastBuildsMatch) {
  const BuildOptions nhwc = Nhwc();
  frontend::ExtractOptions xo;
  xo.channels_last = true;
  const std::vector<std::string> specs = TaskSpecs(Import("resnet18"), v1::OP_KIND_UNSPECIFIED, xo);
  EXPECT_TRUE(absl::c_linear_search(
      specs, "conv2d_nhwc(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)+bias+residual+relu"))
      << absl::StrJoin(specs, "; ");
  EXPECT_TRUE(
      absl::c_linear_search(specs, "max_pool2d_nhwc(N=1,C=64,H=112,W=112,R=3,S=3,stride=2,pad=1)"))
      << absl::StrJoin(specs, "; ");
  // Winograd, where the options ask for it: the 56x56, 28x28 and 14x14
  // 3x3 layers of stride 1 (the 14x14 ones channels-last for it), not the
  // strided ones nor the 7x7 ones (an odd output).
  frontend::ExtractOptions wino = xo;
  wino.winograd = true;
  const std::vector<std::string> ws = TaskSpecs(Import("resnet18"), v1::OP_KIND_CONV2D, wino);
  int winograd_tasks = 0;
  for (const std::string& s : ws) {
    if (!absl::StrContains(s, "winograd=2")) continue;
    ++winograd_tasks;
    EXPECT_TRUE(absl::StrContains(s, "R=3,S=3") && !absl::StrContains(s, "stride")) << s;
  }
  EXPECT_TRUE(absl::c_linear_search(
      ws, "conv2d_nhwc(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,winograd=2)+bias+residual+relu"))
      << absl::StrJoin(ws, "; ");
  EXPECT_TRUE(absl::c_linear_search(
      ws, "conv2d_nhwc(N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1,winograd=2)+bias+relu"))
      << absl::StrJoin(ws, "; ");
  // 56x56: +relu, +residual+relu; 28x28 and 14x14: +bias (the block whose
  // shortcut is the downsampling conv, added after it), +relu,
  // +residual+relu.
  EXPECT_EQ(winograd_tasks, 8) << absl::StrJoin(ws, "; ");
  // With 16 lanes (AVX-512), convolutions whose output channels are
  // multiples of 8 are NHWC too (8-lane channel vectors).
  frontend::ExtractOptions wide = xo;
  wide.lanes = 16;
  const std::vector<std::string> mb = TaskSpecs(Import("mobilenet_v2"), v1::OP_KIND_CONV2D, wide);
  EXPECT_TRUE(absl::c_any_of(mb, [](const std::string& s) {
    return absl::StartsWith(s, "conv2d_nhwc(") && absl::StrContains(s, ",K=24,");
  })) << absl::StrJoin(mb, "; ");
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(Import("resnet18"), nhwc, &pkg, dir_->File("resnet18.onnx")), 23);
  EXPECT_EQ(pkg.layout(), "NHWC");
  // The layout conversions (rearrange kernels, named VALUE/transpose).
  std::vector<std::string> transposes;
  for (const auto& st : pkg.steps()) {
    ASSERT_TRUE(st.has_kernel() || st.node().view() || st.node().op() != "Transpose")
        << st.node().name() << " is a native Transpose";
    if (st.has_kernel() && absl::EndsWith(st.kernel().nodes(0), "/transpose"))
      transposes.push_back(st.kernel().nodes(0));
  }
  EXPECT_LE(transposes.size(), 7u) << absl::StrJoin(transposes, ", ");
  EXPECT_GE(transposes.size(), 1u);
  int nhwc_elementwise = 0;
  std::set<std::string> nhwc_native;  // ops of native steps run channels-last
  for (const char* name : {"mobilenet_v2", "yolov5s_160", "dags", "nhwc_native"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<TaskExtraction> ex = ExtractTasks(Import(name), xo);
    ASSERT_TRUE(ex.ok()) << ex.status();
    for (const auto& oc : ex->occurrences)
      nhwc_elementwise +=
          oc.nhwc && ex->tasks[size_t(oc.task)].workload.op() == v1::OP_KIND_ELEMENTWISE;
    v1::ModelPackage p;
    EXPECT_GE(
        CheckAgainstReference(Import(name), nhwc, &p, dir_->File(std::string(name) + ".onnx")), 2);
    int nhwc_kernels = 0;
    for (const auto& k : p.kernels())
      nhwc_kernels +=
          (k.workload().has_conv2d() && k.workload().conv2d().layout() == v1::DATA_LAYOUT_NHWC) ||
          (k.workload().has_pool2d() && k.workload().pool2d().layout() == v1::DATA_LAYOUT_NHWC);
    EXPECT_GT(nhwc_kernels, 0);
    // Model nodes run channels-last: natively, or as a data mover's kernel.
    std::map<std::string, std::string> op_of;
    for (const auto& n : Import(name).nodes) op_of[n.name] = n.op;
    for (const auto& st : p.steps()) {
      if (st.has_node()) {
        for (const std::string& in : st.node().inputs())
          if (absl::EndsWith(in, "@nhwc")) nhwc_native.insert(st.node().op());
        continue;
      }
      const v1::PackageKernel& k = p.kernels(st.kernel().kernel());
      if (k.workload().op() != v1::OP_KIND_REARRANGE || !op_of.count(st.kernel().nodes(0)))
        continue;
      for (const std::string& in : st.kernel().args())
        if (absl::EndsWith(in, "@nhwc")) nhwc_native.insert(op_of[st.kernel().nodes(0)]);
    }
  }
  // Concat, Resize and elementwise nodes of values written channels-last
  // run channels-last (axis, scales and constants permuted) and match the
  // reference above; the first two as rearrange kernels.
  for (const char* op : {"Concat", "Resize", "Max", "Min"})
    EXPECT_TRUE(nhwc_native.count(op)) << op << ": " << absl::StrJoin(nhwc_native, ", ");
  // 1-D convolutions (3-D values) stay NCHW.
  EXPECT_GE(CheckAgainstReference(Import("conv1d"), nhwc, nullptr, dir_->File("conv1d.onnx")), 2);
  // Elementwise kernels reading a value written channels-last stay so.
  EXPECT_GT(nhwc_elementwise, 0);
}

// Channels-last between convolutions: the upsampling transposed
// convolution (BatchNorm folded, weight permuted to RSCK) and a 4-channel
// 1x1 conv read only by a convolution run NHWC; the 2-channel head, a model
// output, stays NCHW. Every value against the interpreter, outputs against
// ONNX Runtime.
TEST_F(GraphTest, ChannelsLastUpsamplingAndNarrowConvolutions) {
  const BuildOptions nhwc = Nhwc();
  const frontend::ExtractOptions xo = ChannelsLast8();
  const std::vector<std::string> specs =
      TaskSpecs(Import("upsample_nhwc"), v1::OP_KIND_UNSPECIFIED, xo);
  const std::string all = absl::StrJoin(specs, "; ");
  EXPECT_TRUE(absl::c_linear_search(
      specs, "conv2d_transpose_nhwc(N=1,C=16,H=10,W=12,K=8,R=2,S=2,stride=2)+bias+relu"))
      << all;
  EXPECT_TRUE(absl::c_linear_search(specs, "conv2d_nhwc(N=1,C=8,H=20,W=24,K=4,R=1,S=1)")) << all;
  EXPECT_TRUE(absl::c_linear_search(specs, "conv2d_nchw(N=1,C=4,H=20,W=24,K=2,R=1,S=1)")) << all;
  v1::ModelPackage pkg;
  EXPECT_GE(
      CheckAgainstReference(Import("upsample_nhwc"), nhwc, &pkg, dir_->File("upsample_nhwc.onnx")),
      4);
  int transposed_nhwc = 0;
  for (const auto& k : pkg.kernels())
    transposed_nhwc += k.workload().op() == v1::OP_KIND_CONV2D_TRANSPOSE &&
                       k.workload().conv2d().layout() == v1::DATA_LAYOUT_NHWC;
  EXPECT_EQ(transposed_nhwc, 1);
}

// A Reshape's output shares its input's memory in the planned arena (the
// runtime skips the step); values and outputs still match the reference,
// on the arena and in separate buffers.
TEST_F(GraphTest, CopyNodesShareTheirInputsMemory) {
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(Import("tiny"), Nchw(), &pkg, dir_->File("tiny.onnx")), 5);
  std::map<std::string, int64_t> offset;
  for (const v1::PackageValue& v : pkg.values()) offset[v.name()] = v.offset();
  ASSERT_TRUE(offset.count("g") && offset.count("f")) << pkg.values_size() << " values";
  EXPECT_EQ(offset["g"], offset["f"]);
  EXPECT_NE(offset["g"], offset["y"]);
}

// A channel Split, a one-channel Gather and a one-channel Slice are views:
// their outputs are placed inside the convolution's value (at 0, 2, 3 and
// 1 channels of 16 floats), as is a Slice of 4 floats from the second
// float on of its flattened form, and the runtime skips them; a Slice
// along the last axis still copies, as a rearrange kernel. Values match on the arena and in
// separate buffers, and against ONNX Runtime.
TEST_F(GraphTest, SplitGatherAndSliceAreViews) {
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(Import("views"), Nchw(), &pkg, dir_->File("views.onnx")), 8);
  std::map<std::string, bool> view;
  std::set<std::string> kernels;
  for (const auto& st : pkg.steps()) {
    if (st.has_node()) view[st.node().name()] = st.node().view();
    if (st.has_kernel()) kernels.insert(st.kernel().nodes().begin(), st.kernel().nodes().end());
  }
  EXPECT_TRUE(view["split"] && view["gather"] && view["channel"] && view["row"]);
  EXPECT_TRUE(kernels.count("columns") && !view.count("columns"));
  std::map<std::string, int64_t> at;
  for (const v1::PackageValue& v : pkg.values()) at[v.name()] = v.offset();
  EXPECT_EQ(at["s1"], at["c"]);
  EXPECT_EQ(at["s2"], at["c"] + 2 * 16 * 4);
  EXPECT_EQ(at["g"], at["c"] + 3 * 16 * 4);
  EXPECT_EQ(at["sl"], at["c"] + 1 * 16 * 4);
  EXPECT_EQ(at["row"], at["c"] + 4);
}

// The arch of this machine's GPU ("sm_90"), or empty where there is none.
std::string LocalGpuArch() {
  absl::StatusOr<const runtime::CudaDriver*> d = runtime::CudaDriver::Get();
  if (!d.ok()) return "";
  absl::StatusOr<runtime::CudaDriver::CUdevice> dev = (*d)->RetainDevice0();
  if (!dev.ok()) return "";
  int major = 0, minor = 0;
  (*d)->cuDeviceGetAttribute(&major, runtime::kCuAttrComputeCapabilityMajor, *dev);
  (*d)->cuDeviceGetAttribute(&minor, runtime::kCuAttrComputeCapabilityMinor, *dev);
  (*d)->cuDevicePrimaryCtxRelease(*dev);
  return absl::StrCat("sm_", major, minor);
}

// CUDA packages: every operator a kernel (NVRTC builds them here, GPU or
// not), data movers (YOLO's Concat, Resize and Transposes) as rearrange
// kernels, small pools and elementwise nodes as kernels too, views placed
// in the device arena; a node with no GPU kernel is named at build time. On a GPU each package runs
// there, and its outputs match the float64 interpreter and ONNX Runtime (CPU). Without one, loading
// says there is no GPU.
TEST_F(GraphTest, CudaPackagesRunEveryOperatorOnTheGpu) {
  if (!codegen::HaveNvrtc()) TF_SKIP("no-cuda-toolkit") << "this build has no NVRTC";
  const std::string here = LocalGpuArch();
  absl::StatusOr<ir::Target> target =
      ir::Target::Parse("cuda -arch=" + (here.empty() ? "sm_90" : here));
  ASSERT_TRUE(target.ok()) << target.status();
  absl::StatusOr<v1::ModelPackage> refused = BuildPackage(Import("nhwc_native"), *target, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented) << refused.status();
  // (Its Concat and Resize are data movers, kernels too; the broadcast
  // Max and Min have no kernel form.)
  EXPECT_TRUE(absl::EndsWith(refused.status().message(), "none yet: Max, Min")) << refused.status();
  for (const char* name : {"upsample", "sig_residual", "dags", "softmax", "resnet18", "tiny",
                           "views", "yolov5s_160"}) {
    SCOPED_TRACE(name);
    const Model model = Import(name);
    absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(model, *target, {});
    ASSERT_TRUE(pkg.ok()) << pkg.status();
    EXPECT_EQ(pkg->layout(), "NCHW");
    ASSERT_GT(pkg->kernels_size(), 0);
    for (const v1::PackageKernel& k : pkg->kernels()) {
      v1::GpuModule module;
      EXPECT_TRUE(module.ParseFromString(k.shared_object()) && module.kernels_size() > 0)
          << k.description();
    }
    for (const v1::PackageStep& st : pkg->steps())
      EXPECT_TRUE(st.has_kernel() || st.node().view()) << st.node().name();
    // The 16-bit builds: float16, and bfloat16 where the arch has it.
    std::vector<v1::ModelPackage> halves;
    for (v1::DType precision : {v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16}) {
      if (precision == v1::DTYPE_BFLOAT16 && target->sm < 80) continue;
      BuildOptions half;
      half.precision = precision;
      absl::StatusOr<v1::ModelPackage> p = BuildPackage(model, *target, half);
      ASSERT_TRUE(p.ok()) << p.status();
      halves.push_back(*std::move(p));
    }
    absl::StatusOr<std::unique_ptr<GraphRuntime>> rt = GraphRuntime::Load(*pkg, {});
    if (here.empty()) {
      EXPECT_EQ(rt.status().code(), absl::StatusCode::kUnavailable) << rt.status();
      continue;
    }
    ASSERT_TRUE(rt.ok()) << rt.status();
    Values<float> in = RandomModelInputs(model, 11);
    std::map<std::string, std::vector<float>> out;
    absl::Status ran = (*rt)->Run(in, &out);
    ASSERT_TRUE(ran.ok()) << ran;
    absl::StatusOr<Values<double>> ref = InterpretFloat32(model, in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (const std::string& o : model.outputs)
      EXPECT_LT(RelError(out[o], ref->at(o)), 1e-4) << "output " << o;
    // A second run on the same device state gives the same outputs.
    std::map<std::string, std::vector<float>> again;
    ASSERT_TRUE((*rt)->Run(in, &again).ok());
    EXPECT_EQ(again, out);
    // Profiled: the steps launched one by one, each kernel step timed, the
    // same outputs.
    GraphRuntime::Options po;
    po.profile = true;
    absl::StatusOr<std::unique_ptr<GraphRuntime>> profiled = GraphRuntime::Load(*pkg, po);
    ASSERT_TRUE(profiled.ok()) << profiled.status();
    std::map<std::string, std::vector<float>> stepped;
    ran = (*profiled)->Run(in, &stepped);
    ASSERT_TRUE(ran.ok()) << ran;
    EXPECT_EQ(stepped, out);
    const std::vector<double>& sec = (*profiled)->StepSeconds();
    ASSERT_EQ(int(sec.size()), pkg->steps_size());
    for (int i = 0; i < pkg->steps_size(); ++i)
      EXPECT_EQ(sec[size_t(i)] > 0, pkg->steps(i).has_kernel()) << "step " << i;
    if (absl::Status ort = testing::OrtAvailable(); ort.ok()) {
      testing::TempDir scratch;
      auto theirs = testing::RunOrt(dir_->File(std::string(name) + ".onnx"), in, model.shapes,
                                    model.outputs, scratch.path());
      ASSERT_TRUE(theirs.ok()) << theirs.status();
      EXPECT_LT(testing::MaxOutputError(out, *theirs, model.outputs), 1e-4)
          << "against ONNX Runtime";
    }
    // In 16 bits: the arena and constants in the dtype, outputs within its
    // model tolerance (or infinite where they leave float16's range).
    for (const v1::ModelPackage& p16 : halves) {
      const HalfKind kind = *HalfKindOf(p16.precision());
      absl::StatusOr<std::unique_ptr<GraphRuntime>> rt16 = GraphRuntime::Load(p16, {});
      ASSERT_TRUE(rt16.ok()) << rt16.status();
      std::map<std::string, std::vector<float>> out16;
      ran = (*rt16)->Run(in, &out16);
      ASSERT_TRUE(ran.ok()) << ran;
      for (const std::string& o : model.outputs) {
        if (kind == HalfKind::kFloat16 && Largest(ref->at(o)) > 65504) {
          EXPECT_TRUE(absl::c_any_of(out16[o], [](float v) { return std::isinf(v); })) << o;
        } else {
          EXPECT_LT(RelError(out16[o], ref->at(o)), HalfModelTolerance(kind))
              << v1::DType_Name(p16.precision()) << " output " << o;
        }
      }
    }
  }
  if (here.empty()) TF_SKIP("no-gpu") << "CUDA packages built, not run: no GPU here";
}

// A package build's choice that puts every task the tensor-core sketch
// takes on its default tiling (as a tuned record would), counting them in
// `count`; the other tasks keep their default schedules.
std::function<absl::StatusOr<KernelChoice>(const ModelTask&)> TensorCoreChoice(
    const ir::Target& target, int* count) {
  return [target, count](const ModelTask& t) -> absl::StatusOr<KernelChoice> {
    KernelChoice c;
    TF_ASSIGN_OR_RETURN(ir::ComputeDAG dag, ir::BuildComputeDAG(t.workload));
    if (!schedule::HasTensorCoreSketch(dag, target)) return c;
    TF_ASSIGN_OR_RETURN(schedule::Trace tc, schedule::TensorCoreSchedule(
                                          dag, target, schedule::DefaultTensorCoreTiling(dag, target)));
    c.tuned = true;
    c.schedule = schedule::ToProto(tc);
    c.tuned_sec = 1e-3;
    c.default_sec = 2e-3;
    c.why = "tensor cores";
    ++*count;
    return c;
  };
}

// CUDA packages without a GPU: each kernel step's lowered program runs in the
// SIMT interpreter on the package's own memory plan (views in place), in
// float32 and in float16 (`--precision fp16`: every task, data mover and
// value float16, the arena half the bytes, each kernel computing in float32)
// and in bfloat16 (`--precision bf16`, sm_80), and with tf32 products
// (`--precision tf32`: float32 values). In the 16-bit and tf32 packages
// every product the tensor-core sketch takes is built on it (as a tuned
// record would make it). Outputs against the float64 interpreter: float32
// within 1e-4, the others within their model tolerances, or infinite where
// the model's values leave float16's range.
TEST_F(GraphTest, CudaPackagesRunInTheSimtInterpreter) {
  if (!codegen::HaveNvrtc()) TF_SKIP("no-cuda-toolkit") << "this build has no NVRTC";
  absl::StatusOr<ir::Target> target = ir::Target::Parse("cuda -arch=sm_80");
  ASSERT_TRUE(target.ok()) << target.status();
  for (const char* name : {"tiny", "sig_residual", "softmax", "views", "upsample", "dags"}) {
    SCOPED_TRACE(name);
    const Model model = Import(name);
    const Values<float> in = RandomModelInputs(model, 5);
    absl::StatusOr<Values<double>> ref = InterpretFloat32(model, in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    int64_t arena[2] = {0, 0};
    int values = 0;
    for (const v1::DType precision :
         {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16, v1::DTYPE_TF32}) {
      SCOPED_TRACE(v1::DType_Name(precision));
      const bool tf32 = precision == v1::DTYPE_TF32;
      BuildOptions bo;
      bo.precision = precision;
      int tensor_core = 0;
      if (precision != v1::DTYPE_FLOAT32) {
        bo.choose = TensorCoreChoice(*target, &tensor_core);
      }
      absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(model, *target, bo);
      ASSERT_TRUE(pkg.ok()) << pkg.status();
      const std::optional<HalfKind> kind = HalfKindOf(precision);
      const bool half = kind.has_value();
      EXPECT_EQ(pkg->precision(), half ? precision : v1::DTYPE_UNSPECIFIED);
      const v1::DType dtype = tf32 ? v1::DTYPE_FLOAT32 : precision;
      for (const v1::PackageKernel& k : pkg->kernels()) {
        EXPECT_EQ(k.workload().out_dtype(), dtype) << k.description();
        EXPECT_EQ(k.workload().tf32(), tf32 && ir::IsProductOp(k.workload().op()))
            << k.description();
        EXPECT_EQ(k.signature().tf32(), k.workload().tf32()) << k.description();
        for (const v1::KernelArgument& a : k.signature().args())
          EXPECT_EQ(a.dtype(), dtype) << k.description();
      }
      if (std::string(name) == "tiny" && precision != v1::DTYPE_FLOAT32)
        EXPECT_GT(tensor_core, 0);  // its convolutions and dense layer are products
      if (precision == v1::DTYPE_FLOAT32 || precision == v1::DTYPE_FLOAT16)
        arena[half] = pkg->arena_bytes();
      // Float constants stored in the package's format: 2 bytes a value.
      for (const v1::PackageTensor& c : pkg->constants()) {
        if (c.is_int()) continue;
        EXPECT_EQ(c.f32().empty(), half) << c.name();
        EXPECT_EQ(c.f16().empty(), !half) << c.name();
      }
      values = pkg->values_size();
      absl::StatusOr<testing::SimulatedPackage> ran = testing::SimulatePackage(*pkg, in);
      ASSERT_TRUE(ran.ok()) << ran.status();
      EXPECT_GT(ran->kernel_steps, 0);
      for (const std::string& o : model.outputs) {
        if (kind == HalfKind::kFloat16 && Largest(ref->at(o)) > 65504) {
          // Past float16's range (dags' x^2 - sqrt|x|): infinities, not
          // wrong finite numbers; the finite elements as accurate as ever.
          EXPECT_TRUE(absl::c_any_of(ran->outputs[o], [](float v) { return std::isinf(v); }))
              << "output " << o;
          std::vector<float> finite;
          std::vector<double> finite_ref;
          for (size_t i = 0; i < ran->outputs[o].size(); ++i) {
            if (!std::isfinite(ran->outputs[o][i])) continue;
            finite.push_back(ran->outputs[o][i]);
            finite_ref.push_back(ref->at(o)[i]);
          }
          if (!finite.empty())
            EXPECT_LT(RelError(finite, finite_ref), HalfModelTolerance(*kind)) << "output " << o;
          std::printf("%s %s output %s: %zu of %zu elements finite\n", name,
                      v1::DType_Name(precision).c_str(), o.c_str(), finite.size(),
                      ran->outputs[o].size());
          continue;
        }
        const double err = RelError(ran->outputs[o], ref->at(o));
        EXPECT_LT(err, ModelTolerance(kind, tf32)) << "output " << o;
        std::printf("%s %s output %s: error %.2g of the output's range (%d tensor-core kernels)\n",
                    name, v1::DType_Name(precision).c_str(), o.c_str(), err, tensor_core);
        if (half) {
          for (float v : ran->outputs[o]) ASSERT_EQ(v, RoundToHalf(v, *kind)) << "output " << o;
        }
      }
    }
    // Every value two bytes: the plan is about half (alignment padding aside).
    EXPECT_LE(arena[1], arena[0] / 2 + 64 * values) << name;
    EXPECT_LT(arena[1], arena[0]) << name;
  }
}

// Channels-last CUDA packages (`--layout nhwc`) in float16 and with tf32
// products, on tensor cores where the sketch takes a task: NHWC
// convolutions read both factors along contiguous rows (channels, output
// channels), so their tiles move 16 bytes at a time by cp.async. Outputs
// against the float64 interpreter as for NCHW packages.
TEST_F(GraphTest, CudaChannelsLastPackagesRunInTheSimtInterpreter) {
  if (!codegen::HaveNvrtc()) TF_SKIP("no-cuda-toolkit") << "this build has no NVRTC";
  absl::StatusOr<ir::Target> target = ir::Target::Parse("cuda -arch=sm_80");
  ASSERT_TRUE(target.ok()) << target.status();
  int async = 0, nhwc = 0, nhwc_convs = 0;
  for (const char* name : {"tiny", "sig_residual", "views", "dags"}) {
    SCOPED_TRACE(name);
    const Model model = Import(name);
    const Values<float> in = RandomModelInputs(model, 5);
    absl::StatusOr<Values<double>> ref = InterpretFloat32(model, in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (const v1::DType precision : {v1::DTYPE_FLOAT16, v1::DTYPE_TF32}) {
      SCOPED_TRACE(v1::DType_Name(precision));
      BuildOptions bo;
      bo.precision = precision;
      bo.channels_last = true;
      int tensor_core = 0;
      bo.choose = TensorCoreChoice(*target, &tensor_core);
      absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(model, *target, bo);
      ASSERT_TRUE(pkg.ok()) << pkg.status();
      nhwc += pkg->layout() == "NHWC";
      for (const v1::PackageKernel& k : pkg->kernels()) {
        // 3x3 layers stay direct convolutions on a GPU (Winograd is for CPUs),
        // channels-last at any size.
        EXPECT_EQ(k.workload().conv2d().winograd(), 0) << k.description();
        nhwc_convs += k.workload().op() == v1::OP_KIND_CONV2D &&
                      k.workload().conv2d().layout() == v1::DATA_LAYOUT_NHWC;
        if (k.schedule().sketch_id() == ir::kGpuTensorCoreSketchId)
          async += k.schedule().decisions_size() == 9 && k.schedule().decisions(8) == 1;
      }
      absl::StatusOr<testing::SimulatedPackage> ran = testing::SimulatePackage(*pkg, in);
      ASSERT_TRUE(ran.ok()) << ran.status();
      const std::optional<HalfKind> kind = HalfKindOf(precision);
      for (const std::string& o : model.outputs) {
        if (kind.has_value() && Largest(ref->at(o)) > 65504) continue;  // past float16's range
        const double err = RelError(ran->outputs[o], ref->at(o));
        EXPECT_LT(err, ModelTolerance(kind, precision == v1::DTYPE_TF32)) << "output " << o;
        std::printf("%s %s NHWC output %s: error %.2g of the output's range (%d tensor-core)\n",
                    name, v1::DType_Name(precision).c_str(), o.c_str(), err, tensor_core);
      }
    }
  }
  EXPECT_GT(nhwc, 0);
  EXPECT_GE(nhwc_convs, 8);  // tiny's small 3x3 layers too (a CPU keeps those NCHW)
  EXPECT_GT(async, 0);       // some convolution's tiles moved by cp.async
}

TEST_F(GraphTest, SmallModelsWithOldOpsetFormsMatch) {
  for (const char* name : {"tiny", "opset9", "pool_ceil", "sig_residual", "upsample"}) {
    SCOPED_TRACE(name);
    EXPECT_GE(CheckAgainstReference(Import(name), {}, nullptr,
                                    dir_->File(std::string(name) + ".onnx")),
              2);
  }
}

// Element-wise nodes that no anchor fused are kernels of their own, in the
// 4-D form a workload spec writes (5-D merged, 3-D padded, broadcasts kept);
// a broadcast no 4-D form keeps stays native. Tanh, Pow by a constant and
// Neg are copies whose program computes them; under 64 elements a node
// stays native. Values match the interpreter and ONNX Runtime.
TEST_F(GraphTest, LoneElementwiseNodesAreKernels) {
  Model m = Import("alone");
  const std::vector<std::string> listed = TaskSpecs(m);
  const std::set<std::string> specs(listed.begin(), listed.end());
  // The chain after the sigmoid is one program; its inputs in the 4-D form.
  EXPECT_EQ(specs.size(), 4u) << absl::StrJoin(specs, "; ");
  EXPECT_TRUE(specs.count("copy(N=1,C=1,H=2,W=48)+map[](tanh(%0),pow(%1,3))"))
      << absl::StrJoin(specs, "; ");
  EXPECT_TRUE(specs.count("copy(N=1,C=1,H=2,W=48)+map[](neg(%0))")) << absl::StrJoin(specs, "; ");
  EXPECT_TRUE(
      specs.count("sigmoid(N=3,C=16,H=16,W=6)+map[3x1x1x6,6,3x16x16x6,1]"
                  "(mul(%0,$0),add(%1,$1),sub(%2,$2),div(%3,$3),hard_swish(%4),"
                  "clip(%5,-0.5,0.800000012))"))
      << absl::StrJoin(specs, "; ");
  EXPECT_TRUE(specs.count("relu(N=1,C=4,H=32,W=40)")) << absl::StrJoin(specs, "; ");
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, {}, &pkg, dir_->File("alone.onnx")), 6);
  std::vector<std::string> native;
  for (const auto& s : pkg.steps()) {
    if (s.has_node()) native.push_back(s.node().name());
  }
  EXPECT_EQ(native, (std::vector<std::string>{"outer", "tiny_exp"}));
  // 5-D: the copy's input takes the program's 4-D form (C kept apart).
  Model m5 = Import("alone5d");
  EXPECT_EQ(TaskSpecs(m5),
            std::vector<std::string>{"copy(N=2,C=4,H=32,W=8)+map[4x1x1](tanh(%0),mul(%1,$0))"});
  v1::ModelPackage pkg5;
  EXPECT_GE(CheckAgainstReference(m5, {}, &pkg5, dir_->File("alone5d.onnx")), 2);
  for (const auto& st : pkg5.steps()) EXPECT_TRUE(st.has_kernel()) << st.node().name();
}

// Elementwise DAGs (hard-swish, Mish, GELU written out, a square minus a
// root) fuse into the convolution before them as programs, none by its
// name; a value read outside cuts the program there, and what follows it is
// a kernel of its own. Every value against the float64 interpreter and
// ONNX Runtime.
TEST_F(GraphTest, ElementwiseDagsFuseIntoOnePrograms) {
  Model m = Import("dags");
  const std::vector<std::string> specs = TaskSpecs(m);
  const std::string all = absl::StrJoin(specs, "\n");
  ASSERT_EQ(specs.size(), 5u) << all;
  // Cut where the scaled value leaves for the model's outputs.
  EXPECT_EQ(
      specs[0],
      "conv2d_nchw(N=1,C=8,H=24,W=40,K=8,R=3,S=3,pad=1)+bias+map[1,1](mul(%0,$0),add(%1,$1))");
  EXPECT_EQ(specs[1],
            "add(N=1,C=8,H=24,W=40,yC=1,yH=1,yW=1)+map[8x24x40,1](clip(%0,0,6),mul($0,%1),"
            "div(%2,$1))");
  // (The 1x1 layers read their 24 x 40 pixels as one row: PixelRowForm.)
  EXPECT_EQ(specs[2],
            "conv2d_nchw(N=1,C=8,H=1,W=960,K=16,R=1,S=1)+bias+map[](softplus(%0),tanh(%1),"
            "mul(%0,%2))");
  EXPECT_EQ(specs[3],
            "conv2d_nchw(N=1,C=16,H=24,W=40,K=16,R=3,S=3,pad=1)+map[1,1,1](div(%0,$0),erf(%1),"
            "add(%2,$1),mul(%0,%3),mul(%4,$2))");
  EXPECT_EQ(specs[4],
            "conv2d_nchw(N=1,C=16,H=1,W=960,K=16,R=1,S=1)+bias+map[16x1x1](pow(%0,2),abs(%0),"
            "sqrt(%2),sub(%1,%3),mul(%4,$0))");
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, Nchw(), &pkg, dir_->File("dags.onnx")), 3);
  for (const auto& s : pkg.steps()) EXPECT_FALSE(s.has_node()) << s.node().name();
  EXPECT_EQ(pkg.steps_size(), 5);
}

// PRelu is a program step, never a native one: fused after a convolution
// (and the BatchNorm folded into it) with its slope per channel, after a
// depthwise convolution, with one slope for all channels, and on a graph
// input as a kernel of its own. NCHW and channels-last builds, every value
// against the float64 interpreter and ONNX Runtime.
TEST_F(GraphTest, PReluIsAFusedProgramStep) {
  Model m = Import("prelu");
  const std::vector<std::string> specs = TaskSpecs(m, v1::OP_KIND_UNSPECIFIED, {});
  const std::string all = absl::StrJoin(specs, "\n");
  ASSERT_EQ(specs.size(), 4u) << all;
  int convs = 0, copies = 0;
  for (const std::string& s : specs) {
    EXPECT_TRUE(absl::StrContains(s, "(prelu(%0,$0))")) << s;
    convs += absl::StrContains(s, "conv2d") ? 1 : 0;
    copies += absl::StartsWith(s, "copy(") ? 1 : 0;
  }
  EXPECT_EQ(convs, 3) << all;
  EXPECT_EQ(copies, 1) << all;
  for (const BuildOptions& options : {Nchw(), BuildOptions{}}) {
    v1::ModelPackage pkg;
    EXPECT_GE(CheckAgainstReference(m, options, &pkg, dir_->File("prelu.onnx")), 2);
    for (const auto& s : pkg.steps()) EXPECT_FALSE(s.has_node()) << s.node().name();
  }
}

// BatchNorm that no convolution absorbs (after a concatenation, after a
// ReLU) is a scale and shift by per-channel constants: a program step of a
// kernel, never a native step, in NCHW and channels-last builds. In NCHW
// the second concatenation is written in place: the convolution and the
// first concatenation write their blocks of it, and its step is skipped
// (the first reads a model input, which stays where the caller put it).
// Every value against the float64 interpreter and ONNX Runtime.
TEST_F(GraphTest, BatchNormNoConvolutionAbsorbsIsAProgram) {
  Model m = Import("dense_bn");
  for (const auto& n : m.nodes) EXPECT_NE(n.op, "BatchNormalization") << n.name;
  const std::vector<std::string> specs = TaskSpecs(m);
  const std::string all = absl::StrJoin(specs, "\n");
  // After each concatenation: a scale kernel whose program shifts and
  // applies the ReLU; after the last ReLU: a program of the convolution.
  EXPECT_TRUE(absl::c_linear_search(specs, "mul(N=1,C=20,H=16,W=16,yH=1,yW=1)+map[20x1x1]"
                                           "(add(%0,$0),relu(%1))"))
      << all;
  EXPECT_TRUE(absl::c_linear_search(specs, "mul(N=1,C=32,H=16,W=16,yH=1,yW=1)+map[32x1x1]"
                                           "(add(%0,$0),relu(%1))"))
      << all;
  EXPECT_TRUE(absl::c_linear_search(specs, "conv2d_nchw(N=1,C=32,H=16,W=16,K=16,R=3,S=3,pad=1)"
                                           "+bias+relu+map[16x1x1,16x1x1](mul(%0,$0),add(%1,$1))"))
      << all;
  for (bool nchw : {true, false}) {
    v1::ModelPackage pkg;
    EXPECT_GE(CheckAgainstReference(m, nchw ? Nchw() : BuildOptions{}, &pkg,
                                    dir_->File("dense_bn.onnx")),
              4);
    std::vector<std::string> in_place;
    for (const auto& s : pkg.steps()) {
      if (s.has_node()) EXPECT_EQ(s.node().op(), "Concat") << s.node().name();
      if (s.has_node() && s.node().view()) in_place.push_back(s.node().name());
    }
    if (!nchw) continue;
    EXPECT_EQ(in_place, std::vector<std::string>{"cat2"});
    std::map<std::string, int64_t> at;
    for (const v1::PackageValue& v : pkg.values()) at[v.name()] = v.offset();
    ASSERT_TRUE(at.count("cat1") && at.count("c2") && at.count("cat2"));
    EXPECT_EQ(at["cat1"], at["cat2"]);
    EXPECT_EQ(at["c2"], at["cat2"] + 20 * 16 * 16 * 4);
  }
}

// A Pad of zeros before a Conv is the Conv's padding (asymmetric, as
// tf2onnx writes a "SAME" stride-2 layer); a Pad of 0.5 is not. Both
// layouts against the float64 interpreter and ONNX Runtime.
TEST_F(GraphTest, ZeroPadsFoldIntoTheConvolutionAfterThem) {
  Model m = Import("pad_conv");
  std::vector<std::string> ops;
  for (const auto& n : m.nodes) ops.push_back(n.name);
  EXPECT_EQ(ops, (std::vector<std::string>{"conv_s2", "pad_half", "conv_after_half"}));
  EXPECT_EQ(m.nodes[0].inputs[0], "x");
  EXPECT_EQ(m.nodes[0].Ints("pads"), (std::vector<int64_t>{0, 0, 1, 1}));
  const std::string all = absl::StrJoin(TaskSpecs(m), "\n");
  EXPECT_TRUE(absl::StrContains(all, "stride=2,pad_top=0,pad_left=0,pad_bottom=1,pad_right=1"))
      << all;
  for (bool nchw : {true, false}) {
    EXPECT_GE(CheckAgainstReference(m, nchw ? Nchw() : BuildOptions{}, nullptr,
                                    dir_->File("pad_conv.onnx")),
              3);
  }
}

// An NCHW 1x1 convolution with a shallow reduction reads its H x W pixels
// as one row (the same memory), its residual and per-channel PRelu
// reshaped with it; one whose epilogue varies along the row, one with
// short rows and every channels-last build keep their rows. Every value
// matches the interpreter and ONNX Runtime.
TEST_F(GraphTest, PointwiseConvolutionsReadPixelsAsOneRow) {
  Model m = Import("pointwise");
  frontend::ExtractOptions nchw;
  nchw.lanes = 16;
  const std::string all = absl::StrJoin(TaskSpecs(m, v1::OP_KIND_CONV2D, nchw), "\n");
  EXPECT_TRUE(absl::StrContains(all, "C=24,H=1,W=440,K=32,R=1,S=1")) << all;
  EXPECT_TRUE(absl::StrContains(all, "C=32,H=20,W=22,K=16,R=1,S=1")) << all;
  EXPECT_TRUE(absl::StrContains(all, "C=16,H=11,W=12,K=16,R=1,S=1")) << all;
  frontend::ExtractOptions nhwc = nchw;
  nhwc.channels_last = true;
  EXPECT_FALSE(absl::StrContains(absl::StrJoin(TaskSpecs(m, v1::OP_KIND_CONV2D, nhwc), "\n"),
                                 "W=440"));
  for (bool nchw_build : {true, false}) {
    EXPECT_GE(CheckAgainstReference(m, nchw_build ? Nchw() : BuildOptions{}, nullptr,
                                    dir_->File("pointwise.onnx")),
              6);
  }
}

// A dynamically quantized model (DynamicQuantizeLinear, ConvInteger,
// MatMulInteger, their int32 sums cast and scaled) imports and runs: the
// integer products natively, exact; a QDQ weight (int8, per output
// channel) folds at import into the float convolution's weights, a
// kernel. Every value against the float64 interpreter, the output against
// ONNX Runtime.
TEST_F(GraphTest, DynamicallyQuantizedModelsImportAndRun) {
  Model m = Import("quant_dynamic");
  std::set<std::string> ops;
  for (const auto& n : m.nodes) ops.insert(n.op);
  EXPECT_FALSE(ops.count("DequantizeLinear")) << absl::StrJoin(ops, ", ");
  EXPECT_TRUE(ops.count("ConvInteger") && ops.count("MatMulInteger")) << absl::StrJoin(ops, ", ");
  const std::vector<std::string> convs = TaskSpecs(m, v1::OP_KIND_CONV2D);
  EXPECT_EQ(convs, std::vector<std::string>{"conv2d_nchw(N=1,C=8,H=12,W=12,K=6,R=1,S=1)"});
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, Nchw(), &pkg, dir_->File("quant_dynamic.onnx")), 8);
}

// An If whose condition is computed from the data: both branches are
// built and run, a Where picks the outputs; inputs that take each branch
// give that branch's values, as the float64 interpreter and ONNX Runtime do.
TEST_F(GraphTest, RuntimeIfRunsBothBranchesAndSelects) {
  Model m = Import("runtime_branch");
  std::vector<std::string> ops;
  for (const auto& n : m.nodes) ops.push_back(n.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"ReduceSum", "Greater", "Sigmoid", "Mul", "Neg", "Mul",
                                           "Where"}));
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, Nchw(), &pkg, dir_->File("runtime_branch.onnx")), 1);
  GraphRuntime::Options ro;
  ro.threads = 1;
  auto rt = GraphRuntime::Load(pkg, ro);
  ASSERT_TRUE(rt.ok()) << rt.status();
  const std::vector<float> mag = RandomModelInputs(m, 3).at("x");
  for (float sign : {1.0f, -1.0f}) {
    Values<float> in;
    for (float v : mag) in["x"].push_back(sign * (std::abs(v) + 0.1f));
    std::map<std::string, std::vector<float>> out;
    ASSERT_TRUE((*rt)->Run(in, &out).ok());
    ASSERT_EQ(out["y"].size(), 6u);
    for (size_t i = 0; i < 6; ++i) {
      const double x = in["x"][i];
      const double want = sign > 0 ? 2 / (1 + std::exp(-x)) : -3 * x;
      EXPECT_NEAR(out["y"][i], want, 1e-5) << "x " << x;
    }
    absl::StatusOr<Values<double>> ref = InterpretFloat32(m, in);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_LT(RelError(out["y"], ref->at("y")), 1e-5);
  }
}

// Zero-size tensors: a key/value cache of no past tokens (a decoder's first
// step) and a batch of no rows run, and match the float64 interpreter and
// ONNX Runtime; with no past, the attention of one token is its value.
TEST_F(GraphTest, ZeroSizeTensorsRun) {
  for (int64_t past : {0, 3}) {
    frontend::ImportOptions io;
    io.input_shapes["past_k"] = {1, 2, past, 4};
    io.input_shapes["past_v"] = {1, 2, past, 4};
    absl::StatusOr<Model> m = ImportOnnxFile(dir_->File("kv_step.onnx"), io);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->shapes.at("present_k"), (std::vector<int64_t>{1, 2, past + 1, 4}));
    EXPECT_GE(CheckAgainstReference(*m, Nchw(), nullptr, dir_->File("kv_step.onnx")), 1)
        << "past " << past;
    if (past != 0) continue;
    absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(*m, codegen::HostTarget(), Nchw());
    ASSERT_TRUE(pkg.ok()) << pkg.status();
    auto rt = GraphRuntime::Load(*pkg, {});
    ASSERT_TRUE(rt.ok()) << rt.status();
    Values<float> in = RandomModelInputs(*m, 8);
    EXPECT_TRUE(in.at("past_k").empty());
    std::map<std::string, std::vector<float>> out;
    ASSERT_TRUE((*rt)->Run(in, &out).ok());
    ASSERT_EQ(out["y"].size(), in.at("v").size());
    for (size_t i = 0; i < out["y"].size(); ++i) EXPECT_NEAR(out["y"][i], in.at("v")[i], 1e-6);
  }
  frontend::ImportOptions io;
  io.input_shapes["x"] = {0, 4};
  absl::StatusOr<Model> m = ImportOnnxFile(dir_->File("rows_dense.onnx"), io);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{0, 3}));
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(*m, codegen::HostTarget(), Nchw());
  ASSERT_TRUE(pkg.ok()) << pkg.status();
  auto rt = GraphRuntime::Load(*pkg, {});
  ASSERT_TRUE(rt.ok()) << rt.status();
  std::map<std::string, std::vector<float>> out;
  ASSERT_TRUE((*rt)->Run(RandomModelInputs(*m, 8), &out).ok());
  EXPECT_TRUE(out.count("y") && out["y"].empty());
}

// A QDQ model (activations quantized and dequantized around a
// convolution, int8 in and uint8 out; an int8 per-channel weight): the
// weight's DequantizeLinear folds into a float kernel, QuantizeLinear
// saturates to its zero point's type, and every value matches the
// interpreter and ONNX Runtime.
TEST_F(GraphTest, QdqModelsQuantizeToTheirZeroPointsType) {
  Model m = Import("quant_qdq");
  std::vector<std::string> ops;
  for (const auto& n : m.nodes) ops.push_back(n.op);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "QuantizeLinear"), 2) << absl::StrJoin(ops, ", ");
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "DequantizeLinear"), 2) << absl::StrJoin(ops, ", ");
  for (const auto& n : m.nodes) {
    if (n.op != "QuantizeLinear") continue;
    // TensorProto's INT8 (3) before the convolution, UINT8 (2) after.
    EXPECT_EQ(n.Int("output_dtype", 0), n.name == "q_in" ? 3 : 2) << n.name;
  }
  EXPECT_EQ(TaskSpecs(m, v1::OP_KIND_CONV2D).size(), 1u);
  EXPECT_GE(CheckAgainstReference(m, Nchw(), nullptr, dir_->File("quant_qdq.onnx")), 4);
}

// Pads computed by a shape chain as PyTorch's F.pad exports it (concat
// with zeros, reshape to pairs, a reversing slice, a transpose, a flatten, a
// cast) fold at import: the Pad alone remains, and its values match the
// interpreter and ONNX Runtime.
TEST_F(GraphTest, PadsFromShapeChainsFold) {
  Model m = Import("pad_chain");
  ASSERT_EQ(m.nodes.size(), 1u);
  EXPECT_EQ(m.nodes[0].op, "Pad");
  const frontend::Constant& pads = m.constants.at(m.nodes[0].inputs[1]);
  EXPECT_EQ(pads.ints, (std::vector<int64_t>{0, 0, 1, 0, 0, 2}));
  EXPECT_GE(CheckAgainstReference(m, Nchw(), nullptr, dir_->File("pad_chain.onnx")), 1);
}

// A concatenation of values written channels-last and the BatchNorm + ReLU
// after it (a dense layer's input) are one channels-last kernel: it reads
// each input where its convolution wrote it, so the concatenation is never
// stored, and nothing is flipped between the first convolution and the
// last. Every value against the float64 interpreter and ONNX Runtime.
TEST_F(GraphTest, ConcatAndTheProgramAfterItAreOneChannelsLastKernel) {
  Model m = Import("dense_nhwc");
  const std::vector<std::string> specs = TaskSpecs(m, v1::OP_KIND_UNSPECIFIED, ChannelsLast8());
  EXPECT_TRUE(absl::c_linear_search(
      specs,
      "rearrange(out=1x6x10x32,x0=1x6x10x16[o0,o1,o2,o3],x1=1x6x10x16[o0,o1,o2,o3-16])"
      "+map[32,32](mul(%0,$0),add(%1,$1),relu(%2))"))
      << absl::StrJoin(specs, "\n");
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, Nhwc(), &pkg, dir_->File("dense_nhwc.onnx")), 3);
  std::set<std::string> values;
  for (const v1::PackageValue& v : pkg.values()) values.insert(v.name());
  for (const char* v : {"a", "b", "r"}) {
    EXPECT_TRUE(values.count(std::string(v) + "@nhwc")) << v;
    EXPECT_FALSE(values.count(v)) << v << " has an NCHW form";
  }
  for (const char* v : {"cat", "cat@nhwc"}) EXPECT_FALSE(values.count(v)) << v << " is stored";
  for (const auto& st : pkg.steps()) EXPECT_TRUE(st.has_kernel()) << st.node().name();
}

// A concatenation whose program would read a 3-D runtime value stays a step
// of its own (the value has no channels-last form); the build still
// matches the float64 interpreter and ONNX Runtime.
TEST_F(GraphTest, ConcatWhoseProgramReadsA3dValueStaysAStep) {
  Model m = Import("concat_add_3d");
  for (const std::string& spec : TaskSpecs(m, v1::OP_KIND_UNSPECIFIED, ChannelsLast8()))
    EXPECT_FALSE(absl::StartsWith(spec, "rearrange(")) << spec;
  EXPECT_GE(CheckAgainstReference(m, Nhwc(), nullptr, dir_->File("concat_add_3d.onnx")), 3);
}

// A dense block as torchvision exports it (each layer concatenates every
// earlier feature) in NCHW: the four concatenations share the last one's
// buffer, each feature is written by its producer into its block there,
// and no concatenation copies. Every value against the float64
// interpreter and ONNX Runtime.
TEST_F(GraphTest, DenseBlockConcatenationsShareOneBuffer) {
  Model m = Import("dense_block");
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, Nchw(), &pkg, dir_->File("dense_block.onnx")), 8);
  std::vector<std::string> in_place;
  for (const auto& s : pkg.steps()) {
    if (s.has_node() && s.node().op() == "Concat") {
      EXPECT_TRUE(s.node().view()) << s.node().name();
      in_place.push_back(s.node().name());
    }
  }
  EXPECT_EQ(in_place, (std::vector<std::string>{"cat0", "cat1", "cat2", "cat3"}));
  std::map<std::string, int64_t> at;
  for (const v1::PackageValue& v : pkg.values()) at[v.name()] = v.offset();
  const int64_t plane = 16 * 16 * 4;  // bytes of one channel
  ASSERT_TRUE(at.count("block_out"));
  const int64_t base = at["block_out"];
  for (const char* cat : {"cat0", "cat1", "cat2"}) EXPECT_EQ(at[cat], base) << cat;
  EXPECT_EQ(at["x0"], base);
  EXPECT_EQ(at["f1"], base + 8 * plane);
  EXPECT_EQ(at["f2"], base + 12 * plane);
  EXPECT_EQ(at["f3"], base + 16 * plane);
}

// A float16 export with float32 inputs and outputs imports (float16
// initializers as raw data and as int32_data bit patterns) and runs in
// float32 on the 16-bit values: a Cast to float16 or bfloat16 rounds to that
// format. Every value against the float64 interpreter; the output against
// ONNX Runtime, which computes in float16, within the float16 model
// tolerance.
TEST_F(GraphTest, Float16ExportsImportAndRun) {
  Model m = Import("fp16_io32");
  const std::vector<std::string> specs = TaskSpecs(m, v1::OP_KIND_CONV2D);
  EXPECT_EQ(specs.size(), 2u) << absl::StrJoin(specs, "\n");
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, Nchw(), &pkg), 4);
  if (absl::Status ort = testing::OrtAvailable(); !ort.ok()) {
    TF_SKIP("no-models") << "outputs not compared with ONNX Runtime: " << ort.message();
  }
  auto rt = GraphRuntime::Load(pkg, {});
  ASSERT_TRUE(rt.ok()) << rt.status();
  const Values<float> in = RandomModelInputs(m, 16);
  Values<float> out;
  ASSERT_TRUE((*rt)->Run(in, &out).ok());
  testing::TempDir scratch;
  auto theirs = testing::RunOrt(dir_->File("fp16_io32.onnx"), in, m.shapes, m.outputs,
                                scratch.path());
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  const double err = testing::MaxOutputError(out, *theirs, m.outputs);
  EXPECT_LT(err, kFloat16ModelTolerance) << "against ONNX Runtime";
}

// Softmax and LogSoftmax are kernels: over a strided axis (channels of
// NCHW), over rows, and in the opset-11 form that normalizes the whole
// input coerced to 2-D. Every value against the interpreter and ONNX Runtime.
TEST_F(GraphTest, SoftmaxIsAKernel) {
  for (const auto& [name, want] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"softmax", {"softmax(A=1,N=8,B=960)", "log_softmax(A=192,N=40)"}},
           {"softmax_old", {"softmax(A=1,N=7680)"}}}) {
    SCOPED_TRACE(name);
    Model m = Import(name);
    EXPECT_EQ(TaskSpecs(m, v1::OP_KIND_SOFTMAX), want);
    v1::ModelPackage pkg;
    EXPECT_GE(CheckAgainstReference(m, Nchw(), &pkg, dir_->File(name + ".onnx")), 2);
    for (const auto& s : pkg.steps()) EXPECT_FALSE(s.has_node()) << s.node().name();
  }
}

// Reductions are kernels: every ONNX reduction, over one run of
// neighbouring axes (rows, a strided axis, two axes, all of them), as
// [A, N, B] whatever keepdims; a decomposed LayerNorm's variance takes its
// Add eps -> Sqrt as a program; over axes apart, one kernel per run (L1,
// SumSquare and LogSum change op after the first pass); GlobalMaxPool as a
// max over each channel. Every value against the interpreter and ONNX
// Runtime.
TEST_F(GraphTest, ReductionsAreKernels) {
  Model m = Import("reduce");
  // The two means over rows are one task.
  EXPECT_EQ(
      TaskSpecs(m, v1::OP_KIND_REDUCE),
      (std::vector<std::string>{
          "reduce_mean(A=192,N=40)", "reduce_sum(A=8,N=960)", "reduce_max(A=1,N=8,B=960)",
          "reduce_min(A=1,N=192,B=40)", "reduce_l2(A=192,N=40)", "reduce_l1(A=8,N=24,B=40)",
          "reduce_log_sum_exp(A=1,N=8,B=960)", "reduce_sum_square(A=1,N=7680)",
          "reduce_max(A=192,N=40)", "reduce_min(A=192,N=40)", "reduce_log_sum_exp(A=192,N=40)",
          "reduce_sum(A=1,N=8,B=960)", "reduce_prod(A=192,N=40)", "reduce_l1(A=1,N=8,B=960)",
          "reduce_sum_square(A=1,N=8,B=960)", "reduce_l2(A=1,N=8,B=960)", "reduce_max(A=8,N=960)",
          "reduce_log_sum(A=192,N=40)", "reduce_mean(A=192,N=40)+map[1](add(%0,$0),sqrt(%1))"}));
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, {}, &pkg, dir_->File("reduce.onnx")), 20);
  // Native: only the passes after the first over axes apart, under 4,096
  // elements (960).
  std::vector<std::string> native;
  for (const auto& s : pkg.steps())
    if (s.has_node()) native.push_back(s.node().name());
  EXPECT_EQ(native, (std::vector<std::string>{"sum_apart/run1", "l1_apart/run1", "ss_apart/run1",
                                              "lse_apart/run1", "l2_apart/run1", "ls_apart/run1"}));
}

// Reductions of a value written channels-last read it so when their
// reduced dimensions are neighbours in N, H, W, C order and they keep their
// dimensions: no layout conversion between the convolution and them (the
// L2 over C and W, apart in NCHW, is two passes from import: over C, then
// over W of a value whose NHWC memory is its NCHW memory).
TEST_F(GraphTest, ReductionsReadChannelsLastValues) {
  const BuildOptions nhwc = Nhwc();
  const frontend::ExtractOptions xo = ChannelsLast8();
  Model m = Import("reduce_nhwc");
  EXPECT_EQ(TaskSpecs(m, v1::OP_KIND_REDUCE, xo),
            (std::vector<std::string>{"reduce_mean(A=1,N=960,B=16)", "reduce_max(A=960,N=16)",
                                      "reduce_sum(A=1,N=24,B=640)", "reduce_l2(A=960,N=16)",
                                      "reduce_max(A=1,N=960,B=16)"}));
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, nhwc, &pkg, dir_->File("reduce_nhwc.onnx")), 7);
  std::vector<std::string> transposes;
  for (const auto& st : pkg.steps()) {
    const std::string name = st.has_kernel() ? st.kernel().nodes(0) : st.node().name();
    if (absl::EndsWith(name, "/transpose")) transposes.push_back(name);
  }
  // Only the model's input to NHWC and its outputs back (max_c's and the
  // L2's first pass have the same memory in both layouts).
  EXPECT_EQ(transposes,
            (std::vector<std::string>{"x@nhwc/transpose", "y/transpose", "sum_h/transpose"}))
      << absl::StrJoin(transposes, ", ");
}

// LayerNormalization and InstanceNormalization (one image) are kernels:
// rows read in slices (40, 960 elements) with and without a bias, per
// channel, and with a scale that repeats along the row (P=40 of 960).
TEST_F(GraphTest, NormalizationsAreKernels) {
  Model m = Import("norm");
  EXPECT_EQ(TaskSpecs(m, v1::OP_KIND_NORMALIZE),
            (std::vector<std::string>{
                "layer_norm(A=192,N=40)", "layer_norm(A=8,N=960,eps=0.00100000005,bias=0)",
                "instance_norm(A=8,N=960)", "layer_norm(A=8,N=960,bias=0,P=40)"}));
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, {}, &pkg, dir_->File("norm.onnx")), 4);
  for (const auto& s : pkg.steps()) EXPECT_FALSE(s.has_node()) << s.node().name();
}

// A batch of two: InstanceNormalization's rows are each image's channels,
// scale and bias repeating per image (P=8 of 16 rows); a LayerNormalization
// scale of [1, W] repeats along the row. A scale over other dimensions of
// the row ([H, 1]) stays native.
TEST_F(GraphTest, NormalizationsOfABatch) {
  Model m = Import("norm_batch");
  EXPECT_EQ(
      TaskSpecs(m, v1::OP_KIND_NORMALIZE),
      (std::vector<std::string>{"instance_norm(A=16,N=320,P=8)", "layer_norm(A=2,N=2560,P=20)"}));
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, {}, &pkg, dir_->File("norm_batch.onnx")), 3);
  std::vector<std::string> native;
  for (const auto& s : pkg.steps())
    if (s.has_node()) native.push_back(s.node().name());
  EXPECT_EQ(native, (std::vector<std::string>{"ln_rows_scale"}));
}

// Linear resizes are kernels (rearranges with linear set): half pixel x2,
// align corners to a size, a pytorch-half-pixel downsampling; no native
// step is left, and every value matches the interpreter and ONNX Runtime.
TEST_F(GraphTest, LinearResizesAreKernels) {
  Model m = Import("resize_linear");
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, Nchw(), &pkg, dir_->File("resize_linear.onnx")), 4);
  int linear = 0;
  for (const auto& k : pkg.kernels())
    linear += k.workload().op() == v1::OP_KIND_REARRANGE && k.workload().rearrange().linear();
  EXPECT_EQ(linear, 3);
  for (const auto& s : pkg.steps()) EXPECT_FALSE(s.has_node()) << s.node().name();
}

// The never-slower rule: a tuned schedule is used only where it measured
// faster than the default on the same device; the result is right either way.
TEST_F(GraphTest, TunedKernelOnlyWhereItBeatsTheDefault) {
  Model m = Import("tiny");
  absl::StatusOr<TaskExtraction> ex = ExtractTasks(m);
  ASSERT_TRUE(ex.ok());
  ASSERT_GE(ex->tasks.size(), 3u);
  std::mt19937_64 rng(5);
  const ir::Target host = codegen::HostTarget();
  int asked = 0;
  BuildOptions o;
  o.compare_locally = false;
  o.choose = [&](const ModelTask& t) -> absl::StatusOr<KernelChoice> {
    KernelChoice c;
    auto dag = ir::BuildComputeDAG(t.workload);
    if (!dag.ok()) return dag.status();
    c.tuned = true;
    c.schedule = schedule::ToProto(search::space::RandomSchedule(*dag, host, rng));
    c.record_id = 100 + asked;
    // Even tasks: the tuned one measured faster; odd: slower; the last: no
    // default time (and no local comparison), so the default is kept.
    if (asked == int(ex->tasks.size()) - 1) {
      c.tuned_sec = 1e-3;
    } else if (asked % 2 == 0) {
      c.tuned_sec = 1e-3;
      c.default_sec = 2e-3;
    } else {
      c.tuned_sec = 3e-3;
      c.default_sec = 2e-3;
    }
    ++asked;
    return c;
  };
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, o, &pkg), 2);
  // The tasks' kernels, then the data movers' (never tuned).
  const int tasks = int(ex->tasks.size());
  ASSERT_GE(pkg.kernels_size(), tasks);
  for (int k = tasks; k < pkg.kernels_size(); ++k) {
    EXPECT_EQ(pkg.kernels(k).workload().op(), v1::OP_KIND_REARRANGE);
    EXPECT_FALSE(pkg.kernels(k).tuned());
  }
  for (int k = 0; k < tasks; ++k) {
    const v1::PackageKernel& kern = pkg.kernels(k);
    SCOPED_TRACE(kern.description() + ": " + kern.choice());
    const bool last = k == tasks - 1;
    EXPECT_EQ(kern.tuned(), !last && k % 2 == 0);
    EXPECT_EQ(kern.schedule().is_default(), !kern.tuned());
    if (kern.tuned()) EXPECT_EQ(kern.record_id(), 100 + k);
    if (!last && k % 2 == 1) EXPECT_TRUE(absl::StrContains(kern.choice(), "measured faster"));
    if (last) EXPECT_TRUE(absl::StrContains(kern.choice(), "no time on the tuned record"));
  }
}

// Where no default time is stored and the target is this machine, both
// kernels are timed here and the faster kept (the choice says which).
TEST_F(GraphTest, TunedWithoutADefaultTimeIsComparedHere) {
  Model m = Import("tiny");
  std::mt19937_64 rng(9);
  BuildOptions o;
  o.choose = [&](const ModelTask& t) -> absl::StatusOr<KernelChoice> {
    KernelChoice c;
    auto dag = ir::BuildComputeDAG(t.workload);
    if (!dag.ok()) return dag.status();
    c.tuned = true;
    c.schedule = schedule::ToProto(search::space::RandomSchedule(*dag, codegen::HostTarget(), rng));
    c.record_id = 7;
    return c;
  };
  v1::ModelPackage pkg;
  EXPECT_GE(CheckAgainstReference(m, o, &pkg), 2);
  for (const auto& k : pkg.kernels()) {
    if (k.workload().op() == v1::OP_KIND_REARRANGE) continue;  // a data mover, never tuned
    EXPECT_GT(k.default_sec(), 0) << k.choice();
    EXPECT_GT(k.tuned_sec(), 0) << k.choice();
    EXPECT_EQ(k.tuned(), k.tuned_sec() < k.default_sec()) << k.choice();
    EXPECT_TRUE(absl::StrContains(k.choice(), "timed here")) << k.choice();
  }
}

// A shared object that kills its process (SIGSEGV) as it is loaded.
absl::StatusOr<std::string> CrashingLibrary(const testing::TempDir& dir) {
  std::ofstream(dir.File("crash.c"))
      << "#include <signal.h>\n__attribute__((constructor)) static void die(void) { "
         "raise(SIGSEGV); }\n";
  testing::CommandResult cc = testing::RunCommand(
      {"/usr/bin/cc", "-shared", "-fPIC", "-o", dir.File("crash.so"), dir.File("crash.c")},
      dir.path());
  if (cc.exit_code != 0) return absl::InternalError(cc.err);
  return testing::ReadFileOrEmpty(dir.File("crash.so"));
}

// The whole-model comparison behind never-slower: a ratio of paired runs
// (no claim on its value here: this machine is noisy), and the reason when
// a build does not load.
TEST_F(GraphTest, PairedSpeedupComparesWholeBuilds) {
  Model m = Import("tiny");
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(m, codegen::HostTarget());
  ASSERT_TRUE(pkg.ok()) << pkg.status();
  absl::StatusOr<double> same = PairedSpeedup(*pkg, *pkg, 1, 5);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(std::isfinite(*same) && *same > 0) << *same;
  v1::ModelPackage broken = *pkg;
  broken.mutable_kernels(0)->set_shared_object("not an ELF file");
  absl::StatusOr<double> bad = PairedSpeedup(*pkg, broken, 1, 5);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "kernel ")) << bad.status();
  // A build that computes something else is refused before it is timed:
  // its weights moved by 0.5 move the outputs far past the tolerance.
  v1::ModelPackage other = *pkg;
  int moved = 0;
  for (v1::PackageTensor& c : *other.mutable_constants()) {
    std::string& bytes = *c.mutable_f32();
    for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
      float v;
      std::memcpy(&v, bytes.data() + i, 4);
      v += 0.5f;
      std::memcpy(bytes.data() + i, &v, 4);
      ++moved;
    }
  }
  ASSERT_GT(moved, 0) << "the model has no float32 weights to move";
  absl::StatusOr<PairedTiming> wrong = TimePaired(*pkg, other, 1, 5);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kDataLoss) << wrong.status();
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "the two builds disagree on output"))
      << wrong.status();
  // A kernel that kills its process takes the child down, not the caller.
  v1::ModelPackage crashing = *pkg;
  absl::StatusOr<std::string> so = CrashingLibrary(*dir_);
  ASSERT_TRUE(so.ok()) << so.status();
  crashing.mutable_kernels(0)->set_shared_object(*so);
  absl::StatusOr<PairedTiming> died = TimePaired(*pkg, crashing, 1, 5);
  ASSERT_FALSE(died.ok());
  EXPECT_TRUE(absl::StrContains(died.status().message(), "runtime error: model process"))
      << died.status();
}

TEST(MemoryPlan, LiveValuesNeverOverlap) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 300; ++round) {
    const int n = 1 + int(rng() % 40);
    std::vector<std::pair<int, int>> life;
    std::vector<int64_t> bytes;
    int64_t sum = 0;
    for (int i = 0; i < n; ++i) {
      int a = int(rng() % 30), b = a + int(rng() % 8);
      life.push_back({a, b});
      bytes.push_back(1 + int64_t(rng() % 5000));
      sum += (bytes.back() + 63) / 64 * 64;
    }
    std::vector<int64_t> off;
    const int64_t arena = PlanMemory(life, bytes, &off);
    ASSERT_EQ(off.size(), size_t(n));
    EXPECT_LE(arena, sum);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(off[size_t(i)] % 64, 0);
      EXPECT_LE(off[size_t(i)] + bytes[size_t(i)], arena);
      for (int j = i + 1; j < n; ++j) {
        const bool alive = life[size_t(i)].first <= life[size_t(j)].second &&
                           life[size_t(j)].first <= life[size_t(i)].second;
        const bool overlap = off[size_t(i)] < off[size_t(j)] + bytes[size_t(j)] &&
                             off[size_t(j)] < off[size_t(i)] + bytes[size_t(i)];
        ASSERT_FALSE(alive && overlap) << "round " << round << " values " << i << ", " << j;
      }
    }
  }
}

TEST_F(GraphTest, BadPackagesAreRefusedWithTheReason) {
  Model m = Import("tiny");
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(m, codegen::HostTarget());
  ASSERT_TRUE(pkg.ok()) << pkg.status();
  auto refused = [&](v1::ModelPackage p, const std::string& why) {
    auto rt = GraphRuntime::Load(p, {});
    ASSERT_FALSE(rt.ok()) << "accepted; wanted: " << why;
    EXPECT_TRUE(absl::StrContains(rt.status().message(), why)) << rt.status();
  };
  v1::ModelPackage p = *pkg;
  p.set_format_version(9);
  refused(p, "format version 9");
  p = *pkg;
  p.mutable_kernels(0)->clear_signature();
  refused(p, "the kernel has no arguments");
  p = *pkg;
  for (auto& s : *p.mutable_steps()) {
    if (s.has_kernel()) {
      s.mutable_kernel()->set_args(0, "nowhere");
      break;
    }
  }
  refused(p, "unknown 'nowhere'");
  p = *pkg;
  p.mutable_values(0)->set_offset(p.arena_bytes());
  refused(p, "outside the arena");
  p.mutable_values(0)->set_offset(2);  // not on a float
  refused(p, "outside the arena");
  p = *pkg;
  for (v1::PackageTensor& c : *p.mutable_constants()) {
    if (c.is_int()) continue;
    c.set_f16(std::string(c.f32().size() / 2, '\0'));
    c.clear_f32();
    break;
  }
  refused(p, "is 16-bit in a float32 package");
  p = *pkg;
  p.set_precision(v1::DType(99));
  refused(p, "precision 99");
  p.set_precision(v1::DTYPE_INT8);
  refused(p, "precision DTYPE_INT8");
  p = *pkg;
  p.mutable_constants(0)->set_f32("abc");
  refused(p, "wrong size");
  p = *pkg;
  for (auto& s : *p.mutable_steps()) {
    if (s.has_kernel()) {
      s.mutable_kernel()->add_args(s.kernel().args(0));
      break;
    }
  }
  refused(p, "arguments, the kernel takes");
  p = *pkg;
  p.mutable_kernels(0)->set_shared_object("not an ELF file");
  refused(p, "kernel ");
  // Structural fuzz: random field damage is an error or a working package, never a crash.
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) {
    p = *pkg;
    switch (rng() % 5) {
      case 0:
        p.mutable_values(int(rng() % p.values_size()))->set_shape(0, int64_t(rng() % 100000));
        break;
      case 1:
        p.mutable_values(int(rng() % p.values_size()))->set_offset(int64_t(rng() % 100000) * 64);
        break;
      case 2:
        p.set_arena_bytes(int64_t(rng() % 100000));
        break;
      case 3:
        p.mutable_steps(int(rng() % p.steps_size()))->Clear();
        break;
      case 4:
        p.mutable_constants(int(rng() % p.constants_size()))->add_shape(int64_t(rng() % 4));
        break;
    }
    auto rt = GraphRuntime::Load(p, {});
    if (rt.ok()) {
      std::map<std::string, std::vector<float>> out;
      (void)(*rt)->Run(RandomModelInputs(m, 1), &out);
    }
  }
}

TEST(Npy, RoundTripAndFuzz) {
  std::vector<float> data = {1.5f, -2, 3, 4, 5, 6};
  std::string bytes = WriteNpy({2, 3}, data);
  absl::StatusOr<NpyArray> a = ParseNpy(bytes);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->data, data);
  EXPECT_EQ(bytes.size() % 64, 24u);  // header padded to 64 bytes, then 24 bytes of data
  EXPECT_FALSE(ParseNpy("hello").ok());
  std::string wrong = bytes;
  wrong.replace(wrong.find("<f4"), 3, "<i8");
  EXPECT_TRUE(absl::StrContains(ParseNpy(wrong).status().message(), "element type"));
  EXPECT_TRUE(absl::StrContains(ParseNpy(bytes.substr(0, bytes.size() - 4)).status().message(),
                                "the shape needs 24"));
  std::mt19937_64 rng(2);
  for (int i = 0; i < 3000; ++i) {
    std::string b = bytes;
    if (rng() % 2) b.resize(rng() % b.size());
    for (int k = 0; k < 3 && !b.empty(); ++k) b[rng() % b.size()] = char(rng());
    absl::StatusOr<NpyArray> r = ParseNpy(b);
    if (r.ok()) {
      int64_t n = 1;
      for (int64_t d : r->shape) n *= d;
      EXPECT_EQ(int64_t(r->data.size()), n);
    }
  }
}

TEST_F(GraphTest, CliBuildsAndRunsAModel) {
  const std::string cli = std::string(TF_BIN_DIR) + "/tunefarm";
  const std::string model = dir_->File("tiny.onnx"), pkg = dir_->File("tiny.tfpkg");
  // Usage errors: exit 2 with one line; a bad model: exit 1 naming it.
  testing::CommandResult r = testing::RunCommand({cli, "build", model, "--untuned"}, dir_->path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "build needs -o")) << r.err;
  r = testing::RunCommand({cli, "build", dir_->File("unsupported.onnx"), "-o", pkg, "--untuned"},
                          dir_->path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "unsupported.onnx")) << r.err;
  r = testing::RunCommand({cli, "build", model, "-o", pkg, "--db", dir_->File("none.db")},
                          dir_->path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "no log database")) << r.err;
  r = testing::RunCommand({cli, "build", model, "-o", pkg, "--untuned"}, dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "0 tuned")) << r.out;

  // Run with an input from a .npy file; the output file matches the reference.
  Model m = Import("tiny");
  Values<float> in = RandomModelInputs(m, 4);
  testing::WriteFile(dir_->File("x.npy"), WriteNpy(m.shapes.at("x"), in.at("x")));
  r = testing::RunCommand({cli, "run", pkg, "--input", "x=" + dir_->File("x.npy"), "--output-dir",
                           dir_->File("out"), "--repeat", "3", "--threads", "2"},
                          dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "median of 3")) << r.out;
  absl::StatusOr<NpyArray> y = ParseNpy(testing::ReadFileOrEmpty(dir_->File("out/y.npy")));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape, (std::vector<int64_t>{1, 10}));
  Values<double> in64;
  in64["x"].assign(in.at("x").begin(), in.at("x").end());
  auto ref = Interpret(m, in64);
  ASSERT_TRUE(ref.ok());
  EXPECT_LT(RelError(y->data, ref->at("y")), 2e-4);

  // The package records the thread count it was built for; `run` uses it
  // by default and says so when told another.
  r = testing::RunCommand({cli, "build", model, "-o", dir_->File("t2.tfpkg"), "--untuned",
                           "--threads", "2"},
                          dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<v1::ModelPackage> built2 = GraphRuntime::ReadPackage(dir_->File("t2.tfpkg"));
  ASSERT_TRUE(built2.ok()) << built2.status();
  EXPECT_EQ(built2->threads(), 2);
  r = testing::RunCommand({cli, "run", dir_->File("t2.tfpkg"), "--json"}, dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "\"threads\": 2")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.err, "note:")) << r.err;
  r = testing::RunCommand({cli, "run", dir_->File("t2.tfpkg"), "--threads", "1", "--json"},
                          dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "\"threads\": 1")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "was built for 2 threads")) << r.err;

  // Bad run inputs: one line each, exit 1 or 2.
  r = testing::RunCommand({cli, "run", model}, dir_->path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "is not a tunefarm model package")) << r.err;
  testing::WriteFile(dir_->File("small.npy"), WriteNpy({1, 3}, {1, 2, 3}));
  r = testing::RunCommand({cli, "run", pkg, "--input", "x=" + dir_->File("small.npy")},
                          dir_->path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "needs shape 1x3x16x16")) << r.err;
  r = testing::RunCommand({cli, "run", pkg, "--input", "nope=" + dir_->File("x.npy")},
                          dir_->path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "'nope' is not an input")) << r.err;

  // --value fixes an input: the If on it takes a branch and the package
  // has only the other input; a malformed or misnamed value exits 2 or 1.
  const std::string rate = dir_->File("rate_branch.onnx");
  r = testing::RunCommand(
      {cli, "build", rate, "-o", dir_->File("rate.tfpkg"), "--untuned", "--value", "rate=16000"},
      dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<v1::ModelPackage> fixed = GraphRuntime::ReadPackage(dir_->File("rate.tfpkg"));
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(std::vector<std::string>(fixed->inputs().begin(), fixed->inputs().end()),
            std::vector<std::string>{"x"});
  r = testing::RunCommand(
      {cli, "build", rate, "-o", dir_->File("rate.tfpkg"), "--untuned", "--value", "rate="},
      dir_->path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "expected NAME=V")) << r.err;
  r = testing::RunCommand(
      {cli, "build", rate, "-o", dir_->File("rate.tfpkg"), "--untuned", "--value", "sr=1"},
      dir_->path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "--value names 'sr'")) << r.err;

  // A zero-size input (a batch of no rows): an output of no values, said
  // so in text and as nulls in JSON.
  r = testing::RunCommand({cli, "build", dir_->File("rows_dense.onnx"), "-o",
                           dir_->File("rows.tfpkg"), "--untuned", "--shape", "x=0x4"},
                          dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testing::RunCommand({cli, "run", dir_->File("rows.tfpkg")}, dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "y 0x3: empty (no values)")) << r.out;
  r = testing::RunCommand({cli, "run", dir_->File("rows.tfpkg"), "--json"}, dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.out, "{\"name\": \"y\", \"shape\": \"0x3\", \"min\": null, \"max\": null"))
      << r.out;
}

// runtime::MeasureModel, the one measure of whole packages: given inputs
// (checked by name and shape) beside seeded ones, outputs from the first
// run, each step profiled, the run count as asked; paired, both builds'
// steps and the error between their outputs.
TEST_F(GraphTest, MeasureModelTakesInputsProfilesAndPairs) {
  Model m = Import("tiny");
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(m, codegen::HostTarget());
  ASSERT_TRUE(pkg.ok()) << pkg.status();
  Values<float> in = RandomModelInputs(m, 5);
  v1::ModelRunRequest req;
  req.set_package(pkg->SerializeAsString());
  req.set_repeats(3);
  req.set_profile(true);
  req.set_return_outputs(true);
  req.set_time_limit_s(120);
  runtime::SetModelInputs(*pkg, in, &req);
  v1::ModelRunResult r = runtime::MeasureModel(req);
  ASSERT_EQ(r.status(), v1::MEASURE_STATUS_OK) << r.error();
  EXPECT_EQ(r.latencies_sec_size(), 3);
  EXPECT_EQ(r.step_sec_size(), pkg->steps_size());
  EXPECT_GT(r.first_run_sec(), 0);
  Values<double> in64;
  in64["x"].assign(in.at("x").begin(), in.at("x").end());
  auto ref = Interpret(m, in64);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_LT(RelError(runtime::ModelRunOutputs(r)["y"], ref->at("y")), 2e-4);

  v1::ModelRunRequest first = req;
  first.set_first_run_only(true);
  r = runtime::MeasureModel(first);
  ASSERT_EQ(r.status(), v1::MEASURE_STATUS_OK) << r.error();
  EXPECT_EQ(r.latencies_sec_size(), 0);
  EXPECT_EQ(r.step_sec_size(), pkg->steps_size());  // the first run's

  v1::ModelRunRequest bad = req;
  bad.mutable_inputs(0)->set_name("nope");
  r = runtime::MeasureModel(bad);
  EXPECT_EQ(r.status(), v1::MEASURE_STATUS_RUNTIME_ERROR);
  EXPECT_TRUE(absl::StrContains(r.error(), "'nope' is not an input of the model")) << r.error();
  bad = req;
  bad.mutable_inputs(0)->set_shape(0, 2);
  r = runtime::MeasureModel(bad);
  EXPECT_EQ(r.status(), v1::MEASURE_STATUS_RUNTIME_ERROR);
  EXPECT_TRUE(absl::StrContains(r.error(), "input 'x' needs shape 1x3x16x16 (given 2x3x16x16)"))
      << r.error();

  v1::ModelRunRequest paired = req;
  paired.set_paired_package(pkg->SerializeAsString());
  r = runtime::MeasureModel(paired);
  ASSERT_EQ(r.status(), v1::MEASURE_STATUS_OK) << r.error();
  EXPECT_GE(r.pair().pairs(), 3);
  EXPECT_EQ(r.pair().a_step_sec_size(), pkg->steps_size());
  EXPECT_EQ(r.pair().b_step_sec_size(), pkg->steps_size());
  EXPECT_EQ(r.pair().output_error(), 0);  // one build, one set of outputs
  EXPECT_TRUE(r.pair().a_sec() > 0 && r.pair().b_sec() > 0 && r.pair().a_over_b() > 0);
}

// `tunefarm run` measures in a confined child (runtime::MeasureModel): a
// kernel that kills its process is an error naming the package, and the
// command exits 1 with one line.
TEST_F(GraphTest, CliRunSurvivesAKernelThatCrashes) {
  absl::StatusOr<v1::ModelPackage> pkg = BuildPackage(Import("tiny"), codegen::HostTarget());
  ASSERT_TRUE(pkg.ok()) << pkg.status();
  absl::StatusOr<std::string> so = CrashingLibrary(*dir_);
  ASSERT_TRUE(so.ok()) << so.status();
  pkg->mutable_kernels(0)->set_shared_object(*so);
  const std::string path = dir_->File("crash.tfpkg");
  testing::WriteFile(path, pkg->SerializeAsString());
  testing::CommandResult r = testing::RunCommand(
      {std::string(TF_BIN_DIR) + "/tunefarm", "run", path, "--repeat", "3"}, dir_->path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, path + ": runtime error: model process")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// `--precision fp16`: a cuda package of float16 kernels and values (the
// build line says so), the float16 tasks from `tasks`; bf16 likewise, and
// tf32 a float32 package of tf32 products (the build line counts them); for
// a CPU target, an arch without the format, or another dtype, one line and
// exit 2. The runtime refuses a float16 package for a CPU target and a
// kernel whose dtype is not the package's.
TEST_F(GraphTest, CliBuilds16BitAndTf32Packages) {
  if (!codegen::HaveNvrtc()) TF_SKIP("no-cuda-toolkit") << "this build has no NVRTC";
  const std::string cli = std::string(TF_BIN_DIR) + "/tunefarm";
  const std::string model = dir_->File("tiny.onnx"), pkg = dir_->File("tiny16.tfpkg");
  testing::CommandResult r =
      testing::RunCommand({cli, "build", model, "-o", pkg, "--untuned", "--target",
                           "cuda -arch=sm_87", "--precision", "fp16"},
                          dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, " MB in float16, arena")) << r.out;
  absl::StatusOr<v1::ModelPackage> built = GraphRuntime::ReadPackage(pkg);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->precision(), v1::DTYPE_FLOAT16);
  EXPECT_EQ(built->format_version(), runtime::kPackageFormatVersion);
  ASSERT_GT(built->kernels_size(), 0);
  for (const v1::PackageKernel& k : built->kernels())
    EXPECT_TRUE(absl::StrContains(k.description(), " fp16 ")) << k.description();
  // bfloat16 likewise (sm_80 and newer).
  r = testing::RunCommand({cli, "build", model, "-o", dir_->File("tiny_bf16.tfpkg"), "--untuned",
                           "--target", "cuda -arch=sm_87", "--precision", "bf16"},
                          dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, " MB in bfloat16, arena")) << r.out;
  absl::StatusOr<v1::ModelPackage> bf16 = GraphRuntime::ReadPackage(dir_->File("tiny_bf16.tfpkg"));
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->precision(), v1::DTYPE_BFLOAT16);
  for (const v1::PackageKernel& k : bf16->kernels())
    EXPECT_TRUE(absl::StrContains(k.description(), " bf16 ")) << k.description();
  // tf32: a float32 package (format 3) whose products are tf32 kernels.
  r = testing::RunCommand({cli, "build", model, "-o", dir_->File("tiny_tf32.tfpkg"), "--untuned",
                           "--target", "cuda -arch=sm_87", "--precision", "tf32"},
                          dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<v1::ModelPackage> tf32 = GraphRuntime::ReadPackage(dir_->File("tiny_tf32.tfpkg"));
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  EXPECT_EQ(tf32->precision(), v1::DTYPE_UNSPECIFIED);
  EXPECT_EQ(tf32->format_version(), runtime::kFloat32PackageFormatVersion);
  int tf32_kernels = 0;
  for (const v1::PackageKernel& k : tf32->kernels()) {
    EXPECT_EQ(absl::StrContains(k.description(), " tf32 "), k.workload().tf32()) << k.description();
    tf32_kernels += k.workload().tf32();
  }
  EXPECT_GE(tf32_kernels, 3);  // tiny's convolutions and dense layer
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("; ", tf32_kernels, " in tf32)"))) << r.out;
  r = testing::RunCommand(
      {cli, "tasks", model, "--target", "cuda -arch=sm_87", "--precision", "fp16", "--specs"},
      dir_->path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  EXPECT_EQ(int(lines.size()), built->kernels_size()) << r.out;
  for (const std::string& l : lines) EXPECT_TRUE(absl::StrContains(l, "dtype=float16")) << l;
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--precision", "fp16"},
        std::vector<std::string>{"--target", "cuda -arch=sm_75", "--precision", "bf16"},
        std::vector<std::string>{"--target", "cuda -arch=sm_75", "--precision", "tf32"},
        std::vector<std::string>{"--target", "cuda -arch=sm_87", "--precision", "half"}}) {
    std::vector<std::string> cmd = {cli, "build", model, "-o", pkg, "--untuned"};
    cmd.insert(cmd.end(), bad.begin(), bad.end());
    r = testing::RunCommand(cmd, dir_->path());
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(bad, " ");
    EXPECT_TRUE(absl::StrContains(r.err, "--precision")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  v1::ModelPackage cpu = *built;
  cpu.set_target("llvm -mtriple=x86_64-linux-gnu");
  absl::StatusOr<std::unique_ptr<GraphRuntime>> rt = GraphRuntime::Load(cpu, {});
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kUnimplemented) << rt.status();
  EXPECT_TRUE(absl::StrContains(rt.status().message(), "float16 package runs on cuda targets"))
      << rt.status();
  absl::StatusOr<v1::ModelPackage> host = BuildPackage(Import("tiny"), codegen::HostTarget(), {});
  ASSERT_TRUE(host.ok()) << host.status();
  host->mutable_kernels(0)->mutable_signature()->mutable_args(0)->set_dtype(v1::DTYPE_FLOAT16);
  rt = GraphRuntime::Load(*host, {});
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kInvalidArgument) << rt.status();
  EXPECT_TRUE(absl::StrContains(rt.status().message(), "the package's values are float32"))
      << rt.status();
}

}  // namespace
}  // namespace tunefarm::deploy
