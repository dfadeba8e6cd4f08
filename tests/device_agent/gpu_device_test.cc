// On a machine with an NVIDIA GPU (ctest label gpu; every test here skips,
// reported as skipped, where there is none): worker-built CUDA modules of
// random GPU schedules measured by the agent's handler, each checked against
// the float64 reference on random inputs before it is timed; a kernel that
// faults is a runtime error and one that spins is a timeout, and the agent
// measures correctly right after both.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/codegen/nvrtc_info.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/schedule.h"
#include "device_agent/measure_handler.h"
#include "device_agent/runtime/capabilities.h"
#include "device_agent/runtime/measure.h"
#include "gtest/gtest.h"
#include "search/gpu_local_measurer.h"
#include "search/space/gpu_sketch.h"
#include "search/space/tensor_core_sketch.h"
#include "tests/testing/skip.h"
#include "worker/builder.h"

namespace tunefarm {
namespace {

class GpuDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    caps_ = runtime::DetectCapabilities();
    if (!caps_.has_gpu()) TF_SKIP("no-gpu") << "no GPU on this machine";
    target_spec_ = runtime::LocalCudaTarget(caps_);
    // No toolkit in this build, or a driver too old for what NVRTC builds
    // (CUDA_ERROR_UNSUPPORTED_PTX_VERSION): say so rather than fail.
    if (absl::Status s = search::GpuLocalMeasurer::Check(*ir::Target::Parse(target_spec_));
        !s.ok()) {
      TF_SKIP("gpu-unusable") << s;
    }
    agent::MeasureHandlerOptions o;
    o.gpu = true;
    handler_ = std::make_unique<agent::MeasureHandler>(o);
  }

  v1::MeasureRequest Request(const std::string& spec, const schedule::Trace& schedule,
                             const v1::BuildResult& built) {
    v1::MeasureRequest m;
    *m.mutable_workload() = ir::Canonicalize(*ir::ParseWorkloadSpec(spec))->workload;
    m.mutable_target()->set_spec(target_spec_);
    *m.mutable_schedule() = schedule::ToProto(schedule);
    m.set_kind(built.kind());
    m.set_artifact(built.artifact());
    *m.mutable_signature() = built.signature();
    m.set_input_seed(17);
    // The reference the server sends: the interpreter's output.
    ir::ComputeDAG dag = *ir::BuildComputeDAG(m.workload());
    std::vector<double> want = *ir::EvaluateReference(dag, ir::RandomInputs(dag, 17));
    std::vector<float> f(want.begin(), want.end());
    m.set_reference_output(std::string(reinterpret_cast<const char*>(f.data()), f.size() * 4));
    m.mutable_options()->set_timeout_ms(5000);
    return m;
  }

  v1::BuildResult Build(const std::string& spec, const schedule::Trace& schedule,
                        v1::ArtifactKind kind = v1::ARTIFACT_KIND_CUBIN,
                        const std::string& target = "") {
    v1::BuildRequest req;
    *req.mutable_workload() = ir::Canonicalize(*ir::ParseWorkloadSpec(spec))->workload;
    req.mutable_target()->set_spec(target.empty() ? target_spec_ : target);
    *req.mutable_schedule() = schedule::ToProto(schedule);
    req.set_kind(kind);
    return worker::Build(req);
  }

  // A module of one hand-written kernel over `spec`'s arguments: a fault
  // the generated code cannot produce on demand.
  v1::BuildResult HandWritten(const std::string& spec, const std::string& body) {
    ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
    ir::Target t = *ir::Target::Parse(target_spec_);
    codegen::GpuProgram p;
    p.source =
        "extern \"C\" __global__ void tf_kernel_0(const float* x, float* out) {" + body + "}\n";
    codegen::GpuKernel k;
    k.name = "tf_kernel_0";
    k.block = {32, 1, 1};
    k.params = dag.args;
    p.kernels.push_back(k);
    v1::BuildResult r;
    absl::StatusOr<codegen::GpuArtifact> a = codegen::CompileCuda(p, t);
    if (!a.ok()) {
      r.set_error(std::string(a.status().message()));
      return r;
    }
    v1::GpuModule m;
    m.set_arch(t.arch());
    m.set_image(a->cubin);
    v1::GpuModule::Kernel* mk = m.add_kernels();
    mk->set_name(k.name);
    for (int i = 0; i < 3; ++i) mk->add_grid(k.grid[i]), mk->add_block(k.block[i]);
    for (int p : k.params) mk->add_params(p);
    r.set_kind(v1::ARTIFACT_KIND_CUBIN);
    r.set_artifact(m.SerializeAsString());
    *r.mutable_signature() = ir::SignatureOf(dag);
    return r;
  }

  v1::Capabilities caps_;
  std::string target_spec_;
  std::unique_ptr<agent::MeasureHandler> handler_;
};

TEST_F(GpuDevice, RandomSchedulesMatchTheReference) {
  const char* specs[] = {"dense(M=64,N=96,K=128)+bias+relu",
                         "conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1)+bias+relu",
                         "depthwise_conv2d_nchw(N=1,C=32,H=28,W=28,R=3,S=3,pad=1)",
                         "matmul(M=128,N=128,K=64)"};
  ir::Target t = *ir::Target::Parse(target_spec_);
  std::mt19937_64 rng(5);
  int measured = 0, built = 0;
  for (const char* spec : specs) {
    ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
    for (int i = 0; i < 12; ++i) {
      schedule::Trace s =
          i == 0 ? schedule::DefaultGpuSchedule(dag, t) : search::space::RandomGpuSchedule(dag, t, rng);
      v1::BuildResult b = Build(spec, s);
      if (!b.error().empty()) continue;  // past a launch limit: refused before any device
      ++built;
      v1::MeasureResult r = handler_->Measure(Request(spec, s, b));
      EXPECT_EQ(r.status(), v1::MEASURE_STATUS_OK) << spec << " #" << i << ": " << r.error();
      if (r.status() == v1::MEASURE_STATUS_OK) {
        ++measured;
        ASSERT_GT(r.costs_sec_size(), 0);
        EXPECT_GT(r.costs_sec(0), 0);
      }
    }
  }
  std::printf("GPU: %d of %d built random schedules measured correct on %s\n", measured, built,
              caps_.gpu_name().c_str());
  EXPECT_GE(built, 24);
  EXPECT_EQ(measured, built);
  // PTX instead of a cubin: the driver JIT-compiles it.
  const char* spec = specs[0];
  ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
  schedule::Trace s = schedule::DefaultGpuSchedule(dag, t);
  v1::BuildResult ptx = Build(spec, s, v1::ARTIFACT_KIND_PTX);
  ASSERT_TRUE(ptx.error().empty()) << ptx.error();
  v1::MeasureResult r = handler_->Measure(Request(spec, s, ptx));
  EXPECT_EQ(r.status(), v1::MEASURE_STATUS_OK) << r.error();
}

// Float16 kernels on the GPU: arguments converted at upload and download,
// outputs within float16 rounding of the float64 reference; on sm_80 and
// newer, tensor-core schedules (mma.sync) among them, bfloat16 and tf32
// ones too, each checked the same way, so a fragment layout the interpreter
// and the hardware disagree on fails here.
TEST_F(GpuDevice, Float16AndTensorCoreSchedulesMatchTheReference) {
  const char* specs[] = {"dense(M=64,N=96,K=128,dtype=float16)+bias+relu",
                         "matmul(M=100,N=72,K=50,transpose_a=1,dtype=float16)",
                         "batch_matmul(B=2,M=64,N=40,K=48,transpose_b=1,dtype=float16)",
                         "conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1,dtype=float16)",
                         // bfloat16 builds on sm_80 and newer only.
                         "matmul(M=100,N=72,K=50,dtype=bfloat16)",
                         "conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1,dtype=bfloat16)+bias",
                         // tf32 (float32 tensors, m16n8k8): sm_80 and newer too.
                         "matmul(M=100,N=72,K=50,dtype=tf32)",
                         // rows of 4 floats: cp.async and 16-byte vectors
                         "matmul(M=128,N=96,K=64,dtype=tf32)+relu",
                         "conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1,dtype=tf32)+bias"};
  ir::Target t = *ir::Target::Parse(target_spec_);
  std::mt19937_64 rng(16);
  int measured = 0, built = 0, tensor_core = 0, bf16_built = 0, tf32_built = 0, tf32_mma = 0;
  for (const char* spec : specs) {
    ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
    for (int i = 0; i < 10; ++i) {
      // The default tiling, and for tf32 the search's samples too.
      const bool tc = schedule::HasTensorCoreSketch(dag, t) && (i == 1 || (dag.tf32 && i < 5));
      schedule::Trace s = i == 0 ? schedule::DefaultGpuSchedule(dag, t)
                    : tc   ? *schedule::TensorCoreSchedule(
                                 dag, t,
                               i == 1 ? schedule::DefaultTensorCoreTiling(dag, t)
                                        : search::space::TensorCoreSketch(dag, t).SampleTiling(rng))
                         : search::space::RandomGpuSchedule(dag, t, rng);
      v1::BuildResult b = Build(spec, s);
      if (!b.error().empty()) continue;
      ++built;
      bf16_built += ir::HasFloat16(dag) && dag.half == HalfKind::kBFloat16;
      tf32_built += dag.tf32;
      tf32_mma += dag.tf32 && s.sketch_id == ir::kGpuTensorCoreSketchId;
      tensor_core += s.sketch_id == ir::kGpuTensorCoreSketchId;
      v1::MeasureResult r = handler_->Measure(Request(spec, s, b));
      EXPECT_EQ(r.status(), v1::MEASURE_STATUS_OK)
          << spec << " #" << i << " sketch " << s.sketch_id << ": " << r.error();
      measured += r.status() == v1::MEASURE_STATUS_OK;
    }
  }
  std::printf(
      "GPU: %d of %d built 16-bit and tf32 schedules (%d tensor-core, %d tf32) measured correct "
      "on %s\n",
      measured, built, tensor_core, tf32_built, caps_.gpu_name().c_str());
  EXPECT_GE(built, 30);
  EXPECT_EQ(measured, built);
  if (t.sm >= 80) EXPECT_GE(tensor_core, 3);
  if (t.sm >= 80) EXPECT_GE(bf16_built, 10);  // bfloat16 is checked here, not only float16
  if (t.sm >= 80) EXPECT_GE(tf32_built, 10);
  if (t.sm >= 80) EXPECT_GE(tf32_mma, 6);  // m16n8k8 tf32 on the hardware, not only SIMT
}

// cp.async pipelines 2 to 4 stages deep, and tiles past the 48 KiB of
// static shared memory where the GPU lets a block opt in to more (the
// loader sets the kernel's dynamic shared memory, each launch passes it),
// the large 16-bit ones with 2 and 4 stages swizzled (ldmatrix from the
// swizzled rows, B's fragments in pairs): right outputs on the hardware.
TEST_F(GpuDevice, DeepPipelinesAndDynamicSharedMemoryRunCorrectly) {
  ir::Target t = *ir::Target::Parse(target_spec_);
  if (t.sm < 80) TF_SKIP("has-gpu") << "no cp.async before sm_80 (" << t.arch() << ")";
  int measured = 0, built = 0, dynamic = 0, swizzled = 0;
  for (const char* spec : {"matmul(M=512,N=384,K=520,dtype=float16)+relu",
                           "conv2d_nhwc(N=2,C=64,H=14,W=14,K=128,R=3,S=3,pad=1,dtype=float16)",
                           "matmul(M=256,N=256,K=264,dtype=tf32)"}) {
    ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
    for (int64_t stages = 2; stages <= schedule::kMaxTensorCoreStages; ++stages) {
      for (bool large : {false, true}) {
        schedule::TensorCoreTiling tiling = schedule::DefaultTensorCoreTiling(dag, t);
        tiling.stages = stages;
        tiling.async_copy = 1;
        if (large) {  // 128x128 block tiles, 64-deep 16-bit (32-deep tf32) K steps
          tiling.warps_m = tiling.warps_n = 2;
          tiling.frags_m = 4;
          tiling.frags_n = 8;
          tiling.k_steps = 4;
          if (!dag.tf32 && stages != 3) {
            tiling.pad = 0;
            tiling.swizzle = 1;
          }
        }
        absl::StatusOr<schedule::Trace> s = schedule::TensorCoreSchedule(dag, t, tiling);
        if (!s.ok()) continue;  // past this GPU's shared memory
        v1::BuildResult b = Build(spec, *s);
        ASSERT_TRUE(b.error().empty()) << spec << ": " << b.error();
        ++built;
        swizzled += tiling.swizzle;
        v1::GpuModule m;
        ASSERT_TRUE(m.ParseFromString(b.artifact()));
        dynamic += m.kernels(0).dynamic_shared();
        v1::MeasureResult r = handler_->Measure(Request(spec, *s, b));
        EXPECT_EQ(r.status(), v1::MEASURE_STATUS_OK)
            << spec << " decisions " << absl::StrJoin(tiling.Encode(), ",") << ": " << r.error();
        measured += r.status() == v1::MEASURE_STATUS_OK;
      }
    }
  }
  std::printf(
      "GPU: %d of %d pipelined tensor-core kernels (%d with dynamic shared memory, %d swizzled) "
      "measured correct on %s (%lld B shared per block)\n",
      measured, built, dynamic, swizzled, caps_.gpu_name().c_str(),
      static_cast<long long>(caps_.gpu_shared_memory_per_block()));
  EXPECT_GE(built, 9);
  EXPECT_EQ(measured, built);
  if (caps_.gpu_shared_memory_per_block() >= 100 * 1024) EXPECT_GE(dynamic, 3);
  if (caps_.gpu_shared_memory_per_block() >= 100 * 1024) EXPECT_GE(swizzled, 2);
}

// sm_90: wgmma tilings (warpgroup products from core-matrix tiles, the
// descriptors' layouts as the interpreter reads them, all four pairs of
// K- and MN-major operands, float16 and bfloat16), with the search's own
// samples: right
// outputs on the hardware, so a layout or fence the interpreter and the
// GPU disagree on fails here.
TEST_F(GpuDevice, WgmmaSchedulesMatchTheReference) {
  ir::Target t = *ir::Target::Parse(target_spec_);
  if (t.sm != 90) TF_SKIP("has-gpu") << "wgmma is sm_90's; this GPU is " << t.arch();
  std::mt19937_64 rng(90);
  int measured = 0, built = 0;
  for (const char* spec : {"matmul(M=512,N=384,K=512,dtype=float16)+relu",
                           "matmul(M=200,N=136,K=72,transpose_a=1,dtype=float16)",
                           "matmul(M=128,N=96,K=64,transpose_a=1,transpose_b=1,dtype=float16)",
                           "dense(M=256,N=256,K=256,dtype=bfloat16)+bias",
                           "conv2d_nhwc(N=2,C=64,H=14,W=14,K=128,R=3,S=3,pad=1,dtype=float16)"}) {
    ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
    search::space::TensorCoreSketch sketch(dag, t);
    int taken = 0;
    for (int i = 0; i < 200 && taken < 4; ++i) {
      schedule::TensorCoreTiling tiling = sketch.SampleTiling(rng);
      if (tiling.wgmma == 0) continue;
      ++taken;
      absl::StatusOr<schedule::Trace> s = schedule::TensorCoreSchedule(dag, t, tiling);
      ASSERT_TRUE(s.ok()) << spec << ": " << s.status();
      v1::BuildResult b = Build(spec, *s);
      ASSERT_TRUE(b.error().empty()) << spec << ": " << b.error();
      ++built;
      v1::MeasureResult r = handler_->Measure(Request(spec, *s, b));
      EXPECT_EQ(r.status(), v1::MEASURE_STATUS_OK)
          << spec << " decisions " << absl::StrJoin(tiling.Encode(), ",") << ": " << r.error();
      measured += r.status() == v1::MEASURE_STATUS_OK;
    }
  }
  std::printf("GPU: %d of %d wgmma kernels measured correct on %s\n", measured, built,
              caps_.gpu_name().c_str());
  EXPECT_GE(built, 16);
  EXPECT_EQ(measured, built);
}

TEST_F(GpuDevice, WrongFaultingAndSpinningKernelsAreResults) {
  const std::string spec = "relu(N=1,C=1,H=1,W=32)";
  ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
  ir::Target t = *ir::Target::Parse(target_spec_);
  schedule::Trace def = schedule::DefaultGpuSchedule(dag, t);
  schedule::Trace fused = *schedule::GpuFusedSchedule(dag, t, 32);

  v1::BuildResult wrong = HandWritten(spec, "out[threadIdx.x] = x[threadIdx.x] + 1.0f;");
  ASSERT_TRUE(wrong.error().empty()) << wrong.error();
  EXPECT_EQ(handler_->Measure(Request(spec, fused, wrong)).status(),
            v1::MEASURE_STATUS_WRONG_RESULT);

  // An address far past any allocation, through a volatile pointer so the
  // compiler cannot reason the store away.
  v1::BuildResult fault =
      HandWritten(spec, "float* volatile p = out + (1ll << 36); p[threadIdx.x] = x[threadIdx.x];");
  ASSERT_TRUE(fault.error().empty()) << fault.error();
  v1::MeasureResult r = handler_->Measure(Request(spec, fused, fault));
  EXPECT_EQ(r.status(), v1::MEASURE_STATUS_RUNTIME_ERROR) << r.error();
  EXPECT_TRUE(absl::StrContains(r.error(), "CUDA_ERROR")) << r.error();

  v1::BuildResult spin =
      HandWritten(spec, "while (*(volatile const float*)x < 1e30f) {} out[threadIdx.x] = 0.0f;");
  ASSERT_TRUE(spin.error().empty()) << spin.error();
  v1::MeasureRequest req = Request(spec, fused, spin);
  req.mutable_options()->set_timeout_ms(1500);
  EXPECT_EQ(handler_->Measure(req).status(), v1::MEASURE_STATUS_TIMEOUT);

  v1::BuildResult good = Build(spec, def);
  ASSERT_TRUE(good.error().empty()) << good.error();
  r = handler_->Measure(Request(spec, def, good));
  EXPECT_EQ(r.status(), v1::MEASURE_STATUS_OK) << r.error();
}

// Jetson Xavier's route, run here: PTX for sm_72 from LLVM's NVPTX back end
// (NVRTC 13 does not build sm_72), which this GPU's driver compiles for its
// own arch at load. Random schedules, each checked against the reference;
// the time of each default schedule beside NVRTC's build of it for this GPU
// (printed, not asserted).
TEST_F(GpuDevice, XavierPtxFromLlvmRunsCorrectlyHere) {
  const std::string xavier = "cuda -arch=sm_72";
  const ir::Target t = *ir::Target::Parse(xavier);
  const char* specs[] = {"dense(M=64,N=96,K=128)+bias+relu",
                         "conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1)+bias+relu",
                         "matmul(M=128,N=128,K=64)", "add(N=1,C=8,H=16,W=16)+sigmoid"};
  std::mt19937_64 rng(72);
  int measured = 0, built = 0;
  for (const char* spec : specs) {
    ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
    for (int i = 0; i < 8; ++i) {
      schedule::Trace s =
          i == 0 ? schedule::DefaultGpuSchedule(dag, t) : search::space::RandomGpuSchedule(dag, t, rng);
      v1::BuildResult b = Build(spec, s, v1::ARTIFACT_KIND_CUBIN, xavier);
      if (!b.error().empty()) continue;  // past a launch limit
      ASSERT_EQ(b.kind(), v1::ARTIFACT_KIND_PTX);
      ++built;
      v1::MeasureResult r = handler_->Measure(Request(spec, s, b));
      EXPECT_EQ(r.status(), v1::MEASURE_STATUS_OK) << spec << " #" << i << ": " << r.error();
      measured += r.status() == v1::MEASURE_STATUS_OK;
      if (i == 0 && r.status() == v1::MEASURE_STATUS_OK) {
        schedule::Trace here = schedule::DefaultGpuSchedule(dag, *ir::Target::Parse(target_spec_));
        v1::MeasureResult n = handler_->Measure(Request(spec, here, Build(spec, here)));
        if (n.status() == v1::MEASURE_STATUS_OK) {
          std::printf("[llvm ptx] %s: sm_72 PTX via LLVM %.1f us, %s cubin via NVRTC %.1f us\n",
                      spec, r.costs_sec(0) * 1e6, caps_.cuda_archs(0).c_str(),
                      n.costs_sec(0) * 1e6);
        }
      }
    }
  }
  std::printf("GPU: %d of %d LLVM-built sm_72 schedules measured correct on %s\n", measured, built,
              caps_.gpu_name().c_str());
  EXPECT_GE(built, 16);
  EXPECT_EQ(measured, built);
}

// The runner is confined on the GPU as on the CPU (confine.h): under the
// filter, and in a root of its own wherever this machine gives the CPU
// runner one; the driver runs there and the result is checked and timed.
TEST_F(GpuDevice, TheRunnerIsConfinedAsOnTheCpu) {
  const std::string spec = "dense(M=64,K=96,N=80)";
  ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
  ir::Target t = *ir::Target::Parse(target_spec_);
  schedule::Trace def = schedule::DefaultGpuSchedule(dag, t);
  v1::BuildResult gpu = Build(spec, def);
  ASSERT_TRUE(gpu.error().empty()) << gpu.error();
  v1::MeasureRequest req = Request(spec, def, gpu);
  std::vector<float> reference(size_t(req.reference_output().size() / 4));
  std::memcpy(reference.data(), req.reference_output().data(), reference.size() * 4);
  runtime::SandboxOptions so;
  so.time_limit_s = 60;
  runtime::SandboxOutcome on_gpu = runtime::MeasureFromSeed(
      runtime::Kernel{gpu.kind(), gpu.artifact(), gpu.signature()}, 17, reference, so);
  ASSERT_EQ(on_gpu.status, runtime::SandboxOutcome::Status::kOk) << on_gpu.error;
  EXPECT_TRUE(on_gpu.filtered);

  v1::BuildRequest cpu_req;
  *cpu_req.mutable_workload() = req.workload();
  const ir::Target host = codegen::HostTarget();
  cpu_req.mutable_target()->set_spec(host.ToString());
  *cpu_req.mutable_schedule() = schedule::ToProto(schedule::DefaultSchedule(dag, host));
  cpu_req.set_kind(v1::ARTIFACT_KIND_SHARED_OBJECT);
  v1::BuildResult cpu = worker::Build(cpu_req);
  ASSERT_TRUE(cpu.error().empty()) << cpu.error();
  runtime::SandboxOutcome on_cpu = runtime::MeasureFromSeed(
      runtime::Kernel{cpu.kind(), cpu.artifact(), cpu.signature()}, 17, reference, so);
  ASSERT_EQ(on_cpu.status, runtime::SandboxOutcome::Status::kOk) << on_cpu.error;
  EXPECT_EQ(on_gpu.namespaces, on_cpu.namespaces);
  std::printf("[gpu sandbox] namespaces: %s, filter: %s\n", on_gpu.namespaces ? "yes" : "no",
              on_gpu.filtered ? "yes" : "no");
}

}  // namespace
}  // namespace tunefarm
