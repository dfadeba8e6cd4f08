// Every operator, compiled with its default schedule for this machine, run on
// random inputs and compared with the float64 reference.
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/workload_spec.h"
#include "gtest/gtest.h"
#include "tests/compiler/kernel_check.h"

namespace tunefarm {
namespace {

class DefaultScheduleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DefaultScheduleTest, MatchesReference) {
  auto w = ir::ParseWorkloadSpec(GetParam());
  ASSERT_TRUE(w.ok()) << w.status();
  auto check = testing::CheckKernel(*w, nullptr, codegen::HostTarget(), 42);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_GT(check->outputs, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Ops, DefaultScheduleTest,
    ::testing::Values(
        "conv2d_nchw(N=1,C=16,H=14,W=14,K=32,R=3,S=3,stride=1,pad=1)+bias+relu",
        "conv2d_nchw(N=2,C=8,H=9,W=11,K=12,R=1,S=1,stride=2)",
        "conv2d_nchw(N=1,C=6,H=13,W=13,K=8,R=5,S=5,pad=2)+bias+sigmoid",
        "conv2d_nchw(N=1,C=3,H=17,W=17,K=8,R=7,S=7,stride=2,pad=3)+bias+relu6",
        "conv2d_nchw(N=1,C=8,H=12,W=12,K=8,R=3,S=3,pad_top=0,pad_left=1,pad_bottom=2,pad_right=1,"
        "stride_h=2,stride_w=1)",
        "conv2d_nchw(N=1,C=8,H=15,W=15,K=8,R=3,S=3,pad=2,dilation=2)+leaky_relu(alpha=0.1)",
        "conv2d_nchw(N=1,C=8,H=10,W=10,K=12,R=3,S=3,pad=1,groups=4)+residual",
        "conv2d_nhwc(N=1,C=8,H=10,W=10,K=16,R=3,S=3,pad=1)+bias+silu",
        "depthwise_conv2d_nchw(N=1,C=24,H=14,W=14,R=3,S=3,stride=2,pad=1)+bias+hardswish",
        "depthwise_conv2d_nchw(N=1,C=16,H=7,W=7,R=3,S=3,pad=1)+clip(min=-0.5,max=0.5)",
        "conv2d_transpose_nchw(N=1,C=8,H=6,W=6,K=4,R=3,S=3,stride=2,pad=1)",
        "dense(M=3,N=37,K=29)+bias",
        "matmul(M=17,N=19,K=23)",
        "matmul(M=8,N=12,K=16,transpose_a=1,transpose_b=1)",
        "batch_matmul(B=3,M=7,N=9,K=11,transpose_b=1)",
        "max_pool2d_nchw(N=1,C=4,H=11,W=11,R=3,S=3,stride=2,pad=1)",
        "max_pool2d_nchw(N=1,C=4,H=10,W=10,R=3,S=3,stride=2,ceil_mode=1)",
        "avg_pool2d_nchw(N=1,C=4,H=9,W=9,R=3,S=3,stride=2,pad=1)",
        "avg_pool2d_nchw(N=1,C=4,H=9,W=9,R=3,S=3,stride=2,pad=1,count_include_pad=1)",
        "global_avg_pool2d_nchw(N=2,C=8,H=7,W=7)",
        "add(N=1,C=8,H=5,W=7)+relu",
        "mul(N=1,C=3,H=4,W=4)",
        "sigmoid(N=1,C=3,H=5,W=5)",
        "silu(N=1,C=3,H=5,W=17)",
        "hardswish(N=1,C=3,H=5,W=5)"));

}  // namespace
}  // namespace tunefarm
