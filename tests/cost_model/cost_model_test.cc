// Feature extraction on a small program checked by hand, and the XGBoost
// model: training, prediction quality, save/load.
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/gpu_tiling.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/schedule_builder.h"
#include "cost_model/features.h"
#include "cost_model/xgb_model.h"
#include "gtest/gtest.h"
#include "search/space/random_schedule.h"
#include "xgboost/c_api.h"

namespace tunefarm {
namespace {

using cost_model::FeatureNames;
using cost_model::kStoreFeatures;
namespace v1 = ::tunefarm::v1;

float L(double x) { return float(std::log2(1 + x)); }

float Col(const cost_model::FeatureRow& r, const std::string& name) {
  const auto& names = FeatureNames();
  auto it = std::find(names.begin(), names.end(), name);
  EXPECT_NE(it, names.end()) << name;
  return r[it - names.begin()];
}

TEST(Features, MatmulLoopsCheckedByHand) {
  // No schedule steps: for i in 4: for j in 8: { out = 0; for rk in 2: out += a[i,rk] * b[rk,j] }
  auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec("matmul(M=4,N=8,K=2)"));
  ASSERT_TRUE(dag.ok());
  auto st = schedule::ScheduleState::Replay(*dag, {}, codegen::HostTarget());
  ASSERT_TRUE(st.ok());
  cost_model::ProgramFeatures f = cost_model::ExtractFeatures(st->dag(), schedule::Lower(*st));
  ASSERT_EQ(f.rows.size(), 2u);
  ASSERT_EQ(FeatureNames().size(), size_t(kStoreFeatures));
  const auto& init = f.rows[0];
  EXPECT_FLOAT_EQ(Col(init, "iterations"), L(32));
  EXPECT_FLOAT_EQ(Col(init, "float_mul"), 0);
  EXPECT_FLOAT_EQ(Col(init, "loop_depth"), 2);
  EXPECT_FLOAT_EQ(Col(init, "num_buffers"), 1);
  EXPECT_FLOAT_EQ(Col(init, "buf0.kind"), 2);  // write
  EXPECT_FLOAT_EQ(Col(init, "buf0.bytes"), L(4 * 8 * 4));
  EXPECT_FLOAT_EQ(Col(init, "buf0.accessed_bytes"), L(32 * 4));  // each element once

  const auto& upd = f.rows[1];
  EXPECT_FLOAT_EQ(Col(upd, "iterations"), L(64));
  EXPECT_FLOAT_EQ(Col(upd, "float_add_sub"), L(64));
  EXPECT_FLOAT_EQ(Col(upd, "float_mul"), L(64));
  EXPECT_FLOAT_EQ(Col(upd, "loop_depth"), 3);
  EXPECT_FLOAT_EQ(Col(upd, "reduction_update"), 1);
  EXPECT_FLOAT_EQ(Col(upd, "vector_len"), 0);
  EXPECT_FLOAT_EQ(Col(upd, "parallel_product"), 0);
  EXPECT_FLOAT_EQ(Col(upd, "num_buffers"), 3);
  // 128 flops over 128 + 64 + 32 bytes.
  EXPECT_FLOAT_EQ(Col(upd, "arith_intensity"), L(128.0 / 224.0));
  // buf0: out, read-write, reused across rk (2x, distance 1 iteration, 1 element).
  EXPECT_FLOAT_EQ(Col(upd, "buf0.kind"), 3);
  EXPECT_FLOAT_EQ(Col(upd, "buf0.bytes"), L(128));
  EXPECT_FLOAT_EQ(Col(upd, "buf0.cache_lines"), L(4));
  EXPECT_FLOAT_EQ(Col(upd, "buf0.innermost_stride"), 0);
  EXPECT_FLOAT_EQ(Col(upd, "buf0.reuse_count"), L(2));
  EXPECT_FLOAT_EQ(Col(upd, "buf0.reuse_distance_iters"), L(1));
  EXPECT_FLOAT_EQ(Col(upd, "buf0.reuse_distance_bytes"), L(4));
  EXPECT_FLOAT_EQ(Col(upd, "buf0.access_count"), 2);  // the store and the load
  EXPECT_FLOAT_EQ(Col(upd, "buf0.accessed_bytes"), L(2 * 64 * 4));  // 128 distinct
  // buf1: b[rk, j] (64 bytes): stride 8 along rk, reused across i (4x, 16 iterations apart).
  EXPECT_FLOAT_EQ(Col(upd, "buf1.kind"), 1);
  EXPECT_FLOAT_EQ(Col(upd, "buf1.bytes"), L(64));
  EXPECT_FLOAT_EQ(Col(upd, "buf1.innermost_stride"), L(8));
  EXPECT_FLOAT_EQ(Col(upd, "buf1.reuse_count"), L(4));
  EXPECT_FLOAT_EQ(Col(upd, "buf1.reuse_distance_iters"), L(16));
  EXPECT_FLOAT_EQ(Col(upd, "buf1.reuse_distance_bytes"), L(64));
  EXPECT_FLOAT_EQ(Col(upd, "buf1.accessed_bytes"), L(64 * 4));
  EXPECT_FLOAT_EQ(Col(upd, "buf1.cache_lines"), L(2));  // 2 rows of 32 bytes
  // buf2: a[i, rk] (32 bytes): stride 1, reused across j (8x, 2 iterations apart).
  EXPECT_FLOAT_EQ(Col(upd, "buf2.bytes"), L(32));
  EXPECT_FLOAT_EQ(Col(upd, "buf2.innermost_stride"), L(1));
  EXPECT_FLOAT_EQ(Col(upd, "buf2.reuse_count"), L(8));
  EXPECT_FLOAT_EQ(Col(upd, "buf2.reuse_distance_iters"), L(2));
  EXPECT_FLOAT_EQ(Col(upd, "buf3.kind"), 0);  // no fourth buffer
}

TEST(Features, AnnotationsShowUp) {
  // The generic default of a matmul whose 3 rows have no register tile:
  // parallel i, rk, vectorized j (32).
  auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec("matmul(M=3,N=32,K=5)"));
  ir::Target t = codegen::HostTarget();
  auto st = schedule::ScheduleState::Replay(*dag, schedule::DefaultSchedule(*dag, t), t);
  ASSERT_TRUE(st.ok());
  cost_model::ProgramFeatures f = cost_model::ExtractFeatures(st->dag(), schedule::Lower(*st));
  const auto& upd = f.rows.back();
  EXPECT_FLOAT_EQ(Col(upd, "vector_len"), L(32));
  EXPECT_FLOAT_EQ(Col(upd, "vector_innermost"), 1);
  EXPECT_FLOAT_EQ(Col(upd, "parallel_product"), L(3));
  EXPECT_FLOAT_EQ(Col(upd, "work_per_parallel_iter"), L(5 * 32));
  // out[i, j] along the vector loop: stride 1.
  EXPECT_FLOAT_EQ(Col(upd, "buf0.vector_stride"), L(1));
  EXPECT_FLOAT_EQ(Col(upd, "unroll_count"), 0);
  EXPECT_FLOAT_EQ(Col(upd, "unroll_product"), 0);
  // Inside one parallel iteration (one i): out[i, :] 32 floats, b (the
  // larger input, buf1) all 5x32 of it, a[i, :] 5 floats.
  EXPECT_FLOAT_EQ(Col(upd, "buf0.bytes_per_parallel_iter"), L(32 * 4));
  EXPECT_FLOAT_EQ(Col(upd, "buf1.bytes_per_parallel_iter"), L(5 * 32 * 4));
  EXPECT_FLOAT_EQ(Col(upd, "buf2.bytes_per_parallel_iter"), L(5 * 4));
  EXPECT_FLOAT_EQ(Col(upd, "buf1.bytes"), L(5 * 32 * 4));
  EXPECT_FLOAT_EQ(Col(upd, "buf2.bytes"), L(3 * 5 * 4));

  // j split 4x8 and moved inside rk, both parts unrolled (unrolling is
  // honoured on innermost loops only).
  schedule::ScheduleBuilder b(*dag, t);
  ASSERT_TRUE(b.Split(0, 1, {8}).ok());          // i j.0 j.1 rk
  ASSERT_TRUE(b.Reorder(0, {0, 3, 1, 2}).ok());  // i rk j.0 j.1
  ASSERT_TRUE(b.Annotate(0, 2, v1::ANNOTATION_UNROLL).ok());
  ASSERT_TRUE(b.Annotate(0, 3, v1::ANNOTATION_UNROLL).ok());
  auto unrolled = schedule::ScheduleState::Replay(*dag, b.Take(), t);
  ASSERT_TRUE(unrolled.ok()) << unrolled.status();
  f = cost_model::ExtractFeatures(unrolled->dag(), schedule::Lower(*unrolled));
  for (const auto& row : f.rows) {
    EXPECT_FLOAT_EQ(Col(row, "unroll_count"), 2);
    EXPECT_FLOAT_EQ(Col(row, "unroll_product"), L(4 * 8));
    EXPECT_FLOAT_EQ(Col(row, "parallel_product"), 0);
    EXPECT_FLOAT_EQ(Col(row, "work_per_parallel_iter"), Col(row, "iterations"));
  }
}

// Pairwise accuracy and recall of the true top-k on scores made by hand.
TEST(CostModel, QualityMeasuresCheckedByHand) {
  cost_model::ProgramFeatures none;
  // Group 0: labels 4 3 2 1, scores rank them 4 2 3 1 (one pair of 6 swapped).
  // Group 1: labels 3 2 1, scores exactly reversed (0 of 3 pairs right).
  std::vector<cost_model::Sample> samples = {{&none, 4, 0}, {&none, 3, 0}, {&none, 2, 0},
                                             {&none, 1, 0}, {&none, 3, 1}, {&none, 2, 1},
                                             {&none, 1, 1}};
  std::vector<float> scores = {0.9f, 0.5f, 0.6f, 0.1f, 0.1f, 0.2f, 0.3f};
  cost_model::ModelQuality q = cost_model::EvaluateModel(scores, samples, 2);
  EXPECT_EQ(q.pairs, 9);
  EXPECT_DOUBLE_EQ(q.pairwise_accuracy, 5.0 / 9.0);
  // Top 2: group 0 predicts {4, 2} for the true {4, 3}: 1/2; group 1 predicts
  // {1, 2} for {3, 2}: 1/2.
  EXPECT_DOUBLE_EQ(q.recall_at_k, 0.5);
  q = cost_model::EvaluateModel(scores, samples, 4);  // group 1 is too small for k = 4
  EXPECT_DOUBLE_EQ(q.recall_at_k, 1.0);
}

TEST(Features, GpuBindingAndSharedMemoryCheckedByHand) {
  auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec("matmul(M=4,N=8,K=2)"));
  ir::Target t = *ir::Target::Parse("cuda -arch=sm_87");
  // Fused, 8 threads a block: for bx in 4 (blockIdx.x): for tx in 8
  // (threadIdx.x): { out = 0; for rk in 2: out += a * b }.
  auto fused = schedule::GpuFusedSchedule(*dag, t, 8);
  ASSERT_TRUE(fused.ok()) << fused.status();
  auto st = schedule::ScheduleState::Replay(*dag, *fused, t);
  ASSERT_TRUE(st.ok()) << st.status();
  cost_model::ProgramFeatures f = cost_model::ExtractFeatures(st->dag(), schedule::Lower(*st));
  ASSERT_EQ(f.rows.size(), 2u);
  for (const auto& row : f.rows) {
    EXPECT_FLOAT_EQ(Col(row, "gpu_blocks"), L(4));
    EXPECT_FLOAT_EQ(Col(row, "gpu_threads"), L(8));
    EXPECT_FLOAT_EQ(Col(row, "gpu_vthreads"), L(1));
    EXPECT_FLOAT_EQ(Col(row, "shared_store"), 0);
    EXPECT_FLOAT_EQ(Col(row, "shared_bytes"), 0);
    EXPECT_FLOAT_EQ(Col(row, "parallel_product"), 0);  // CPU threads: none
  }
  EXPECT_FLOAT_EQ(Col(f.rows[0], "work_per_thread"), L(1));
  EXPECT_FLOAT_EQ(Col(f.rows[1], "work_per_thread"), L(2));

  // The tiling sketch: i = 2 threads x 2 registers, j = 4 threads x 2
  // registers, one block of 8 threads; rk in one R0 step, so a[4, 2] (32
  // bytes) and b[2, 8] (64 bytes) are staged whole in shared memory.
  //           i: vthread thread S3 S4 | j: vthread thread S3 S4 | rk: R1 R2 | unroll align
  std::vector<int64_t> d = {1, 2, 1, 2, 1, 4, 1, 2, 1, 2, 0, 0};
  auto tiled = schedule::BuildGpuTiledSchedule(*dag, t, d);
  ASSERT_TRUE(tiled.ok()) << tiled.status();
  st = schedule::ScheduleState::Replay(*dag, *tiled, t);
  ASSERT_TRUE(st.ok()) << st.status();
  f = cost_model::ExtractFeatures(st->dag(), schedule::Lower(*st));
  int shared_rows = 0, updates = 0;
  for (const auto& row : f.rows) {
    EXPECT_FLOAT_EQ(Col(row, "gpu_blocks"), L(1));
    EXPECT_FLOAT_EQ(Col(row, "gpu_threads"), L(8));
    if (Col(row, "shared_store") == 1) ++shared_rows;
    if (Col(row, "reduction_update") == 1) {
      ++updates;
      EXPECT_FLOAT_EQ(Col(row, "shared_bytes"), L(32 + 64));
      EXPECT_FLOAT_EQ(Col(row, "local_store"), 1);
      EXPECT_FLOAT_EQ(Col(row, "local_bytes"), L(2 * 2 * 4));  // the register tile
      EXPECT_FLOAT_EQ(Col(row, "work_per_thread"), L(4 * 8 * 2 / 8));
    }
  }
  EXPECT_EQ(shared_rows, 2);  // the two cooperative fetches
  EXPECT_EQ(updates, 1);
  // A CPU program has no GPU columns.
  auto cpu = schedule::ScheduleState::Replay(*dag, {}, codegen::HostTarget());
  for (const auto& row : cost_model::ExtractFeatures(cpu->dag(), schedule::Lower(*cpu)).rows) {
    EXPECT_FLOAT_EQ(Col(row, "gpu_threads"), 0);
    EXPECT_FLOAT_EQ(Col(row, "work_per_thread"), 0);
  }
}

// A tensor-core program: each warp's mma.sync is a row updating its
// accumulators from both shared tiles, 64 multiply-adds per lane each time.
TEST(Features, TensorCoreProductsAreRows) {
  auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec("matmul(M=64,N=64,K=64,dtype=float16)"));
  ASSERT_TRUE(dag.ok()) << dag.status();
  ir::Target t = *ir::Target::Parse("cuda -arch=sm_90");
  schedule::TensorCoreTiling tiling;  // 2x2 warps of 2x4 fragments, 32-deep tiles
  auto sched = schedule::TensorCoreSchedule(*dag, t, tiling);
  ASSERT_TRUE(sched.ok()) << sched.status();
  auto st = schedule::ScheduleState::Replay(*dag, *sched, t);
  ASSERT_TRUE(st.ok()) << st.status();
  cost_model::ProgramFeatures f = cost_model::ExtractFeatures(st->dag(), schedule::Lower(*st));
  int products = 0;
  for (const auto& row : f.rows) {
    if (Col(row, "reduction_update") != 1) continue;
    ++products;
    EXPECT_FLOAT_EQ(Col(row, "gpu_threads"), L(128));
    // k tiles x k steps x fragments x 64 per lane, per thread.
    EXPECT_FLOAT_EQ(Col(row, "work_per_thread"), L(2 * 2 * 2 * 4 * 64));
    EXPECT_FLOAT_EQ(Col(row, "float_mul"), L(2 * 2 * 2 * 4 * 64 * 128));
    EXPECT_FLOAT_EQ(Col(row, "shared_bytes"), L(2 * 2 * (64 * 40 + 32 * 72)));
  }
  EXPECT_EQ(products, 1);
}

// Programs from the schedule space with a label the features determine, so
// a model that learns at all ranks held-out programs well.
struct Data {
  std::vector<cost_model::ProgramFeatures> programs;
  std::vector<cost_model::Sample> samples;
};

Data MakeData(int n, uint64_t seed) {
  Data d;
  ir::Target t = codegen::HostTarget();
  std::mt19937_64 rng(seed);
  const char* specs[] = {"matmul(M=32,N=48,K=16)",
                         "conv2d_nchw(N=1,C=8,H=12,W=12,K=16,R=3,S=3,pad=1)"};
  d.programs.reserve(n);
  std::vector<double> raw;
  for (int i = 0; i < n; ++i) {
    auto dag = ir::BuildComputeDAG(*ir::ParseWorkloadSpec(specs[i % 2]));
    auto st = schedule::ScheduleState::Replay(*dag, search::space::RandomSchedule(*dag, t, rng), t);
    d.programs.push_back(cost_model::ExtractFeatures(st->dag(), schedule::Lower(*st)));
    double v = 0;
    for (const auto& r : d.programs.back().rows)
      v += Col(r, "vector_len") + 2 * Col(r, "unroll_count");
    raw.push_back(v);
  }
  for (int g = 0; g < 2; ++g) {
    double best = 1e-9;
    for (int i = g; i < n; i += 2) best = std::max(best, raw[i]);
    for (int i = g; i < n; i += 2) d.samples.push_back({&d.programs[i], float(raw[i] / best), g});
  }
  return d;
}

TEST(CostModel, LearnsAndRanksHeldOutPrograms) {
  Data train = MakeData(160, 1), test = MakeData(80, 2);
  for (auto o : {cost_model::Objective::kPackSum, cost_model::Objective::kPairwiseRank,
                 cost_model::Objective::kRegression}) {
    cost_model::CostModel m(o);
    ASSERT_TRUE(m.Train(train.samples).ok()) << cost_model::ObjectiveName(o);
    std::vector<const cost_model::ProgramFeatures*> ps;
    for (const auto& s : test.samples) ps.push_back(s.features);
    auto scores = m.Predict(ps);
    ASSERT_TRUE(scores.ok()) << scores.status();
    cost_model::ModelQuality q = cost_model::EvaluateModel(*scores, test.samples, 5);
    EXPECT_GT(q.pairs, 1000);
    EXPECT_GT(q.pairwise_accuracy, 0.8) << cost_model::ObjectiveName(o);
  }
}

TEST(CostModel, WeightsDecideBetweenConflictingRecords) {
  // Every program twice: once with its label, once (another group) with the
  // label reversed. The heavier copy wins, whichever it is, for every
  // objective (regression: per record; ranking: per group; pack-sum: in
  // the gradient). Pack-sum also weighs a record by its label, which favours
  // the reversed copy of a slow program, so the weight is large.
  Data train = MakeData(160, 1), test = MakeData(80, 2);
  std::vector<const cost_model::ProgramFeatures*> ps;
  for (const auto& s : test.samples) ps.push_back(s.features);
  for (auto o : {cost_model::Objective::kPackSum, cost_model::Objective::kPairwiseRank,
                 cost_model::Objective::kRegression}) {
    for (bool reversed_heavy : {false, true}) {
      std::vector<cost_model::Sample> samples;
      for (const auto& x : train.samples) {
        samples.push_back({x.features, x.label, x.group, reversed_heavy ? 1.0f : 100.0f});
        samples.push_back({x.features, 1 - x.label, x.group + 2, reversed_heavy ? 100.0f : 1.0f});
      }
      cost_model::CostModel m(o);
      ASSERT_TRUE(m.Train(samples).ok()) << cost_model::ObjectiveName(o);
      auto scores = m.Predict(ps);
      ASSERT_TRUE(scores.ok()) << scores.status();
      double acc = cost_model::EvaluateModel(*scores, test.samples, 5).pairwise_accuracy;
      if (reversed_heavy) {
        EXPECT_LT(acc, 0.3) << cost_model::ObjectiveName(o);
      } else {
        EXPECT_GT(acc, 0.7) << cost_model::ObjectiveName(o);
      }
    }
  }
}

TEST(CostModel, SavesAndLoads) {
  Data train = MakeData(60, 3);
  cost_model::CostModel m(cost_model::Objective::kPackSum);
  ASSERT_TRUE(m.Train(train.samples).ok());
  auto bytes = m.Serialize();
  ASSERT_TRUE(bytes.ok());
  auto back = cost_model::CostModel::Deserialize(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->objective(), cost_model::Objective::kPackSum);
  std::vector<const cost_model::ProgramFeatures*> ps;
  for (const auto& s : train.samples) ps.push_back(s.features);
  auto a = m.Predict(ps), b = (*back)->Predict(ps);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  // Garbage is refused, not crashed on.
  EXPECT_FALSE(cost_model::CostModel::Deserialize("hello").ok());
  // Cut anywhere, or one byte changed: refused before XGBoost reads it
  // (libxgboost 1.7 reads a truncated buffer past its end).
  for (size_t cut : {bytes->size() / 2, bytes->size() / 3, bytes->size() - 1}) {
    auto refused = cost_model::CostModel::Deserialize(bytes->substr(0, cut));
    EXPECT_FALSE(refused.ok()) << cut;
  }
  std::string altered = *bytes;
  altered[altered.size() / 2] ^= 0x20;
  auto refused = cost_model::CostModel::Deserialize(altered);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("checksum"), std::string::npos)
      << refused.status();
  // A model stored by an older build (no checksum) is refused with a reason.
  auto old = cost_model::CostModel::Deserialize("tunefarm-cost-model-v1 pack-sum\nxyz");
  EXPECT_TRUE(absl::IsFailedPrecondition(old.status())) << old.status();
  EXPECT_FALSE(cost_model::ParseObjective("lambdarank").ok());
}

TEST(CostModel, RefusesAModelOfAnotherFeatureLayout) {
  // A booster trained on 3 columns behind a valid header: an older build's model.
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 0, 1};
  std::vector<float> y = {1, 2, 3, 4};
  DMatrixHandle dm = nullptr;
  ASSERT_EQ(XGDMatrixCreateFromMat(x.data(), 4, 3, NAN, &dm), 0);
  ASSERT_EQ(XGDMatrixSetFloatInfo(dm, "label", y.data(), 4), 0);
  BoosterHandle b = nullptr;
  ASSERT_EQ(XGBoosterCreate(&dm, 1, &b), 0);
  ASSERT_EQ(XGBoosterUpdateOneIter(b, 0, dm), 0);
  bst_ulong len = 0;
  const char* buf = nullptr;
  ASSERT_EQ(XGBoosterSaveModelToBuffer(b, "{\"format\": \"ubj\"}", &len, &buf), 0);
  const std::string payload(buf, len);
  std::string bytes = absl::StrCat("tunefarm-cost-model-v2 pack-sum ", len, " ",
                                   Sha256Hex(payload), "\n", payload);
  XGBoosterFree(b);
  XGDMatrixFree(dm);
  auto m = cost_model::CostModel::Deserialize(bytes);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(m.status())) << m.status();
  EXPECT_NE(std::string(m.status().message()).find("3 features"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace tunefarm
