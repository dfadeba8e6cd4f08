// The CUDA back end on a machine without a GPU: GPU schedules lowered and run
// by the SIMT interpreter against the float64 reference; CUDA C compiled by
// NVRTC for sm_75, sm_87 and sm_90 and the cubins read back; limits refused
// with their reason.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/float16.h"
#include "common/random_fill.h"
#include "common/status_macros.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/nvptx_codegen.h"
#include "compiler/codegen/nvrtc_info.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/gpu_launch.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/schedule.h"
#include "gtest/gtest.h"
#include "search/space/gpu_sketch.h"
#include "search/space/tensor_core_sketch.h"
#include "tests/compiler/gpu_sim.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

namespace v1 = ::tunefarm::v1;

ir::Target Cuda(const std::string& spec = "cuda -arch=sm_87") {
  auto t = ir::Target::Parse(spec);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

ir::ComputeDAG Dag(const std::string& spec) {
  auto w = ir::ParseWorkloadSpec(spec);
  EXPECT_TRUE(w.ok()) << spec << ": " << w.status();
  auto dag = ir::BuildComputeDAG(*w);
  EXPECT_TRUE(dag.ok()) << dag.status();
  return *dag;
}

// Small odd shapes: tails everywhere, padding, strides, epilogues.
const std::vector<std::string>& Workloads() {
  static const std::vector<std::string> specs = {
      "conv2d_nchw(N=1,C=7,H=9,W=11,K=10,R=3,S=3,pad=1)+bias+relu",
      "conv2d_nchw(N=1,C=5,H=9,W=9,K=6,R=1,S=1,stride=2)",
      "conv2d_nchw(N=1,C=4,H=10,W=8,K=6,R=3,S=3,stride=2,pad_top=0,pad_left=1,pad_bottom=1,"
      "pad_right=0)",
      "depthwise_conv2d_nchw(N=1,C=9,H=11,W=11,R=3,S=3,stride=2,pad=1)+bias+relu6",
      "dense(M=5,N=31,K=17)+bias",
      "matmul(M=24,N=20,K=19)",
      "batch_matmul(B=2,M=5,N=11,K=3)",
      "max_pool2d_nchw(N=1,C=3,H=13,W=13,R=3,S=3,stride=2,pad=1)",
      "global_avg_pool2d_nchw(N=1,C=5,H=7,W=3)",
      "add(N=1,C=3,H=5,W=11)+sigmoid",
      "rearrange(out=1x6x5x9,x0=1x5x9x6[o0,o2,o3,o1])",
      "rearrange(out=1x7x6x10,fill=0.5,x0=1x3x5x10[o0,o1,o2-1,o3],x1=1x4x6x5[o0,o1-3,o2,o3/2])",
      "reduce_mean(A=3,N=37)",
      "reduce_log_sum_exp(A=2,N=5,B=7)",
      "reduce_prod(A=3,N=37)",
      "layer_norm(A=3,N=37)",
      "instance_norm(A=6,N=50,P=3)",
      "rearrange(out=1x2x6x10,linear=1,x0=1x2x3x5[o0,o1,(2*o2-1)/4,(2*o3-1)/4])"};
  return specs;
}

struct Simulated {
  double max_rel_error = 0;
  testing::GpuSimStats stats;
};

absl::StatusOr<Simulated> Simulate(const ir::ComputeDAG& dag, const schedule::Trace& sched,
                                   const ir::Target& target, uint64_t seed,
                                   const std::function<ir::Stmt(ir::Stmt)>& edit = nullptr) {
  TF_ASSIGN_OR_RETURN(schedule::ScheduleState st, schedule::ScheduleState::Replay(dag, sched, target));
  ir::Stmt program = schedule::Lower(st);
  if (edit) program = edit(program);
  std::vector<std::vector<float>> inputs = ir::RandomInputs(dag, seed);
  TF_ASSIGN_OR_RETURN(std::vector<double> ref, ir::EvaluateReference(dag, inputs));
  std::vector<std::vector<float>> args = inputs;
  for (auto& [i, packed] : ir::PackedArguments(st.dag(), inputs)) args[i] = std::move(packed);
  args.push_back(std::vector<float>(ref.size(), std::nanf("")));
  Simulated out;
  TF_ASSIGN_OR_RETURN(std::vector<float> got,
                      testing::SimulateGpu(st.dag(), program, target, args, &out.stats));
  if (got.size() != ref.size()) return absl::InternalError("output size");
  // A 16-bit output within its dtype's rounding (the runner's tolerance).
  const bool half = dag.tensors[size_t(dag.output)].float16;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (half && got[i] != RoundToHalf(got[i], dag.half))
      return absl::InternalError(absl::StrCat("output ", i, " = ", got[i], " is not 16-bit"));
    double err = std::abs(got[i] - ref[i]) / std::max(1.0, std::abs(ref[i]));
    if (!(err <= (half ? HalfTolerance(dag.half) : 1e-4))) {
      return absl::InternalError(absl::StrCat("output ", i, " is ", got[i], ", reference ",
                                              ref[i]));
    }
    out.max_rel_error = std::max(out.max_rel_error, err);
  }
  return out;
}

TEST(GpuSchedule, DefaultsMatchReferenceInTheSimulator) {
  const ir::Target target = Cuda();
  for (const std::string& spec : Workloads()) {
    ir::ComputeDAG dag = Dag(spec);
    schedule::Trace sched = schedule::DefaultSchedule(dag, target);
    auto r = Simulate(dag, sched, target, 7);
    ASSERT_TRUE(r.ok()) << spec << ": " << r.status();
    EXPECT_GT(r->stats.threads_per_block, 1) << spec;
  }
}

TEST(GpuSchedule, RandomSchedulesMatchReferenceInTheSimulator) {
  const ir::Target target = Cuda();
  std::mt19937_64 rng(2026);
  int tiled = 0, with_barriers = 0, double_buffered = 0;
  std::set<std::string> distinct;
  for (int i = 0; i < 192; ++i) {
    const std::string& spec = Workloads()[i % Workloads().size()];
    ir::ComputeDAG dag = Dag(spec);
    schedule::Trace sched = search::space::RandomGpuSchedule(dag, target, rng);
    auto r = Simulate(dag, sched, target, 100 + i);
    ASSERT_TRUE(r.ok()) << spec << " schedule " << schedule::ToProto(sched).ShortDebugString() << ": "
                        << r.status();
    distinct.insert(spec + schedule::ToProto(sched).SerializeAsString());
    tiled += sched.sketch_id == schedule::kGpuTilingSketchId;
    with_barriers += r->stats.barriers > 0;
    double_buffered +=
        absl::StrContains(schedule::ToProto(sched).ShortDebugString(), "ANNOTATION_DOUBLE_BUFFER");
  }
  // The draws differ: 192 pairs are not a few schedules checked many times
  // (a data mover's space is small: it has no reduction to tile).
  EXPECT_GE(distinct.size(), 100u);
  // The tiling sketch (shared memory, barriers) must be a good part of it.
  EXPECT_GE(tiled, 40);
  EXPECT_GE(with_barriers, 40);
  EXPECT_GE(double_buffered, 10);
}

std::function<ir::Stmt(ir::Stmt)> Changing(std::function<bool(const ir::StmtNode&)> match,
                                           std::function<void(ir::StmtNode*)> change);

ir::Stmt DropBarriers(const ir::Stmt& s) {
  if (s->kind == ir::StmtKind::kBarrier) return ir::Seq({});
  if (s->body.empty()) return s;
  auto n = std::make_shared<ir::StmtNode>(*s);
  for (ir::Stmt& b : n->body) b = DropBarriers(b);
  return n;
}

TEST(GpuSchedule, SimulatorCatchesAMissingBarrier) {
  const ir::Target target = Cuda();
  ir::ComputeDAG dag = Dag("matmul(M=32,N=32,K=32)");
  schedule::GpuTiling d = schedule::DefaultGpuTiling(dag, target);
  auto sched = schedule::BuildGpuTiledSchedule(dag, target, d);
  ASSERT_TRUE(sched.ok()) << sched.status();
  ASSERT_TRUE(Simulate(dag, *sched, target, 1).ok());
  auto broken = Simulate(dag, *sched, target, 1, DropBarriers);
  ASSERT_FALSE(broken.ok());
  EXPECT_TRUE(absl::StrContains(broken.status().message(), "race")) << broken.status();
}

// `s` without its barrier statement number `which` (in program order);
// `*seen` counts the barrier statements met.
ir::Stmt DropBarrier(const ir::Stmt& s, int which, int* seen) {
  if (s->kind == ir::StmtKind::kBarrier) return (*seen)++ == which ? ir::Seq({}) : s;
  if (s->body.empty()) return s;
  auto n = std::make_shared<ir::StmtNode>(*s);
  for (ir::Stmt& b : n->body) b = DropBarrier(b, which, seen);
  return n;
}

// Without any one of its `barriers` barrier statements, `sched`'s program
// races in the interpreter.
void ExpectEachBarrierNeeded(const ir::ComputeDAG& dag, const schedule::Trace& sched,
                             const ir::Target& target, int barriers, const std::string& spec) {
  for (int which = 0; which < barriers; ++which) {
    auto broken = Simulate(dag, sched, target, 3, [&](ir::Stmt s) {
      int seen = 0;
      return DropBarrier(s, which, &seen);
    });
    ASSERT_FALSE(broken.ok()) << spec << " without barrier " << which;
    EXPECT_TRUE(absl::StrContains(broken.status().message(), "race")) << broken.status();
  }
}

// The shared fetches of a tiling's operands (both matrices of a GEMM, the
// padded input and the weights of a convolution) share one barrier before
// them and one after: two barrier statements, each needed (without either
// the interpreter finds a race).
TEST(GpuSchedule, SharedFetchesShareTheirBarriers) {
  const ir::Target target = Cuda();
  for (const char* spec :
       {"matmul(M=32,N=32,K=32)", "conv2d_nchw(N=1,C=8,H=12,W=12,K=16,R=3,S=3,pad=1)+bias+relu"}) {
    ir::ComputeDAG dag = Dag(spec);
    auto sched = schedule::BuildGpuTiledSchedule(dag, target, schedule::DefaultGpuTiling(dag, target));
    ASSERT_TRUE(sched.ok()) << sched.status();
    auto st = schedule::ScheduleState::Replay(dag, *sched, target);
    ASSERT_TRUE(st.ok()) << st.status();
    int barriers = 0;
    DropBarrier(schedule::Lower(*st), -1, &barriers);
    EXPECT_EQ(barriers, 2) << spec << "\n" << ir::ToString(schedule::Lower(*st));
    ASSERT_TRUE(Simulate(dag, *sched, target, 3).ok()) << spec;
    ExpectEachBarrierNeeded(dag, *sched, target, barriers, spec);
  }
}

// Double-buffered shared fetches: two buffers of each tile, the first
// tiles fetched before the K loop and one barrier per K tile (the interpreter
// counts 1 + tiles crossings for block 0), the right numbers, and each of
// the two barriers needed.
TEST(GpuSchedule, DoubleBufferedFetchesCrossOneBarrierPerTile) {
  const ir::Target target = Cuda();
  // The convolution's default covers its 3x3 window with R2: the pipeline
  // runs over its channels' R0 loop.
  for (const char* spec : {"matmul(M=32,N=32,K=32)", "dense(M=20,N=24,K=40)+bias+relu",
                           "batch_matmul(B=2,M=12,N=16,K=24)",
                           "conv2d_nchw(N=1,C=16,H=8,W=8,K=16,R=3,S=3,pad=1)+bias+relu"}) {
    ir::ComputeDAG dag = Dag(spec);
    schedule::GpuTiling d = schedule::DefaultGpuTiling(dag, target);
    d.double_buffer = true;
    int64_t tiles = 1;  // every R0 loop's iterations (all but one run once)
    for (size_t r = 0; r < d.reduce.size(); ++r) {
      const int64_t step = d.reduce[r].r1 * d.reduce[r].r2;
      tiles *= (schedule::TilingNest::Of(dag).reduce[r] + step - 1) / step;
    }
    ASSERT_GE(tiles, 2) << spec;
    auto sched = schedule::BuildGpuTiledSchedule(dag, target, d);
    ASSERT_TRUE(sched.ok()) << sched.status();
    auto back = schedule::GpuTiling::Decode(schedule::TilingNest::Of(dag), sched->decisions);
    ASSERT_TRUE(back.has_value());
    EXPECT_TRUE(back->double_buffer);
    auto st = schedule::ScheduleState::Replay(dag, *sched, target);
    ASSERT_TRUE(st.ok()) << st.status();
    const ir::Stmt program = schedule::Lower(*st);
    std::vector<std::string> names = st->dag().TensorNames();
    const std::string text = ir::ToString(program, &names);
    int barriers = 0;
    DropBarrier(program, -1, &barriers);
    EXPECT_EQ(barriers, 2) << spec << "\n" << text;
    auto r = Simulate(dag, *sched, target, 4);
    ASSERT_TRUE(r.ok()) << spec << ": " << r.status() << "\n" << text;
    EXPECT_EQ(r->stats.barriers, 1 + tiles) << spec;
    // Twice the shared memory of the single-buffered tiling.
    schedule::GpuTiling single = d;
    single.double_buffer = false;
    auto single_sched = schedule::BuildGpuTiledSchedule(dag, target, single);
    ASSERT_TRUE(single_sched.ok());
    auto single_st = schedule::ScheduleState::Replay(dag, *single_sched, target);
    ASSERT_TRUE(single_st.ok());
    auto plan = schedule::PlanGpuLaunches(st->dag(), program, target);
    auto single_plan = schedule::PlanGpuLaunches(single_st->dag(), schedule::Lower(*single_st), target);
    ASSERT_TRUE(plan.ok() && single_plan.ok());
    EXPECT_EQ(plan->kernels[0].shared_bytes, 2 * single_plan->kernels[0].shared_bytes) << spec;
    ExpectEachBarrierNeeded(dag, *sched, target, barriers, spec);
  }
  // On a CPU target the annotation is refused by name.
  ir::ComputeDAG dag = Dag("matmul(M=32,N=32,K=32)");
  schedule::Trace t;
  t.steps.push_back(schedule::AnnotateStep{0, 2, v1::ANNOTATION_DOUBLE_BUFFER});
  auto host = ir::Target::Parse("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64");
  ASSERT_TRUE(host.ok());
  auto cpu = schedule::ScheduleState::Replay(dag, t, *host);
  ASSERT_FALSE(cpu.ok());
  EXPECT_TRUE(
      absl::StrContains(cpu.status().message(), "double buffering stages GPU shared memory"))
      << cpu.status();
}

// The GEMM-library-like SIMT tilings the sketch draws a quarter of its
// samples from: only for products with two inner axes of 64 or more, all
// double-buffered, each matching the reference in the interpreter.
TEST(GpuSchedule, KnownTilingsMatchTheReference) {
  const ir::Target target = Cuda("cuda -arch=sm_90");
  int checked = 0;
  for (const char* spec : {"matmul(M=256,N=192,K=40)", "batch_matmul(B=2,M=64,N=128,K=24)+relu",
                           "dense(M=128,N=72,K=33)+bias"}) {
    ir::ComputeDAG dag = Dag(spec);
    const std::vector<schedule::GpuTiling> known = search::space::GpuSketch(dag, target).KnownTilings();
    EXPECT_GE(known.size(), 4u) << spec;
    for (const schedule::GpuTiling& d : known) {
      EXPECT_TRUE(d.double_buffer);
      auto sched = schedule::BuildGpuTiledSchedule(dag, target, d);
      ASSERT_TRUE(sched.ok()) << spec << ": " << sched.status();
      auto r = Simulate(dag, *sched, target, 11);
      ASSERT_TRUE(r.ok()) << spec << " decisions " << absl::StrJoin(d.Encode(), ",") << ": "
                          << r.status();
      ++checked;
    }
  }
  EXPECT_GE(checked, 12);
  ir::ComputeDAG small = Dag("matmul(M=32,N=256,K=64)");
  EXPECT_TRUE(search::space::GpuSketch(small, target).KnownTilings().empty());
}

// The float16 form of a spec (dtype=float16 inside its parentheses).
std::string Half(const std::string& spec) {
  std::string out = spec;
  out.insert(out.find(')'), ",dtype=float16");
  return out;
}

// Float16 workloads (float16 in memory, float32 arithmetic): default and
// random schedules against the float64 reference on the same float16
// inputs, within float16 rounding; a float16 output holds float16 values.
TEST(GpuFloat16, SchedulesMatchReferenceInTheSimulator) {
  const ir::Target target = Cuda("cuda -arch=sm_90");
  std::mt19937_64 rng(16);
  int tiled = 0, checked = 0;
  for (const std::string& base :
       {std::string("conv2d_nchw(N=2,C=7,H=9,W=11,K=10,R=3,S=3,pad=1)+bias+relu"),
        std::string("matmul(M=24,N=20,K=19)"), std::string("dense(M=5,N=31,K=40)+bias"),
        std::string("batch_matmul(B=2,M=5,N=11,K=3)"),
        std::string("depthwise_conv2d_nchw(N=1,C=9,H=11,W=11,R=3,S=3,stride=2,pad=1)"),
        std::string("add(N=1,C=3,H=5,W=11)+sigmoid"), std::string("softmax(A=3,N=37)"),
        std::string("layer_norm(A=3,N=37)"), std::string("reduce_mean(A=3,N=37)")}) {
    const std::string spec = Half(base);
    ir::ComputeDAG dag = Dag(spec);
    ASSERT_TRUE(ir::HasFloat16(dag)) << spec;
    for (int i = 0; i < 6; ++i) {
      schedule::Trace sched = i == 0 ? schedule::DefaultSchedule(dag, target)
                               : search::space::RandomGpuSchedule(dag, target, rng);
      auto r = Simulate(dag, sched, target, 300 + i);
      ASSERT_TRUE(r.ok()) << spec << " schedule " << schedule::ToProto(sched).ShortDebugString() << ": "
                          << r.status();
      tiled += sched.sketch_id == schedule::kGpuTilingSketchId;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 54);
  EXPECT_GE(tiled, 10);
}

// Float16 operands are staged in shared memory as float16: half the bytes
// of the float32 tiles, the accumulators float32 in registers.
TEST(GpuFloat16, SharedTilesTakeHalfTheBytes) {
  const ir::Target target = Cuda("cuda -arch=sm_90");
  int64_t bytes[2] = {0, 0};
  for (int half = 0; half < 2; ++half) {
    const std::string spec = "matmul(M=64,N=64,K=64)";
    ir::ComputeDAG dag = Dag(half ? Half(spec) : spec);
    auto sched = schedule::BuildGpuTiledSchedule(dag, target, schedule::DefaultGpuTiling(dag, target));
    ASSERT_TRUE(sched.ok()) << sched.status();
    auto st = schedule::ScheduleState::Replay(dag, *sched, target);
    ASSERT_TRUE(st.ok()) << st.status();
    auto plan = schedule::PlanGpuLaunches(st->dag(), schedule::Lower(*st), target);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->kernels.size(), 1u);
    bytes[half] = plan->kernels[0].shared_bytes;
    for (const ir::TensorDecl& t : st->dag().tensors) {
      if (t.name.find(".local") != std::string::npos) EXPECT_FALSE(t.float16) << t.name;
      if (t.shared) EXPECT_EQ(t.float16, half == 1) << t.name;
    }
    auto program = codegen::EmitCuda(st->dag(), schedule::Lower(*st), target);
    ASSERT_TRUE(program.ok()) << program.status();
    EXPECT_EQ(program->kernels[0].shared_bytes, bytes[half]);
    EXPECT_EQ(absl::StrContains(program->source, "tf_f2h("), half == 1) << program->source;
  }
  EXPECT_GT(bytes[0], 0);
  EXPECT_EQ(bytes[1] * 2, bytes[0]);
}

// ---- Tensor cores: float16 products by mma.sync m16n8k16 ----

// The statements of kind kMma that load fragments (`loads`) or multiply.
int CountMma(const ir::Stmt& s, bool loads = false) {
  int n = s->kind == ir::StmtKind::kMma && (s->mma_load != 0) == loads;
  for (const ir::Stmt& b : s->body) n += CountMma(b, loads);
  return n;
}

// Random decisions within the sketch's ranges that build for dag and target.
schedule::TensorCoreTiling RandomTensorCoreTiling(const ir::ComputeDAG& dag, const ir::Target& target,
                                            std::mt19937_64& rng) {
  for (;;) {
    schedule::TensorCoreTiling t;
    t.tf32 = dag.tf32;
    t.warps_m = int64_t{1} << (rng() % 3);
    t.warps_n = int64_t{1} << (rng() % 3);
    t.frags_m = int64_t{1} << (rng() % 3);
    t.frags_n = int64_t{1} << (rng() % 4);
    t.k_steps = 1 + int64_t(rng() % 3);
    t.pad = dag.tf32 ? int64_t(rng() % 3) * 4 : rng() % 2 ? 8 : 0;
    t.stages = 1 + int64_t(rng() % schedule::kMaxTensorCoreStages);
    t.ldmatrix = dag.tf32 ? 0 : int64_t(rng() % 2);
    t.async_copy = t.stages == 2 ? int64_t(rng() % 2) : t.stages > 2 ? 1 : 0;
    if (schedule::TensorCoreSchedule(dag, target, t).ok()) return t;
  }
}

// Tensor-core schedules (the default and random decisions) of float16
// products with ragged edges, transposes, batches and epilogues against the
// float64 reference: the interpreter runs each warp's mma.sync on the
// fragments its lanes gather, so a wrong offset, stride or layout fails.
TEST(GpuTensorCore, SchedulesMatchReferenceInTheSimulator) {
  const ir::Target target = Cuda("cuda -arch=sm_90");
  std::mt19937_64 rng(80);
  int checked = 0, async = 0;
  for (const std::string spec :
       {"matmul(M=40,N=36,K=50,dtype=float16)", "matmul(M=64,N=64,K=64,dtype=float16)",
        "matmul(M=17,N=9,K=33,transpose_a=1,dtype=float16)",
        "matmul(M=24,N=40,K=20,transpose_b=1,dtype=float16)+relu",
        "dense(M=33,N=20,K=70,dtype=float16)+bias+relu",
        "batch_matmul(B=3,M=20,N=24,K=40,dtype=float16)",
        "batch_matmul(B=2,M=16,N=8,K=16,transpose_a=1,transpose_b=1,dtype=float16)+sigmoid",
        // Convolutions as implicit GEMMs: M = (n, y, x), N = k, K = (c, r, s).
        "conv2d_nchw(N=2,C=8,H=9,W=9,K=16,R=3,S=3,pad=1,dtype=float16)+bias+relu",
        "conv2d_nhwc(N=1,C=16,H=8,W=8,K=24,R=3,S=3,stride=2,pad=1,dtype=float16)",
        "conv2d_nchw(N=1,C=32,H=7,W=7,K=40,R=1,S=1,dtype=float16)+residual",
        "conv2d_nchw(N=1,C=16,H=12,W=12,K=16,R=3,S=3,pad=2,dilation=2,dtype=float16)+map[16x1x1]"
        "(mul(%0,$0),sigmoid(%1))"}) {
    ir::ComputeDAG dag = Dag(spec);
    ASSERT_TRUE(schedule::CheckTensorCoreSketch(dag, target).ok())
        << spec << ": " << schedule::CheckTensorCoreSketch(dag, target);
    for (int i = 0; i < 6; ++i) {
      // Random tiles, each of the four stages x ldmatrix choices staged
      // through registers once, then cp.async where the rows allow it.
      schedule::TensorCoreTiling tiling = i == 0 ? schedule::DefaultTensorCoreTiling(dag, target)
                                           : RandomTensorCoreTiling(dag, target, rng);
      if (i > 0) {
        tiling.stages = i == 5 ? 2 : 1 + (i - 1) % 2;
        tiling.ldmatrix = i == 5 ? 1 : (i - 1) / 2;
        tiling.async_copy = i == 5 ? 1 : 0;
        if (!schedule::CheckTensorCoreTiling(tiling, target).ok()) tiling.k_steps = 1;
        if (!schedule::TensorCoreSchedule(dag, target, tiling).ok()) tiling.async_copy = 0;
      }
      async += tiling.async_copy;
      auto sched = schedule::TensorCoreSchedule(dag, target, tiling);
      ASSERT_TRUE(sched.ok()) << spec << ": " << sched.status();
      auto st = schedule::ScheduleState::Replay(dag, *sched, target);
      ASSERT_TRUE(st.ok()) << st.status();
      // One product on fragments each loaded once per k step: A's and B's.
      EXPECT_EQ(CountMma(schedule::Lower(*st)), 1) << spec;
      EXPECT_EQ(CountMma(schedule::Lower(*st), /*loads=*/true), 2) << spec;
      auto r = Simulate(dag, *sched, target, 500 + i);
      ASSERT_TRUE(r.ok()) << spec << " decisions " << absl::StrJoin(tiling.Encode(), ",") << ": "
                          << r.status();
      EXPECT_EQ(r->stats.threads_per_block, tiling.Threads());
      EXPECT_GT(r->stats.barriers, 0);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 66);
  EXPECT_GE(async, 6);
}

// bfloat16: the same kernels with bfloat16 storage (SIMT schedules, and
// tensor-core ones on the mma's bfloat16 form), outputs bfloat16 values
// within 4 bfloat16 ulps of the float64 reference on bfloat16 inputs.
// The fused schedule of a reduction into a 16-bit tensor accumulates in a
// float32 register and rounds once: a 400-long bfloat16 sum stays within
// the output's rounding (rounding every partial sum drifts past it).
TEST(GpuBFloat16, FusedReductionsAccumulateInFloat32) {
  const ir::Target target = Cuda("cuda -arch=sm_80");
  for (const char* spec :
       {"matmul(M=8,N=12,K=400,dtype=bfloat16)", "matmul(M=8,N=12,K=400,dtype=float16)"}) {
    ir::ComputeDAG dag = Dag(spec);
    auto sched = schedule::GpuFusedSchedule(dag, target, 64);
    ASSERT_TRUE(sched.ok()) << spec << ": " << sched.status();
    auto st = schedule::ScheduleState::Replay(dag, *sched, target);
    ASSERT_TRUE(st.ok()) << st.status();
    std::vector<std::string> names = st->dag().TensorNames();
    const std::string text = ir::ToString(schedule::Lower(*st), &names);
    EXPECT_TRUE(absl::StrContains(text, "allocate local ")) << spec << "\n" << text;
    auto r = Simulate(dag, *sched, target, 7);
    EXPECT_TRUE(r.ok()) << spec << ": " << r.status() << "\n" << text;
  }
}

TEST(GpuBFloat16, SchedulesMatchReferenceInTheSimulator) {
  const ir::Target target = Cuda("cuda -arch=sm_80");
  std::mt19937_64 rng(1680);
  int checked = 0, mma = 0;
  for (const std::string spec :
       {"conv2d_nchw(N=2,C=7,H=9,W=11,K=10,R=3,S=3,pad=1,dtype=bfloat16)+bias+relu",
        "dense(M=5,N=31,K=40,dtype=bfloat16)+bias", "softmax(A=3,N=37,dtype=bf16)",
        "add(N=1,C=3,H=5,W=11,dtype=bfloat16)+sigmoid", "matmul(M=40,N=36,K=50,dtype=bfloat16)",
        "conv2d_nchw(N=2,C=8,H=9,W=9,K=16,R=3,S=3,pad=1,dtype=bfloat16)+bias+relu"}) {
    ir::ComputeDAG dag = Dag(spec);
    ASSERT_TRUE(ir::HasFloat16(dag)) << spec;
    ASSERT_EQ(dag.half, HalfKind::kBFloat16) << spec;
    EXPECT_EQ(ir::SignatureOf(dag).args(0).dtype(), v1::DTYPE_BFLOAT16);
    const bool tc = schedule::CheckTensorCoreSketch(dag, target).ok();
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<schedule::Trace> sched =
          tc && i >= 2 ? schedule::TensorCoreSchedule(dag, target,
                                                i == 2 ? schedule::DefaultTensorCoreTiling(dag, target)
                                                       : RandomTensorCoreTiling(dag, target, rng))
          : i == 0 ? schedule::DefaultSchedule(dag, target)
                       : search::space::RandomGpuSchedule(dag, target, rng);
      ASSERT_TRUE(sched.ok()) << spec << ": " << sched.status();
      mma += sched->sketch_id == ir::kGpuTensorCoreSketchId;
      auto r = Simulate(dag, *sched, target, 700 + i);
      ASSERT_TRUE(r.ok()) << spec << " schedule " << schedule::ToProto(*sched).ShortDebugString() << ": "
                          << r.status();
      ++checked;
    }
  }
  EXPECT_EQ(checked, 24);
  EXPECT_GE(mma, 4);
}

// ---- TF32: float32 products on tensor cores (mma.sync m16n8k8) ----

// dtype=tf32 is a float32 workload whose product may round its factors:
// its own key, its spec round-trips, and only products take it.
TEST(GpuTf32, WorkloadsNameTheOption) {
  auto w = ir::ParseWorkloadSpec("matmul(M=64,N=48,K=32,dtype=tf32)+relu");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->tf32());
  EXPECT_EQ(w->inputs(0).dtype(), v1::DTYPE_FLOAT32);
  auto plain = ir::ParseWorkloadSpec("matmul(M=64,N=48,K=32)+relu");
  ASSERT_TRUE(plain.ok());
  auto a = ir::Canonicalize(*w), b = ir::Canonicalize(*plain);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->key, b->key);
  auto spec = ir::FormatWorkloadSpec(*w);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, "matmul(M=64,N=48,K=32,dtype=tf32)+relu");
  EXPECT_TRUE(absl::StrContains(ir::Describe(*w), " tf32")) << ir::Describe(*w);
  ir::ComputeDAG dag = Dag("conv2d_nchw(N=1,C=8,H=8,W=8,K=16,R=3,S=3,pad=1,dtype=tf32)");
  EXPECT_TRUE(dag.tf32);
  EXPECT_FALSE(ir::HasFloat16(dag));
  EXPECT_TRUE(ir::SignatureOf(dag).tf32());
  auto refused = ir::ParseWorkloadSpec("softmax(A=3,N=20,dtype=tf32)");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "tf32 applies to products"))
      << refused.status();
  v1::Workload half = *w;
  for (v1::TensorSpec& t : *half.mutable_inputs()) t.set_dtype(v1::DTYPE_FLOAT16);
  half.set_out_dtype(v1::DTYPE_FLOAT16);
  auto mixed = ir::Canonicalize(half);
  ASSERT_FALSE(mixed.ok());
  EXPECT_TRUE(absl::StrContains(mixed.status().message(), "this workload is float16"))
      << mixed.status();
  v1::Workload as_dtype = *w;  // DTYPE_TF32 names a model precision, not a tensor's dtype
  as_dtype.set_tf32(false);
  for (v1::TensorSpec& t : *as_dtype.mutable_inputs()) t.set_dtype(v1::DTYPE_TF32);
  auto precision = ir::Canonicalize(as_dtype);
  ASSERT_FALSE(precision.ok());
  EXPECT_TRUE(absl::StrContains(precision.status().message(), "DTYPE_TF32, a model precision"))
      << precision.status();
  auto bad = ir::ParseWorkloadSpec("matmul(M=4,N=4,K=4,dtype=tf16)");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "float32, float16, bfloat16 or tf32"))
      << bad.status();
  // Targets: cuda sm_80 and newer only.
  EXPECT_TRUE(
      absl::StrContains(ir::CheckWorkloadTarget(*w, Cuda("cuda -arch=sm_75")).message(),
                        "tf32 products need sm_80 or newer (sm_75 has no tf32 tensor cores)"));
  EXPECT_TRUE(ir::CheckWorkloadTarget(*w, Cuda("cuda -arch=sm_80")).ok());
  auto cpu = ir::Target::Parse("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64");
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(absl::StrContains(ir::CheckWorkloadTarget(*w, *cpu).message(),
                                "tf32 products build for cuda targets only"));
}

// Tensor-core schedules of tf32 products (the default and random
// decisions: stages, cp.async, pads) and SIMT schedules of the same
// workloads against the float64 reference on TF32 inputs, at float32's
// tolerance: the products are exact, so a wrong fragment fails.
TEST(GpuTf32, SchedulesMatchReferenceInTheSimulator) {
  const ir::Target target = Cuda("cuda -arch=sm_80");
  std::mt19937_64 rng(32);
  int checked = 0, async = 0, mma = 0;
  for (const std::string spec :
       {"matmul(M=40,N=36,K=50,dtype=tf32)", "matmul(M=64,N=64,K=64,dtype=tf32)",
        "matmul(M=17,N=9,K=33,transpose_a=1,dtype=tf32)",
        "matmul(M=24,N=40,K=20,transpose_b=1,dtype=tf32)+relu",
        "dense(M=33,N=20,K=70,dtype=tf32)+bias+relu", "batch_matmul(B=3,M=20,N=24,K=40,dtype=tf32)",
        "conv2d_nchw(N=2,C=8,H=9,W=9,K=16,R=3,S=3,pad=1,dtype=tf32)+bias+relu",
        "conv2d_nhwc(N=1,C=16,H=8,W=8,K=24,R=3,S=3,stride=2,pad=1,dtype=tf32)"}) {
    ir::ComputeDAG dag = Dag(spec);
    ASSERT_TRUE(schedule::CheckTensorCoreSketch(dag, target).ok())
        << spec << ": " << schedule::CheckTensorCoreSketch(dag, target);
    for (int i = 0; i < 6; ++i) {
      absl::StatusOr<schedule::Trace> sched;
      schedule::TensorCoreTiling tiling;
      if (i == 5) {
        sched = search::space::RandomGpuSchedule(dag, target, rng);  // SIMT: float32 products
      } else {
        tiling = i == 0 ? schedule::DefaultTensorCoreTiling(dag, target)
                        : RandomTensorCoreTiling(dag, target, rng);
        if (i == 4) {  // cp.async where the rows and the shared memory allow it
          schedule::TensorCoreTiling copy = tiling;
          copy.stages = 2;
          copy.async_copy = 1;
          if (schedule::TensorCoreSchedule(dag, target, copy).ok()) tiling = copy;
        }
        EXPECT_TRUE(tiling.tf32);
        EXPECT_EQ(tiling.ldmatrix, 0);
        async += tiling.async_copy;
        sched = schedule::TensorCoreSchedule(dag, target, tiling);
      }
      ASSERT_TRUE(sched.ok()) << spec << ": " << sched.status();
      if (sched->sketch_id == ir::kGpuTensorCoreSketchId) {
        auto st = schedule::ScheduleState::Replay(dag, *sched, target);
        ASSERT_TRUE(st.ok()) << st.status();
        const ir::Stmt program = schedule::Lower(*st);
        EXPECT_EQ(CountMma(program), 1) << spec;
        EXPECT_EQ(CountMma(program, /*loads=*/true), 2) << spec;
        EXPECT_TRUE(absl::StrContains(ir::ToString(program), "mma16x8x8.tf32"));
        for (const ir::TensorDecl& t : st->dag().tensors) EXPECT_FALSE(t.float16) << t.name;
        ++mma;
      }
      auto r = Simulate(dag, *sched, target, 900 + i);
      ASSERT_TRUE(r.ok()) << spec << " schedule " << schedule::ToProto(*sched).ShortDebugString() << ": "
                          << r.status();
      ++checked;
    }
  }
  EXPECT_EQ(checked, 48);
  EXPECT_GE(mma, 40);
  EXPECT_GE(async, 4);
}

// On inputs that are not TF32 values the product is that of the factors
// rounded to TF32 (as cvt.rna.tf32.f32 rounds them), not the float32 one.
TEST(GpuTf32, FactorsAreRoundedToTf32) {
  const ir::Target target = Cuda("cuda -arch=sm_90");
  ir::ComputeDAG dag = Dag("matmul(M=32,N=16,K=64,dtype=tf32)");
  auto sched = schedule::TensorCoreSchedule(dag, target, schedule::DefaultTensorCoreTiling(dag, target));
  ASSERT_TRUE(sched.ok()) << sched.status();
  auto st = schedule::ScheduleState::Replay(dag, *sched, target);
  ASSERT_TRUE(st.ok()) << st.status();
  std::vector<std::vector<float>> inputs(2), rounded(2);
  for (int i = 0; i < 2; ++i) {
    inputs[size_t(i)].resize(size_t(dag.NumElements(dag.args[size_t(i)])));
    FillUniform(77, uint64_t(i), inputs[size_t(i)].data(), int64_t(inputs[size_t(i)].size()));
    for (float x : inputs[size_t(i)]) rounded[size_t(i)].push_back(RoundToTf32(x));
  }
  ASSERT_NE(inputs, rounded);
  auto exact = ir::EvaluateReference(dag, inputs);
  auto tf32 = ir::EvaluateReference(dag, rounded);
  ASSERT_TRUE(exact.ok() && tf32.ok());
  std::vector<std::vector<float>> args = inputs;
  args.push_back(std::vector<float>(exact->size(), std::nanf("")));
  auto got = testing::SimulateGpu(st->dag(), schedule::Lower(*st), target, args, nullptr);
  ASSERT_TRUE(got.ok()) << got.status();
  double off_tf32 = 0, off_exact = 0;
  for (size_t i = 0; i < got->size(); ++i) {
    off_tf32 = std::max(off_tf32, std::abs((*got)[i] - (*tf32)[i]));
    off_exact = std::max(off_exact, std::abs((*got)[i] - (*exact)[i]));
  }
  EXPECT_LT(off_tf32, 1e-5);
  EXPECT_GT(off_exact, 1e-4);  // 64 products each ~2^-11 off
}

// Decisions a tf32 schedule cannot take are refused by name; the shared
// tiles take float32's 4 bytes.
TEST(GpuTf32, TilingsAreCheckedForTheFormat) {
  const ir::Target target = Cuda("cuda -arch=sm_90");
  ir::ComputeDAG dag = Dag("matmul(M=128,N=128,K=128,dtype=tf32)");
  schedule::TensorCoreTiling t = schedule::DefaultTensorCoreTiling(dag, target);
  EXPECT_TRUE(t.tf32);
  EXPECT_EQ(t.BlockK(), 8 * t.k_steps);
  // The default pad spreads the fragments' reads over the banks: A's rows
  // (K inner, 16 floats) want 4, B's (N inner, 64 floats) 8; both beat 0.
  EXPECT_NE(t.pad, 0);
  ASSERT_TRUE(schedule::TensorCoreSchedule(dag, target, t).ok());
  schedule::TensorCoreTiling ldm = t;
  ldm.ldmatrix = 1;
  auto refused = schedule::TensorCoreSchedule(dag, target, ldm);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "ldmatrix 0 for tf32"))
      << refused.status();
  ir::ComputeDAG half = Dag("matmul(M=128,N=128,K=128,dtype=float16)");
  schedule::TensorCoreTiling pad4 = schedule::DefaultTensorCoreTiling(half, target);
  pad4.pad = 4;
  auto odd = schedule::TensorCoreSchedule(half, target, pad4);
  ASSERT_FALSE(odd.ok());
  EXPECT_TRUE(absl::StrContains(odd.status().message(), "a pad of 0 or 8")) << odd.status();
  // Float32 tiles: the kernel's shared memory is 4 bytes per element of
  // the two tiles, within the bound the checks use.
  auto sched = schedule::TensorCoreSchedule(dag, target, t);
  auto st = schedule::ScheduleState::Replay(dag, *sched, target);
  ASSERT_TRUE(st.ok()) << st.status();
  auto plan = schedule::PlanGpuLaunches(st->dag(), schedule::Lower(*st), target);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t tile_elements = 0;
  for (const ir::TensorDecl& d : st->dag().tensors) {
    if (!d.shared) continue;
    EXPECT_EQ(ir::ElementBytes(d), 4) << d.name;
    tile_elements += st->dag().NumElements(int(&d - st->dag().tensors.data()));
  }
  EXPECT_EQ(plan->kernels[0].shared_bytes, 4 * tile_elements);
  EXPECT_LE(plan->kernels[0].shared_bytes, t.SharedBytes());
  // The decisions travel as before: tf32 comes from the DAG.
  auto back = schedule::TensorCoreTiling::Decode(t.Encode(), true);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(back->tf32);
  EXPECT_EQ(back->Encode(), t.Encode());
}

// A lane layout mistake is caught: the accumulators written back with the
// lanes' rows and columns swapped differ from the reference.
TEST(GpuTensorCore, SimulatorCatchesAWrongFragmentLayout) {
  const ir::Target target = Cuda("cuda -arch=sm_90");
  ir::ComputeDAG dag = Dag("matmul(M=32,N=32,K=32,dtype=float16)");
  auto sched = schedule::TensorCoreSchedule(dag, target, schedule::DefaultTensorCoreTiling(dag, target));
  ASSERT_TRUE(sched.ok()) << sched.status();
  ASSERT_TRUE(Simulate(dag, *sched, target, 1).ok());
  // B's strides swapped as its fragments load: the warp multiplies by B's
  // transpose.
  std::function<ir::Stmt(ir::Stmt)> swap = [&](ir::Stmt s) -> ir::Stmt {
    auto n = std::make_shared<ir::StmtNode>(*s);
    if (n->kind == ir::StmtKind::kMma && n->mma_load == 2)
      std::swap(n->mma_a_strides[0], n->mma_a_strides[1]);
    for (ir::Stmt& b : n->body) b = swap(b);
    return n;
  };
  auto broken = Simulate(dag, *sched, target, 1, swap);
  EXPECT_FALSE(broken.ok());
  // B's paired ldmatrix loads (.x4) filling only their first fragment.
  ASSERT_EQ(schedule::DefaultTensorCoreTiling(dag, target).ldmatrix, 1);
  auto pair = [](const ir::StmtNode& s) { return s.mma_load == 2 && s.mma_fragments == 2; };
  auto unpaired = Changing(pair, [](ir::StmtNode* n) { n->mma_fragments = 1; });
  int pairs = 0;
  auto count = Changing(pair, [&](ir::StmtNode*) { ++pairs; });
  ASSERT_TRUE(Simulate(dag, *sched, target, 1, count).ok());
  EXPECT_GT(pairs, 0);
  EXPECT_FALSE(Simulate(dag, *sched, target, 1, unpaired).ok());
  // ldmatrix lanes naming the wrong rows: one matrix row on (the
  // interpreter reads each lane's row address as the generated code does),
  // or half a row on.
  auto ldmatrix = [](const ir::StmtNode& s) { return s.mma_ldmatrix; };
  for (int64_t shift : {8, 4}) {
    auto moved = Simulate(dag, *sched, target, 1, Changing(ldmatrix, [&](ir::StmtNode* n) {
                            n->mma_row = n->mma_row + ir::IntImm(shift);
                          }));
    ASSERT_FALSE(moved.ok()) << shift;
    EXPECT_TRUE(absl::StrContains(moved.status().message(),
                                  shift == 8 ? "disagree with the fragment layout" : "aligned"))
        << moved.status();
  }
  // cp.async staging without its barriers: a race.
  schedule::TensorCoreTiling async = schedule::DefaultTensorCoreTiling(dag, target);
  ASSERT_EQ(async.async_copy, 1);
  auto async_sched = schedule::TensorCoreSchedule(dag, target, async);
  ASSERT_TRUE(async_sched.ok()) << async_sched.status();
  ASSERT_TRUE(Simulate(dag, *async_sched, target, 1).ok());
  auto raced = Simulate(dag, *async_sched, target, 1, DropBarriers);
  ASSERT_FALSE(raced.ok());
  EXPECT_TRUE(absl::StrContains(raced.status().message(), "race")) << raced.status();
  // tf32 likewise: B's strides swapped in the m16n8k8 fragment load.
  ir::ComputeDAG tf32 = Dag("matmul(M=32,N=32,K=32,dtype=tf32)");
  auto tf32_sched = schedule::TensorCoreSchedule(tf32, target, schedule::DefaultTensorCoreTiling(tf32, target));
  ASSERT_TRUE(tf32_sched.ok()) << tf32_sched.status();
  ASSERT_TRUE(Simulate(tf32, *tf32_sched, target, 1).ok());
  EXPECT_FALSE(Simulate(tf32, *tf32_sched, target, 1, swap).ok());
}

// Each asynchronous-copy group's wait, made one group laxer.
ir::Stmt WaitOneGroupLess(const ir::Stmt& s) {
  auto n = std::make_shared<ir::StmtNode>(*s);
  if (n->kind == ir::StmtKind::kAsyncCommit && n->extent >= 0) ++n->extent;
  for (ir::Stmt& b : n->body) b = WaitOneGroupLess(b);
  return n;
}

// cp.async pipelines 2 to 4 stages deep, over K loops longer and shorter
// than the pipeline, ragged and exact, 16-bit and tf32: right numbers, one
// barrier per tile, and a wait one group short is caught (a tile read
// before it has landed).
TEST(GpuTensorCore, DeepPipelinesMatchReferenceInTheSimulator) {
  const ir::Target target = Cuda("cuda -arch=sm_80");
  int checked = 0;
  for (const std::string spec :
       {"matmul(M=64,N=48,K=200,dtype=float16)", "matmul(M=32,N=16,K=32,dtype=float16)",
        "conv2d_nhwc(N=1,C=16,H=8,W=8,K=24,R=3,S=3,pad=1,dtype=float16)+bias+relu",
        "batch_matmul(B=2,M=20,N=24,K=72,dtype=tf32)+relu",
        "matmul(M=40,N=16,K=64,dtype=bfloat16)"}) {
    ir::ComputeDAG dag = Dag(spec);
    schedule::TensorCoreTiling t = schedule::DefaultTensorCoreTiling(dag, target);
    ASSERT_EQ(t.async_copy, 1) << spec;
    t.k_steps = 1;
    const int64_t k_tiles = (schedule::TensorCoreProductShape(dag)[2] + t.BlockK() - 1) / t.BlockK();
    for (int64_t stages = 2; stages <= schedule::kMaxTensorCoreStages; ++stages) {
      t.stages = stages;
      auto sched = schedule::TensorCoreSchedule(dag, target, t);
      ASSERT_TRUE(sched.ok()) << spec << ": " << sched.status();
      auto r = Simulate(dag, *sched, target, 40 + stages);
      ASSERT_TRUE(r.ok()) << spec << " decisions " << absl::StrJoin(t.Encode(), ",") << ": "
                          << r.status();
      EXPECT_EQ(r->stats.barriers, k_tiles + 1) << spec << ", " << stages << " stages";
      auto early = Simulate(dag, *sched, target, 40 + stages, WaitOneGroupLess);
      ASSERT_FALSE(early.ok()) << spec << ", " << stages << " stages";
      EXPECT_TRUE(absl::StrContains(early.status().message(), "in flight")) << early.status();
      ++checked;
    }
  }
  EXPECT_EQ(checked, 15);
  // More than 2 stages need cp.async; a long K loop gets 3 by default.
  ir::ComputeDAG dag = Dag("matmul(M=1024,N=1024,K=1024,dtype=float16)");
  schedule::TensorCoreTiling t = schedule::DefaultTensorCoreTiling(dag, target);
  EXPECT_EQ(t.stages, 3);
  EXPECT_EQ(t.async_copy, 1);
  t.async_copy = 0;
  auto refused = schedule::TensorCoreSchedule(dag, target, t);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "more than 2 stages need async_copy"))
      << refused.status();
  t.async_copy = 1;
  t.stages = 5;
  EXPECT_TRUE(absl::StrContains(schedule::TensorCoreSchedule(dag, target, t).status().message(),
                                "1 to 4 stages"));
}

// The most 16-byte chunks of `chunks` (element offsets of 16-bit data)
// that share one of the 8 bank groups of a 128-byte line: the wavefronts a
// quarter warp's 16-byte accesses, or one ldmatrix phase, take.
int WorstBankGroup(const std::vector<int64_t>& chunks) {
  std::map<int64_t, std::set<int64_t>> groups;  // group -> distinct 16-byte chunks
  for (int64_t e : chunks) groups[(e / 8) % 8].insert(e / 8);
  size_t worst = 0;
  for (const auto& [group, in] : groups) worst = std::max(worst, in.size());
  return int(worst);
}

// Swizzled 16-bit tiles: rows of 16 to 256 elements put the same chunk of
// 8 consecutive rows (an ldmatrix phase) and 8 consecutive chunks in row
// order (a quarter warp's 16-byte copies) in 8 distinct bank groups, where
// a padded 32-element row (the default k-inner A tile) gives the copies 2
// chunks in one group. Tilings with it match the reference in the
// interpreter through every staging; reading the tiles unswizzled does
// not; decisions it cannot take are refused by name.
TEST(GpuTensorCore, SwizzledTilesSpreadTheBanksAndMatchTheReference) {
  for (int64_t row : {16, 32, 64, 128, 256}) {
    const int64_t chunks = row / 8, rows = 32;
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
      for (int64_t c = 0; c < chunks; ++c) {
        std::vector<int64_t> phase;
        for (int64_t r = r0; r < r0 + 8; ++r)
          phase.push_back(ir::SwizzledElement(r * row + 8 * c, row));
        EXPECT_EQ(WorstBankGroup(phase), 1) << "ldmatrix, rows of " << row << ", chunk " << c;
      }
    }
    for (int64_t q0 = 0; q0 < rows * chunks; q0 += 8) {
      std::vector<int64_t> copies;
      for (int64_t q = q0; q < q0 + 8; ++q) copies.push_back(ir::SwizzledElement(8 * q, row));
      EXPECT_EQ(WorstBankGroup(copies), 1) << "copies, rows of " << row << ", chunk " << q0;
    }
  }
  std::vector<int64_t> padded;  // rows of 32 + 8: 4 chunks each, 2 rows a quarter warp
  for (int64_t q = 0; q < 8; ++q) padded.push_back((q / 4) * 40 + (q % 4) * 8);
  EXPECT_EQ(WorstBankGroup(padded), 2);

  const ir::Target target = Cuda("cuda -arch=sm_80 -max-shared-memory-per-block=166912");
  int checked = 0;
  for (const std::string spec :
       {"matmul(M=64,N=48,K=200,dtype=float16)",
        "matmul(M=40,N=72,K=96,transpose_a=1,dtype=float16)",
        "dense(M=33,N=40,K=64,dtype=bfloat16)+bias+relu",
        "conv2d_nhwc(N=1,C=16,H=8,W=8,K=24,R=3,S=3,pad=1,dtype=float16)+bias+relu",
        "conv2d_nchw(N=1,C=16,H=6,W=6,K=16,R=3,S=3,pad=1,dtype=float16)"}) {
    ir::ComputeDAG dag = Dag(spec);
    for (int64_t stages : {1, 2, 3}) {
      schedule::TensorCoreTiling t = schedule::DefaultTensorCoreTiling(dag, target);
      t.pad = 0;
      t.swizzle = 1;
      t.k_steps = stages == 3 ? 4 : stages;
      t.stages = stages;
      t.async_copy = stages == 3 ? 1 : 0;
      auto sched = schedule::TensorCoreSchedule(dag, target, t);
      if (stages == 3 && !sched.ok()) continue;  // rows that cp.async cannot move (NCHW)
      ASSERT_TRUE(sched.ok()) << spec << ": " << sched.status();
      EXPECT_EQ(schedule::TensorCoreTiling::Decode(sched->decisions, false)->swizzle, 1);
      auto r = Simulate(dag, *sched, target, 60 + stages);
      ASSERT_TRUE(r.ok()) << spec << " decisions " << absl::StrJoin(t.Encode(), ",") << ": "
                          << r.status();
      auto unswizzled =
          Simulate(dag, *sched, target, 60 + stages,
                   Changing([](const ir::StmtNode& s) { return s.kind == ir::StmtKind::kMma; },
                            [](ir::StmtNode* n) { n->mma_swizzle = 0; }));
      EXPECT_FALSE(unswizzled.ok()) << spec << ", " << stages << " stages";
      ++checked;
    }
  }
  EXPECT_GE(checked, 13);
  ir::ComputeDAG dag = Dag("matmul(M=256,N=256,K=256,dtype=float16)");
  schedule::TensorCoreTiling t = schedule::DefaultTensorCoreTiling(dag, target);
  t.pad = 0;
  t.swizzle = 1;
  for (int bad = 0; bad < 3; ++bad) {
    schedule::TensorCoreTiling b = t;
    if (bad == 0) b.pad = 8;
    if (bad == 1) b.ldmatrix = 0;
    if (bad == 2) b.k_steps = 3;
    auto refused = schedule::TensorCoreSchedule(dag, target, b);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                  bad < 2 ? "swizzled tiles are 16-bit mma.sync tiles read by "
                                            "ldmatrix, with pad 0"
                                          : "power-of-two rows, not 48"))
        << refused.status();
  }
}

// ---- wgmma (sm_90a): warpgroup products from core-matrix tiles ----

// Decisions for wgmma: one warpgroup along M, `warps_n` along N, each
// frags_m products of 64 x 8 frags_n.
schedule::TensorCoreTiling WgmmaTiling(int64_t warps_n, int64_t frags_m, int64_t frags_n, int64_t k_steps,
                                 int64_t stages, int64_t wgmma = 1) {
  schedule::TensorCoreTiling t;
  t.warps_m = 4;
  t.warps_n = warps_n;
  t.frags_m = frags_m;
  t.frags_n = frags_n;
  t.k_steps = k_steps;
  t.pad = 0;
  t.stages = stages;
  t.ldmatrix = 0;
  t.async_copy = 1;
  t.wgmma = wgmma;
  return t;
}

// `s` with each statement `edit` returns a replacement for replaced
// (nullptr: kept), recursively.
ir::Stmt EditStmts(const ir::Stmt& s, const std::function<ir::Stmt(const ir::Stmt&)>& edit) {
  if (ir::Stmt r = edit(s)) return r;
  auto n = std::make_shared<ir::StmtNode>(*s);
  for (ir::Stmt& b : n->body) b = EditStmts(b, edit);
  return n;
}

// The edit that applies `change` to a copy of each statement `match`es.
std::function<ir::Stmt(ir::Stmt)> Changing(std::function<bool(const ir::StmtNode&)> match,
                                           std::function<void(ir::StmtNode*)> change) {
  return [=](ir::Stmt p) {
    return EditStmts(p, [&](const ir::Stmt& s) -> ir::Stmt {
      if (!match(*s)) return nullptr;
      auto n = std::make_shared<ir::StmtNode>(*s);
      change(n.get());
      return n;
    });
  };
}

// wgmma schedules of 16-bit products whose operands are K-major and M- or
// N-major, in all four pairs (transposes, dense weights, NHWC
// convolutions), ragged and
// exact, with epilogues, against the float64 reference: the interpreter
// reads each factor through the descriptors' canonical layouts, so a
// wrong start, lbo or sbo fails; it also requires the proxy fence after
// the copies land, the wgmma fence after the accumulators are written, and
// the wait before they are read, each shown by removing it.
TEST(GpuWgmma, SchedulesMatchReferenceInTheSimulator) {
  const ir::Target target = Cuda("cuda -arch=sm_90 -max-shared-memory-per-block=232448");
  int checked = 0;
  struct Case {
    std::string spec;
    schedule::TensorCoreTiling tiling;
  };
  for (const Case& c : std::vector<Case>{
           {"matmul(M=128,N=64,K=64,dtype=float16)", WgmmaTiling(1, 2, 8, 2, 2)},
           {"matmul(M=64,N=48,K=80,transpose_a=1,dtype=float16)", WgmmaTiling(1, 1, 6, 1, 3, 2)},
           // A M-major and B K-major: the fourth pair
           {"matmul(M=128,N=96,K=64,transpose_a=1,transpose_b=1,dtype=float16)",
            WgmmaTiling(2, 1, 6, 2, 2)},
           {"dense(M=70,N=40,K=48,dtype=float16)+bias+relu", WgmmaTiling(2, 1, 4, 1, 3)},
           {"batch_matmul(B=2,M=64,N=32,K=32,transpose_b=1,dtype=bfloat16)",
            WgmmaTiling(1, 1, 4, 2, 2)},
           {"conv2d_nhwc(N=1,C=16,H=8,W=8,K=32,R=3,S=3,pad=1,dtype=float16)+bias",
            WgmmaTiling(2, 1, 2, 1, 4, 2)},
           {"matmul(M=64,N=256,K=32,dtype=float16)", WgmmaTiling(1, 1, 32, 2, 2)},
           // ragged along M, N and K (72 = 2 x 32 + 8)
           {"matmul(M=96,N=40,K=72,dtype=float16)+relu", WgmmaTiling(1, 1, 4, 2, 3, 2)}}) {
    ir::ComputeDAG dag = Dag(c.spec);
    auto sched = schedule::TensorCoreSchedule(dag, target, c.tiling);
    ASSERT_TRUE(sched.ok()) << c.spec << ": " << sched.status();
    EXPECT_EQ(sched->decisions.size(), 10u);
    auto st = schedule::ScheduleState::Replay(dag, *sched, target);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_TRUE(absl::StrContains(ir::ToString(schedule::Lower(*st)), "wgmma64x")) << c.spec;
    auto r = Simulate(dag, *sched, target, 60 + checked);
    ASSERT_TRUE(r.ok()) << c.spec << " decisions " << absl::StrJoin(c.tiling.Encode(), ",") << ": "
                        << r.status();
    EXPECT_EQ(r->stats.threads_per_block, c.tiling.Threads());
    ++checked;
    if (checked > 2) continue;
    // Without the proxy fence, the wgmma fence, or the wait: refused.
    auto no_proxy = Simulate(
        dag, *sched, target, 1,
        Changing([](const ir::StmtNode& s) { return s.kind == ir::StmtKind::kAsyncCommit; },
                 [](ir::StmtNode* n) { n->proxy_fence = false; }));
    ASSERT_FALSE(no_proxy.ok());
    EXPECT_TRUE(absl::StrContains(no_proxy.status().message(), "no proxy fence"))
        << no_proxy.status();
    auto no_fence = Simulate(dag, *sched, target, 1, [](ir::Stmt p) {
      return EditStmts(p, [](const ir::Stmt& s) -> ir::Stmt {
        return s->kind == ir::StmtKind::kWgmmaSync && s->extent < 0 ? ir::Seq({}) : nullptr;
      });
    });
    ASSERT_FALSE(no_fence.ok());
    EXPECT_TRUE(absl::StrContains(no_fence.status().message(), "without a wgmma fence"))
        << no_fence.status();
    auto commits = [](const ir::StmtNode& s) {
      return s.kind == ir::StmtKind::kWgmmaSync && s.extent >= 0;
    };
    auto no_wait =
        Simulate(dag, *sched, target, 1, Changing(commits, [](ir::StmtNode* n) { n->extent = 1; }));
    ASSERT_FALSE(no_wait.ok());
    EXPECT_TRUE(absl::StrContains(no_wait.status().message(), "not waited for"))
        << no_wait.status();
    if (c.tiling.wgmma == 2) {
      // Two tiles' products left in flight: the copy into the buffer the
      // older one still reads is a race.
      auto lax = Simulate(dag, *sched, target, 1,
                          Changing(commits, [](ir::StmtNode* n) { n->extent += 1; }));
      ASSERT_FALSE(lax.ok());
      EXPECT_TRUE(absl::StrContains(lax.status().message(), "a wgmma reading it is not waited for"))
          << lax.status();
    }
    // A's lbo and sbo swapped, or B read in the other major-ness: wrong numbers.
    for (int wrong = 0; wrong < 2; ++wrong) {
      auto broken =
          Simulate(dag, *sched, target, 1,
                   Changing([](const ir::StmtNode& s) { return s.kind == ir::StmtKind::kMma; },
                            [&](ir::StmtNode* n) {
                              if (wrong == 0) std::swap(n->mma_a_strides[0], n->mma_a_strides[1]);
                              if (wrong == 1) n->mma_b_mn_major = !n->mma_b_mn_major;
                            }));
      EXPECT_FALSE(broken.ok()) << c.spec << " edit " << wrong;
    }
  }
  EXPECT_EQ(checked, 8);
}

// The library-like tilings the sketch draws a quarter of its samples from:
// those that fit each target, every one building, and the interpreter
// agreeing with the reference on a product they tile several times over.
TEST(GpuWgmma, KnownTilingsFitTheirTargetAndMatchTheReference) {
  const ir::Target h100 = Cuda("cuda -arch=sm_90 -max-shared-memory-per-block=232448");
  const ir::Target a100 = Cuda("cuda -arch=sm_80 -max-shared-memory-per-block=166912");
  const ir::Target plain = Cuda("cuda -arch=sm_90");
  ir::ComputeDAG big = Dag("matmul(M=4096,N=4096,K=4096,dtype=float16)");
  auto known = [&](const ir::ComputeDAG& dag, const ir::Target& t) {
    return search::space::TensorCoreSketch(dag, t).KnownTilings();
  };
  const auto on_h100 = known(big, h100), on_a100 = known(big, a100), on_plain = known(big, plain);
  int wgmma = 0;
  for (const schedule::TensorCoreTiling& t : on_h100) wgmma += t.wgmma != 0;
  EXPECT_GE(wgmma, 4);
  EXPECT_GE(int(on_h100.size()) - wgmma, 5);
  for (const schedule::TensorCoreTiling& t : on_a100) EXPECT_EQ(t.wgmma, 0);
  EXPECT_GE(on_a100.size(), 5u);
  EXPECT_LT(on_plain.size(), on_a100.size());  // 48 KiB leaves the deep ones out
  for (const schedule::TensorCoreTiling& t : on_h100)
    EXPECT_TRUE(schedule::TensorCoreSchedule(big, h100, t).ok()) << absl::StrJoin(t.Encode(), ",");
  // Tiled several times over, ragged along N.
  ir::ComputeDAG mid = Dag("matmul(M=256,N=264,K=192,dtype=float16)+relu");
  int checked = 0;
  for (const schedule::TensorCoreTiling& t : known(mid, h100)) {
    auto sched = schedule::TensorCoreSchedule(mid, h100, t);
    ASSERT_TRUE(sched.ok()) << sched.status();
    auto r = Simulate(mid, *sched, h100, 70 + checked);
    ASSERT_TRUE(r.ok()) << absl::StrJoin(t.Encode(), ",") << ": " << r.status();
    ++checked;
  }
  EXPECT_GE(checked, 6);
}

// wgmma decisions are refused where they cannot run, by name.
TEST(GpuWgmma, RefusedWithReasons) {
  ir::ComputeDAG dag = Dag("matmul(M=128,N=64,K=64,dtype=float16)");
  auto why = [&](const std::string& target, schedule::TensorCoreTiling t,
                 const ir::ComputeDAG& d) -> std::string {
    return std::string(schedule::TensorCoreSchedule(d, Cuda(target), t).status().message());
  };
  const schedule::TensorCoreTiling ok = WgmmaTiling(1, 1, 8, 1, 2);
  EXPECT_EQ(why("cuda -arch=sm_90", ok, dag), "");
  EXPECT_TRUE(absl::StrContains(why("cuda -arch=sm_80", ok, dag), "wgmma is sm_90's"));
  schedule::TensorCoreTiling two = ok;
  two.warps_m = 2;
  EXPECT_TRUE(absl::StrContains(why("cuda -arch=sm_90", two, dag), "4 warps along M"));
  schedule::TensorCoreTiling shallow = ok;
  shallow.wgmma = 2;
  EXPECT_TRUE(absl::StrContains(why("cuda -arch=sm_90", shallow, dag), "3 stages or more"));
  schedule::TensorCoreTiling padded = ok;
  padded.pad = 8;
  EXPECT_TRUE(absl::StrContains(why("cuda -arch=sm_90", padded, dag), "pad 0"));
  EXPECT_TRUE(absl::StrContains(
      why("cuda -arch=sm_90", ok, Dag("matmul(M=128,N=64,K=64,dtype=tf32)")), "16-bit"));
  // Stored wgmma decisions replayed onto a product whose rows cannot move
  // 16 bytes at a time (K = 20): refused, not lowered without cp.async.
  schedule::Trace stored;
  stored.sketch_id = ir::kGpuTensorCoreSketchId;
  stored.decisions = ok.Encode();
  auto replay = schedule::ScheduleState::Replay(Dag("matmul(M=128,N=64,K=20,dtype=float16)"), stored,
                                          Cuda("cuda -arch=sm_90"));
  ASSERT_FALSE(replay.ok());
  EXPECT_TRUE(absl::StrContains(replay.status().message(), "wgmma needs both tiles' rows"))
      << replay.status();
  // Likewise an mma.sync pipeline 3 stages deep (2 would fall back to
  // registers).
  schedule::TensorCoreTiling deep;
  deep.stages = 3;
  stored.decisions = deep.Encode();
  replay = schedule::ScheduleState::Replay(Dag("matmul(M=128,N=64,K=20,dtype=float16)"), stored,
                                     Cuda("cuda -arch=sm_90"));
  ASSERT_FALSE(replay.ok());
  EXPECT_TRUE(absl::StrContains(replay.status().message(), "more than 2 stages needs"))
      << replay.status();
  deep.stages = 2;
  stored.decisions = deep.Encode();
  EXPECT_TRUE(schedule::ScheduleState::Replay(Dag("matmul(M=128,N=64,K=20,dtype=float16)"), stored,
                                        Cuda("cuda -arch=sm_90"))
                  .ok());
  // A nine-value wire form is an mma.sync tiling, as before.
  auto nine = schedule::TensorCoreTiling::Decode(std::vector<int64_t>{2, 2, 2, 4, 2, 8, 2, 1, 1}, false);
  ASSERT_TRUE(nine.has_value());
  EXPECT_EQ(nine->wgmma, 0);
  EXPECT_EQ(nine->Encode().size(), 9u);
}

TEST(GpuTensorCore, RefusedWithReasons) {
  auto why = [](const std::string& spec, const std::string& arch) {
    return std::string(schedule::CheckTensorCoreSketch(Dag(spec), Cuda("cuda -arch=" + arch)).message());
  };
  EXPECT_TRUE(absl::StrContains(why("matmul(M=64,N=64,K=64,dtype=float16)", "sm_75"),
                                "sm_75 has no float16 mma.sync"));
  EXPECT_TRUE(absl::StrContains(why("matmul(M=64,N=64,K=64)", "sm_90"), "float32 without tf32"));
  EXPECT_TRUE(absl::StrContains(why("matmul(M=64,N=64,K=64,dtype=tf32)", "sm_75"),
                                "sm_75 has no tf32 mma.sync m16n8k8"));
  EXPECT_TRUE(absl::StrContains(
      why("depthwise_conv2d_nchw(N=1,C=32,H=8,W=8,R=3,S=3,pad=1,dtype=float16)", "sm_90"),
      "too small for 16x8x16 tiles"));
  EXPECT_TRUE(absl::StrContains(why("softmax(A=3,N=20,dtype=float16)", "sm_90"),
                                "no tensor-core schedule"));
  const ir::Target target = Cuda("cuda -arch=sm_90");
  ir::ComputeDAG dag = Dag("matmul(M=64,N=64,K=64,dtype=float16)");
  schedule::TensorCoreTiling t;
  t.frags_m = 8;
  t.frags_n = 8;
  auto too_many = schedule::TensorCoreSchedule(dag, target, t);
  ASSERT_FALSE(too_many.ok());
  EXPECT_TRUE(absl::StrContains(too_many.status().message(), "256 accumulators per thread"))
      << too_many.status();
  schedule::Trace bad;
  bad.sketch_id = ir::kGpuTensorCoreSketchId;
  bad.decisions = {2, 2, 2};
  auto replay = schedule::ScheduleState::Replay(dag, bad, target);
  ASSERT_FALSE(replay.ok());
  EXPECT_TRUE(absl::StrContains(replay.status().message(), "9 to 11 values, not 3"))
      << replay.status();
  // Two decisions are two schedules (a tensor-core schedule has no steps).
  auto a = schedule::TensorCoreSchedule(dag, target, schedule::TensorCoreTiling{});
  schedule::TensorCoreTiling other;
  other.pad = 0;
  auto b = schedule::TensorCoreSchedule(dag, target, other);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(schedule::TraceHash(*a), schedule::TraceHash(*b));
  // LLVM's NVPTX route has no tensor-core lowering and says so.
  auto st = schedule::ScheduleState::Replay(dag, *a, target);
  ASSERT_TRUE(st.ok()) << st.status();
  auto llvm = codegen::CompileCudaWithLlvm(st->dag(), schedule::Lower(*st), target);
  ASSERT_FALSE(llvm.ok());
  EXPECT_TRUE(absl::StrContains(llvm.status().message(), "through NVRTC")) << llvm.status();
}

TEST(GpuSchedule, LoweredTiledProgramStagesInSharedMemory) {
  const ir::Target target = Cuda();
  ir::ComputeDAG dag = Dag("conv2d_nchw(N=1,C=8,H=12,W=12,K=16,R=3,S=3,pad=1)+bias+relu");
  auto sched = schedule::BuildGpuTiledSchedule(dag, target, schedule::DefaultGpuTiling(dag, target));
  ASSERT_TRUE(sched.ok()) << sched.status();
  auto st = schedule::ScheduleState::Replay(dag, *sched, target);
  ASSERT_TRUE(st.ok()) << st.status();
  std::vector<std::string> names = st->dag().TensorNames();
  std::string text = ir::ToString(schedule::Lower(*st), &names);
  EXPECT_TRUE(absl::StrContains(text, "(blockIdx.x)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "(threadIdx.x)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "allocate shared ")) << text;
  EXPECT_TRUE(absl::StrContains(text, "allocate local ")) << text;
  EXPECT_TRUE(absl::StrContains(text, "barrier")) << text;
}

TEST(GpuSchedule, PrimitivesRefusedWithReasons) {
  ir::ComputeDAG dag = Dag("matmul(M=16,N=16,K=16)");
  auto refuse = [&](const ir::Target& target, schedule::Step step, const std::string& why) {
    schedule::Trace s;
    s.steps.push_back(std::move(step));
    auto st = schedule::ScheduleState::Replay(dag, s, target);
    ASSERT_FALSE(st.ok()) << why;
    EXPECT_TRUE(absl::StrContains(st.status().message(), why)) << st.status();
  };
  const schedule::AnnotateStep bind{0, 0, v1::ANNOTATION_THREAD_X};
  auto host = ir::Target::Parse("llvm");
  ASSERT_TRUE(host.ok());
  refuse(*host, bind, "is for GPU targets");
  schedule::AnnotateStep par = bind;
  par.annotation = v1::ANNOTATION_PARALLEL;
  refuse(Cuda(), par, "is for CPU targets");
  schedule::AnnotateStep reduce = bind;
  reduce.iter = 2;
  refuse(Cuda(), reduce, "cannot bind reduction loop");
  schedule::StorageAlignStep align{0};
  align.factor = 32;
  refuse(Cuda(), align, "not a shared-memory copy");
}

TEST(GpuLimits, TooManyThreadsAndTooMuchSharedMemoryAreRefused) {
  ir::ComputeDAG dag = Dag("matmul(M=64,N=64,K=64)");
  ir::Target small = Cuda("cuda -arch=sm_87 -max-threads-per-block=64");
  auto fused = schedule::GpuFusedSchedule(dag, small, 128);
  ASSERT_TRUE(fused.ok());
  auto st = schedule::ScheduleState::Replay(dag, *fused, small);
  ASSERT_TRUE(st.ok());
  auto plan = schedule::PlanGpuLaunches(st->dag(), schedule::Lower(*st), small);
  ASSERT_FALSE(plan.ok());
  EXPECT_TRUE(absl::StrContains(plan.status().message(), "128 threads per block exceed"))
      << plan.status();
  auto emitted = codegen::EmitCuda(st->dag(), schedule::Lower(*st), small);
  EXPECT_FALSE(emitted.ok());

  // The whole K in one shared tile: 64x64 floats per operand = 32 KiB.
  ir::Target tiny_smem = Cuda("cuda -arch=sm_87 -max-shared-memory-per-block=16384");
  schedule::GpuTiling d = schedule::DefaultGpuTiling(dag, tiny_smem);
  d.reduce[0].r2 = 64;
  auto tiled = schedule::BuildGpuTiledSchedule(dag, tiny_smem, d);
  ASSERT_TRUE(tiled.ok()) << tiled.status();
  auto st2 = schedule::ScheduleState::Replay(dag, *tiled, tiny_smem);
  ASSERT_TRUE(st2.ok());
  auto plan2 = schedule::PlanGpuLaunches(st2->dag(), schedule::Lower(*st2), tiny_smem);
  ASSERT_FALSE(plan2.ok());
  EXPECT_TRUE(absl::StrContains(plan2.status().message(), "bytes of shared memory exceed"))
      << plan2.status();
  // The default for that target fits it.
  auto def = schedule::ScheduleState::Replay(dag, schedule::DefaultSchedule(dag, tiny_smem), tiny_smem);
  ASSERT_TRUE(def.ok());
  EXPECT_TRUE(schedule::PlanGpuLaunches(def->dag(), schedule::Lower(*def), tiny_smem).ok());
}

// ---- NVRTC: real compilation for three archs (no GPU needed) ----

// ptxas of this machine's toolkit; "" when there is none.
std::string Ptxas();

class NvrtcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!codegen::HaveNvrtc()) TF_SKIP("no-cuda-toolkit") << "this build has no CUDA toolkit (NVRTC)";
  }
};

absl::StatusOr<codegen::GpuArtifact> Build(const ir::ComputeDAG& dag, const schedule::Trace& sched,
                                           const ir::Target& target,
                                           codegen::CudaCompileOptions options = {}) {
  TF_ASSIGN_OR_RETURN(schedule::ScheduleState st, schedule::ScheduleState::Replay(dag, sched, target));
  TF_ASSIGN_OR_RETURN(codegen::GpuProgram p, codegen::EmitCuda(st.dag(), schedule::Lower(st), target));
  return codegen::CompileCuda(p, target, options);
}

TEST_F(NvrtcTest, SupportsTheArchsWeTarget) {
  std::vector<std::string> archs = codegen::NvrtcSupportedArchs();
  for (const char* a : {"sm_75", "sm_87", "sm_90"}) {
    EXPECT_NE(std::find(archs.begin(), archs.end(), a), archs.end()) << a;
  }
}

TEST_F(NvrtcTest, RandomPairsCompileForThreeArchsAndTheCubinsSayWhatPtxasSaid) {
  std::mt19937_64 rng(77);
  int built = 0;
  for (const char* arch : {"sm_75", "sm_87", "sm_90"}) {
    ir::Target target = Cuda(std::string("cuda -arch=") + arch);
    for (int i = 0; i < 12; ++i) {
      const std::string& spec = Workloads()[rng() % Workloads().size()];
      ir::ComputeDAG dag = Dag(spec);
      schedule::Trace sched = search::space::RandomGpuSchedule(dag, target, rng);
      auto a = Build(dag, sched, target);
      ASSERT_TRUE(a.ok()) << arch << " " << spec << ": " << a.status();
      auto info = codegen::ReadCubin(a->cubin);
      ASSERT_TRUE(info.ok()) << info.status();
      ASSERT_EQ(info->size(), a->program.kernels.size()) << a->program.source;
      for (const codegen::GpuKernel& k : a->program.kernels) {
        auto it = std::find_if(info->begin(), info->end(),
                               [&](const codegen::CubinKernelInfo& c) { return c.name == k.name; });
        ASSERT_NE(it, info->end()) << k.name;
        EXPECT_EQ(it->registers, k.registers)
            << arch << " " << spec << " " << k.name << ", NVRTC " << codegen::NvrtcVersion()
            << ", log:\n"
            << a->log;
        // The section also holds alignment and, from sm_90, 1 KiB reserved.
        EXPECT_GE(it->shared_bytes, k.shared_bytes) << k.name;
        EXPECT_LE(it->shared_bytes, k.shared_bytes + 1024 + 16) << k.name;
        EXPECT_GT(it->code_bytes, 0);
        EXPECT_GE(k.spill_store_bytes, 0) << a->log;
      }
      ++built;
    }
  }
  EXPECT_EQ(built, 36);
}

TEST_F(NvrtcTest, DefaultSchedulesDoNotSpill) {
  for (const char* arch : {"sm_75", "sm_87", "sm_90"}) {
    ir::Target target = Cuda(std::string("cuda -arch=") + arch);
    for (const std::string& spec :
         {std::string("conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)+bias+relu"),
          std::string("matmul(M=1024,N=1024,K=1024)"),
          std::string("depthwise_conv2d_nchw(N=1,C=144,H=56,W=56,R=3,S=3,pad=1)"),
          std::string("add(N=1,C=64,H=56,W=56)+relu")}) {
      ir::ComputeDAG dag = Dag(spec);
      auto a = Build(dag, schedule::DefaultSchedule(dag, target), target);
      ASSERT_TRUE(a.ok()) << arch << " " << spec << ": " << a.status();
      for (const codegen::GpuKernel& k : a->program.kernels) {
        EXPECT_EQ(k.spill_store_bytes, 0) << arch << " " << spec << "\n" << a->log;
        EXPECT_EQ(k.spill_load_bytes, 0) << arch << " " << spec;
        EXPECT_GT(k.registers, 0);
      }
    }
  }
}

TEST_F(NvrtcTest, PtxOnRequest) {
  ir::Target target = Cuda("cuda -arch=sm_87");
  ir::ComputeDAG dag = Dag("dense(M=5,N=31,K=17)+bias");
  codegen::CudaCompileOptions opts;
  opts.cubin = false;
  opts.ptx = true;
  auto a = Build(dag, schedule::DefaultSchedule(dag, target), target, opts);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->cubin.empty());
  EXPECT_TRUE(absl::StrContains(a->ptx, ".target sm_87")) << a->ptx.substr(0, 400);
  EXPECT_TRUE(absl::StrContains(a->ptx, ".entry tf_kernel_0"));
}

// Float16 builds compile for each arch: float16 parameters as their bits,
// float32 arithmetic, conversions by cvt (no header needed).
TEST_F(NvrtcTest, Float16BuildsCompileForThreeArchs) {
  std::mt19937_64 rng(1616);
  int built = 0;
  for (const char* arch : {"sm_75", "sm_87", "sm_90"}) {
    ir::Target target = Cuda(std::string("cuda -arch=") + arch);
    for (int i = 0; i < 4; ++i) {
      const std::string spec =
          Half(i % 2 == 0 ? "conv2d_nchw(N=1,C=7,H=9,W=11,K=10,R=3,S=3,pad=1)+bias+relu"
                          : "matmul(M=64,N=48,K=40)");
      ir::ComputeDAG dag = Dag(spec);
      schedule::Trace sched = i < 2 ? schedule::DefaultSchedule(dag, target)
                              : search::space::RandomGpuSchedule(dag, target, rng);
      codegen::CudaCompileOptions opts;
      opts.ptx = true;
      auto a = Build(dag, sched, target, opts);
      ASSERT_TRUE(a.ok()) << arch << " " << spec << ": " << a.status();
      EXPECT_TRUE(absl::StrContains(a->program.source, "const unsigned short* __restrict__"))
          << a->program.source;
      EXPECT_TRUE(absl::StrContains(a->program.source, "unsigned short* __restrict__ t"));
      EXPECT_TRUE(absl::StrContains(a->ptx, "cvt.rn.f16.f32")) << a->ptx;
      // (A tensor-core product moves its operands' bits; the others widen.)
      if (sched.sketch_id != ir::kGpuTensorCoreSketchId || spec.find("bias") != std::string::npos)
        EXPECT_TRUE(absl::StrContains(a->ptx, "cvt.f32.f16")) << a->ptx;
      ASSERT_TRUE(codegen::ReadCubin(a->cubin).ok());
      ++built;
    }
  }
  EXPECT_EQ(built, 12);
}

// The tensor-core schedule of `tiling` built by NVRTC, with its PTX.
absl::StatusOr<codegen::GpuArtifact> BuildTensorCore(const ir::ComputeDAG& dag,
                                                     const ir::Target& target,
                                                     const schedule::TensorCoreTiling& tiling) {
  TF_ASSIGN_OR_RETURN(schedule::Trace sched, schedule::TensorCoreSchedule(dag, target, tiling));
  codegen::CudaCompileOptions opts;
  opts.ptx = true;
  return Build(dag, sched, target, opts);
}

// How often `needle` occurs in `text`.
int64_t Occurrences(const std::string& text, const std::string& needle) {
  int64_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Tensor-core schedules compile for the archs that have mma.sync
// m16n8k16: the PTX holds it, nothing spills, the cubin reads back.
TEST_F(NvrtcTest, TensorCoreBuildsCompile) {
  std::mt19937_64 rng(8080);
  int built = 0;
  for (const char* arch : {"sm_80", "sm_87", "sm_90"}) {
    ir::Target target = Cuda(std::string("cuda -arch=") + arch);
    for (const std::string spec :
         {"matmul(M=4096,N=4096,K=4096,dtype=float16)",
          "dense(M=33,N=20,K=70,dtype=float16)+bias+relu",
          "conv2d_nchw(N=16,C=128,H=28,W=28,K=128,R=3,S=3,pad=1,dtype=float16)+bias+relu"}) {
      ir::ComputeDAG dag = Dag(spec);
      for (int i = 0; i < 2; ++i) {
        auto a = BuildTensorCore(dag, target,
                                 i == 0 ? schedule::DefaultTensorCoreTiling(dag, target)
                                        : RandomTensorCoreTiling(dag, target, rng));
        ASSERT_TRUE(a.ok()) << arch << " " << spec << ": " << a.status();
        EXPECT_TRUE(absl::StrContains(a->ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"))
            << a->program.source;
        ASSERT_TRUE(codegen::ReadCubin(a->cubin).ok());
        ASSERT_EQ(a->program.kernels.size(), 1u);
        EXPECT_GT(a->program.kernels[0].registers, 0);
        if (i == 0) {  // the default: double-buffered, fragments by ldmatrix
          EXPECT_EQ(a->program.kernels[0].spill_store_bytes, 0) << a->log;
          EXPECT_TRUE(absl::StrContains(a->ptx, "ldmatrix.sync.aligned.m8n8.x4")) << a->ptx;
          // Each k step loads a warp's fragments once: frags_m of A (x4),
          // frags_n of B in pairs (x4), for frags_m x frags_n products.
          const schedule::TensorCoreTiling t = schedule::DefaultTensorCoreTiling(dag, target);
          ASSERT_EQ(t.frags_n % 2, 0);
          const int64_t products = Occurrences(a->ptx, "mma.sync.aligned.m16n8k16"),
                        loads = Occurrences(a->ptx, "ldmatrix.sync.aligned.m8n8.x4");
          EXPECT_GT(products, 0);
          EXPECT_EQ(loads * t.frags_m * t.frags_n, products * (t.frags_m + t.frags_n / 2)) << spec;
          EXPECT_EQ(Occurrences(a->ptx, "ldmatrix.sync.aligned.m8n8.x2"), 0) << spec;
          // Rows of 8 contiguous, aligned elements move 16 bytes at a time,
          // by cp.async.
          if (spec.find("4096") != std::string::npos) {
            EXPECT_TRUE(absl::StrContains(a->ptx, "cp.async.cg.shared.global"))
                << a->program.source;
            EXPECT_TRUE(absl::StrContains(a->ptx, "cp.async.wait_group 1")) << a->program.source;
          }
        }
        ++built;
      }
    }
  }
  EXPECT_EQ(built, 18);
}

// Swizzled tiles compile: a 128x128 block of 2x2 warps (64x64 each), 3
// cp.async stages, on sm_80 and sm_90: ldmatrix from the swizzled rows,
// no spills.
TEST_F(NvrtcTest, SwizzledTensorCoreTilesCompile) {
  ir::ComputeDAG dag = Dag("matmul(M=4096,N=4096,K=4096,dtype=float16)");
  for (const char* target_spec : {"cuda -arch=sm_80 -max-shared-memory-per-block=166912",
                                  "cuda -arch=sm_90 -max-shared-memory-per-block=232448"}) {
    const ir::Target target = Cuda(target_spec);
    auto t = schedule::TensorCoreTiling::Decode({2, 2, 4, 8, 2, 0, 3, 1, 1, 0, 1}, false);
    ASSERT_TRUE(t.has_value());
    auto a = BuildTensorCore(dag, target, *t);
    ASSERT_TRUE(a.ok()) << target_spec << ": " << a.status();
    EXPECT_TRUE(absl::StrContains(a->program.source, "tf_ldmatrix_x4(")) << a->program.source;
    EXPECT_EQ(Occurrences(a->ptx, "ldmatrix.sync.aligned.m8n8.x4") * t->frags_m * t->frags_n,
              Occurrences(a->ptx, "mma.sync.aligned.m16n8k16") * (t->frags_m + t->frags_n / 2));
    EXPECT_EQ(a->program.kernels[0].spill_store_bytes, 0) << a->log;
    EXPECT_LE(a->program.kernels[0].registers, 255);
  }
}

// tf32 tensor-core schedules compile for sm_80 and newer: the PTX rounds
// each factor (cvt.rna.tf32.f32) and multiplies with mma.sync m16n8k8, the
// default stages its float32 rows by cp.async; sm_75 is refused by name.
TEST_F(NvrtcTest, Tf32TensorCoreBuildsCompile) {
  std::mt19937_64 rng(3232);
  int built = 0;
  for (const char* arch : {"sm_80", "sm_90"}) {
    ir::Target target = Cuda(std::string("cuda -arch=") + arch);
    for (const std::string spec :
         {"matmul(M=1024,N=1024,K=1024,dtype=tf32)",
          "conv2d_nchw(N=16,C=128,H=28,W=28,K=128,R=3,S=3,pad=1,dtype=tf32)+bias+relu"}) {
      ir::ComputeDAG dag = Dag(spec);
      for (int i = 0; i < 2; ++i) {
        auto a = BuildTensorCore(dag, target,
                                 i == 0 ? schedule::DefaultTensorCoreTiling(dag, target)
                                        : RandomTensorCoreTiling(dag, target, rng));
        ASSERT_TRUE(a.ok()) << arch << " " << spec << ": " << a.status();
        EXPECT_TRUE(absl::StrContains(a->ptx, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"))
            << a->program.source;
        EXPECT_TRUE(absl::StrContains(a->ptx, "cvt.rna.tf32.f32")) << a->ptx;
        EXPECT_FALSE(absl::StrContains(a->program.source, "unsigned short")) << a->program.source;
        ASSERT_TRUE(codegen::ReadCubin(a->cubin).ok());
        if (i == 0) {
          EXPECT_EQ(a->program.kernels[0].spill_store_bytes, 0) << a->log;
          if (spec.find("matmul") != std::string::npos) {
            EXPECT_TRUE(absl::StrContains(a->ptx, "cp.async.cg.shared.global"))
                << a->program.source;
          }
        }
        ++built;
      }
    }
  }
  EXPECT_EQ(built, 8);
  ir::ComputeDAG dag = Dag("matmul(M=64,N=64,K=64,dtype=tf32)");
  ir::Target turing = Cuda("cuda -arch=sm_75");
  auto old = Build(dag, schedule::DefaultSchedule(dag, turing), turing);
  ASSERT_FALSE(old.ok());
  EXPECT_TRUE(absl::StrContains(old.status().message(), "tf32 products need sm_80 or newer"))
      << old.status();
}

// Past the 48 KiB of static shared memory, where the target allows more, a
// kernel takes its shared buffers from dynamic shared memory (16-byte
// aligned, in the order met) and says so; up to it, it keeps static
// arrays. A 4-stage 64x128x32 float16 tile (55 KiB) and a SIMT tiling of
// 128x128 with 64-deep K tiles (65536 B) both compile that way.
TEST_F(NvrtcTest, SharedMemoryPastTheStaticLimitIsDynamic) {
  const ir::Target big = Cuda("cuda -arch=sm_90 -max-shared-memory-per-block=232448");
  const ir::Target plain = Cuda("cuda -arch=sm_90");
  ir::ComputeDAG dag = Dag("matmul(M=512,N=512,K=512,dtype=float16)");
  schedule::TensorCoreTiling t = schedule::DefaultTensorCoreTiling(dag, big);
  t.warps_m = t.warps_n = 2;
  t.frags_m = 2;
  t.frags_n = 8;
  t.k_steps = 2;
  t.stages = 4;
  t.async_copy = 1;
  ASSERT_GT(t.SharedBytes(), codegen::kStaticSharedLimit);
  auto refused = schedule::TensorCoreSchedule(dag, plain, t);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "exceed the target's 49152"))
      << refused.status();
  auto a = BuildTensorCore(dag, big, t);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->program.kernels.size(), 1u);
  const codegen::GpuKernel& k = a->program.kernels[0];
  EXPECT_TRUE(k.dynamic_shared);
  EXPECT_GT(k.shared_bytes, codegen::kStaticSharedLimit);
  EXPECT_LE(k.shared_bytes, t.SharedBytes());
  EXPECT_TRUE(absl::StrContains(a->program.source,
                                "extern __shared__ __align__(16) unsigned char "
                                "tf_shared[]"))
      << a->program.source;
  EXPECT_EQ(k.spill_store_bytes, 0) << a->log;
  EXPECT_TRUE(absl::StrContains(a->ptx, "cp.async.wait_group 2")) << a->program.source;
  auto cubin = codegen::ReadCubin(a->cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status();
  ASSERT_EQ(cubin->size(), 1u);
  EXPECT_LT((*cubin)[0].shared_bytes, codegen::kStaticSharedLimit);  // none of it static
  // The same decisions with 2 stages fit 48 KiB: static arrays, as before.
  t.stages = 2;
  auto small = BuildTensorCore(dag, big, t);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_FALSE(small->program.kernels[0].dynamic_shared);
  EXPECT_FALSE(absl::StrContains(small->program.source, "extern __shared__"));

  ir::ComputeDAG f32 = Dag("matmul(M=256,N=256,K=256)");
  schedule::GpuTiling g = schedule::DefaultGpuTiling(f32, big);
  for (schedule::GpuTiling::Axis& axis : g.spatial) axis = {1, 16, 4, 2};  // 128-wide block tiles
  g.reduce[0] = {8, 8};                                              // 64-deep K tiles
  auto simt = schedule::BuildGpuTiledSchedule(f32, big, g);
  ASSERT_TRUE(simt.ok()) << simt.status();
  auto b = Build(f32, *simt, big);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->program.kernels[0].dynamic_shared);
  EXPECT_EQ(b->program.kernels[0].shared_bytes, 2 * 128 * 64 * 4);
  // The simulator runs it as any other tiling (the IR does not change).
  auto r = Simulate(f32, *simt, big, 11);
  ASSERT_TRUE(r.ok()) << r.status();
  // LLVM's NVPTX route (Xavier) likewise: its PTX declares an extern shared
  // array, which ptxas takes.
  const ir::Target xavier = Cuda("cuda -arch=sm_72 -max-shared-memory-per-block=98304");
  auto xsched = schedule::BuildGpuTiledSchedule(f32, xavier, g);
  ASSERT_TRUE(xsched.ok()) << xsched.status();
  auto st = schedule::ScheduleState::Replay(f32, *xsched, xavier);
  ASSERT_TRUE(st.ok()) << st.status();
  auto x = codegen::CompileCudaWithLlvm(st->dag(), schedule::Lower(*st), xavier);
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_TRUE(x->program.kernels[0].dynamic_shared);
  EXPECT_EQ(x->program.kernels[0].shared_bytes, 2 * 128 * 64 * 4);
  EXPECT_TRUE(absl::StrContains(x->ptx, ".extern .shared .align 16 .b8 tf_shared[]"))
      << x->ptx.substr(0, 2000);
  if (const std::string ptxas = Ptxas(); !ptxas.empty()) {
    testing::TempDir dir;
    const std::string ptx = dir.File("k.ptx"), cubin = dir.File("k.cubin");
    testing::WriteFile(ptx, x->ptx);
    const std::string cmd = ptxas + " -arch=sm_75 " + ptx + " -o " + cubin + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << x->ptx;
  }
  // Past the target's limit: refused, naming it.
  const ir::Target tight = Cuda("cuda -arch=sm_72 -max-shared-memory-per-block=60000");
  auto over = codegen::CompileCudaWithLlvm(st->dag(), schedule::Lower(*st), tight);
  ASSERT_FALSE(over.ok());
  EXPECT_TRUE(absl::StrContains(over.status().message(), "exceed the target's 60000"))
      << over.status();
}

// wgmma tilings compile as sm_90a code: the PTX holds the warpgroup
// products and their fences, ptxas keeps them asynchronous (no C7510
// serialization warning), nothing spills; float16 and bfloat16, K- and
// MN-major operands, up to 64 x 256 products.
TEST_F(NvrtcTest, WgmmaBuildsCompileForSm90a) {
  const ir::Target target = Cuda("cuda -arch=sm_90 -max-shared-memory-per-block=232448");
  int built = 0;
  for (const auto& [spec, tiling] : std::vector<std::pair<std::string, schedule::TensorCoreTiling>>{
           {"matmul(M=4096,N=4096,K=4096,dtype=float16)", WgmmaTiling(2, 1, 16, 4, 4, 2)},
           {"matmul(M=4096,N=4096,K=4096,dtype=float16)", WgmmaTiling(1, 1, 32, 4, 3)},
           {"matmul(M=1024,N=1024,K=1024,transpose_a=1,dtype=bfloat16)",
            WgmmaTiling(1, 2, 16, 2, 3)},
           {"dense(M=512,N=512,K=512,dtype=float16)+bias+relu", WgmmaTiling(2, 1, 8, 4, 3)},
           {"conv2d_nhwc(N=16,C=128,H=28,W=28,K=128,R=3,S=3,pad=1,dtype=float16)+bias+relu",
            WgmmaTiling(2, 1, 8, 4, 3)}}) {
    ir::ComputeDAG dag = Dag(spec);
    auto a = BuildTensorCore(dag, target, tiling);
    ASSERT_TRUE(a.ok()) << spec << ": " << a.status();
    EXPECT_TRUE(a->program.arch_specific);
    EXPECT_TRUE(absl::StrContains(a->ptx, ".target sm_90a")) << a->ptx.substr(0, 400);
    EXPECT_TRUE(absl::StrContains(a->ptx, "wgmma.mma_async.sync.aligned.m64n" +
                                              std::to_string(8 * tiling.frags_n) + "k16.f32"))
        << a->program.source;
    EXPECT_TRUE(absl::StrContains(a->ptx, "fence.proxy.async.shared::cta")) << a->program.source;
    EXPECT_TRUE(absl::StrContains(a->ptx, "wgmma.wait_group.sync.aligned 0"));
    EXPECT_FALSE(absl::StrContains(a->log, "C7510")) << a->log;
    EXPECT_EQ(a->program.kernels[0].spill_store_bytes, 0) << a->log;
    ASSERT_TRUE(codegen::ReadCubin(a->cubin).ok());
    ++built;
  }
  EXPECT_EQ(built, 5);
}

TEST_F(NvrtcTest, UnbuildableArchAndRegisterLimitAreClearErrors) {
  ir::ComputeDAG dag = Dag("matmul(M=64,N=64,K=64)");
  ir::Target xavier = Cuda("cuda -arch=sm_72");  // NVRTC 13: no (LLVM builds it)
  auto a = Build(dag, schedule::DefaultSchedule(dag, xavier), xavier);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(a.status().message(), "cannot build sm_72")) << a.status();

  ir::Target few_regs = Cuda("cuda -arch=sm_87 -max-registers-per-thread=16");
  auto b = Build(dag, schedule::DefaultSchedule(dag, few_regs), few_regs);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(absl::StrContains(b.status().message(), "registers per thread")) << b.status();
}

// ---- LLVM's NVPTX back end: PTX for archs NVRTC 13 no longer builds ----

// ptxas of this machine's toolkit; "" when there is none.
std::string Ptxas() {
  for (std::string dir : {std::string(std::getenv("CUDA_HOME") ? std::getenv("CUDA_HOME") : ""),
                          std::string("/usr/local/cuda")}) {
    if (!dir.empty() && access((dir + "/bin/ptxas").c_str(), X_OK) == 0) return dir + "/bin/ptxas";
  }
  return "";
}

// Random GPU schedules for Xavier (sm_72) through LLVM: PTX for sm_72 with
// one entry per kernel of the launch plan, that ptxas compiles (for sm_75:
// CUDA 13's ptxas takes no older arch, and sm_72 PTX is valid there) into
// a cubin whose kernels and shared memory are the plan's. exp (sigmoid)
// comes from libdevice.
TEST(NvptxRoute, RandomPairsBuildPtxForXavierThatPtxasCompiles) {
  const ir::Target xavier = Cuda("cuda -arch=sm_72");
  const std::string ptxas = Ptxas();
  if (ptxas.empty()) TF_SKIP("no-cuda-toolkit") << "no ptxas to check the PTX with";
  if (codegen::LibdevicePath().empty()) TF_SKIP("no-cuda-toolkit") << "no libdevice";
  testing::TempDir dir;
  std::mt19937_64 rng(72);
  int built = 0, with_shared = 0, with_math = 0;
  for (int i = 0; i < 30; ++i) {
    const std::string& spec = Workloads()[size_t(i) % Workloads().size()];
    ir::ComputeDAG dag = Dag(spec);
    schedule::Trace sched = i < int(Workloads().size())
                          ? schedule::DefaultSchedule(dag, xavier)
                          : search::space::RandomGpuSchedule(dag, xavier, rng);
    auto st = schedule::ScheduleState::Replay(dag, sched, xavier);
    ASSERT_TRUE(st.ok()) << st.status();
    auto a = codegen::CompileCudaWithLlvm(st->dag(), schedule::Lower(*st), xavier);
    ASSERT_TRUE(a.ok()) << spec << ": " << a.status();
    EXPECT_TRUE(a->cubin.empty());
    EXPECT_TRUE(absl::StrContains(a->ptx, ".target sm_72")) << a->ptx.substr(0, 300);
    EXPECT_TRUE(absl::StrContains(a->ptx, ".version 6.1")) << a->ptx.substr(0, 300);
    with_math += absl::StrContains(a->program.source, "__nv_expf");
    const std::string ptx = dir.File("k.ptx"), cubin = dir.File("k.cubin");
    testing::WriteFile(ptx, a->ptx);
    std::remove(cubin.c_str());
    const std::string cmd = ptxas + " -arch=sm_75 " + ptx + " -o " + cubin + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << spec << "\n" << a->ptx;
    auto info = codegen::ReadCubin(testing::ReadFileOrEmpty(cubin));
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_EQ(info->size(), a->program.kernels.size()) << a->ptx;
    for (const codegen::GpuKernel& k : a->program.kernels) {
      auto it = std::find_if(info->begin(), info->end(),
                             [&](const codegen::CubinKernelInfo& c) { return c.name == k.name; });
      ASSERT_NE(it, info->end()) << k.name;
      EXPECT_GE(it->shared_bytes, k.shared_bytes) << k.name;
      EXPECT_LE(it->shared_bytes, k.shared_bytes + 1024 + 16) << k.name;
      with_shared += k.shared_bytes > 0;
    }
    ++built;
  }
  EXPECT_EQ(built, 30);
  EXPECT_GT(with_shared, 0);
  EXPECT_GT(with_math, 0);
}

// Float16 through LLVM (Xavier, sm_72): half loads widened, stores rounded
// (cvt.rn.f16.f32), PTX that ptxas compiles.
TEST(NvptxRoute, Float16PtxForXavierCompiles) {
  const ir::Target xavier = Cuda("cuda -arch=sm_72");
  const std::string ptxas = Ptxas();
  if (ptxas.empty()) TF_SKIP("no-cuda-toolkit") << "no ptxas to check the PTX with";
  if (codegen::LibdevicePath().empty()) TF_SKIP("no-cuda-toolkit") << "no libdevice";
  testing::TempDir dir;
  for (const std::string spec : {Half("conv2d_nchw(N=1,C=7,H=9,W=11,K=10,R=3,S=3,pad=1)+bias+relu"),
                                 Half("add(N=1,C=3,H=5,W=11)+sigmoid")}) {
    ir::ComputeDAG dag = Dag(spec);
    auto st = schedule::ScheduleState::Replay(dag, schedule::DefaultSchedule(dag, xavier), xavier);
    ASSERT_TRUE(st.ok()) << st.status();
    auto a = codegen::CompileCudaWithLlvm(st->dag(), schedule::Lower(*st), xavier);
    ASSERT_TRUE(a.ok()) << spec << ": " << a.status();
    EXPECT_TRUE(absl::StrContains(a->ptx, "cvt.rn.f16.f32")) << a->ptx;
    EXPECT_TRUE(absl::StrContains(a->ptx, "cvt.f32.f16")) << a->ptx;
    const std::string ptx = dir.File("h.ptx"), cubin = dir.File("h.cubin");
    testing::WriteFile(ptx, a->ptx);
    std::remove(cubin.c_str());
    const std::string cmd = ptxas + " -arch=sm_75 " + ptx + " -o " + cubin + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << spec << "\n" << a->ptx;
  }
}

// bfloat16 builds for sm_80 and newer through NVRTC: cvt.rn.bf16.f32
// stores, the mma's bfloat16 form; sm_75 and the NVPTX route (Xavier) are
// refused by name.
TEST_F(NvrtcTest, BFloat16BuildsCompileForSm80AndNewer) {
  int built = 0;
  for (const char* arch : {"sm_80", "sm_90"}) {
    ir::Target target = Cuda(std::string("cuda -arch=") + arch);
    for (const std::string spec :
         {"conv2d_nchw(N=1,C=7,H=9,W=11,K=10,R=3,S=3,pad=1,dtype=bfloat16)+bias+relu",
          "matmul(M=256,N=256,K=256,dtype=bfloat16)"}) {
      ir::ComputeDAG dag = Dag(spec);
      for (bool tc : {false, true}) {
        if (tc && !schedule::CheckTensorCoreSketch(dag, target).ok()) continue;
        absl::StatusOr<schedule::Trace> sched =
            tc ? schedule::TensorCoreSchedule(dag, target, schedule::DefaultTensorCoreTiling(dag, target))
               : absl::StatusOr<schedule::Trace>(schedule::DefaultSchedule(dag, target));
        ASSERT_TRUE(sched.ok()) << sched.status();
        codegen::CudaCompileOptions opts;
        opts.ptx = true;
        auto a = Build(dag, *sched, target, opts);
        ASSERT_TRUE(a.ok()) << arch << " " << spec << ": " << a.status();
        EXPECT_TRUE(absl::StrContains(a->ptx, "cvt.rn.bf16.f32")) << a->ptx;
        EXPECT_FALSE(absl::StrContains(a->ptx, "cvt.rn.f16.f32")) << a->ptx;
        if (tc) {
          EXPECT_TRUE(
              absl::StrContains(a->ptx, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"))
              << a->program.source;
        }
        ASSERT_TRUE(codegen::ReadCubin(a->cubin).ok());
        ++built;
      }
    }
  }
  EXPECT_EQ(built, 8);
  ir::ComputeDAG dag = Dag("matmul(M=64,N=48,K=40,dtype=bfloat16)");
  const ir::Target turing = Cuda("cuda -arch=sm_75");
  auto old = Build(dag, schedule::DefaultSchedule(dag, turing), turing, {});
  ASSERT_FALSE(old.ok());
  EXPECT_TRUE(absl::StrContains(old.status().message(), "bfloat16 kernels need sm_80 or newer"))
      << old.status();
  const ir::Target xavier = Cuda("cuda -arch=sm_72");
  auto st = schedule::ScheduleState::Replay(dag, schedule::DefaultSchedule(dag, xavier), xavier);
  ASSERT_TRUE(st.ok()) << st.status();
  auto llvm = codegen::CompileCudaWithLlvm(st->dag(), schedule::Lower(*st), xavier);
  ASSERT_FALSE(llvm.ok());
  EXPECT_TRUE(
      absl::StrContains(llvm.status().message(), "bfloat16 kernels are built through NVRTC"))
      << llvm.status();
}

// What the launch planner refuses, the LLVM route refuses the same way;
// an arch neither route builds is named.
TEST(NvptxRoute, LimitsAndUnknownArchsAreClearErrors) {
  ir::ComputeDAG dag = Dag("matmul(M=64,N=64,K=64)");
  const ir::Target kepler = Cuda("cuda -arch=sm_35");
  auto st = schedule::ScheduleState::Replay(dag, schedule::DefaultSchedule(dag, Cuda()), Cuda());
  ASSERT_TRUE(st.ok());
  auto a = codegen::CompileCudaWithLlvm(st->dag(), schedule::Lower(*st), kepler);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(absl::StrContains(a.status().message(), "does not build sm_35")) << a.status();
  const ir::Target small = Cuda("cuda -arch=sm_72 -max-threads-per-block=32");
  auto b = codegen::CompileCudaWithLlvm(st->dag(), schedule::Lower(*st), small);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
  EXPECT_TRUE(absl::StrContains(b.status().message(), "tf_kernel_0")) << b.status();
}

TEST(CubinReader, RefusesWhatIsNotACubin) {
  EXPECT_FALSE(codegen::ReadCubin("").ok());
  EXPECT_FALSE(codegen::ReadCubin(std::string(100, 'x')).ok());
  std::string truncated = "\x7f" "ELF";
  truncated += std::string("\x02\x01", 2) + std::string(60, '\0');
  truncated[0x28] = '\x7f';  // section table far past the end
  EXPECT_FALSE(codegen::ReadCubin(truncated).ok());
}

}  // namespace
}  // namespace tunefarm
