// The agent's GPU path on any machine: the runner's plan of a CUDA build
// (encoded, decoded, refused when damaged), its parameter mapping from a real
// worker-built GpuModule, and the answers of an agent or a runner without a
// GPU. The GPU itself is exercised by gpu_device_test (label gpu).
#include "device_agent/runtime/gpu_plan.h"

#include <random>

#include "absl/strings/match.h"
#include "compiler/codegen/nvrtc_info.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/schedule.h"
#include "device_agent/measure_handler.h"
#include "device_agent/runtime/cuda_driver.h"
#include "device_agent/runtime/measure.h"
#include "device_agent/runtime/sandbox.h"
#include "gtest/gtest.h"
#include "tests/testing/skip.h"
#include "worker/builder.h"

namespace tunefarm {
namespace {

runtime::GpuPlan TwoKernels() {
  runtime::GpuPlan plan;
  plan.image = std::string(
                   "\x7f"
                   "ELF") +
               std::string(300, 'x');
  plan.kernels.push_back({"tf_kernel_0", {4, 2, 1}, {128, 1, 1}, {0, 3}});
  plan.kernels.push_back({"tf_kernel_1", {1, 1, 1}, {32, 8, 1}, {3, 1, 2}});
  plan.workspace_bytes = {4096};
  return plan;
}

TEST(GpuPlan, RoundTripsAndRefusesDamage) {
  const runtime::GpuPlan plan = TwoKernels();
  absl::StatusOr<std::string> bytes = runtime::EncodeGpuPlan(plan);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // 2 inputs: buffers 0, 1; output 2; workspace 3.
  absl::StatusOr<runtime::GpuPlan> back = runtime::DecodeGpuPlan(bytes->data(), bytes->size(), 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->image, plan.image);
  EXPECT_EQ(back->workspace_bytes, plan.workspace_bytes);
  ASSERT_EQ(back->kernels.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(back->kernels[k].name, plan.kernels[k].name);
    EXPECT_EQ(back->kernels[k].grid, plan.kernels[k].grid);
    EXPECT_EQ(back->kernels[k].block, plan.kernels[k].block);
    EXPECT_EQ(back->kernels[k].buffers, plan.kernels[k].buffers);
  }
  // With one input there are only 3 buffers: buffer 3 names none.
  absl::StatusOr<runtime::GpuPlan> short_args =
      runtime::DecodeGpuPlan(bytes->data(), bytes->size(), 1);
  ASSERT_FALSE(short_args.ok());
  EXPECT_TRUE(absl::StrContains(short_args.status().message(), "names buffer 3 of 3"))
      << short_args.status();
  // Every truncation is refused.
  for (size_t n = 0; n < bytes->size(); n += 7) {
    EXPECT_FALSE(runtime::DecodeGpuPlan(bytes->data(), n, 2).ok()) << n;
  }
  // Random damage: refused, or a plan whose every launch and buffer is in range.
  std::mt19937_64 rng(3);
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string damaged = *bytes;
    for (int k = 0; k < 4; ++k) damaged[rng() % damaged.size()] = char(rng());
    absl::StatusOr<runtime::GpuPlan> p = runtime::DecodeGpuPlan(damaged.data(), damaged.size(), 2);
    if (!p.ok()) {
      ++refused;
      continue;
    }
    for (const auto& k : p->kernels) {
      for (int d = 0; d < 3; ++d) {
        EXPECT_GE(k.grid[d], 1);
        EXPECT_GE(k.block[d], 1);
        EXPECT_LE(k.block[d], d == 2 ? 64 : 1024);
      }
      EXPECT_LE(k.block[0] * k.block[1] * k.block[2], 1024);
      for (int b : k.buffers) {
        EXPECT_GE(b, 0);
        EXPECT_LT(b, 3 + int(p->workspace_bytes.size()));
      }
    }
  }
  EXPECT_GT(refused, 0);
  // Float16 buffers travel; one that is not an argument buffer is refused.
  runtime::GpuPlan half = plan;
  half.float16_buffers = {0, 2};
  absl::StatusOr<std::string> half_bytes = runtime::EncodeGpuPlan(half);
  ASSERT_TRUE(half_bytes.ok()) << half_bytes.status();
  absl::StatusOr<runtime::GpuPlan> half_back =
      runtime::DecodeGpuPlan(half_bytes->data(), half_bytes->size(), 2);
  ASSERT_TRUE(half_back.ok()) << half_back.status();
  EXPECT_EQ(half_back->float16_buffers, half.float16_buffers);
  EXPECT_EQ(half_back->half, HalfKind::kFloat16);
  half.half = HalfKind::kBFloat16;  // the buffers' format travels too
  absl::StatusOr<std::string> bf_bytes = runtime::EncodeGpuPlan(half);
  ASSERT_TRUE(bf_bytes.ok()) << bf_bytes.status();
  absl::StatusOr<runtime::GpuPlan> bf_back =
      runtime::DecodeGpuPlan(bf_bytes->data(), bf_bytes->size(), 2);
  ASSERT_TRUE(bf_back.ok()) << bf_back.status();
  EXPECT_EQ(bf_back->half, HalfKind::kBFloat16);
  half.half = HalfKind::kFloat16;
  EXPECT_EQ(half_back->image, plan.image);
  EXPECT_TRUE(back->float16_buffers.empty());
  // Damage there: refused, or float16 buffers that are argument buffers.
  for (int i = 0; i < 2000; ++i) {
    std::string damaged = *half_bytes;
    for (int k = 0; k < 3; ++k) damaged[rng() % damaged.size()] = char(rng());
    absl::StatusOr<runtime::GpuPlan> p = runtime::DecodeGpuPlan(damaged.data(), damaged.size(), 2);
    if (!p.ok()) continue;
    for (int b : p->float16_buffers) {
      EXPECT_GE(b, 0);
      EXPECT_LE(b, 2);
    }
  }
  half.float16_buffers = {3};  // the workspace
  half_bytes = runtime::EncodeGpuPlan(half);
  ASSERT_TRUE(half_bytes.ok());
  absl::StatusOr<runtime::GpuPlan> not_arg =
      runtime::DecodeGpuPlan(half_bytes->data(), half_bytes->size(), 2);
  ASSERT_FALSE(not_arg.ok());
  EXPECT_TRUE(absl::StrContains(not_arg.status().message(), "float16 buffer 3 is not an argument"))
      << not_arg.status();
  // Past the limits: refused when encoded.
  runtime::GpuPlan none = plan;
  none.kernels.clear();
  EXPECT_FALSE(runtime::EncodeGpuPlan(none).ok());
  runtime::GpuPlan long_name = plan;
  long_name.kernels[0].name = std::string(80, 'k');
  EXPECT_FALSE(runtime::EncodeGpuPlan(long_name).ok());
}

// The worker's module for a dense layer: parameters, tensor ids in the
// scheduled DAG, become argument indices (inputs, then the output).
TEST(GpuPlan, MapsAWorkerModulesParametersToArguments) {
  if (codegen::NvrtcSupportedArchs().empty()) TF_SKIP("no-cuda-toolkit") << "no CUDA toolkit in this build";
  v1::BuildRequest req;
  *req.mutable_workload() =
      ir::Canonicalize(*ir::ParseWorkloadSpec("dense(M=64,N=96,K=128)+bias+relu"))->workload;
  req.mutable_target()->set_spec("cuda -arch=sm_90");
  absl::StatusOr<ir::Target> t = ir::Target::Parse(req.target().spec());
  ASSERT_TRUE(t.ok());
  absl::StatusOr<ir::ComputeDAG> dag = ir::BuildComputeDAG(req.workload());
  ASSERT_TRUE(dag.ok());
  *req.mutable_schedule() = schedule::ToProto(schedule::DefaultSchedule(*dag, *t));
  req.set_kind(v1::ARTIFACT_KIND_CUBIN);
  v1::BuildResult r = worker::Build(req);
  ASSERT_TRUE(r.error().empty()) << r.error();
  v1::GpuModule m;
  ASSERT_TRUE(m.ParseFromString(r.artifact()));
  auto st = schedule::ScheduleState::Replay(*dag, *schedule::TraceFromProto(req.schedule()), *t);
  ASSERT_TRUE(st.ok());
  const ir::ComputeDAG& sdag = st->dag();
  absl::StatusOr<runtime::GpuPlan> plan = runtime::PlanFromModule(m, r.signature());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->kernels.size(), size_t(m.kernels_size()));
  const int n_inputs = int(sdag.args.size()) - 1;  // data, weight, bias
  EXPECT_EQ(n_inputs, 3);
  bool writes_output = false;
  for (int k = 0; k < m.kernels_size(); ++k) {
    ASSERT_EQ(plan->kernels[k].buffers.size(), size_t(m.kernels(k).params_size()));
    for (int p = 0; p < m.kernels(k).params_size(); ++p) {
      int tensor = m.kernels(k).params(p), buffer = plan->kernels[k].buffers[p];
      if (buffer <= n_inputs) {
        EXPECT_EQ(sdag.args[buffer], tensor);
      } else {
        EXPECT_EQ(m.workspace(buffer - n_inputs - 1).tensor(), tensor);
      }
      writes_output |= buffer == n_inputs;
    }
  }
  EXPECT_TRUE(writes_output);
  EXPECT_EQ(plan->image, m.image());
  absl::StatusOr<std::string> bytes = runtime::EncodeGpuPlan(*plan);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_TRUE(runtime::DecodeGpuPlan(bytes->data(), bytes->size(), n_inputs).ok());
  // A parameter naming a tensor that is neither an argument nor a workspace.
  m.mutable_kernels(0)->set_params(0, 9999);
  absl::StatusOr<runtime::GpuPlan> bad = runtime::PlanFromModule(m, r.signature());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "tensor 9999")) << bad.status();
  EXPECT_TRUE(plan->float16_buffers.empty());
}

// A worker's build whose tiles pass the 48 KiB of static shared memory (a
// 4-stage float16 tensor-core tiling on a target that allows 227 KiB)
// marks its kernel dynamic; the runner's plan carries the bytes each
// launch passes, through the flat form, and refuses a damaged amount.
TEST(GpuPlan, DynamicSharedMemoryTravelsFromTheBuildToTheLaunch) {
  if (codegen::NvrtcSupportedArchs().empty())
    TF_SKIP("no-cuda-toolkit") << "no CUDA toolkit in this build";
  v1::BuildRequest req;
  *req.mutable_workload() =
      ir::Canonicalize(*ir::ParseWorkloadSpec("matmul(M=256,N=256,K=256,dtype=float16)"))->workload;
  req.mutable_target()->set_spec("cuda -arch=sm_90 -max-shared-memory-per-block=232448");
  absl::StatusOr<ir::Target> t = ir::Target::Parse(req.target().spec());
  ASSERT_TRUE(t.ok());
  absl::StatusOr<ir::ComputeDAG> dag = ir::BuildComputeDAG(req.workload());
  ASSERT_TRUE(dag.ok());
  schedule::TensorCoreTiling tiling = schedule::DefaultTensorCoreTiling(*dag, *t);
  tiling.frags_m = 4;
  tiling.frags_n = 8;
  tiling.k_steps = 4;
  tiling.stages = 4;
  tiling.async_copy = 1;
  absl::StatusOr<schedule::Trace> sched = schedule::TensorCoreSchedule(*dag, *t, tiling);
  ASSERT_TRUE(sched.ok()) << sched.status();
  *req.mutable_schedule() = schedule::ToProto(*sched);
  req.set_kind(v1::ARTIFACT_KIND_CUBIN);
  v1::BuildResult r = worker::Build(req);
  ASSERT_TRUE(r.error().empty()) << r.error();
  EXPECT_GT(r.shared_bytes(), 48 * 1024);
  v1::GpuModule m;
  ASSERT_TRUE(m.ParseFromString(r.artifact()));
  ASSERT_EQ(m.kernels_size(), 1);
  EXPECT_TRUE(m.kernels(0).dynamic_shared());
  EXPECT_EQ(m.kernels(0).shared_bytes(), r.shared_bytes());
  absl::StatusOr<runtime::GpuPlan> plan = runtime::PlanFromModule(m, r.signature());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->kernels[0].dynamic_shared_bytes, m.kernels(0).shared_bytes());
  absl::StatusOr<std::string> bytes = runtime::EncodeGpuPlan(*plan);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<runtime::GpuPlan> back = runtime::DecodeGpuPlan(bytes->data(), bytes->size(), 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kernels[0].dynamic_shared_bytes, plan->kernels[0].dynamic_shared_bytes);
  // Static kernels launch with none.
  runtime::GpuPlan plain = *plan;
  plain.kernels[0].dynamic_shared_bytes = 0;
  bytes = runtime::EncodeGpuPlan(plain);
  ASSERT_TRUE(bytes.ok());
  back = runtime::DecodeGpuPlan(bytes->data(), bytes->size(), 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kernels[0].dynamic_shared_bytes, 0);
  // More than any GPU has, in the flat form or in the module: refused.
  runtime::GpuPlan huge = *plan;
  huge.kernels[0].dynamic_shared_bytes = runtime::kMaxGpuDynamicShared + 1;
  bytes = runtime::EncodeGpuPlan(huge);
  ASSERT_TRUE(bytes.ok());
  back = runtime::DecodeGpuPlan(bytes->data(), bytes->size(), 2);
  ASSERT_FALSE(back.ok());
  EXPECT_TRUE(absl::StrContains(back.status().message(), "dynamic shared memory out of range"))
      << back.status();
  m.mutable_kernels(0)->set_shared_bytes(int64_t{1} << 30);
  absl::StatusOr<runtime::GpuPlan> bad = runtime::PlanFromModule(m, r.signature());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "bytes of dynamic shared memory"))
      << bad.status();
}

// A float16 build's plan names its float16 arguments: every input and the
// output of a float16 matmul, so the runner converts them.
TEST(GpuPlan, Float16ArgumentsAreNamedForTheRunner) {
  if (codegen::NvrtcSupportedArchs().empty())
    TF_SKIP("no-cuda-toolkit") << "no CUDA toolkit in this build";
  v1::BuildRequest req;
  *req.mutable_workload() =
      ir::Canonicalize(*ir::ParseWorkloadSpec("matmul(M=64,N=96,K=128,dtype=float16)"))->workload;
  req.mutable_target()->set_spec("cuda -arch=sm_90");
  absl::StatusOr<ir::Target> t = ir::Target::Parse(req.target().spec());
  ASSERT_TRUE(t.ok());
  absl::StatusOr<ir::ComputeDAG> dag = ir::BuildComputeDAG(req.workload());
  ASSERT_TRUE(dag.ok()) << dag.status();
  *req.mutable_schedule() = schedule::ToProto(schedule::DefaultSchedule(*dag, *t));
  req.set_kind(v1::ARTIFACT_KIND_CUBIN);
  v1::BuildResult r = worker::Build(req);
  ASSERT_TRUE(r.error().empty()) << r.error();
  v1::GpuModule m;
  ASSERT_TRUE(m.ParseFromString(r.artifact()));
  absl::StatusOr<runtime::GpuPlan> plan = runtime::PlanFromModule(m, r.signature());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->float16_buffers, (std::vector<int>{0, 1, 2}));
  // The same build asked of a CPU target is refused by name.
  req.mutable_target()->set_spec("llvm -mtriple=x86_64-linux-gnu");
  absl::StatusOr<ir::Target> cpu = ir::Target::Parse(req.target().spec());
  ASSERT_TRUE(cpu.ok());
  *req.mutable_schedule() = schedule::ToProto(schedule::DefaultSchedule(*dag, *cpu));
  req.set_kind(v1::ARTIFACT_KIND_SHARED_OBJECT);
  v1::BuildResult refused = worker::Build(req);
  EXPECT_TRUE(absl::StrContains(refused.error(),
                                "float16 and bfloat16 kernels build for cuda targets only"))
      << refused.error();
}

// Without a GPU: the agent refuses a CUDA build with a reason, and the
// runner, handed a plan anyway, answers that there is no GPU.
TEST(GpuPlan, WithoutAGpuTheAnswerSaysSo) {
  agent::MeasureHandlerOptions o;
  o.gpu = false;
  agent::MeasureHandler handler(o);
  v1::MeasureRequest req;
  *req.mutable_workload() =
      ir::Canonicalize(*ir::ParseWorkloadSpec("relu(N=1,C=4,H=8,W=8)"))->workload;
  req.mutable_target()->set_spec("cuda -arch=sm_87");
  req.set_kind(v1::ARTIFACT_KIND_CUBIN);
  req.set_artifact("not read");
  v1::MeasureResult r = handler.Measure(req);
  EXPECT_EQ(r.status(), v1::MEASURE_STATUS_RUNTIME_ERROR);
  EXPECT_TRUE(absl::StrContains(r.error(), "no GPU")) << r.error();

  if (runtime::CudaDriver::Get().ok()) TF_SKIP("has-gpu") << "this machine has a CUDA driver";
  absl::StatusOr<std::string> plan = runtime::EncodeGpuPlan(TwoKernels());
  ASSERT_TRUE(plan.ok());
  std::vector<float> a(10, 1.0f), b(10, 2.0f);
  runtime::SandboxOptions so;
  so.cuda = true;
  runtime::SandboxOutcome out = runtime::MeasureInSandbox(*plan, {&a, &b}, 10, {}, so);
  EXPECT_EQ(out.status, runtime::SandboxOutcome::Status::kRuntimeError);
  EXPECT_TRUE(absl::StrContains(out.error, "no GPU")) << out.error;
}

}  // namespace
}  // namespace tunefarm
