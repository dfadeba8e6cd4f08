// tunefarm-bench native: the graph runtime's native elementwise operators
// (what a model runs outside its compiled kernels) against oneDNN's binary
// and eltwise primitives on the same shapes, one thread each, in the same
// run; every output is checked against oneDNN's.
#include <omp.h>

#include <cstdio>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_join.h"
#include "bench/references.h"
#include "device_agent/runtime/ops.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace tunefarm::bench {
namespace {

using Shape = std::vector<int64_t>;
using graph::Numel;

struct Case {
  std::string what;  // the model pattern it stands for
  std::string op;    // ONNX op
  Shape a, b, out;   // b empty: unary
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"residual add", "Add", {1, 24, 96, 100}, {1, 24, 96, 100}, {1, 24, 96, 100}},
      {"per-channel offset", "Add", {1, 24, 160, 160}, {1, 24, 1, 1}, {1, 24, 160, 160}},
      {"per-channel scale", "Mul", {1, 24, 160, 160}, {24, 1, 1}, {1, 24, 160, 160}},
      {"scalar scale", "Mul", {1, 64, 40, 40}, {1}, {1, 64, 40, 40}},
      {"row broadcast", "Add", {1, 8, 40, 40}, {40}, {1, 8, 40, 40}},
      {"per-channel divide", "Div", {1, 96, 20, 20}, {1, 96, 1, 1}, {1, 96, 20, 20}},
      {"max with a scalar", "Max", {1, 96, 20, 20}, {1}, {1, 96, 20, 20}},
      {"relu", "Relu", {1, 24, 160, 160}, {}, {1, 24, 160, 160}},
      {"sigmoid", "Sigmoid", {1, 24, 160, 160}, {}, {1, 24, 160, 160}},
  };
  return cases;
}

// oneDNN's time and output for a case (b right-aligned to the output's rank).
ReferenceRun OneDnn(const Case& c, const std::vector<float>& a, const std::vector<float>& b) {
  using namespace dnnl;
  using tag = memory::format_tag;
  static const tag kTags[] = {tag::a, tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde};
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  const size_t r = c.out.size();
  auto desc = [&](const Shape& s) {
    memory::dims d(r - s.size(), 1);
    d.insert(d.end(), s.begin(), s.end());
    return memory::desc(d, memory::data_type::f32, kTags[r]);
  };
  ReferenceRun run;
  run.output.assign(size_t(Numel(c.out)), 0);
  memory am(desc(c.a), eng, const_cast<float*>(a.data()));
  memory ym(desc(c.out), eng, run.output.data());
  std::unordered_map<int, memory> args;
  primitive p;
  if (c.b.empty()) {
    const algorithm alg = c.op == "Relu" ? algorithm::eltwise_relu : algorithm::eltwise_logistic;
    eltwise_forward::primitive_desc pd(
        eltwise_forward::desc(prop_kind::forward_inference, alg, desc(c.a), 0.f, 0.f), eng);
    p = eltwise_forward(pd);
    args = {{DNNL_ARG_SRC, am}, {DNNL_ARG_DST, ym}};
  } else {
    const algorithm alg = c.op == "Add"   ? algorithm::binary_add
                          : c.op == "Mul" ? algorithm::binary_mul
                          : c.op == "Div" ? algorithm::binary_div
                                          : algorithm::binary_max;
    memory bm(desc(c.b), eng, const_cast<float*>(b.data()));
    binary::primitive_desc pd(binary::desc(alg, desc(c.a), desc(c.b), desc(c.out)), eng);
    p = binary(pd);
    args = {{DNNL_ARG_SRC_0, am}, {DNNL_ARG_SRC_1, bm}, {DNNL_ARG_DST, ym}};
  }
  run.seconds = TimeIt([&] {
    p.execute(strm, args);
    strm.wait();
  });
  return run;
}

}  // namespace

int RunNativeBench(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "usage: tunefarm-bench native   (no flags)\n");
    return 2;
  }
  omp_set_num_threads(1);
  std::mt19937_64 rng(2026);
  std::uniform_real_distribution<float> value(-2, 2);
  std::printf("native elementwise operators vs oneDNN (binary/eltwise), 1 thread\n");
  std::printf("%-20s %-8s %-28s %10s %10s %10s %8s\n", "pattern", "op", "shapes", "elements",
              "ours_Ge/s", "dnnl_Ge/s", "ours/dnnl");
  int wrong = 0;
  for (const Case& c : Cases()) {
    std::vector<float> a(size_t(Numel(c.a))), b(c.b.empty() ? 0 : size_t(Numel(c.b)));
    for (float& x : a) x = value(rng);
    for (float& x : b) x = value(rng) + (value(rng) < 0 ? -2.5f : 2.5f);  // no division by ~0
    graph::Node n;
    n.op = c.op;
    n.name = c.what;
    n.inputs = c.b.empty() ? std::vector<std::string>{"a"} : std::vector<std::string>{"a", "b"};
    n.outputs = {"y"};
    std::vector<float> y(size_t(Numel(c.out)));
    runtime::OpArgs<float> op;
    op.node = &n;
    op.opset = 13;
    op.in = {a.data()};
    op.in_shapes = {c.a};
    op.in_const = {nullptr};
    if (!c.b.empty()) {
      op.in.push_back(b.data());
      op.in_shapes.push_back(c.b);
      op.in_const.push_back(nullptr);
    }
    op.out = {y.data()};
    op.out_shapes = {c.out};
    absl::Status s = runtime::RunOp(op);
    if (!s.ok()) {
      std::printf("%-20s %s\n", c.what.c_str(), std::string(s.message()).c_str());
      ++wrong;
      continue;
    }
    const double ours = TimeIt([&] { (void)runtime::RunOp(op); });
    const ReferenceRun ref = OneDnn(c, a, b);
    const double err = MaxRelError(y.data(), y.size(), ref.output);
    const std::string shapes = c.b.empty()
                                   ? absl::StrJoin(c.a, "x")
                                   : absl::StrJoin(c.a, "x") + " . " + absl::StrJoin(c.b, "x");
    std::printf("%-20s %-8s %-28s %10lld %10.2f %10.2f %8.2f%s\n", c.what.c_str(), c.op.c_str(),
                shapes.c_str(), (long long)y.size(), y.size() / ours * 1e-9,
                y.size() / ref.seconds * 1e-9, ours / ref.seconds,
                err <= 1e-5 ? "" : "  WRONG (vs oneDNN)");
    wrong += !(err <= 1e-5);
  }
  if (wrong > 0) std::printf("%d wrong or failed\n", wrong);
  return wrong > 0 ? 1 : 0;
}

}  // namespace tunefarm::bench
