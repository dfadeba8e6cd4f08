// Property test: random (workload, schedule) pairs from the schedule space,
// odd shapes included, must all compile and match the float64 reference.
// CI runs kShards x kPerShard pairs; TUNEFARM_PROPERTY_PAIRS=N runs N per
// shard locally (e.g. 10000 for 100,000 in all).
#include <cstdlib>
#include <random>

#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/compute.h"
#include "search/space/random_schedule.h"
#include "compiler/ir/workload_spec.h"
#include "gtest/gtest.h"
#include "tests/compiler/kernel_check.h"

namespace tunefarm {
namespace {

constexpr int kShards = 10;
constexpr int kPerShard = 100;

const std::vector<std::string>& Workloads() {
  static const std::vector<std::string> specs = {
      "conv2d_nchw(N=1,C=7,H=13,W=11,K=10,R=3,S=3,pad=1)+bias+relu",
      "conv2d_nchw(N=1,C=5,H=9,W=9,K=6,R=1,S=1,stride=2)",
      "conv2d_nchw(N=1,C=4,H=12,W=10,K=6,R=3,S=3,stride=2,pad_top=0,pad_left=1,pad_bottom=1,"
      "pad_right=0)",
      "conv2d_nhwc(N=1,C=6,H=7,W=9,K=5,R=3,S=3,pad=1)+silu",
      "depthwise_conv2d_nchw(N=1,C=9,H=11,W=11,R=3,S=3,stride=2,pad=1)+bias+relu6",
      "conv2d_nchw(N=1,C=6,H=9,W=9,K=9,R=3,S=3,pad=2,dilation=2,groups=3)",
      "dense(M=5,N=31,K=17)+bias",
      "matmul(M=13,N=7,K=19,transpose_a=1)",
      "batch_matmul(B=2,M=5,N=11,K=3)",
      "max_pool2d_nchw(N=1,C=3,H=13,W=13,R=3,S=3,stride=2,pad=1)",
      "avg_pool2d_nchw(N=1,C=3,H=10,W=10,R=2,S=2,stride=2)",
      "global_avg_pool2d_nchw(N=1,C=5,H=7,W=3)",
      "rearrange(out=1x6x5x9,x0=1x5x9x6[o0,o2,o3,o1])",
      "rearrange(out=1x7x6x10,fill=0.5,x0=1x3x5x10[o0,o1,o2-1,o3],x1=1x4x6x5[o0,o1-3,o2,o3/2])",
      "reduce_mean(A=3,N=37)",
      "reduce_log_sum_exp(A=2,N=5,B=7)",
      "reduce_prod(A=3,N=37)",
      "layer_norm(A=3,N=37)",
      "instance_norm(A=6,N=50,P=3)",
      "rearrange(out=1x2x6x10,linear=1,x0=1x2x3x5[o0,o1,(2*o2-1)/4,(2*o3-1)/4])",
      "conv2d_transpose_nchw(N=1,C=4,H=5,W=5,K=6,R=3,S=3,stride=2,pad=1)",
      "hardswish(N=1,C=3,H=7,W=13)",
      "add(N=1,C=3,H=5,W=11)+sigmoid"};
  return specs;
}

int PairsPerShard() {
  const char* env = std::getenv("TUNEFARM_PROPERTY_PAIRS");
  return env ? std::max(1, std::atoi(env)) : kPerShard;
}

class RandomScheduleTest : public ::testing::TestWithParam<int> {};

TEST_P(RandomScheduleTest, RandomPairsMatchReference) {
  const ir::Target target = codegen::HostTarget();
  std::mt19937_64 rng(1000 + GetParam());
  int pairs = PairsPerShard();
  int steps = 0, tiled = 0;
  for (int i = 0; i < pairs; ++i) {
    const std::string& spec = Workloads()[rng() % Workloads().size()];
    auto w = ir::ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << w.status();
    auto dag = ir::BuildComputeDAG(*w);
    ASSERT_TRUE(dag.ok());
    schedule::Trace sched = search::space::RandomSchedule(*dag, target, rng);
    steps += int(sched.steps.size());
    tiled += sched.sketch_id == 1;
    auto check = testing::CheckKernel(*w, &sched, target, rng(), 1e-4, 1 + int(rng() % 3));
    ASSERT_TRUE(check.ok()) << spec << "\nschedule: " << schedule::ToProto(sched).ShortDebugString()
                            << "\n"
                            << check.status();
  }
  std::printf("shard %d: %d pairs (%d multi-level tiled), %.1f steps per schedule\n", GetParam(),
              pairs, tiled, double(steps) / pairs);
  // Most workloads reduce: about a third of the pairs take the tiling sketch
  // (cache_write/compute_at/layout_pack); none would mean the sketch broke.
  EXPECT_GE(tiled, pairs / 8);
}

INSTANTIATE_TEST_SUITE_P(Shards, RandomScheduleTest, ::testing::Range(0, kShards));

}  // namespace
}  // namespace tunefarm
