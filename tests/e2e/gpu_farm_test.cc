// On a machine with an NVIDIA GPU (ctest label gpu; skipped, reported as
// skipped, where there is none): a CUDA tuning job through the real farm.
// The server, a compile worker (NVRTC cubins) and a device agent with the
// GPU run as processes on 127.0.0.1; every candidate the GPU search proposes
// is built by the worker, checked against the reference and timed by the
// agent, and lands in the database; the job beats its default schedule.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "cli/records_jsonl.h"
#include "common/float16.h"
#include "common/subprocess.h"
#include "device_agent/runtime/capabilities.h"
#include "device_agent/runtime/npy.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "search/gpu_local_measurer.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

using testing::BinPath;
using testing::CommandResult;
using testing::ServerProcess;

// Skips where there is no GPU, or one this build cannot use; target is
// this machine's GPU's ("cuda -arch=sm_90").
class GpuFarm : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::Capabilities caps = runtime::DetectCapabilities();
    if (!caps.has_gpu()) TF_SKIP("no-gpu") << "no GPU on this machine";
    target = runtime::LocalCudaTarget(caps);
    if (absl::Status s = search::GpuLocalMeasurer::Check(*ir::Target::Parse(target)); !s.ok())
      TF_SKIP("gpu-unusable") << s;
  }
  std::string target;
};

TEST_F(GpuFarm, CudaJobIsBuiltByAWorkerAndTimedByAnAgentWithTheGpu) {
  testing::TempDir dir;
  auto server =
      ServerProcess::Start(dir.File("farm.db"), dir.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = (*server)->address();
  auto cli = [&](std::vector<std::string> args) {
    return (*server)->Cli(std::move(args), dir.path());
  };
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir.File("procs.log");
  auto agent = Subprocess::Start(
      {BinPath("tunefarm-agent"), "--server=" + addr, "--key=gpu", "--device_id=g1",
       (*server)->server_key_flag()},
      quiet);
  auto worker =
      Subprocess::Start({BinPath("tunefarm-worker"), "--server=" + addr, "--device_id=w1"}, quiet);
  ASSERT_TRUE(agent.ok() && worker.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        CommandResult r = cli({"devices"});
        return absl::StrContains(r.out, "g1") && absl::StrContains(r.out, "w1");
      },
      absl::Seconds(60)))
      << testing::ReadFileOrEmpty(dir.File("procs.log"));
  const std::string list = dir.File("w.txt");
  testing::WriteFile(list,
                     "conv2d_nchw(N=1,C=64,H=28,W=28,K=64,R=3,S=3,pad=1)\n"
                     "matmul(M=256,N=256,K=256)\n");
  CommandResult r = cli(
      {"submit", "--workloads=" + list, "--target=" + target, "--device_key=gpu", "--trials=64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        std::string out = cli({"job", "1"}).out;
        return absl::StrContains(out, "succeeded") || absl::StrContains(out, "failed");
      },
      absl::Seconds(400)))
      << cli({"job", "1"}).out << testing::ReadFileOrEmpty(dir.File("procs.log"));
  r = cli({"job", "1"});
  ASSERT_TRUE(absl::StrContains(r.out, "succeeded")) << r.out;
  std::istringstream in(cli({"records", "--job=1", "--limit=1000", "--json"}).out);
  auto records = cli::ParseRecordsJsonl(in, "records --json");
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(records->size(), 64u);
  int ok = 0;
  std::map<std::string, double> best, def;
  for (const v1::Record& rec : *records) {
    EXPECT_NE(rec.status(), v1::MEASURE_STATUS_WRONG_RESULT) << cli::RecordToJsonLine(rec);
    EXPECT_EQ(rec.device_id(), "g1");
    if (rec.status() != v1::MEASURE_STATUS_OK) continue;
    ++ok;
    EXPECT_FALSE(rec.fingerprint().gpu_name().empty());
    EXPECT_FALSE(rec.fingerprint().cuda_toolkit().empty());
    std::vector<double> c(rec.costs_sec().begin(), rec.costs_sec().end());
    std::sort(c.begin(), c.end());
    const double t = c[c.size() / 2];
    if (rec.schedule().is_default()) def[rec.workload_key()] = t;
    if (!best.count(rec.workload_key()) || t < best[rec.workload_key()])
      best[rec.workload_key()] = t;
  }
  EXPECT_GT(ok, 32);
  ASSERT_EQ(def.size(), 2u) << "each task's default schedule is measured first";
  for (const auto& [key, t] : def) {
    EXPECT_LT(best[key], t) << key << ": the GPU search found nothing faster than the default";
  }
  (*agent)->Kill(SIGTERM);
  (*worker)->Kill(SIGTERM);
  ASSERT_TRUE((*agent)->Wait(absl::Seconds(20)).ok());
  ASSERT_TRUE((*worker)->Wait(absl::Seconds(20)).ok());
}

// y = Conv1x1(Relu(Conv3x3(x) + b)), x [1, 4, 16, 16], as ONNX bytes.
std::string SmallCnn() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  auto value = [](onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  uint32_t seed = 5;
  auto weight = [&](const std::string& name, std::vector<int64_t> dims) {
    onnx::TensorProto* w = g->add_initializer();
    w->set_name(name);
    w->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) w->add_dims(d), n *= d;
    for (int64_t i = 0; i < n; ++i)
      w->add_float_data(float((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f);
  };
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const std::string& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  value(g->add_input(), "x", {1, 4, 16, 16});
  weight("w1", {8, 4, 3, 3});
  weight("b1", {8});
  weight("w2", {2, 8, 1, 1});
  onnx::NodeProto* c = node("Conv", {"x", "w1", "b1"}, "c");
  onnx::AttributeProto* pads = c->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  node("Relu", {"c"}, "r");
  node("Conv", {"r", "w2"}, "y");
  value(g->add_output(), "y", {1, 2, 16, 16});
  return m.SerializeAsString();
}

std::vector<float> ReadNpy(const std::string& path) {
  absl::StatusOr<runtime::NpyArray> a = runtime::ParseNpy(testing::ReadFileOrEmpty(path));
  EXPECT_TRUE(a.ok()) << path << ": " << a.status();
  return a.ok() ? a->data : std::vector<float>();
}

// A CUDA model package run on a board through the farm (`run --device-key`):
// the server has a worker build its kernels again for the agent's GPU, the
// agent's model runner runs it on the device, confined, and the outputs
// equal a local run on this GPU and match the CPU build of the same model.
TEST_F(GpuFarm, CudaModelPackageRunsOnAnAgentWithTheGpu) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("m.onnx"), SmallCnn());
  auto local = [&](std::vector<std::string> args) {
    args.insert(args.begin(), BinPath("tunefarm"));
    return testing::RunCommand(args, dir.path());
  };
  const std::string model = dir.File("m.onnx"), gpu_pkg = dir.File("gpu.tfpkg"),
                    cpu_pkg = dir.File("cpu.tfpkg");
  CommandResult b = local({"build", model, "--target", target, "--untuned", "-o", gpu_pkg});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  b = local({"build", model, "--untuned", "--layout", "nchw", "-o", cpu_pkg});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto server =
      ServerProcess::Start(dir.File("farm.db"), dir.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir.File("procs.log");
  auto agent = Subprocess::Start({BinPath("tunefarm-agent"), "--server=" + (*server)->address(),
                                  "--key=gpu", "--device_id=g1", (*server)->server_key_flag()},
                                 quiet);
  auto worker = Subprocess::Start(
      {BinPath("tunefarm-worker"), "--server=" + (*server)->address(), "--device_id=w1"}, quiet);
  ASSERT_TRUE(agent.ok() && worker.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        CommandResult r = (*server)->Cli({"devices"}, dir.path());
        return absl::StrContains(r.out, "g1") && absl::StrContains(r.out, "w1");
      },
      absl::Seconds(60)))
      << testing::ReadFileOrEmpty(dir.File("procs.log"));
  CommandResult r = (*server)->Cli({"run", gpu_pkg, "--device-key=gpu", "--seed=3", "--repeat=20",
                                    "--output-dir=" + dir.File("agent")},
                                   dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << testing::ReadFileOrEmpty(dir.File("procs.log"));
  EXPECT_TRUE(absl::StrContains(r.out, "latency")) << r.out;
  r = local({"run", gpu_pkg, "--seed=3", "--output-dir=" + dir.File("here")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = local({"run", cpu_pkg, "--seed=3", "--output-dir=" + dir.File("cpu")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<float> on_agent = ReadNpy(dir.File("agent/y.npy"));
  const std::vector<float> here = ReadNpy(dir.File("here/y.npy"));
  const std::vector<float> cpu = ReadNpy(dir.File("cpu/y.npy"));
  ASSERT_EQ(on_agent.size(), 2u * 16 * 16);
  ASSERT_EQ(here.size(), on_agent.size());
  ASSERT_EQ(cpu.size(), on_agent.size());
  // Largest difference relative to the largest |b|.
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0, scale = 1e-6;
    for (size_t i = 0; i < b.size(); ++i) {
      worst = std::max(worst, double(std::fabs(a[i] - b[i])));
      scale = std::max(scale, double(std::fabs(b[i])));
    }
    return worst / scale;
  };
  // The worker's build of the same schedules (another route, PTX through
  // LLVM, may differ in the last bits).
  EXPECT_LT(rel(on_agent, here), 1e-6);
  EXPECT_LT(rel(on_agent, cpu), 1e-5);
  // The same model in float16 through the farm: the worker rebuilds its
  // float16 kernels, the agent's runtime converts at the package's edges;
  // the output within the float16 model tolerance of the float32 one.
  const std::string half_pkg = dir.File("gpu16.tfpkg");
  b = local(
      {"build", model, "--target", target, "--untuned", "--precision", "fp16", "-o", half_pkg});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  r = (*server)->Cli({"run", half_pkg, "--device-key=gpu", "--seed=3", "--repeat=20",
                      "--output-dir=" + dir.File("agent16")},
                     dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << testing::ReadFileOrEmpty(dir.File("procs.log"));
  const std::vector<float> half = ReadNpy(dir.File("agent16/y.npy"));
  ASSERT_EQ(half.size(), cpu.size());
  EXPECT_LT(rel(half, cpu), kFloat16ModelTolerance);
  for (float v : half) ASSERT_EQ(v, RoundToFloat16(v));
  (*agent)->Kill(SIGTERM);
  (*worker)->Kill(SIGTERM);
  ASSERT_TRUE((*agent)->Wait(absl::Seconds(20)).ok());
  ASSERT_TRUE((*worker)->Wait(absl::Seconds(20)).ok());
}

}  // namespace
}  // namespace tunefarm
