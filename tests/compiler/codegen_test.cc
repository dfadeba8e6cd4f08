// Code generation checks that need no reference run: vector width, cross
// targets, bad schedules, and the printed loop program.
#include "absl/strings/match.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/compute.h"
#include "compiler/schedule/schedule.h"
#include "compiler/ir/workload_spec.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/TargetParser/X86TargetParser.h"

namespace tunefarm {
namespace {

struct Built {
  ir::ComputeDAG dag;
  ir::Stmt program;
};

Built Build(const std::string& spec, const std::string& target_spec) {
  auto w = ir::ParseWorkloadSpec(spec);
  EXPECT_TRUE(w.ok()) << w.status();
  auto dag = ir::BuildComputeDAG(*w);
  EXPECT_TRUE(dag.ok()) << dag.status();
  auto target = ir::Target::Parse(target_spec);
  EXPECT_TRUE(target.ok());
  auto st = schedule::ScheduleState::Replay(*dag, schedule::DefaultSchedule(*dag, *target), *target);
  EXPECT_TRUE(st.ok()) << st.status();
  // The scheduled program's DAG (with any repacked weights) is what compiles.
  Built b{st->dag(), schedule::Lower(*st)};
  return b;
}

// The lowered program as text, tensors by name.
std::string Text(const Built& b) {
  std::vector<std::string> names = b.dag.TensorNames();
  return ir::ToString(b.program, &names);
}

TEST(Codegen, Avx512TargetsUseZmmRegisters) {
  const std::string target_spec = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512";
  Built b = Build("conv2d_nchw(N=1,C=16,H=28,W=32,K=16,R=3,S=3,pad=1)+bias+relu", target_spec);
  codegen::CpuCompileOptions o;
  o.keep_assembly = true;
  o.keep_llvm_ir = true;
  auto art = codegen::CompileCpu(b.dag, b.program, *ir::Target::Parse(target_spec), o);
  ASSERT_TRUE(art.ok()) << art.status();
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "\"prefer-vector-width\"=\"512\"")) << art->llvm_ir;
  EXPECT_TRUE(absl::StrContains(art->assembly, "zmm")) << "no 512-bit vector code";
  EXPECT_TRUE(absl::StrContains(art->assembly, "vfmadd")) << "no FMA in the conv";
  // The same kernel for haswell has no zmm (AVX2 only).
  const std::string haswell = "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell";
  auto h = codegen::CompileCpu(b.dag, b.program, *ir::Target::Parse(haswell), o);
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(absl::StrContains(h->assembly, "zmm"));
  EXPECT_TRUE(absl::StrContains(h->assembly, "ymm"));
}

// Every x86 CPU LLVM knows with AVX-512F gets 16-float vectors and the
// 512-bit preference, and no other does.
TEST(Codegen, WideVectorsExactlyOnAvx512Cpus) {
  llvm::SmallVector<llvm::StringRef, 128> cpus;
  llvm::X86::fillValidCPUArchList(cpus, /*Only64Bit=*/true);
  ASSERT_GT(cpus.size(), 30u);
  int wide = 0;
  for (llvm::StringRef cpu : cpus) {
    llvm::SmallVector<llvm::StringRef, 128> features;
    llvm::X86::getFeaturesForCPU(cpu, features);
    // Any AVX-512 subset implies AVX-512F (LLVM's x86-64-v4 entry lists avx512vl and the
    // others, but not avx512f itself).
    const bool avx512 = std::any_of(features.begin(), features.end(),
                                    [](llvm::StringRef f) { return f.starts_with("avx512"); });
    auto t = ir::Target::Parse("llvm -mtriple=x86_64-linux-gnu -mcpu=" + cpu.str());
    ASSERT_TRUE(t.ok()) << cpu.str() << ": " << t.status();
    EXPECT_EQ(t->wide_vectors(), avx512) << cpu.str();
    EXPECT_EQ(t->float_lanes(), avx512 ? 16 : 8) << cpu.str();
    wide += avx512;
  }
  EXPECT_GE(wide, 15);
}

TEST(Codegen, VectorizedLoopsBecomeVectorCode) {
  const std::string t = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512";
  codegen::CpuCompileOptions o;
  o.keep_llvm_ir = true;
  o.optimize = false;  // our own IR, before LLVM touches it
  o.link = false;
  // 21 = 16 lanes + a 5-lane tail: plain loads and stores, no mask (a masked
  // store costs several plain ones on some cores).
  Built tail = Build("matmul(M=4,N=21,K=8)", t);
  auto art = codegen::CompileCpu(tail.dag, tail.program, *ir::Target::Parse(t), o);
  ASSERT_TRUE(art.ok()) << art.status();
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "store <16 x float>")) << art->llvm_ir;
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "store <5 x float>")) << art->llvm_ir;
  EXPECT_FALSE(absl::StrContains(art->llvm_ir, "@llvm.masked.store")) << art->llvm_ir;
  // b[j, rk] with j vectorized is strided: a gather.
  Built strided = Build("matmul(M=4,N=32,K=8,transpose_b=1)", t);
  art = codegen::CompileCpu(strided.dag, strided.program, *ir::Target::Parse(t), o);
  ASSERT_TRUE(art.ok());
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "@llvm.masked.gather.v16f32")) << art->llvm_ir;
  // A stride-2 input row (strided convolution): one wide masked load, then a shuffle.
  Built s2 = Build("conv2d_nchw(N=1,C=4,H=32,W=32,K=4,R=1,S=1,stride=2)", t);
  art = codegen::CompileCpu(s2.dag, s2.program, *ir::Target::Parse(t), o);
  ASSERT_TRUE(art.ok());
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "@llvm.masked.load.v32f32")) << art->llvm_ir;
  // exp (a silu epilogue) stays vector arithmetic: no llvm.exp, which
  // becomes one libm call per lane.
  Built silu = Build("conv2d_nchw(N=1,C=8,H=6,W=16,K=16,R=1,S=1)+bias+silu", t);
  art = codegen::CompileCpu(silu.dag, silu.program, *ir::Target::Parse(t), o);
  ASSERT_TRUE(art.ok());
  EXPECT_FALSE(absl::StrContains(art->llvm_ir, "@llvm.exp")) << art->llvm_ir;
  EXPECT_FALSE(absl::StrContains(art->llvm_ir, "expf")) << art->llvm_ir;
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "fmuladd.v16f32")) << art->llvm_ir;
  // aarch64 vectors are 4 floats.
  const std::string arm = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a78";
  Built a = Build("matmul(M=4,N=32,K=8)", arm);
  art = codegen::CompileCpu(a.dag, a.program, *ir::Target::Parse(arm), o);
  ASSERT_TRUE(art.ok());
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "<4 x float>")) << art->llvm_ir;
}

// A parallel loop hands its iterations to the runtime's pool only when it
// stores enough elements to pay for the hand-off (both loops below are
// parallel in the lowered program).
TEST(Codegen, LittleWorkStaysOnTheCallingThread) {
  const std::string t = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -num-cores=2";
  codegen::CpuCompileOptions o;
  o.keep_llvm_ir = true;
  o.optimize = false;
  o.link = false;
  for (const auto& [spec, split] : std::vector<std::pair<std::string, bool>>{
           {"relu(N=1,C=1,H=129,W=3)", false},
           {"conv2d_nchw(N=1,C=64,H=1,W=2,K=64,R=1,S=3,stride_w=2,pad_left=1,pad_right=1)", false},
           {"relu(N=1,C=16,H=32,W=32)", true},
           {"conv2d_nchw(N=1,C=16,H=16,W=16,K=32,R=3,S=3,pad=1)", true}}) {
    Built b = Build(spec, t);
    ASSERT_TRUE(absl::StrContains(ir::ToString(b.program), "parallel ")) << spec;
    EXPECT_EQ(ir::StoreCount(b.program) >= 16384, split) << spec;
    auto art = codegen::CompileCpu(b.dag, b.program, *ir::Target::Parse(t), o);
    ASSERT_TRUE(art.ok()) << art.status();
    EXPECT_EQ(absl::StrContains(art->llvm_ir, "@tf_par_0("), split) << spec << "\n" << art->llvm_ir;
  }
}

// A guard on the lanes of an accumulator tile (258 output channels in
// 16-lane blocks, the last blocks partly or wholly past the end) keeps lanes
// out of the output, not out of the tile: after O3 the tile is registers
// (no masked store, no stack array left), and a masked access whose vector
// starts past its tensor's end is pointed at element 0.
TEST(Codegen, GuardedTilesStayInRegisters) {
  const std::string t = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver5 -num-cores=1";
  Built b = Build("conv2d_nchw(N=1,C=1,H=1,W=576,K=258,R=1,S=256,stride_w=128)", t);
  ASSERT_TRUE(absl::StrContains(ir::ToString(b.program), "< 258)")) << ir::ToString(b.program);
  codegen::CpuCompileOptions o;
  o.keep_llvm_ir = true;
  o.link = false;
  auto art = codegen::CompileCpu(b.dag, b.program, *ir::Target::Parse(t), o);
  ASSERT_TRUE(art.ok()) << art.status();
  EXPECT_FALSE(absl::StrContains(art->llvm_ir, "@llvm.masked.store")) << art->llvm_ir;
  EXPECT_FALSE(absl::StrContains(art->llvm_ir, "alloca float")) << art->llvm_ir;
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "@llvm.masked.load.v16f32")) << art->llvm_ir;
  o.optimize = false;
  art = codegen::CompileCpu(b.dag, b.program, *ir::Target::Parse(t), o);
  ASSERT_TRUE(art.ok()) << art.status();
  // The packed weight holds 5 blocks of the 64-channel tile x 256: 81920
  // elements.
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "icmp sge i64")) << art->llvm_ir;
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, ", 81920")) << art->llvm_ir;
}

TEST(Codegen, CrossCompilesForAarch64) {
  for (const char* cpu : {"cortex-a78", "carmel", "neoverse-n1"}) {
    std::string spec = std::string("llvm -mtriple=aarch64-linux-gnu -mcpu=") + cpu;
    Built b = Build("dense(M=4,N=64,K=32)+bias+relu", spec);
    codegen::CpuCompileOptions o;
    o.keep_assembly = true;
    auto art = codegen::CompileCpu(b.dag, b.program, *ir::Target::Parse(spec), o);
    ASSERT_TRUE(art.ok()) << cpu << ": " << art.status();
    // ELF64, e_machine 183 = EM_AARCH64, e_type 3 = ET_DYN for the shared object.
    ASSERT_GT(art->shared_object.size(), 64u);
    EXPECT_EQ(art->shared_object.substr(0, 4), "\x7f" "ELF");
    EXPECT_EQ(static_cast<unsigned char>(art->shared_object[18]), 183);
    EXPECT_EQ(static_cast<unsigned char>(art->shared_object[16]), 3);
    EXPECT_TRUE(absl::StrContains(art->assembly, "fmla") ||
                absl::StrContains(art->assembly, "fmadd"))
        << cpu;
  }
}

TEST(Codegen, LoweredProgramReadsLikeTheSchedule) {
  const std::string text = Text(Build("matmul(M=3,N=32,K=8)", "llvm -mcpu=skylake-avx512"));
  // The generic default (3 rows have no register tile): rows parallel, the
  // reduction, then the whole row as one vector loop; the accumulator is
  // zeroed by its own nest first.
  EXPECT_EQ(text,
            "parallel i.init in 0..3:\n"
            "  vectorized j.init in 0..32:\n"
            "    out[i.init, j.init] = 0f\n"
            "parallel i in 0..3:\n"
            "  for rk in 0..8:\n"
            "    vectorized j in 0..32:\n"
            "      out[i, j] = (out[i, j] + (a[i, rk] * b[rk, j]))\n");
}

// A concatenation along the vectorized axis (NHWC channels): one vector
// loop per input, each reading its input alone, where every input spans 8
// channels or more; a select chain over every input where one is shorter.
TEST(Codegen, ConcatAlongTheVectorAxisIsOneLoopPerInput) {
  const std::string t = "llvm -mcpu=skylake-avx512";
  std::string text = Text(
      Build("rearrange(out=1x2x3x72,x0=1x2x3x40[o0,o1,o2,o3],x1=1x2x3x8[o0,o1,o2,o3-40],"
            "x2=1x2x3x24[o0,o1,o2,o3-48])+map[1x1x1x72](mul(%0,$0))",
            t));
  EXPECT_EQ(text,
            "parallel e0.e1.e2.f in 0..6:\n"
            "  vectorized e3 in 0..40:\n"
            "    out[0, (e0.e1.e2.f // 3), (e0.e1.e2.f % 3), e3] = "
            "(x0[0, (e0.e1.e2.f // 3), (e0.e1.e2.f % 3), e3] * map0[e3])\n"
            "  vectorized e3 in 0..8:\n"
            "    out[0, (e0.e1.e2.f // 3), (e0.e1.e2.f % 3), (e3 + 40)] = "
            "(x1[0, (e0.e1.e2.f // 3), (e0.e1.e2.f % 3), e3] * map0[(e3 + 40)])\n"
            "  vectorized e3 in 0..24:\n"
            "    out[0, (e0.e1.e2.f // 3), (e0.e1.e2.f % 3), (e3 + 48)] = "
            "(x2[0, (e0.e1.e2.f // 3), (e0.e1.e2.f % 3), e3] * map0[(e3 + 48)])\n");
  text = Text(
      Build("rearrange(out=1x2x3x44,x0=1x2x3x40[o0,o1,o2,o3],x1=1x2x3x4[o0,o1,o2,o3-40])", t));
  EXPECT_TRUE(absl::StrContains(text, "in 0..44:")) << text;
  EXPECT_TRUE(absl::StrContains(text, "select(")) << text;
}

absl::Status ApplyOne(const std::string& workload, const std::string& step_text) {
  auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec(workload));
  v1::Schedule s;
  auto st = schedule::ScheduleState::Initial(*dag);
  v1::Step step;
  if (!google::protobuf::TextFormat::ParseFromString(step_text, &step)) {
    return absl::InternalError("bad test step");
  }
  *s.add_steps() = step;
  absl::StatusOr<schedule::Trace> trace = schedule::TraceFromProto(s);
  if (!trace.ok()) return trace.status();
  return schedule::ScheduleState::Replay(*dag, *trace, *ir::Target::Parse("llvm")).status();
}

TEST(Schedule, BadStepsAreRefusedWithTheReason) {
  const std::string conv = "conv2d_nchw(N=1,C=4,H=8,W=8,K=4,R=3,S=3,pad=1)";
  struct Case {
    std::string step, expect;
  };
  // Stage 0 is the padding stage, stage 1 the convolution (n,k,y,x,rc,ry,rx).
  std::vector<Case> cases = {
      {"split { stage: 1 iter: 2 lengths: 0 }", "split length 0"},
      {"split { stage: 1 iter: 9 lengths: 2 }", "loop 9 of stage 1 does not exist"},
      {"split { stage: 7 iter: 0 lengths: 2 }", "stage 7 does not exist"},
      {"annotate { stage: 1 iter: 4 annotation: ANNOTATION_VECTORIZE }", "vectorize a reduction"},
      {"annotate { stage: 1 iter: 5 annotation: ANNOTATION_PARALLEL }", "parallelize a reduction"},
      {"annotate { stage: 1 iter: 0 annotation: ANNOTATION_THREAD_X }", "GPU targets"},
      {"reorder { stage: 1 order: [0, 1, 2] }", "order has 3 loops"},
      {"reorder { stage: 1 order: [0, 0, 1, 2, 3, 4, 5] }", "not a permutation"},
      {"fuse { stage: 1 iters: [3, 4] }", "reduction loop with a spatial loop"},
      {"fuse { stage: 1 iters: [0, 2] }", "consecutive"},
      {"compute_inline { stage: 1 }", "cannot inline a reduction"},
      {"compute_at { stage: 1 target_stage: 0 target_iter: 0 }", "output stage stays at the root"},
      {"compute_at { stage: 0 target_stage: 1 target_iter: 9 }", "loop 9 of stage 1 does not exist"},
      {"cache_write { stage: 1 scope: MEMORY_SCOPE_SHARED }", "shared memory is for GPU targets"},
      {"layout_pack { stage: 1 input: 0 block: [4, 0, 0, 0] }", "not a constant input"},
      {"layout_pack { stage: 1 input: 1 block: [4, 0, 0] }", "has 4 dimensions, block has 3"},
      {"layout_pack { stage: 1 input: 1 block: [0, 0, 0, 0] }", "no dimension is blocked"},
      {"layout_pack { stage: 1 input: 1 block: [5, 0, 0, 0] }", "block 5 for dimension 0"},
      {"layout_pack { stage: 1 input: 1 block: [2, 2, 0, 0] inner_dims: [1] }", "each blocked dimension once"},
      {"layout_pack { stage: 1 input: 3 block: [2] }", "has no operand 3"},
      {"cache_read { stage: 1 input: 2 scope: MEMORY_SCOPE_LOCAL }", "has no operand 2"},
      {"cache_read { stage: 1 input: 0 scope: MEMORY_SCOPE_LOCAL reader_stages: 0 }", "does not read"},
      {"follow_split { stage: 1 iter: 0 src_step: 0 n_split: 1 }", "not built yet"},
      {"", "empty step"},
  };
  for (const Case& c : cases) {
    absl::Status s = ApplyOne(conv, c.step);
    ASSERT_FALSE(s.ok()) << c.step;
    EXPECT_TRUE(absl::StrContains(s.message(), "step 0")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.expect)) << c.step << " -> " << s;
  }
}

TEST(WorkloadSpec, ErrorsPointAtTheBadPart) {
  struct Case {
    std::string spec, expect;
  };
  std::vector<Case> cases = {
      {"conv3d(N=1)", "column 1: unknown op 'conv3d'"},
      {"conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,strid=2)",
       "column 45: unknown attribute 'strid' for conv2d_nchw (it takes N, C, H, W, K, R, S"},
      {"conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3)", "needs S"},
      {"matmul(M=512,N=x,K=512)", "column 16: expected a number for N"},
      {"matmul(M=8,N=8,K=8)+gelu", "column 21: unknown epilogue 'gelu'"},
      {"matmul(M=8,N=8,K=8", "expected ',' or ')'"},
      {"conv2d_nchw(N=1,C=6,H=8,W=8,K=4,R=3,S=3,groups=4)", "groups"},
  };
  for (const Case& c : cases) {
    auto w = ir::ParseWorkloadSpec(c.spec);
    ASSERT_FALSE(w.ok()) << c.spec;
    EXPECT_TRUE(absl::StrContains(w.status().message(), c.expect)) << w.status();
  }
  EXPECT_TRUE(absl::StrContains(ir::WorkloadSpecHelp(), "depthwise_conv2d_nchw"));
}

}  // namespace
}  // namespace tunefarm
