// cache_write, compute_at and layout_pack: the programs they make, and the
// hand-written convolution schedule built from them, checked against the
// float64 reference on random inputs (tails included).
#include <google/protobuf/text_format.h>

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/compute.h"
#include "compiler/schedule/handwritten.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/tiling.h"
#include "search/space/cpu_sketch.h"
#include "compiler/ir/workload_spec.h"
#include "gtest/gtest.h"
#include "tests/compiler/kernel_check.h"

namespace tunefarm {
namespace {

namespace v1 = ::tunefarm::v1;

// A schedule written in the wire form's text format.
schedule::Trace Parse(const std::string& text) {
  v1::Schedule s;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &s)) << text;
  absl::StatusOr<schedule::Trace> t = schedule::TraceFromProto(s);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : schedule::Trace();
}

std::string LoweredText(const std::string& spec, const schedule::Trace& s) {
  auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
  auto st = schedule::ScheduleState::Replay(*dag, s, codegen::HostTarget());
  EXPECT_TRUE(st.ok()) << st.status();
  if (!st.ok()) return "";
  std::vector<std::string> names = st->dag().TensorNames();
  return ir::ToString(schedule::Lower(*st), &names);
}

// matmul: cache_write, then the local stage tiled and computed per output tile.
const char* kMatmulTiled = R"pb(
  steps { cache_write { stage: 0 scope: MEMORY_SCOPE_LOCAL } }
  steps { split { stage: 1 iter: 0 lengths: 4 } }
  steps { split { stage: 1 iter: 2 lengths: 8 } }
  steps {
    reorder {
      stage: 1
      order: [ 0, 2, 1, 3 ]
    }
  }
  steps { annotate { stage: 1 iter: 0 annotation: ANNOTATION_PARALLEL } }
  steps { split { stage: 0 iter: 0 lengths: 4 } }
  steps { split { stage: 0 iter: 2 lengths: 8 } }
  steps {
    reorder {
      stage: 0
      order: [ 0, 2, 4, 1, 3 ]
    }
  }
  steps { annotate { stage: 0 iter: 4 annotation: ANNOTATION_VECTORIZE } }
  steps { annotate { stage: 0 iter: 3 annotation: ANNOTATION_UNROLL } }
  steps { compute_at { stage: 0 target_stage: 1 target_iter: 1 } }
)pb";

TEST(Primitives, CacheWriteComputesATileInALocalBuffer) {
  std::string text = LoweredText("matmul(M=16,N=32,K=8)", Parse(kMatmulTiled));
  // The accumulator is a 4x8 stack buffer inside the tile loops, written back once.
  EXPECT_TRUE(absl::StrContains(text, "allocate local out.local[1, 1, 4, 8]")) << text;
  EXPECT_TRUE(absl::StrContains(text, "for rk in 0..8")) << text;
  EXPECT_FALSE(absl::StrContains(text, "allocate out.local[")) << text;
}

TEST(Primitives, CacheWriteAndComputeAtMatchReference) {
  for (const char* spec :
       {"matmul(M=16,N=32,K=8)", "matmul(M=13,N=29,K=7)", "matmul(M=4,N=8,K=3)"}) {
    schedule::Trace s = Parse(kMatmulTiled);
    auto check = testing::CheckKernel(*ir::ParseWorkloadSpec(spec), &s, codegen::HostTarget(), 7);
    ASSERT_TRUE(check.ok()) << spec << ": " << check.status();
    EXPECT_GT(check->outputs, 0);
  }
}

TEST(Primitives, ComputeAtRegionSpanningSeveralTilesWithUnitSplits) {
  // The local stage splits i by 1 (a loop of one iteration that shares its
  // coefficient with i.o) and is computed at the consumer's outer row block
  // of 4 rows: the buffer's coordinates must come from the loops that
  // iterate, not from the unit loop.
  const char* sched = R"pb(
    steps { cache_write { stage: 0 scope: MEMORY_SCOPE_LOCAL } }
    steps { split { stage: 1 iter: 0 lengths: 4 } }
    steps { split { stage: 0 iter: 0 lengths: 1 } }
    steps {
      split {
        stage: 0
        iter: 2
        lengths: [ 1, 8 ]
      }
    }
    steps { compute_at { stage: 0 target_stage: 1 target_iter: 0 } }
  )pb";
  for (const char* spec : {"matmul(M=16,N=16,K=5)", "matmul(M=14,N=19,K=3)"}) {
    schedule::Trace s = Parse(sched);
    auto check = testing::CheckKernel(*ir::ParseWorkloadSpec(spec), &s, codegen::HostTarget(), 21);
    ASSERT_TRUE(check.ok()) << spec << ": " << check.status() << "\n" << LoweredText(spec, s);
  }
}

TEST(Primitives, ComputeAtFusesTheConvolutionIntoItsEpilogue) {
  // Stages: 0 padding, 1 convolution, 2 bias+relu. The convolution runs per
  // (k, y) row of the epilogue into a row-sized buffer.
  const char* sched = R"pb(
    steps { compute_at { stage: 1 target_stage: 2 target_iter: 2 } }
  )pb";
  std::string spec = "conv2d_nchw(N=1,C=3,H=9,W=7,K=5,R=3,S=3,pad=1)+bias+relu";
  std::string text = LoweredText(spec, Parse(sched));
  EXPECT_TRUE(absl::StrContains(text, "allocate local conv[1, 1, 1, 7]")) << text;
  schedule::Trace s = Parse(sched);
  auto check = testing::CheckKernel(*ir::ParseWorkloadSpec(spec), &s, codegen::HostTarget(), 3);
  ASSERT_TRUE(check.ok()) << check.status();
}

TEST(Primitives, ComputeAtPaddingIntoTheConvolution) {
  // The padded input is computed per output row: a 3-row halo region.
  const char* sched = R"pb(
    steps { compute_at { stage: 0 target_stage: 1 target_iter: 2 } }
  )pb";
  std::string spec = "conv2d_nchw(N=1,C=2,H=8,W=6,K=3,R=3,S=3,pad=1,stride=1)";
  std::string text = LoweredText(spec, Parse(sched));
  EXPECT_TRUE(absl::StrContains(text, "allocate local data_pad[1, 2, 3, 8]")) << text;
  schedule::Trace s = Parse(sched);
  auto check = testing::CheckKernel(*ir::ParseWorkloadSpec(spec), &s, codegen::HostTarget(), 5);
  ASSERT_TRUE(check.ok()) << check.status();
  // Stride 2: rows y*2 .. y*2+2.
  spec = "conv2d_nchw(N=1,C=2,H=9,W=9,K=3,R=3,S=3,pad=1,stride=2)";
  check = testing::CheckKernel(*ir::ParseWorkloadSpec(spec), &s, codegen::HostTarget(), 6);
  ASSERT_TRUE(check.ok()) << check.status();
}

TEST(Primitives, CacheReadCopiesAnInputTilePerOutputTile) {
  // matmul: a's rows for one output row block are copied into a local
  // buffer inside that block's loop, then read from there.
  const char* sched = R"pb(
    steps { cache_read { stage: 0 input: 0 scope: MEMORY_SCOPE_LOCAL } }
    steps { split { stage: 1 iter: 0 lengths: 4 } }
    steps { compute_at { stage: 0 target_stage: 1 target_iter: 0 } }
  )pb";
  for (const char* spec : {"matmul(M=16,N=12,K=9)", "matmul(M=15,N=7,K=5)"}) {
    std::string text = LoweredText(spec, Parse(sched));
    EXPECT_TRUE(absl::StrContains(text, "allocate local a.local[4, ")) << text;
    schedule::Trace s = Parse(sched);
    auto check = testing::CheckKernel(*ir::ParseWorkloadSpec(spec), &s, codegen::HostTarget(), 4);
    ASSERT_TRUE(check.ok()) << spec << ": " << check.status();
  }
}

TEST(Primitives, TilingSketchCopiesAStreamedOperandPerReductionStep) {
  // matmul's b is read along the vector axis (its rows a whole row of b
  // apart) and is no weight to repack: with the pack decision the sketch
  // copies its tile for each reduction step into a local buffer, computed
  // inside the local stage that is itself computed per output tile. Tails
  // on every axis (the last step's copy reads past K: guarded).
  ir::Target target = codegen::HostTarget();
  const int64_t lanes = target.float_lanes();
  for (const char* spec : {"matmul(M=37,N=45,K=29)", "batch_matmul(B=2,M=9,N=33,K=20)"}) {
    auto w = ir::ParseWorkloadSpec(spec);
    auto dag = ir::BuildComputeDAG(*w);
    ASSERT_TRUE(dag.ok()) << dag.status();
    std::mt19937_64 rng(11);
    int copies = 0;
    for (int i = 0; i < 12; ++i) {
      schedule::CpuTiling d = search::space::CpuSketch(*dag, target).SampleTiling(rng);
      d.vector_axis = int64_t(dag->stages.back().axes.size()) - 1;  // b's columns
      d.pack = true;
      d.spatial.back().s3 = std::min<int64_t>(lanes, 16);  // the vector axis's register tile
      d.reduce_steps.back() = 4 + i % 5;
      auto s = schedule::BuildTiledSchedule(*dag, target, d);
      ASSERT_TRUE(s.ok()) << spec << ": " << s.status();
      bool copy = false;
      for (const schedule::Step& step : s->steps) copy |= std::holds_alternative<schedule::CacheReadStep>(step);
      copies += copy;
      auto st = schedule::ScheduleState::Replay(*dag, *s, target);
      ASSERT_TRUE(st.ok()) << st.status();
      std::vector<std::string> names = st->dag().TensorNames();
      std::string text = ir::ToString(schedule::Lower(*st), &names);
      if (copy) {  // allocated inside the reduction-step loop, one step long
        // The step loop: serial, or unrolled by the auto-unroll pragma.
        size_t step = text.find(" rk.o in "), alloc = text.find("allocate local b.local[");
        ASSERT_NE(alloc, std::string::npos) << text;
        EXPECT_LT(step, alloc) << text;
        std::string dims = text.substr(alloc + 23, text.find(']', alloc) - alloc - 23);
        std::vector<std::string> extents = absl::StrSplit(dims, ", ");
        ASSERT_GE(extents.size(), 2u) << dims;
        EXPECT_EQ(extents[extents.size() - 2], absl::StrCat(d.reduce_steps.back())) << text;
      }
      auto check = testing::CheckKernel(*w, &*s, target, 30 + i);
      ASSERT_TRUE(check.ok()) << spec << " " << i << ": " << check.status();
    }
    EXPECT_GT(copies, 0) << spec;
  }
}

TEST(Primitives, LayoutPackBlocksTheWeights) {
  const char* sched = R"pb(
    steps {
      layout_pack {
        stage: 0
        input: 1
        block: [ 8, 4 ]
        inner_dims: [ 0, 1 ]
      }
    }
  )pb";
  std::string spec = "dense(M=6,N=10,K=20)";
  auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
  auto st = schedule::ScheduleState::Replay(*dag, Parse(sched), codegen::HostTarget());
  ASSERT_TRUE(st.ok()) << st.status();
  int packed = st->dag().args[1];
  const ir::TensorDecl& t = st->dag().tensors[packed];
  EXPECT_EQ(t.packed_from, dag->args[1]);
  // weight[N=10, K=20] -> [ceil(10/8), ceil(20/4), 8, 4]
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 5, 8, 4}));
  std::vector<float> orig(200);
  for (int i = 0; i < 200; ++i) orig[i] = float(i + 1);
  std::vector<float> p = ir::PackConstant(st->dag(), packed, orig);
  ASSERT_EQ(p.size(), 2u * 5 * 8 * 4);
  // weight[9, 13] is at [1, 3, 1, 1]; weight[10.., *] does not exist and is zero.
  EXPECT_EQ(p[((1 * 5 + 3) * 8 + 1) * 4 + 1], orig[9 * 20 + 13]);
  EXPECT_EQ(p[((1 * 5 + 3) * 8 + 2) * 4 + 1], 0.0f);
  schedule::Trace s = Parse(sched);
  auto check = testing::CheckKernel(*ir::ParseWorkloadSpec(spec), &s, codegen::HostTarget(), 9);
  ASSERT_TRUE(check.ok()) << check.status();
}

TEST(Handwritten, Conv2dScheduleMatchesReference) {
  ir::Target target = codegen::HostTarget();
  for (const char* spec : {
           "conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1)",
           "conv2d_nchw(N=1,C=8,H=7,W=7,K=64,R=3,S=3,pad=1)",
           "conv2d_nchw(N=2,C=5,H=11,W=13,K=24,R=3,S=3,pad=1)",  // tails everywhere
           "conv2d_nchw(N=1,C=16,H=20,W=20,K=16,R=3,S=3,stride=2,pad=1)+bias+relu",
           "conv2d_nchw(N=1,C=16,H=10,W=10,K=32,R=1,S=1)+bias+silu",
       }) {
    auto w = ir::ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << w.status();
    auto dag = ir::BuildComputeDAG(*w);
    schedule::ConvTile tile = schedule::PickConvTile(*dag, target);
    auto s = schedule::HandwrittenConv2dSchedule(*dag, target, tile);
    ASSERT_TRUE(s.ok()) << spec << ": " << s.status();
    auto check = testing::CheckKernel(*w, &*s, target, 11);
    ASSERT_TRUE(check.ok()) << spec << ": " << check.status();
    EXPECT_GT(check->outputs, 0);
  }
}

TEST(Handwritten, GroupedConvDefaultIsATiledScheduleThatMatchesReference) {
  // Depthwise and grouped convolutions: the default is the tiling sketch's
  // decisions (padding read inline, register tiles of whole output rows), for
  // short rows (a whole row of 7 or 14: an odd-width vector), rows that are
  // a multiple of the lanes, rows that are neither, strides and multipliers.
  ir::Target target = codegen::HostTarget();
  for (const char* spec : {
           "depthwise_conv2d_nchw(N=1,C=8,H=7,W=7,R=3,S=3,pad=1)+bias+relu6",
           "depthwise_conv2d_nchw(N=1,C=6,H=14,W=14,R=3,S=3,pad=1)",
           "depthwise_conv2d_nchw(N=1,C=4,H=12,W=56,R=3,S=3,pad=1)+bias",
           "depthwise_conv2d_nchw(N=1,C=3,H=9,W=38,R=3,S=3,pad=1)",
           "depthwise_conv2d_nchw(N=1,C=2,H=5,W=224,R=3,S=3,stride=2,pad=1)+bias",
           "depthwise_conv2d_nchw(N=1,C=2,H=4,W=67,R=3,S=3,pad=1)",
           "depthwise_conv2d_nchw(N=1,C=5,H=24,W=24,R=3,S=3,stride=2,pad=1)+bias+relu6",
           "conv2d_nchw(N=1,C=6,H=8,W=8,K=12,R=5,S=5,pad=2,groups=6)",
           "conv2d_nchw(N=2,C=8,H=10,W=10,K=12,R=3,S=3,pad=1,groups=4)+residual",
       }) {
    auto w = ir::ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << spec << ": " << w.status();
    auto dag = ir::BuildComputeDAG(*w);
    ASSERT_TRUE(dag.ok()) << spec << ": " << dag.status();
    auto s = schedule::GroupedConv2dSchedule(*dag, target);
    ASSERT_TRUE(s.ok()) << spec << ": " << s.status();
    EXPECT_TRUE(s->is_default);
    EXPECT_EQ(s->sketch_id, schedule::kTilingSketchId);
    const schedule::Trace def = schedule::DefaultSchedule(*dag, target);
    EXPECT_EQ(def.decisions, s->decisions) << spec << ": the default is not this schedule";
    auto check = testing::CheckKernel(*w, &def, target, 23);
    ASSERT_TRUE(check.ok()) << spec << ": " << check.status();
    EXPECT_GT(check->outputs, 0);
  }
  for (const char* other : {"conv2d_nchw(N=1,C=8,H=8,W=8,K=16,R=3,S=3,pad=1)",
                            "dense(M=4,N=16,K=8)", "max_pool2d_nchw(N=1,C=4,H=8,W=8,R=2,S=2)"}) {
    auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec(other));
    EXPECT_FALSE(schedule::GroupedConv2dSchedule(*dag, target).ok()) << other;
  }
}

TEST(Handwritten, RowConvDefaultWhereChannelVectorsDoNotFit) {
  // Dense convolutions whose output channels are not whole vectors, or whose
  // reduction is shallow with unstrided rows, default to the row-vectorized
  // tiling (a tile of output channels per input vector); the others keep the
  // channel-vector schedule. 13 and 255 channels are ragged at 4, 8 and 16
  // lanes; 32 and 64 are whole at all three.
  ir::Target target = codegen::HostTarget();
  for (const char* spec : {
           "conv2d_nchw(N=1,C=40,H=6,W=20,K=13,R=1,S=1)+bias",
           "conv2d_nchw(N=1,C=64,H=5,W=33,K=255,R=3,S=3,stride=2,pad=1)+bias+silu",
           "conv2d_nchw(N=1,C=16,H=9,W=24,K=32,R=1,S=1)+bias+relu6",
           "conv2d_nchw(N=2,C=8,H=7,W=7,K=16,R=3,S=3,pad=1)+residual",
           "conv2d_nchw(N=1,C=32,H=6,W=28,K=64,R=3,S=3,pad=1)+bias+silu",
       }) {
    auto w = ir::ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << spec << ": " << w.status();
    auto dag = ir::BuildComputeDAG(*w);
    ASSERT_TRUE(dag.ok()) << spec << ": " << dag.status();
    EXPECT_TRUE(schedule::PrefersRowConv(*dag, target)) << spec;
    auto s = schedule::RowConv2dSchedule(*dag, target);
    ASSERT_TRUE(s.ok()) << spec << ": " << s.status();
    EXPECT_EQ(s->sketch_id, schedule::kTilingSketchId);
    const schedule::Trace def = schedule::DefaultSchedule(*dag, target);
    EXPECT_EQ(def.decisions, s->decisions) << spec << ": the default is not this schedule";
    auto check = testing::CheckKernel(*w, &def, target, 29);
    ASSERT_TRUE(check.ok()) << spec << ": " << check.status();
    EXPECT_GT(check->outputs, 0);
  }
  // Deep reductions, and ragged channels over rows that fill under half a
  // vector (Silero VAD's STFT: rows of 3, 258 channels) or whose pixels lie
  // far apart in the input (openWakeWord's mel STFT: 8 frames at a hop of
  // 160, 257 channels), take channel vectors.
  for (const char* deep : {"conv2d_nchw(N=1,C=64,H=8,W=8,K=64,R=3,S=3,pad=1)",
                           "conv2d_nchw(N=1,C=16,H=8,W=16,K=32,R=1,S=1,stride=2)",
                           "conv2d_nchw(N=1,C=1,H=1,W=576,K=258,R=1,S=256,stride_w=128)+bias",
                           "conv2d_nchw(N=1,C=1,H=1,W=1760,K=257,R=1,S=512,stride_w=160)"}) {
    auto w = ir::ParseWorkloadSpec(deep);
    ASSERT_TRUE(w.ok()) << deep;
    auto dag = ir::BuildComputeDAG(*w);
    ASSERT_TRUE(dag.ok()) << deep;
    EXPECT_FALSE(schedule::PrefersRowConv(*dag, target)) << deep;
    const schedule::Trace def = schedule::DefaultSchedule(*dag, target);
    // The channel-vector tile: the tiling sketch vectorized along the
    // output channels (axis 1), not along the row.
    ASSERT_EQ(def.sketch_id, schedule::kTilingSketchId) << deep;
    EXPECT_EQ(def.decisions.at(1), 1) << deep;
    auto check = testing::CheckKernel(*w, &def, target, 31);
    ASSERT_TRUE(check.ok()) << deep << ": " << check.status();
  }
  auto dw = ir::BuildComputeDAG(
      *ir::ParseWorkloadSpec("depthwise_conv2d_nchw(N=1,C=8,H=7,W=7,R=3,S=3,pad=1)"));
  EXPECT_FALSE(schedule::RowConv2dSchedule(*dw, target).ok()) << "depthwise is not a dense conv";
}

TEST(Handwritten, DenseScheduleMatchesReference) {
  // The default for dense is the packed, register-tiled schedule for every
  // N: 16, 8 or 4 lanes where they divide N, else column pairs or single
  // columns; tails in M.
  ir::Target target = codegen::HostTarget();
  for (const char* spec : {
           "dense(M=1,N=1000,K=512)+bias",  // ResNet-18's classifier: 8 lanes
           "dense(M=7,N=64,K=33)",
           "dense(M=6,N=20,K=5)+bias+relu",
           "dense(M=2,N=12,K=130)",
           "dense(M=1,N=66,K=256)+bias",  // a 66-class head: column pairs
           "dense(M=3,N=13,K=9)",         // single columns
       }) {
    auto w = ir::ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << w.status();
    auto dag = ir::BuildComputeDAG(*w);
    auto s = schedule::HandwrittenDenseSchedule(*dag, target);
    ASSERT_TRUE(s.ok()) << spec << ": " << s.status();
    schedule::Trace def = schedule::DefaultSchedule(*dag, target);
    bool packs = false;
    for (const schedule::Step& step : def.steps)
      packs |= std::holds_alternative<schedule::LayoutPackStep>(step);
    EXPECT_TRUE(packs) << spec << ": the default schedule does not pack the weight";
    for (const schedule::Trace* sched : {&*s, &def}) {
      auto check = testing::CheckKernel(*w, sched, target, 13);
      ASSERT_TRUE(check.ok()) << spec << ": " << check.status();
      EXPECT_GT(check->outputs, 0);
    }
  }
  auto mm = ir::BuildComputeDAG(*ir::ParseWorkloadSpec("matmul(M=4,N=16,K=8)"));
  EXPECT_FALSE(schedule::HandwrittenDenseSchedule(*mm, target).ok()) << "matmul's b is [K,N]";
}

TEST(Handwritten, MatmulTilingIsTheDefaultAndMatchesReference) {
  // Matrix products whose B rows run along the columns (or whose B is a
  // constant) default to the blocked tiling: 8 rows x 2 vectors with
  // AVX-512's 32 registers, 6 rows with AVX2's 16; odd M by its divisors,
  // prime M by rows of 1-3 x up to 8 vectors; reductions by divisors of
  // 32-128 or whole; epilogues in the write-back.
  ir::Target avx512 = codegen::HostTarget();
  auto haswell = ir::Target::Parse("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell -num-cores=2");
  ASSERT_TRUE(haswell.ok()) << haswell.status();
  const std::vector<ir::Target> targets =
      avx512.float_lanes() == 16 ? std::vector<ir::Target>{avx512, *haswell}
                                 : std::vector<ir::Target>{*haswell};
  for (const ir::Target& target : targets) {
    for (const char* spec : {
             "matmul(M=64,N=96,K=200)",
             "matmul(M=49,N=64,K=96)+bias+relu",
             "matmul(M=24,N=40,K=7,transpose_a=1)",
             "batch_matmul(B=3,M=16,N=32,K=64)",
             "dense(M=32,N=48,K=70)+bias",
             "matmul(M=12,N=32,K=300)",  // a reduction of 2 x 150: whole
             "matmul(M=13,N=128,K=80)",  // prime M: 1 row x 8 vectors, every row
         }) {
      SCOPED_TRACE(absl::StrCat(spec, " on ", target.ToString()));
      auto w = ir::ParseWorkloadSpec(spec);
      ASSERT_TRUE(w.ok()) << w.status();
      auto dag = ir::BuildComputeDAG(*w);
      ASSERT_TRUE(dag.ok()) << dag.status();
      auto tiling = schedule::MatmulTiling(*dag, target);
      ASSERT_TRUE(tiling.ok()) << tiling.status();
      const int64_t lanes = target.float_lanes();
      const auto& rows = tiling->spatial[tiling->spatial.size() - 2];
      const auto& cols = tiling->spatial.back();
      const int64_t accumulators = rows.s3 * (cols.s3 / std::min<int64_t>(cols.s3, lanes));
      EXPECT_GE(accumulators, 4);
      EXPECT_LE(accumulators, lanes == 8 ? 12 : 16);
      const schedule::Trace def = schedule::DefaultSchedule(*dag, target);
      EXPECT_EQ(def.sketch_id, schedule::kTilingSketchId);
      EXPECT_EQ(def.decisions, tiling->Encode());
      auto check = testing::CheckKernel(*w, &def, target, 37);
      ASSERT_TRUE(check.ok()) << check.status();
      EXPECT_GT(check->outputs, 0);
    }
  }
  // B read across its rows, M without a divisor of 4-8 and columns too
  // few for 8 accumulators, columns that are no whole vectors, and a GEMV
  // (one row) keep the generic schedule.
  for (const char* spec : {"matmul(M=16,N=32,K=8,transpose_b=1)", "matmul(M=197,N=64,K=32)",
                           "matmul(M=16,N=13,K=8)", "matmul(M=1,N=768,K=768)"}) {
    auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
    ASSERT_TRUE(dag.ok()) << spec;
    EXPECT_FALSE(schedule::MatmulTiling(*dag, avx512).ok()) << spec;
    EXPECT_NE(schedule::DefaultSchedule(*dag, avx512).sketch_id, schedule::kTilingSketchId) << spec;
  }
}

TEST(Padding, ReadsAreMaskedLoadsAndMatchTheReference) {
  // select(inside, x[clamp(h), clamp(w)], 0) vectorized along w: the
  // condition bounds both clamps, so the read is one masked load of the
  // unclamped row (lanes in the padding are 0 and not read), not a gather.
  ir::Target target = codegen::HostTarget();
  auto dw = ir::BuildComputeDAG(
      *ir::ParseWorkloadSpec("depthwise_conv2d_nchw(N=1,C=8,H=10,W=10,R=3,S=3,pad=1)"));
  auto st = schedule::ScheduleState::Replay(*dw, schedule::DefaultSchedule(*dw, target), target);
  ASSERT_TRUE(st.ok()) << st.status();
  codegen::CpuCompileOptions o;
  o.keep_llvm_ir = true;
  o.optimize = false;
  o.link = false;
  auto art = codegen::CompileCpu(st->dag(), schedule::Lower(*st), target, o);
  ASSERT_TRUE(art.ok()) << art.status();
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "@llvm.masked.load")) << art->llvm_ir;
  EXPECT_FALSE(absl::StrContains(art->llvm_ir, "@llvm.masked.gather")) << art->llvm_ir;
  // A register tile reading padding inline, stride 2: the simplifier drops
  // the bound the loops already prove (and its clamp), the read is still a
  // masked load, and where every lane is inside the frame (the first and
  // last lane decide) a plain one with no mask to compute.
  const auto s2_workload =
      ir::ParseWorkloadSpec("depthwise_conv2d_nchw(N=1,C=4,H=32,W=32,R=3,S=3,stride=2,pad=1)");
  ASSERT_TRUE(s2_workload.ok()) << s2_workload.status();
  auto s2 = ir::BuildComputeDAG(*s2_workload);
  std::mt19937_64 sample_rng(1);
  schedule::CpuTiling inline_pad = search::space::CpuSketch(*s2, target).SampleTiling(sample_rng);
  inline_pad.pad_pass = false;
  inline_pad.vector_axis = 3;
  for (schedule::CpuTiling::Axis& a : inline_pad.spatial) a.s1 = a.s2 = a.s3 = 1;
  inline_pad.spatial[3].s3 = 8;
  auto tiled = schedule::BuildTiledSchedule(*s2, target, inline_pad);
  ASSERT_TRUE(tiled.ok()) << tiled.status();
  st = schedule::ScheduleState::Replay(*s2, *tiled, target);
  ASSERT_TRUE(st.ok()) << st.status();
  art = codegen::CompileCpu(st->dag(), schedule::Lower(*st), target, o);
  ASSERT_TRUE(art.ok()) << art.status();
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "inside")) << art->llvm_ir;
  EXPECT_TRUE(absl::StrContains(art->llvm_ir, "@llvm.masked.load")) << art->llvm_ir;
  EXPECT_FALSE(absl::StrContains(art->llvm_ir, "@llvm.masked.gather")) << art->llvm_ir;
  auto s2check = testing::CheckKernel(*s2_workload, &*tiled, target, 29);
  ASSERT_TRUE(s2check.ok()) << s2check.status();
  // Padding inlined into the reduction (the default; sketch decision 0 = 0)
  // and as a pass of its own (decision 0 = 1), asymmetric pads, strides and
  // tails: every output against the float64 reference on random inputs.
  for (const char* spec : {
           "depthwise_conv2d_nchw(N=1,C=16,H=13,W=19,R=3,S=3,pad=1)",
           "depthwise_conv2d_nchw(N=1,C=8,H=12,W=12,R=5,S=5,stride=2,pad=2)",
           "conv2d_nchw(N=1,C=3,H=17,W=23,K=16,R=7,S=7,stride=2,pad=3)+bias+relu",
           "conv2d_nchw(N=1,C=4,H=9,W=11,K=8,R=3,S=3,pad_top=2,pad_left=0,pad_bottom=1,"
           "pad_right=3)",
           "max_pool2d_nchw(N=1,C=4,H=11,W=11,R=3,S=3,stride=2,pad=1)",
       }) {
    auto w = ir::ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << spec << ": " << w.status();
    auto check = testing::CheckKernel(*w, nullptr, target, 17);
    ASSERT_TRUE(check.ok()) << spec << ": " << check.status();
    auto dag = ir::BuildComputeDAG(*w);
    if (!schedule::HasTilingSketch(*dag)) continue;
    std::mt19937_64 rng(3);
    for (int i = 0; i < 4; ++i) {
      schedule::CpuTiling d = search::space::CpuSketch(*dag, target).SampleTiling(rng);
      d.pad_pass = i % 2;  // false: padding inlined into the reduction's loads
      auto s = schedule::BuildTiledSchedule(*dag, target, d);
      ASSERT_TRUE(s.ok()) << spec << ": " << s.status();
      auto c = testing::CheckKernel(*w, &*s, target, 19 + i);
      ASSERT_TRUE(c.ok()) << spec << " (padding pass " << d.pad_pass << "): " << c.status();
    }
  }
}

TEST(Handwritten, RegisterTileStaysInRegisters) {
  // The accumulator tile must not live in memory: the local buffer is
  // promoted to registers and the hot loop is FMAs on zmm registers.
  ir::Target target = *ir::Target::Parse("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512");
  auto w = ir::ParseWorkloadSpec("conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,pad=1)");
  auto dag = ir::BuildComputeDAG(*w);
  auto s = schedule::HandwrittenConv2dSchedule(*dag, target, schedule::PickConvTile(*dag, target));
  ASSERT_TRUE(s.ok()) << s.status();
  auto st = schedule::ScheduleState::Replay(*dag, *s, target);
  ASSERT_TRUE(st.ok()) << st.status();
  codegen::CpuCompileOptions o;
  o.keep_assembly = true;
  o.link = false;
  auto art = codegen::CompileCpu(st->dag(), schedule::Lower(*st), target, o);
  ASSERT_TRUE(art.ok()) << art.status();
  // zmm FMAs for the whole tile (7 columns x 2 channel vectors, LLVM may
  // unroll further), and no zmm register ever goes through the stack.
  int fmas = 0, stack = 0;
  for (absl::string_view line : absl::StrSplit(art->assembly, '\n')) {
    if (!absl::StrContains(line, "zmm")) continue;
    if (absl::StrContains(line, "vfmadd")) ++fmas;
    if (absl::StrContains(line, "(%rsp)")) ++stack;
  }
  EXPECT_GE(fmas, 14) << art->assembly;
  EXPECT_EQ(stack, 0) << "the accumulator tile spilled";
}

}  // namespace
}  // namespace tunefarm
