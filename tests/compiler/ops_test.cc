// Every operator, compiled with its default schedule for this machine, run on
// random inputs and compared with the float64 reference.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/winograd.h"
#include "compiler/ir/workload.h"
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
        "conv2d_nhwc(N=1,C=24,H=7,W=7,K=32,R=3,S=3,pad=1)+bias+residual+relu",
        "conv2d_nhwc(N=2,C=5,H=9,W=5,K=8,R=3,S=3,stride=2,pad=1)+map[8](mul(%0,$0))",
        "conv2d_nhwc(N=1,C=16,H=6,W=6,K=16,R=3,S=3,pad=1,groups=16)+bias+relu6",
        // Channel vectors narrower than the target's (K = 24 with AVX-512,
        // K = 12 everywhere), and a 2-row image whose tile widens along it.
        "conv2d_nhwc(N=1,C=20,H=6,W=9,K=24,R=1,S=1)+bias+residual",
        "conv2d_nhwc(N=1,C=6,H=5,W=7,K=12,R=3,S=3,pad=1)+bias+relu",
        "conv2d_nhwc(N=1,C=16,H=2,W=30,K=40,R=1,S=1)+bias+relu6",
        // 1x1 with AVX-512: the GEMM tile (4 vectors x 5 pixels).
        "conv2d_nhwc(N=1,C=22,H=3,W=10,K=64,R=1,S=1)+bias+silu",
        // Winograd F(2x2, 3x3): two images, asymmetric padding, channels
        // of 4-lane vectors, and odd outputs (a half tile at the edge), in
        // the whole-image form (up to 64 tiles) and by rows of tiles.
        "conv2d_nhwc(N=1,C=16,H=12,W=10,K=32,R=3,S=3,pad=1,winograd=2)+bias+residual+relu",
        "conv2d_nhwc(N=1,C=16,H=17,W=20,K=32,R=3,S=3,pad=1,winograd=2)+bias+residual+relu",
        "conv2d_nhwc(N=2,C=8,H=9,W=7,K=12,R=3,S=3,pad_top=1,pad_left=0,pad_bottom=0,"
        "pad_right=1,winograd=2)",
        "conv2d_nhwc(N=1,C=8,H=7,W=7,K=16,R=3,S=3,pad=1,winograd=2)+bias+relu6",
        "depthwise_conv2d_nchw(N=1,C=24,H=14,W=14,R=3,S=3,stride=2,pad=1)+bias+hardswish",
        "depthwise_conv2d_nchw(N=1,C=16,H=7,W=7,R=3,S=3,pad=1)+clip(min=-0.5,max=0.5)",
        "conv2d_transpose_nchw(N=1,C=8,H=6,W=6,K=4,R=3,S=3,stride=2,pad=1)",
        // Dense columns in vectors, in pairs (a 66-class head) and alone.
        "dense(M=3,N=37,K=29)+bias", "dense(M=1,N=66,K=1024)+bias", "dense(M=4,N=40,K=24)",
        "matmul(M=17,N=19,K=23)",
        "matmul(M=8,N=12,K=16,transpose_a=1,transpose_b=1)",
        "batch_matmul(B=3,M=7,N=9,K=11,transpose_b=1)",
        "max_pool2d_nchw(N=1,C=4,H=11,W=11,R=3,S=3,stride=2,pad=1)",
        "max_pool2d_nchw(N=1,C=4,H=10,W=10,R=3,S=3,stride=2,ceil_mode=1)",
        "avg_pool2d_nchw(N=1,C=4,H=9,W=9,R=3,S=3,stride=2,pad=1)",
        "avg_pool2d_nchw(N=1,C=4,H=9,W=9,R=3,S=3,stride=2,pad=1,count_include_pad=1)",
        "global_avg_pool2d_nchw(N=2,C=8,H=7,W=7)", "add(N=1,C=8,H=5,W=7)+relu",
        "max_pool2d_nhwc(N=1,C=16,H=11,W=11,R=3,S=3,stride=2,pad=1)",
        "avg_pool2d_nhwc(N=1,C=8,H=9,W=9,R=3,S=3,stride=2,pad=1)",
        "global_avg_pool2d_nhwc(N=1,C=24,H=7,W=7)", "mul(N=1,C=3,H=4,W=4)",
        "sigmoid(N=1,C=3,H=5,W=5)", "silu(N=1,C=3,H=5,W=17)", "hardswish(N=1,C=3,H=5,W=5)",
        // Elementwise programs: after a convolution (per-channel and scalar
        // inputs, a value read twice), a dense layer and a kernel of its own.
        "conv2d_nchw(N=1,C=8,H=10,W=13,K=16,R=3,S=3,pad=1)+bias+map[1,16x1x1](mul(%0,$0),"
        "add(%1,$1),add(%2,$0),clip(%3,0,6),mul(%2,%4),div(%5,$0))",
        "depthwise_conv2d_nchw(N=1,C=24,H=14,W=14,R=3,S=3,pad=1)+map[24x1x1](softplus(%0),"
        "tanh(%1),mul(%0,%2),sub(%3,$0))",
        "dense(M=5,N=40,K=24)+bias+map[40,5x1](erf(%0),max(%1,$0),pow(%2,3),min(%3,$1))",
        "add(N=1,C=3,H=9,W=21,yC=1,yH=1,yW=1)+map[3x9x21](sigmoid(%0),mul(%1,$0),"
        "leaky_relu(%2,0.1),hard_sigmoid(%0,0.2,0.5),sub(%3,%4))",
        // Softmax along rows (16-wide slices, a ragged last one), along rows
        // shorter than a slice and across a strided axis.
        "softmax(A=5,N=37)", "softmax(A=2,N=6625)", "softmax(A=37,N=2)", "log_softmax(A=9,N=5)",
        "log_softmax(A=3,N=20,B=9)",
        "softmax(A=4,N=7,B=33)",
        // Reductions: along rows in 16-wide slices (ragged last one), along
        // short rows, across a strided axis; min as -max(-x), mean's divide,
        // l2's root, log_sum_exp's two passes and a product (padded with 1).
        "reduce_mean(A=5,N=37)", "reduce_max(A=3,N=100)", "reduce_min(A=4,N=7,B=33)",
        "reduce_sum(A=3,N=20,B=9)", "reduce_l1(A=2,N=50)", "reduce_l2(A=6,N=9)",
        "reduce_sum_square(A=2,N=40,B=3)", "reduce_log_sum_exp(A=3,N=70)",
        "reduce_log_sum_exp(A=2,N=5,B=17)", "reduce_min(A=1,N=64)", "reduce_prod(A=3,N=37)",
        "reduce_prod(A=2,N=6,B=11)", "reduce_mean(A=4,N=40)+map[1](add(%0,$0),sqrt(%1))",
        // Normalizations: rows in slices (a ragged last one, which must add
        // nothing to the variance), short rows without a bias, per row, and
        // parameters repeating along the row and over the rows.
        "layer_norm(A=5,N=37)", "layer_norm(A=3,N=20,bias=0)", "instance_norm(A=4,N=100,eps=0.001)",
        "layer_norm(A=3,N=40,P=8)", "instance_norm(A=6,N=50,P=3)",
        // Data movers: a transpose each way (the gathering default), a
        // concat, a constant pad, a nearest upsampling (floor division),
        // a reversed strided slice, a broadcast and a constant index.
        "rearrange(out=2x24x5x19,x0=2x5x19x24[o0,o2,o3,o1])",
        "rearrange(out=1x9x7x3,x0=1x3x9x7[o0,o3,o1,o2])", "rearrange(out=37x19,x0=19x37[o1,o0])",
        "rearrange(out=1x13x6x5,x0=1x4x6x5[o0,o1,o2,o3],x1=1x9x6x5[o0,o1-4,o2,o3])",
        // A concat along the vectorized axis, segments across vector edges
        // (each a masked load passing the next input's lanes through).
        "rearrange(out=1x3x4x43,fill=2,x0=1x3x4x16[o0,o1,o2,o3],x1=1x3x4x7[o0,o1,o2,o3-16],"
        "x2=1x3x4x17[o0,o1,o2,o3-23])",
        "rearrange(out=2x5x37,x0=2x5x19[o0,o1,o2],x1=2x5x18[o0,o1,o2-19])",
        // The same with every segment 8 or wider: one loop per segment
        // (ragged tails; an epilogue read at the segment's offset), and a
        // fill on both sides of one input.
        "rearrange(out=1x3x4x67,x0=1x3x4x24[o0,o1,o2,o3],x1=1x3x4x9[o0,o1,o2,o3-24],"
        "x2=1x3x4x34[o0,o1,o2,o3-33])+map[1x1x1x67,1x1x1x67](mul(%0,$0),add(%1,$1),relu(%2))",
        "rearrange(out=1x2x3x40,fill=0.5,x0=1x2x3x20[o0,o1,o2,o3-10])",
        "rearrange(out=1x3x9x12,fill=-1.5,x0=1x3x6x10[o0,o1,o2-2,o3-1])",
        "rearrange(out=1x5x14x22,x0=1x5x7x11[o0,o1,o2/2,o3/2])",
        "rearrange(out=1x4x3x6,x0=1x4x9x20[o0,o1,-3*o2+8,(3*o3+1)/2])",
        "rearrange(out=2x4x6,x0=1x4x1[0,o1,0])",
        // Linear resizes: half-pixel x2 in two dimensions (the first and
        // last rows clamp), align corners 5 -> 7, a downsampling by 2/5.
        "rearrange(out=1x3x8x10,linear=1,x0=1x3x4x5[o0,o1,(2*o2-1)/4,(2*o3-1)/4])",
        "rearrange(out=1x2x7x7,linear=1,x0=1x2x5x5[o0,o1,(2*o2)/3,(2*o3)/3])",
        "rearrange(out=2x5x4,linear=1,x0=2x5x10[o0,o1,(10*o2+3)/4])"));

// Each function of elementwise programs against the C library in double,
// over ranges that reach its edges (exp's clamp, log and sqrt near 0, erf's
// tails), in the vector body and the narrower tail (W = 21).
TEST(Map, EveryFunctionAgainstTheMathLibrary) {
  struct Case {
    const char* step;  // applied to %0 = x; $0 = y
    double lo, hi;
    double (*ref)(double x, double y);
  };
  const std::vector<Case> cases = {
      {"add(%0,$0)", -5, 5, [](double x, double y) { return x + y; }},
      {"sub(%0,$0)", -5, 5, [](double x, double y) { return x - y; }},
      {"mul(%0,$0)", -5, 5, [](double x, double y) { return x * y; }},
      {"div(%0,$0)", -5, 5, [](double x, double y) { return x / y; }},
      {"min(%0,$0)", -5, 5, [](double x, double y) { return std::min(x, y); }},
      {"max(%0,$0)", -5, 5, [](double x, double y) { return std::max(x, y); }},
      {"neg(%0)", -5, 5, [](double x, double) { return -x; }},
      {"abs(%0)", -5, 5, [](double x, double) { return std::fabs(x); }},
      {"sqrt(%0)", 1e-6, 50, [](double x, double) { return std::sqrt(x); }},
      {"exp(%0)", -100, 88, [](double x, double) { return std::exp(x); }},
      {"log(%0)", 1e-6, 1e6, [](double x, double) { return std::log(x); }},
      {"tanh(%0)", -12, 12, [](double x, double) { return std::tanh(x); }},
      {"tanh(%0)", -8.5, 8.5, [](double x, double) { return std::tanh(x); }},
      {"sigmoid(%0)", -100, 100, [](double x, double) { return 1 / (1 + std::exp(-x)); }},
      {"relu(%0)", -5, 5, [](double x, double) { return std::max(x, 0.0); }},
      {"reciprocal(%0)", 0.01, 50, [](double x, double) { return 1 / x; }},
      {"erf(%0)", -6, 6, [](double x, double) { return std::erf(x); }},
      {"softplus(%0)", -100, 100,
       [](double x, double) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }},
      {"hard_swish(%0)", -5, 5,
       [](double x, double) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; }},
      {"pow(%0,2.5)", 0, 9, [](double x, double) { return std::pow(x, 2.5); }},
      {"pow(%0,-2)", 0.1, 9, [](double x, double) { return std::pow(x, -2.0); }},
      {"pow(%0,3)", -4, 4, [](double x, double) { return x * x * x; }},
      {"clip(%0,-0.5,2)", -5, 5, [](double x, double) { return std::min(std::max(x, -0.5), 2.0); }},
      {"leaky_relu(%0,0.2)", -5, 5, [](double x, double) { return x < 0 ? 0.2 * x : x; }},
      {"hard_sigmoid(%0,0.2,0.5)", -5, 5,
       [](double x, double) { return std::min(std::max(0.2 * x + 0.5, 0.0), 1.0); }},
  };
  const int64_t n = 2 * 4 * 21;
  for (const Case& c : cases) {
    // x * 1 (the kernel's own op), then the step.
    const std::string spec =
        std::string("mul(N=1,C=2,H=4,W=21,yN=1,yC=1,yH=1,yW=1)+map[2x4x21](") + c.step + ")";
    SCOPED_TRACE(spec);
    auto w = ir::ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<float> x(n), y(n);
    for (int64_t i = 0; i < n; ++i) {
      x[size_t(i)] = float(c.lo + (c.hi - c.lo) * double(i) / double(n - 1));
      y[size_t(i)] = float(0.25 + double((i * 7) % 13) * (i % 2 ? 1 : -1));  // no zeros
    }
    auto out = testing::RunKernel(*w, nullptr, codegen::HostTarget(), {x, {1.0f}, y});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(int64_t(out->size()), n);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = c.ref(x[size_t(i)], y[size_t(i)]);
      const double err = std::fabs(double((*out)[size_t(i)]) - ref) / std::max(1.0, std::fabs(ref));
      ASSERT_LE(err, 2e-6) << "at x = " << x[size_t(i)] << ", y = " << y[size_t(i)] << ": "
                           << (*out)[size_t(i)] << " vs " << ref;
    }
  }
}

// tanh is a rational function in the kernels: within 1e-6 of tanh relative
// to the value itself (so also near 0, where it is x), +-1 far out, and NaN
// for NaN; a copy kernel whose program is the tanh, as a lone Tanh node
// becomes.
TEST(Tanh, HoldsRelativeToTheValueOverTheWholeRange) {
  auto w = ir::ParseWorkloadSpec("copy(N=1,C=4,H=8,W=21)+map[](tanh(%0))");
  ASSERT_TRUE(w.ok()) << w.status();
  const int64_t n = 4 * 8 * 21;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(-9.0 + 18.0 * double(i) / double(n - 1));
  const float edges[] = {1e-30f, -1e-30f, 1e-6f,  3.99e-4f, -4.01e-4f, 0.125f,    7.9988f, -7.9989f,
                         8.0f,   20.0f,   -1e30f, 1e30f,    INFINITY,  -INFINITY, NAN};
  for (size_t k = 0; k < std::size(edges); ++k) x[k * 17 + 3] = edges[k];
  auto out = testing::RunKernel(*w, nullptr, codegen::HostTarget(), {x});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(int64_t(out->size()), n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[size_t(i)], got = (*out)[size_t(i)];
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(got)) << "tanh(NaN) = " << got;
      continue;
    }
    const double ref = std::tanh(v);
    ASSERT_LE(std::fabs(got - ref), 1e-6 * std::fabs(ref))
        << "at x = " << v << ": " << got << " vs " << ref;
  }
}

// exp is straight-line vector arithmetic in the kernels (sigmoid and silu
// epilogues); it must hold over the whole float range, not only on the
// [-1, 1) inputs of the random checks: across the clamp at both ends, in the
// vector body and in the narrower tail (W = 21 = 2 x 8 + 5 or 16 + 5).
TEST(Exp, SigmoidAndSiluHoldOverTheWholeRange) {
  for (const char* spec : {"sigmoid(N=1,C=4,H=8,W=21)", "silu(N=1,C=4,H=8,W=21)"}) {
    auto w = ir::ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << w.status();
    const int64_t n = 4 * 8 * 21;
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i)
      x[size_t(i)] = float(-120.0 + 240.0 * double(i) / double(n - 1));
    for (float edge : {88.3762f, 88.3763f, 88.72f, 89.0f, -87.3365f, -87.3366f, -103.0f, 0.0f,
                       1e-30f, -1e-30f, 0.34657359f, -0.34657359f})
      x[size_t(std::lround(double(edge + 120.0f) / 240.0 * double(n - 1)))] = edge;
    auto out = testing::RunKernel(*w, nullptr, codegen::HostTarget(), {x});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(int64_t(out->size()), n);
    const bool silu = std::string(spec).rfind("silu", 0) == 0;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[size_t(i)], s = 1.0 / (1.0 + std::exp(-v));
      const double ref = silu ? v * s : s;
      const double err = std::fabs(double((*out)[size_t(i)]) - ref) / std::max(1.0, std::fabs(ref));
      ASSERT_LE(err, 1e-6) << spec << " at x = " << v << ": " << (*out)[size_t(i)] << " vs " << ref;
      worst = std::max(worst, err);
    }
    EXPECT_GT(worst, 0.0) << "every output exact: the inputs did not reach the kernel";
  }
}

// Transposed convolutions against the textbook definition (every input
// pixel scatters its kernel-weighted value into the output), not against the
// DAG the kernel is built from: upsampling forms (kernel = stride, no
// padding; grouped; 3x3 stride 3) and a general one with overlap and padding;
// NHWC upsampling forms (RSCK weights) with 8- and 4-lane channel vectors,
// an odd height, and 3 channels (no vector: the generic default).
TEST(ConvTranspose, MatchesTheScatterDefinition) {
  struct Case {
    const char* spec;
    int64_t c, h, w, k, g, r, s, stride, pad;
    bool nhwc = false;
  };
  for (const Case& t :
       std::vector<Case>{{"conv2d_transpose_nchw(N=1,C=5,H=4,W=9,K=3,R=2,S=2,stride=2)+bias", 5, 4,
                          9, 3, 1, 2, 2, 2, 0},
                         {"conv2d_transpose_nchw(N=1,C=4,H=3,W=5,K=6,R=2,S=2,stride=2,groups=2)", 4,
                          3, 5, 6, 2, 2, 2, 2, 0},
                         {"conv2d_transpose_nchw(N=1,C=2,H=3,W=4,K=2,R=3,S=3,stride=3)", 2, 3, 4, 2,
                          1, 3, 3, 3, 0},
                         {"conv2d_transpose_nchw(N=1,C=3,H=4,W=5,K=2,R=3,S=3,stride=2,pad=1)", 3, 4,
                          5, 2, 1, 3, 3, 2, 1},
                         {"conv2d_transpose_nhwc(N=1,C=5,H=4,W=10,K=16,R=2,S=2,stride=2)+bias", 5,
                          4, 10, 16, 1, 2, 2, 2, 0, true},
                         {"conv2d_transpose_nhwc(N=1,C=6,H=3,W=5,K=12,R=3,S=3,stride=3)", 6, 3, 5,
                          12, 1, 3, 3, 3, 0, true},
                         {"conv2d_transpose_nhwc(N=1,C=4,H=5,W=6,K=3,R=2,S=2,stride=2)+bias", 4, 5,
                          6, 3, 1, 2, 2, 2, 0, true}}) {
    SCOPED_TRACE(t.spec);
    auto w = ir::ParseWorkloadSpec(t.spec);
    ASSERT_TRUE(w.ok()) << w.status();
    const bool bias = std::string(t.spec).find("+bias") != std::string::npos;
    const int64_t kg = t.k / t.g, cg = t.c / t.g;
    const int64_t oh = (t.h - 1) * t.stride - 2 * t.pad + t.r;
    const int64_t ow = (t.w - 1) * t.stride - 2 * t.pad + t.s;
    std::vector<float> x(size_t(t.c * t.h * t.w)), wt(size_t(t.c * kg * t.r * t.s)), b(size_t(t.k));
    uint32_t seed = 7;
    auto next = [&] {
      return float((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    };
    for (float& v : x) v = next();
    for (float& v : wt) v = next();
    for (float& v : b) v = next();
    std::vector<std::vector<float>> inputs = {x, wt};
    if (bias) inputs.push_back(b);
    auto out = testing::RunKernel(*w, nullptr, codegen::HostTarget(), inputs);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(int64_t(out->size()), t.k * oh * ow);
    // Offsets in the case's layout: NCHW / IOHW, or NHWC / RSCK.
    auto x_at = [&](int64_t c, int64_t iy, int64_t ix) {
      return size_t(t.nhwc ? (iy * t.w + ix) * t.c + c : (c * t.h + iy) * t.w + ix);
    };
    auto w_at = [&](int64_t c, int64_t kk, int64_t ry, int64_t rx) {
      return size_t(t.nhwc ? ((ry * t.s + rx) * t.c + c) * kg + kk
                           : ((c * kg + kk) * t.r + ry) * t.s + rx);
    };
    auto y_at = [&](int64_t k, int64_t y, int64_t xx) {
      return size_t(t.nhwc ? (y * ow + xx) * t.k + k : (k * oh + y) * ow + xx);
    };
    std::vector<double> ref(out->size(), 0.0);
    for (int64_t k = 0; k < t.k; ++k)
      for (int64_t i = 0; bias && i < oh * ow; ++i) ref[y_at(k, i / ow, i % ow)] = b[size_t(k)];
    for (int64_t c = 0; c < t.c; ++c)
      for (int64_t iy = 0; iy < t.h; ++iy)
        for (int64_t ix = 0; ix < t.w; ++ix)
          for (int64_t kk = 0; kk < kg; ++kk)
            for (int64_t ry = 0; ry < t.r; ++ry)
              for (int64_t rx = 0; rx < t.s; ++rx) {
                const int64_t y = iy * t.stride + ry - t.pad, xx = ix * t.stride + rx - t.pad;
                if (y < 0 || y >= oh || xx < 0 || xx >= ow) continue;
                const int64_t k = (c / cg) * kg + kk;
                ref[y_at(k, y, xx)] += double(x[x_at(c, iy, ix)]) * wt[w_at(c, kk, ry, rx)];
              }
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR((*out)[i], ref[i], 1e-5) << "output " << i;
  }
  // NHWC has the upsampling form alone.
  for (const char* spec : {"conv2d_transpose_nhwc(N=1,C=4,H=5,W=6,K=8,R=3,S=3,stride=2)",
                           "conv2d_transpose_nhwc(N=1,C=4,H=5,W=6,K=8,R=2,S=2,stride=1)"}) {
    auto w = ir::ParseWorkloadSpec(spec);
    absl::Status s = w.ok() ? ir::Canonicalize(*w).status() : w.status();
    EXPECT_NE(s.message().find("kernel = stride"), absl::string_view::npos) << spec << ": " << s;
  }
}

// The Winograd form against the direct convolution: the same input, the
// direct kernel given the HWIO weight g and the Winograd kernel given
// WinogradWeight(g). Fails with a wrong transform matrix (B, G or A) even
// where the DAG and its own reference agree.
TEST(Winograd, EqualsTheDirectConvolution) {
  for (const char* shape :
       {"N=1,C=16,H=12,W=10,K=32,R=3,S=3,pad=1", "N=1,C=8,H=18,W=20,K=16,R=3,S=3,pad=1",
        "N=1,C=8,H=10,W=9,K=8,R=3,S=3,pad_top=0,pad_left=1,pad_bottom=2,"
        "pad_right=0"}) {
    SCOPED_TRACE(shape);
    auto direct = ir::ParseWorkloadSpec(absl::StrCat("conv2d_nhwc(", shape, ")"));
    auto wino = ir::ParseWorkloadSpec(absl::StrCat("conv2d_nhwc(", shape, ",winograd=2)"));
    ASSERT_TRUE(direct.ok()) << direct.status();
    ASSERT_TRUE(wino.ok()) << wino.status();
    const auto& xs = direct->inputs(0).shape();
    const auto& gs = direct->inputs(1).shape();
    std::vector<float> x(size_t(xs[0] * xs[1] * xs[2] * xs[3])), g(size_t(9 * gs[2] * gs[3]));
    uint32_t seed = 11;
    auto next = [&] {
      return float((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    };
    for (float& v : x) v = next();
    for (float& v : g) v = next();
    auto ref = testing::RunKernel(*direct, nullptr, codegen::HostTarget(), {x, g});
    auto out = testing::RunKernel(*wino, nullptr, codegen::HostTarget(),
                                  {x, ir::WinogradWeight(g, gs[2], gs[3])});
    ASSERT_TRUE(ref.ok()) << ref.status();
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), ref->size());
    double worst = 0;
    for (size_t i = 0; i < ref->size(); ++i)
      worst = std::max(worst, double(std::fabs((*out)[i] - (*ref)[i])));
    EXPECT_LT(worst, 1e-4);
  }
}

}  // namespace
}  // namespace tunefarm
