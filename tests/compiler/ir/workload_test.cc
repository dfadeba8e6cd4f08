#include "compiler/ir/workload.h"

#include <algorithm>
#include <climits>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/map_program.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/workload_spec.h"
#include "gtest/gtest.h"
#include "tests/server/test_records.h"

namespace tunefarm::ir {
namespace {

using ::tunefarm::testing::Conv2d;
using ::tunefarm::testing::Dense;

TEST(Workload, Conv2dShapeFlopsAndStableKey) {
  auto c = Canonicalize(Conv2d(64, 128, 56));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->output_shape, (std::vector<int64_t>{1, 128, 56, 56}));
  double main = 2.0 * 128 * 56 * 56 * 64 * 9;
  EXPECT_DOUBLE_EQ(c->flops, main + 2.0 * 128 * 56 * 56);  // + bias + relu
  EXPECT_EQ(c->key.rfind("conv2d-", 0), 0u);
  EXPECT_EQ(c->key.size(), std::string("conv2d-").size() + 24);
  // Defaults are filled in, so spelling them out gives the same key.
  v1::Workload explicit_w = Conv2d(64, 128, 56);
  explicit_w.mutable_conv2d()->add_strides(1);
  explicit_w.mutable_conv2d()->add_strides(1);
  explicit_w.mutable_conv2d()->add_dilations(1);
  explicit_w.mutable_conv2d()->add_dilations(1);
  explicit_w.mutable_conv2d()->set_groups(1);
  explicit_w.set_out_dtype(v1::DTYPE_FLOAT32);
  auto c2 = Canonicalize(explicit_w);
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c->key, c2->key);
  EXPECT_EQ(c->canonical_json, c2->canonical_json);
  // A different shape is a different key.
  EXPECT_NE(c->key, Canonicalize(Conv2d(64, 128, 28))->key);
}

TEST(Workload, StridedDilatedDepthwiseAsymmetric) {
  v1::Workload w = Conv2d(32, 32, 17);
  w.mutable_inputs(1)->set_shape(1, 1);  // weight [32, 1, 3, 3]
  auto* a = w.mutable_conv2d();
  a->set_groups(32);
  a->add_strides(2);
  a->add_strides(1);
  a->clear_pads();
  for (int64_t p : {0, 1, 1, 2}) a->add_pads(p);
  a->add_dilations(2);
  a->add_dilations(1);
  auto c = Canonicalize(w);
  ASSERT_TRUE(c.ok()) << c.status();
  // H: (17 + 0 + 1 - 2*2 - 1) / 2 + 1 = 7; W: (17 + 1 + 2 - 2 - 1) / 1 + 1 = 18.
  EXPECT_EQ(c->output_shape, (std::vector<int64_t>{1, 32, 7, 18}));
  EXPECT_DOUBLE_EQ(c->flops, 2.0 * 32 * 7 * 18 * 1 * 9 + 2.0 * 32 * 7 * 18);
}

TEST(Workload, Nhwc) {
  v1::Workload w;
  w.set_op(v1::OP_KIND_CONV2D);
  auto* d = w.add_inputs();
  for (int64_t x : {1, 10, 10, 8}) d->add_shape(x);
  auto* k = w.add_inputs();
  for (int64_t x : {1, 1, 8, 16}) k->add_shape(x);  // HWIO
  w.mutable_conv2d()->set_layout(v1::DATA_LAYOUT_NHWC);
  auto c = Canonicalize(w);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->output_shape, (std::vector<int64_t>{1, 10, 10, 16}));
}

TEST(Workload, MatmulFamilies) {
  auto d = Canonicalize(Dense(8, 1000, 512));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->output_shape, (std::vector<int64_t>{8, 1000}));
  EXPECT_DOUBLE_EQ(d->flops, 2.0 * 8 * 1000 * 512);

  v1::Workload bmm;
  bmm.set_op(v1::OP_KIND_BATCH_MATMUL);
  auto* a = bmm.add_inputs();
  for (int64_t x : {12, 64, 128}) a->add_shape(x);
  auto* b = bmm.add_inputs();
  for (int64_t x : {12, 256, 128}) b->add_shape(x);
  bmm.mutable_matmul()->set_transpose_b(true);
  auto c = Canonicalize(bmm);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->output_shape, (std::vector<int64_t>{12, 64, 256}));
  bmm.mutable_matmul()->set_transpose_b(false);
  EXPECT_FALSE(Canonicalize(bmm).ok());  // 128 vs 256 reduction extents
}

TEST(Workload, PoolAndElementwise) {
  v1::Workload p;
  p.set_op(v1::OP_KIND_POOL2D);
  auto* d = p.add_inputs();
  for (int64_t x : {1, 64, 112, 112}) d->add_shape(x);
  auto* a = p.mutable_pool2d();
  a->set_kind(v1::POOL_KIND_MAX);
  a->add_kernel(3), a->add_kernel(3);
  a->add_strides(2), a->add_strides(2);
  for (int i = 0; i < 4; ++i) a->add_pads(1);
  auto c = Canonicalize(p);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->output_shape, (std::vector<int64_t>{1, 64, 56, 56}));

  v1::Workload e;
  e.set_op(v1::OP_KIND_ELEMENTWISE);
  e.mutable_elementwise()->set_kind(v1::ELEMENTWISE_KIND_ADD);
  auto* x = e.add_inputs();
  for (int64_t v : {1, 64, 8, 8}) x->add_shape(v);
  auto* y = e.add_inputs();
  for (int64_t v : {64, 1, 1}) y->add_shape(v);
  auto ce = Canonicalize(e);
  ASSERT_TRUE(ce.ok()) << ce.status();
  EXPECT_EQ(ce->output_shape, (std::vector<int64_t>{1, 64, 8, 8}));
  y->set_shape(0, 3);
  EXPECT_FALSE(Canonicalize(e).ok());
}

// Each bad workload is rejected with a message naming what is wrong.
TEST(Workload, ErrorsNameTheField) {
  struct Case {
    std::function<void(v1::Workload*)> mutate;
    std::string expect;
  };
  std::vector<Case> cases = {
      {[](v1::Workload* w) { w->set_op(v1::OP_KIND_UNSPECIFIED); }, "workload.op"},
      {[](v1::Workload* w) { w->mutable_conv2d()->set_groups(3); }, "conv2d.groups"},
      {[](v1::Workload* w) { w->mutable_conv2d()->add_strides(1); }, "conv2d.strides"},
      {[](v1::Workload* w) { w->mutable_inputs(0)->set_shape(2, 0); }, "inputs[0]"},
      {[](v1::Workload* w) { w->mutable_inputs(1)->add_shape(1); }, "inputs[1]"},
      {[](v1::Workload* w) { w->mutable_inputs(1)->set_shape(2, 99); }, "empty"},
      {[](v1::Workload* w) { w->add_epilogue(); }, "epilogue[2]"},
      {[](v1::Workload* w) { w->mutable_pool2d()->set_kind(v1::POOL_KIND_MAX); }, "another op"},
      {[](v1::Workload* w) { w->clear_inputs(); }, "no inputs"},
  };
  for (const Case& c : cases) {
    v1::Workload w = ::tunefarm::testing::Conv2d(16, 16, 8);
    c.mutate(&w);
    auto r = Canonicalize(w);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
    EXPECT_NE(std::string(r.status().message()).find(c.expect), std::string::npos)
        << r.status().message();
  }
}

// Random workloads, including absurd shapes and attributes: each one is either
// canonical (and canonicalising it again changes nothing) or refused with a
// message; never a crash or an overflow.
TEST(Workload, FuzzedWorkloadsNeverCrash) {
  std::mt19937_64 rng(11);
  const std::vector<int64_t> dims = {1, 2, 3, 7, 64, 0, -1, int64_t{1} << 31, int64_t{1} << 40,
                                     INT64_MAX};
  auto pick = [&] { return dims[rng() % dims.size()]; };
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    v1::Workload w;
    w.set_op(static_cast<v1::OpKind>(rng() % 12));
    int n_inputs = rng() % 4;
    for (int j = 0; j < n_inputs; ++j) {
      auto* t = w.add_inputs();
      int rank = rng() % 6;
      for (int r = 0; r < rank; ++r) t->add_shape(rng() % 3 ? int64_t(1 + rng() % 64) : pick());
      t->set_dtype(static_cast<v1::DType>(rng() % 10));
    }
    switch (rng() % 7) {
      case 0: {
        auto* a = w.mutable_conv2d();
        a->set_layout(static_cast<v1::DataLayout>(rng() % 4));
        for (int k = 0; k < int(rng() % 3); ++k) a->add_strides(rng() % 2 ? 1 : pick());
        for (int k = 0; k < int(rng() % 5); ++k) a->add_pads(rng() % 2 ? 1 : pick());
        a->set_groups(rng() % 2 ? 1 : pick());
        break;
      }
      case 1: w.mutable_matmul()->set_transpose_b(rng() % 2); break;
      case 2: {
        auto* p = w.mutable_pool2d();
        p->set_kind(static_cast<v1::PoolKind>(rng() % 5));
        for (int k = 0; k < int(rng() % 3); ++k) p->add_kernel(rng() % 2 ? 3 : pick());
        break;
      }
      case 3: w.mutable_elementwise()->set_kind(static_cast<v1::ElementwiseKind>(rng() % 12)); break;
      case 4: {
        auto* r = w.mutable_rearrange();
        for (int k = 0; k < int(rng() % 5); ++k)
          r->add_out_shape(rng() % 3 ? int64_t(1 + rng() % 9) : pick());
        for (int k = 0; k < int(rng() % 12); ++k) {
          auto* x = r->add_index();
          x->set_source(int64_t(rng() % 6) - 1);
          x->set_mul(rng() % 3 ? int64_t(rng() % 5) - 2 : pick());
          x->set_add(rng() % 3 ? int64_t(rng() % 9) - 4 : pick());
          x->set_div(rng() % 3 ? int64_t(rng() % 4) : pick());
        }
        break;
      }
      case 5:
        w.mutable_reduce()->set_op(static_cast<v1::ReduceOp>(rng() % 11));
        break;
      default: break;
    }
    if (rng() % 3 == 0) w.add_epilogue()->set_kind(static_cast<v1::EpilogueKind>(rng() % 11));
    auto c = Canonicalize(w);
    if (!c.ok()) {
      EXPECT_FALSE(c.status().message().empty());
      continue;
    }
    ++ok;
    EXPECT_GT(c->flops, 0);
    auto again = Canonicalize(c->workload);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->key, c->key);
  }
  EXPECT_GT(ok, 10);
}

TEST(Workload, Describe) {
  auto c = Canonicalize(Conv2d(3, 16, 32));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(Describe(c->workload), "conv2d 1x3x32x32 * 16x3x3x3 s1,1 p1,1,1,1 +bias_add +relu");
}

// The spec of a workload reads back as the same workload (same key), for
// every op and attribute the syntax has, and the forms it cannot say are
// refused with what they are.
// Elementwise programs are checked step by step, errors naming the step and
// operand; their input shapes are canonical (no leading 1s), and a program
// that written out as one expression would explode is refused.
TEST(WorkloadSpec, MapProgramsAreCheckedStepByStep) {
  const std::string conv = "conv2d_nchw(N=1,C=4,H=5,W=5,K=8,R=1,S=1)";
  struct Case {
    std::string map, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"+map[](gelu(%0))", "unknown map function 'gelu'"},
           {"+map[](add(%0,%2))", "map step 1 operand 2: no value 2"},
           {"+map[1](add(%0,$1))", "map step 1 operand 2: no input 1"},
           {"+map[](add(%0))", "takes 2 tensor and 0 literal operands, got 1"},
           {"+map[](clip(%0,%0,6))", "operand 2: expected a literal"},
           {"+map[](pow(%0,2),add(3,%1))", "map step 2 (add) operand 1: expected a value"},
           {"+map[7x1x1](mul(%0,$0))", "map input 0 (7x1x1) does not broadcast to the output"},
           {"+map[2x1x8x5x5](mul(%0,$0))", "more dimensions than the output"},
           {"+map[](clip(%0,1,0))", "min > max"},
           {"+map[](relu(%0)", "expected ',' or ')'"},
           {"+map[0](relu(%0))", "expected a dimension"},
           {"+map[]()", "map: no steps"},
       }) {
    absl::StatusOr<v1::Workload> w = ParseWorkloadSpec(conv + c.map);
    ASSERT_FALSE(w.ok()) << c.map;
    EXPECT_TRUE(absl::StrContains(w.status().message(), c.expect)) << w.status();
  }
  // Each step squares the one before: 2^k terms written out.
  std::string doubling = conv + "+map[](mul(%0,%0)";
  for (int k = 1; k < 12; ++k) doubling += absl::StrCat(",mul(%", k, ",%", k, ")");
  absl::StatusOr<v1::Workload> big = ParseWorkloadSpec(doubling + ")");
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(absl::StrContains(big.status().message(), "passes 512 terms at step 9"))
      << big.status();
  // Leading 1s do not make another workload.
  absl::StatusOr<v1::Workload> a =
      ParseWorkloadSpec(conv + "+map[1x1x8x1x1,1x1](mul(%0,$0),add(%1,$1))");
  absl::StatusOr<v1::Workload> b = ParseWorkloadSpec(conv + "+map[8x1x1,1](mul(%0,$0),add(%1,$1))");
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(Canonicalize(*a)->key, Canonicalize(*b)->key);
  EXPECT_EQ(Describe(*a), "conv2d 1x4x5x5 * 8x4x1x1 s1,1 p0,0,0,0 +map(mul,add)");
  // An elementwise kernel says its kind before the program.
  absl::StatusOr<v1::Workload> gate =
      ParseWorkloadSpec("sigmoid(N=1,C=1,H=1,W=128)+map[128](mul(%0,$0))");
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_EQ(Describe(*gate), "elementwise sigmoid 1x1x1x128 +map(mul)");
  // Flops: one per element for mul and add, on 8x5x5 outputs.
  EXPECT_DOUBLE_EQ(Canonicalize(*a)->flops - Canonicalize(*ParseWorkloadSpec(conv))->flops,
                   2.0 * 8 * 5 * 5);
  // A program's fields on another epilogue would make two equal workloads differ.
  v1::Workload stray = *ParseWorkloadSpec(conv + "+relu");
  stray.mutable_epilogue(0)->add_steps()->set_fn(v1::MAP_FN_EXP);
  EXPECT_FALSE(Canonicalize(stray).ok());

  // Random programs: refused with a reason, or canonical, written and read
  // back as the same workload, and built into a compute DAG.
  std::mt19937_64 rng(17);
  int accepted = 0;
  const v1::Workload base = *ParseWorkloadSpec(conv + "+bias");
  for (int i = 0; i < 3000; ++i) {
    v1::Workload w = base;
    v1::Epilogue* e = w.add_epilogue();
    e->set_kind(v1::EPILOGUE_KIND_MAP);
    for (int k = 0; k < int(rng() % 3); ++k) {
      v1::TensorSpec* t = e->add_map_inputs();
      for (int d = 0; d < int(rng() % 4); ++d)
        t->add_shape(std::vector<int64_t>{1, 8, 5, 2, 0}[rng() % 5]);
    }
    const int steps = int(rng() % 6);
    for (int k = 0; k < steps; ++k) {
      v1::MapStep* s = e->add_steps();
      const MapFnInfo& f = MapFns()[rng() % MapFns().size()];
      const bool wild = rng() % 6 == 0;  // any function, any operands
      s->set_fn(wild ? static_cast<v1::MapFn>(rng() % 36) : f.fn);
      const int args = wild ? int(rng() % 4) : f.tensors + f.literals;
      for (int a = 0; a < args; ++a) {
        v1::MapOperand* op = s->add_args();
        switch (wild ? rng() % 3 : a >= f.tensors ? 2 : rng() % 4 == 0) {
          case 0:
            op->set_value(int(rng() % (k + 2)) - (rng() % 8 == 0));
            break;
          case 1:
            op->set_input(int(rng() % 3));
            break;
          default:
            op->set_literal(float(int(rng() % 9) - 4) / 2);
            break;
        }
      }
    }
    absl::StatusOr<CanonicalWorkload> c = Canonicalize(w);
    if (!c.ok()) {
      EXPECT_FALSE(c.status().message().empty());
      continue;
    }
    ++accepted;
    absl::StatusOr<std::string> spec = FormatWorkloadSpec(c->workload);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(Canonicalize(*ParseWorkloadSpec(*spec))->key, c->key) << *spec;
    EXPECT_TRUE(BuildComputeDAG(c->workload).ok()) << *spec;
    // Cut short anywhere, the spec is an error, never a crash.
    for (size_t cut = 0; cut < spec->size(); cut += 1 + rng() % 5)
      (void)ParseWorkloadSpec(spec->substr(0, cut));
  }
  EXPECT_GT(accepted, 30);
}

TEST(WorkloadSpec, FormatReadsBackAsTheSameWorkload) {
  const std::vector<std::string> specs = {
      "conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)+bias+relu",
      "conv2d_nchw(N=2,C=6,H=11,W=13,K=12,R=3,S=2,stride_h=2,stride_w=1,pad_top=0,pad_left=1,"
      "pad_bottom=2,pad_right=1,dilation_h=2,dilation_w=1,groups=3)+bias+residual",
      "conv2d_nhwc(N=1,C=32,H=28,W=28,K=64,R=3,S=3,stride=2,pad=1,groups=2)+relu6",
      "depthwise_conv2d_nchw(N=1,C=144,H=56,W=56,R=3,S=3,pad=1,multiplier=2)+clip(min=0.1,max=6)",
      "conv2d_transpose_nchw(N=1,C=24,H=80,W=80,K=24,R=2,S=2,stride=2)+bias+leaky_relu(alpha=0.01)",
      "conv2d_transpose_nchw(N=1,C=8,H=9,W=7,K=4,R=3,S=3,stride_h=2,stride_w=3,pad_top=1,"
      "pad_left=0,pad_bottom=0,pad_right=1,groups=2)",
      "dense(M=1,N=1000,K=512)+bias+sigmoid",
      "matmul(M=40,N=6625,K=120,transpose_b=1)+silu",
      "matmul(M=7,N=9,K=5,transpose_a=1)+hardswish",
      "batch_matmul(B=4,M=16,N=8,K=32,transpose_a=1,transpose_b=1)",
      "max_pool2d_nchw(N=1,C=16,H=10,W=10,R=2,S=2,stride=2,ceil_mode=1)",
      "avg_pool2d_nchw(N=1,C=16,H=10,W=10,R=3,S=3,stride=1,pad=1,count_include_pad=1)",
      "global_avg_pool2d_nchw(N=1,C=512,H=7,W=7)",
      "max_pool2d_nhwc(N=1,C=64,H=112,W=112,R=3,S=3,stride=2,pad=1)",
      "avg_pool2d_nhwc(N=1,C=8,H=9,W=10,R=2,S=2,stride=2,ceil_mode=1)",
      "global_avg_pool2d_nhwc(N=1,C=512,H=7,W=7)",
      "conv2d_nhwc(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)+bias+map[64](mul(%0,$0))",
      "add(N=1,C=8,H=4,W=4)",
      "mul(N=3,C=16,H=16,W=6,yC=1,yH=1)",
      "sub(N=1,C=1,H=1,W=6,yN=2,yC=3,yH=5)",
      "div(N=2,C=3,H=4,W=5,yN=1,yC=1,yH=1,yW=1)",
      "clip(N=1,C=2,H=3,W=4,min=-0.5,max=0.8)",
      // Unbounded clips (a log-mel front end's clip(min=1e-10)).
      "clip(N=1,C=2,H=3,W=4,min=-inf,max=0)",
      "matmul(M=8,N=32,K=257)+clip(min=1e-10,max=inf)+map[1](log(%0),mul(%1,$0))",
      "hardswish(N=1,C=8,H=4,W=4)",
      "conv2d_nchw(N=1,C=8,H=6,W=6,K=16,R=1,S=1)+bias+map[1,16x1x1](mul(%0,$0),add(%1,$1),"
      "clip(%2,0,6),mul(%2,%3),pow(%4,0.333333343),hard_sigmoid(%0,0.200000003,0.5))",
      "add(N=1,C=8,H=4,W=4)+map[](erf(%0))+relu",
      "softmax(A=40,N=6625)",
      "log_softmax(A=3,N=20,B=9)",
      "reduce_mean(A=40,N=120)",
      "reduce_log_sum_exp(A=3,N=20,B=9)",
      "reduce_min(A=1,N=7)+map[1](add(%0,$0))",
      "layer_norm(A=40,N=120)",
      "instance_norm(A=8,N=960,eps=0.001,bias=0)",
      "instance_norm(A=16,N=60,P=8)",
      "layer_norm(A=2,N=480,bias=0,P=10)",
      "reduce_prod(A=3,N=20,B=9)",
      "rearrange(out=1x24x160x160,x0=1x160x160x24[o0,o2,o3,o1])",
      "rearrange(out=1x48x8x8,fill=0.25,x0=1x24x8x8[o0,o1,o2,o3],x1=1x24x4x4[o0,o1-24,o2/2,o3/2])",
      "rearrange(out=2x3x4,x0=5x9x4[0,-2*o1+8,(3*o2+1)/4])+relu",
      "rearrange(out=1x3x8x10,linear=1,x0=1x3x4x5[o0,o1,(2*o2-1)/4,(2*o3-1)/4])",
  };
  for (const std::string& spec : specs) {
    absl::StatusOr<v1::Workload> w = ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << w.status();
    absl::StatusOr<std::string> formatted = FormatWorkloadSpec(*w);
    ASSERT_TRUE(formatted.ok()) << spec << ": " << formatted.status();
    absl::StatusOr<v1::Workload> back = ParseWorkloadSpec(*formatted);
    ASSERT_TRUE(back.ok()) << *formatted << ": " << back.status();
    EXPECT_EQ(Canonicalize(*back)->key, Canonicalize(*w)->key) << spec << " -> " << *formatted;
  }
  // Written as the syntax's shortest form: defaults left out, equal pairs once.
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec(
                "conv2d_nchw(N=1,C=3,H=8,W=8,K=4,R=3,S=3,stride=1,pad=0,dilation=1,groups=1)")),
            "conv2d_nchw(N=1,C=3,H=8,W=8,K=4,R=3,S=3)");
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec("softmax(A=3,N=20,B=1)")), "softmax(A=3,N=20)");
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec("reduce_sum_square(A=3,N=20,B=1)")),
            "reduce_sum_square(A=3,N=20)");
  EXPECT_FALSE(ParseWorkloadSpec("reduce_median(A=3,N=20)").ok()) << "no such reduction";
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec("layer_norm(A=2,N=3,eps=0.00001,bias=1)")),
            "layer_norm(A=2,N=3)");
  EXPECT_FALSE(ParseWorkloadSpec("layer_norm(A=2,N=3,eps=-1)").ok()) << "a negative epsilon";
  EXPECT_FALSE(ParseWorkloadSpec("layer_norm(A=2,N=40,P=7)").ok()) << "P does not divide N";
  EXPECT_FALSE(ParseWorkloadSpec("instance_norm(A=6,N=4,P=4)").ok()) << "P does not divide A";
  EXPECT_FALSE(ParseWorkloadSpec("layer_norm(A=2,N=4,P=0)").ok()) << "no parameters";
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec("layer_norm(A=2,N=40,P=40)")),
            "layer_norm(A=2,N=40)");
  // A linear constant index is a real coordinate (1/2), not floored to 0.
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec("rearrange(out=3,linear=1,x0=2[2/4])")),
            "rearrange(out=3,linear=1,x0=2[1/2])");
  // One normalize workload, one key: attributes set or not, eps 0 or -0.
  {
    v1::Workload a = *ParseWorkloadSpec("layer_norm(A=2,N=3,eps=0)"), b = a, c = a;
    b.clear_normalize();
    c.mutable_normalize()->set_epsilon(-0.f);
    EXPECT_EQ(Canonicalize(a)->key, Canonicalize(b)->key);
    EXPECT_EQ(Canonicalize(a)->key, Canonicalize(c)->key);
  }
  EXPECT_FALSE(ParseWorkloadSpec("relu(N=1,C=2,H=3,W=4,eps=1)").ok()) << "eps is not relu's";
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec("mul(N=3,C=16,H=16,W=6,yN=3,yC=1,yH=1)")),
            "mul(N=3,C=16,H=16,W=6,yC=1,yH=1)");
  EXPECT_FALSE(ParseWorkloadSpec("mul(N=3,C=16,H=16,W=6,yC=2)").ok()) << "16 vs 2 do not broadcast";
  EXPECT_FALSE(ParseWorkloadSpec("relu(N=1,C=2,H=3,W=4,yC=1)").ok()) << "relu has one input";
  EXPECT_FALSE(ParseWorkloadSpec("clip(N=1,C=2,H=3,W=4,min=1,max=0)").ok()) << "min > max";
  // A zero multiplier reads no dimension: the constant 0.
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec("rearrange(out=3x4,x0=1x4[0*o1,o1])")),
            "rearrange(out=3x4,x0=1x4[0,o1])");
  // Rearrange maps are written reduced: 2*o1+4 over 2 is o1+2.
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec("rearrange(out=3x4,x0=6x4[(2*o0+4)/2,o1])")),
            "rearrange(out=3x4,x0=6x4[o0+2,o1])");
  for (const char* bad :
       {"rearrange(out=3x4,x0=6x4[o0])", "rearrange(out=3x4,x0=6x4[o2,o1])",
        "rearrange(out=3x4,x0=6x4[o0/0,o1])", "rearrange(x0=6x4[o0,o1])", "rearrange(out=3x4)",
        "rearrange(out=3x4,x1=6x4[o0,o1])", "rearrange(out=3x4,x0=6x4[p0,o1])",
        "rearrange(out=3x4,x0=6x4[o0+-1,o1])", "rearrange(out=3x4,fill=1,fill=2,x0=6x4[o0,o1])",
        // linear: one input, at most 3 interpolated dimensions, 0 or 1
        "rearrange(out=3x4,linear=1,x0=2x4[o0/2,o1],x1=2x4[o0/2,o1])",
        "rearrange(out=3x3x3x3,linear=1,x0=2x2x2x2[o0/2,o1/2,o2/2,o3/2])",
        "rearrange(out=3x4,linear=2,x0=2x4[o0/2,o1])",
        // 65537 * 59999 passes 2^31: GPU kernels index with int.
        "rearrange(out=60000,x0=60000[(65537*o0)/65536])"}) {
    absl::StatusOr<v1::Workload> w = ParseWorkloadSpec(bad);
    EXPECT_FALSE(w.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(w.status().message(), "rearrange")) << w.status();
  }
  // A clip bound that is not a short decimal keeps every bit of its float.
  v1::Workload clipped = *ParseWorkloadSpec("dense(M=2,N=3,K=4)+clip(min=0,max=6)");
  clipped.mutable_epilogue(0)->set_max(1.0f / 3.0f);
  absl::StatusOr<std::string> third = FormatWorkloadSpec(clipped);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(Canonicalize(*ParseWorkloadSpec(*third))->key, Canonicalize(clipped)->key) << *third;

  // What the syntax cannot say.
  v1::Workload broadcast = *ParseWorkloadSpec("batch_matmul(B=2,M=4,N=4,K=4)");
  auto* b_shape = broadcast.mutable_inputs(1)->mutable_shape();
  b_shape->erase(b_shape->begin());
  v1::Workload uneven_pool = *ParseWorkloadSpec("avg_pool2d_nchw(N=1,C=4,H=8,W=8,R=2,S=2)");
  uneven_pool.mutable_pool2d()->set_pads(2, 1);
  ASSERT_TRUE(Canonicalize(uneven_pool).ok());
  for (const auto& [w, why] : std::vector<std::pair<v1::Workload, std::string>>{
           {broadcast, "broadcast operand"}, {uneven_pool, "unequal pads"}}) {
    SCOPED_TRACE(why);
    absl::StatusOr<std::string> f = FormatWorkloadSpec(w);
    ASSERT_FALSE(f.ok()) << why << ": " << *f;
    // Not a workload at all: the workload's own error.
    if (absl::Status canon = Canonicalize(w).status(); !canon.ok()) {
      EXPECT_EQ(f.status(), canon);
      continue;
    }
    EXPECT_EQ(f.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(std::string(f.status().message()).find(why), std::string::npos) << f.status();
  }
}

// dtype=float16 makes every tensor float16 (inputs and output), reads back
// as written, and builds a DAG whose arguments, only, are held as float16;
// other dtypes and mixed ones are refused by name.
TEST(WorkloadSpec, Float16WorkloadsReadBackAndBuild) {
  for (const std::string spec :
       {"matmul(M=4096,N=4096,K=4096,dtype=float16)",
        "conv2d_nchw(N=16,C=64,H=56,W=56,K=64,R=3,S=3,pad=1,dtype=float16)+bias+relu",
        "softmax(A=3,N=20,dtype=float16)",
        "add(N=1,C=8,H=4,W=4,yC=1,dtype=float16)+map[1](mul(%0,$0))"}) {
    absl::StatusOr<v1::Workload> w = ParseWorkloadSpec(spec);
    ASSERT_TRUE(w.ok()) << spec << ": " << w.status();
    for (const v1::TensorSpec& t : w->inputs()) EXPECT_EQ(t.dtype(), v1::DTYPE_FLOAT16) << spec;
    EXPECT_EQ(w->out_dtype(), v1::DTYPE_FLOAT16);
    absl::StatusOr<std::string> formatted = FormatWorkloadSpec(*w);
    ASSERT_TRUE(formatted.ok()) << spec << ": " << formatted.status() << w->DebugString();
    EXPECT_EQ(*formatted, spec);
    absl::StatusOr<ComputeDAG> dag = BuildComputeDAG(*w);
    ASSERT_TRUE(dag.ok()) << dag.status();
    int half = 0;
    for (size_t t = 0; t < dag->tensors.size(); ++t) {
      const bool arg = std::find(dag->args.begin(), dag->args.end(), int(t)) != dag->args.end();
      EXPECT_EQ(dag->tensors[t].float16, arg) << spec << " tensor " << dag->tensors[t].name;
      half += dag->tensors[t].float16;
    }
    EXPECT_EQ(half, int(dag->args.size()));
    EXPECT_TRUE(HasFloat16(*dag));
    const v1::KernelSignature signature = SignatureOf(*dag);
    for (const v1::KernelArgument& a : signature.args()) EXPECT_EQ(a.dtype(), v1::DTYPE_FLOAT16);
  }
  // float16 and float32 of one shape are two workloads; WithDType turns
  // one into the other (the spec's float16 form, map inputs included).
  EXPECT_NE(Canonicalize(*ParseWorkloadSpec("matmul(M=8,N=8,K=8,dtype=float16)"))->key,
            Canonicalize(*ParseWorkloadSpec("matmul(M=8,N=8,K=8)"))->key);
  for (const std::string spec :
       {"matmul(M=8,N=8,K=8)", "add(N=1,C=8,H=4,W=4,yC=1)+map[1](mul(%0,$0))",
        "conv2d_nchw(N=1,C=4,H=8,W=8,K=8,R=3,S=3,pad=1)+bias+relu"}) {
    const v1::Workload w = *ParseWorkloadSpec(spec);
    absl::StatusOr<CanonicalWorkload> half = WithDType(w, v1::DTYPE_FLOAT16);
    ASSERT_TRUE(half.ok()) << half.status();
    const std::string want =
        spec.find(')') == spec.size() - 1
            ? spec.substr(0, spec.size() - 1) + ",dtype=float16)"
            : spec.substr(0, spec.find(')')) + ",dtype=float16" + spec.substr(spec.find(')'));
    EXPECT_EQ(*FormatWorkloadSpec(half->workload), want);
    EXPECT_EQ(half->key, Canonicalize(*ParseWorkloadSpec(want))->key) << spec;
    EXPECT_EQ(WithDType(half->workload, v1::DTYPE_FLOAT32)->key, Canonicalize(w)->key) << spec;
  }
  EXPECT_EQ(*FormatWorkloadSpec(*ParseWorkloadSpec("matmul(M=8,N=8,K=8,dtype=fp32)")),
            "matmul(M=8,N=8,K=8)");
  absl::StatusOr<v1::Workload> int8 = ParseWorkloadSpec("matmul(M=8,N=8,K=8,dtype=int8)");
  ASSERT_FALSE(int8.ok());
  EXPECT_TRUE(absl::StrContains(int8.status().message(),
                                "dtype must be float32, float16, bfloat16 or tf32"))
      << int8.status();
  v1::Workload mixed = *ParseWorkloadSpec("matmul(M=8,N=8,K=8,dtype=float16)");
  mixed.mutable_inputs(1)->set_dtype(v1::DTYPE_FLOAT32);
  absl::StatusOr<ComputeDAG> refused = BuildComputeDAG(mixed);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "mixed dtypes")) << refused.status();
  EXPECT_FALSE(FormatWorkloadSpec(mixed).ok());
  // bfloat16 likewise (dtype=bfloat16 or bf16), held in 16 bits of its own format.
  v1::Workload bf16 = *ParseWorkloadSpec("matmul(M=8,N=8,K=8,dtype=bf16)");
  EXPECT_EQ(bf16.inputs(1).dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(*FormatWorkloadSpec(bf16), "matmul(M=8,N=8,K=8,dtype=bfloat16)");
  absl::StatusOr<ComputeDAG> bdag = BuildComputeDAG(bf16);
  ASSERT_TRUE(bdag.ok()) << bdag.status();
  EXPECT_EQ(bdag->half, HalfKind::kBFloat16);
  EXPECT_EQ(SignatureOf(*bdag).args(2).dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(BuildComputeDAG(*ParseWorkloadSpec("matmul(M=8,N=8,K=8,dtype=float16)"))->half,
            HalfKind::kFloat16);
  v1::Workload ints = *ParseWorkloadSpec("matmul(M=8,N=8,K=8)");
  for (v1::TensorSpec& t : *ints.mutable_inputs()) t.set_dtype(v1::DTYPE_INT8);
  ints.set_out_dtype(v1::DTYPE_INT8);
  refused = BuildComputeDAG(ints);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "DTYPE_INT8")) << refused.status();
}

// A stage big enough to be split across threads (about 6.3 million body
// evaluations) gives exactly what a plain loop in the same order gives.
TEST(Reference, SplitStagesMatchAPlainLoop) {
  const int64_t M = 256, N = 192, K = 128;
  absl::StatusOr<ComputeDAG> dag =
      BuildComputeDAG(*ParseWorkloadSpec(absl::StrCat("matmul(M=", M, ",N=", N, ",K=", K, ")")));
  ASSERT_TRUE(dag.ok()) << dag.status();
  const std::vector<std::vector<float>> in = RandomInputs(*dag, 3);
  ASSERT_EQ(in.size(), 2u);
  absl::StatusOr<std::vector<double>> got = EvaluateReference(*dag, in);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(int64_t(got->size()), M * N);
  int64_t mismatches = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(in[0][m * K + k]) * double(in[1][k * N + n]);
      if ((*got)[m * N + n] != acc) ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace tunefarm::ir
