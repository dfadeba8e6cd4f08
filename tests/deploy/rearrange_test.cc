// Data movers as generated kernels: which native nodes RearrangeOf turns
// into rearrange workloads, and that each such kernel, compiled for this
// machine with its default schedule, writes exactly what the native
// operator writes on random data (a linear resize: within 1e-5).
#include "deploy/rearrange.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/ir/workload.h"
#include "device_agent/runtime/ops.h"
#include "gtest/gtest.h"
#include "tests/compiler/kernel_check.h"

namespace tunefarm::deploy {
namespace {

using graph::Constant;
using graph::Node;
using Shape = std::vector<int64_t>;

struct Case {
  std::string what;
  Node node;
  std::vector<Shape> in_shapes;
  std::vector<std::optional<Constant>> in_const;  // per input; nullopt: runtime
  std::vector<Shape> out_shapes;
  bool kernel = true;  // whether it becomes kernels
  int64_t opset = 13;
  // 0: the kernel writes what the operator writes, bit for bit; else the
  // largest |kernel - operator| / max(1, |operator|) (linear resizes).
  double tolerance = 0;
};

Constant Ints(std::vector<int64_t> v) {
  Constant c;
  c.shape = {int64_t(v.size())};
  c.is_int = true;
  c.ints = std::move(v);
  return c;
}

Constant Floats(std::vector<float> v) {
  Constant c;
  c.shape = {int64_t(v.size())};
  c.floats = std::move(v);
  return c;
}

Node MakeNode(const std::string& op, int inputs, int outputs) {
  Node n;
  n.op = op;
  n.name = op;
  for (int i = 0; i < inputs; ++i) n.inputs.push_back(absl::StrCat("in", i));
  for (int i = 0; i < outputs; ++i) n.outputs.push_back(absl::StrCat("out", i));
  return n;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  {
    Case c{"NHWC -> NCHW transpose",
           MakeNode("Transpose", 1, 1),
           {{1, 5, 7, 12}},
           {std::nullopt},
           {{1, 12, 5, 7}}};
    c.node.ints["perm"] = {0, 3, 1, 2};
    cases.push_back(c);
  }
  {
    Case c{"concat of three along channels",
           MakeNode("Concat", 3, 1),
           {{1, 4, 3, 5}, {1, 2, 3, 5}, {1, 6, 3, 5}},
           {std::nullopt, std::nullopt, std::nullopt},
           {{1, 12, 3, 5}}};
    c.node.ints["axis"] = {1};
    cases.push_back(c);
  }
  {
    Case c{"concat along the innermost axis",
           MakeNode("Concat", 2, 1),
           {{2, 3, 4}, {2, 3, 5}},
           {std::nullopt, std::nullopt},
           {{2, 3, 9}}};
    c.node.ints["axis"] = {-1};
    cases.push_back(c);
  }
  {
    Case c{"strided reversed slice",
           MakeNode("Slice", 5, 1),
           {{2, 9, 10}, {2}, {2}, {2}, {2}},
           {std::nullopt, Ints({8, 1}), Ints({0, 10}), Ints({1, 2}), Ints({-3, 3})},
           {{2, 3, 3}}};
    cases.push_back(c);
  }
  {
    Case c{"constant pad",
           MakeNode("Pad", 3, 1),
           {{1, 2, 4, 5}, {8}, {1}},
           {std::nullopt, Ints({0, 0, 1, 2, 0, 0, 2, 0}), Floats({-0.75f})},
           {{1, 2, 7, 7}}};
    cases.push_back(c);
  }
  {
    Case c{"pad with NaN (the fill compared bit for bit)",
           MakeNode("Pad", 3, 1),
           {{1, 2, 3, 4}, {8}, {1}},
           {std::nullopt, Ints({0, 0, 0, 1, 0, 0, 1, 0}), Floats({std::nanf("")})},
           {{1, 2, 4, 5}}};
    cases.push_back(c);
  }
  {
    Case c{"reflect pad (not of the form)",
           MakeNode("Pad", 2, 1),
           {{1, 1, 4, 5}, {8}},
           {std::nullopt, Ints({0, 0, 1, 1, 0, 0, 1, 1})},
           {{1, 1, 6, 7}}};
    c.node.strings["mode"] = "reflect";
    c.kernel = false;
    cases.push_back(c);
  }
  {
    Case c{"nearest resize x2, asymmetric floor",
           MakeNode("Resize", 3, 1),
           {{1, 3, 4, 5}, {0}, {4}},
           {std::nullopt, Floats({}), Floats({1, 1, 2, 2})},
           {{1, 3, 8, 10}}};
    c.node.inputs[1] = "";
    c.node.strings["mode"] = "nearest";
    c.node.strings["coordinate_transformation_mode"] = "asymmetric";
    c.node.strings["nearest_mode"] = "floor";
    c.in_const[1] = std::nullopt;
    cases.push_back(c);
  }
  {
    Case c{"nearest resize by 3/2, half pixel",
           MakeNode("Resize", 4, 1),
           {{1, 2, 6, 4}, {0}, {0}, {4}},
           {std::nullopt, std::nullopt, std::nullopt, Ints({1, 2, 9, 6})},
           {{1, 2, 9, 6}}};
    c.node.inputs[1] = c.node.inputs[2] = "";
    c.node.strings["mode"] = "nearest";
    cases.push_back(c);
  }
  {
    Case c{"nearest downsampling by 2",
           MakeNode("Resize", 3, 1),
           {{1, 2, 8, 6}, {0}, {4}},
           {std::nullopt, std::nullopt, Floats({1, 1, 0.5f, 0.5f})},
           {{1, 2, 4, 3}}};
    c.node.inputs[1] = "";
    c.node.strings["mode"] = "nearest";
    cases.push_back(c);
  }
  {
    Case c{"linear resize x2, half pixel, by scales",
           MakeNode("Resize", 3, 1),
           {{1, 2, 4, 5}, {0}, {4}},
           {std::nullopt, std::nullopt, Floats({1, 1, 2, 2})},
           {{1, 2, 8, 10}}};
    c.node.inputs[1] = "";
    c.node.strings["mode"] = "linear";
    c.tolerance = 1e-5;
    cases.push_back(c);
  }
  {
    Case c{"bilinear to a size, align corners (5x7 -> 9x12)",
           MakeNode("Resize", 4, 1),
           {{1, 2, 5, 7}, {0}, {0}, {4}},
           {std::nullopt, std::nullopt, std::nullopt, Ints({1, 2, 9, 12})},
           {{1, 2, 9, 12}}};
    c.node.inputs[1] = c.node.inputs[2] = "";
    c.node.strings["mode"] = "linear";
    c.node.strings["coordinate_transformation_mode"] = "align_corners";
    c.tolerance = 1e-5;
    cases.push_back(c);
  }
  {
    Case c{"linear downsampling by 2/5 to one column, pytorch half pixel",
           MakeNode("Resize", 4, 1),
           {{1, 3, 10, 5}, {0}, {0}, {4}},
           {std::nullopt, std::nullopt, std::nullopt, Ints({1, 3, 4, 1})},
           {{1, 3, 4, 1}}};
    c.node.inputs[1] = c.node.inputs[2] = "";
    c.node.strings["mode"] = "linear";
    c.node.strings["coordinate_transformation_mode"] = "pytorch_half_pixel";
    c.tolerance = 1e-5;
    cases.push_back(c);
  }
  {
    Case c{"opset 10 linear resize by 3/2 (asymmetric)",
           MakeNode("Resize", 2, 1),
           {{1, 1, 4, 6}, {4}},
           {std::nullopt, Floats({1, 1, 1.5f, 1.5f})},
           {{1, 1, 6, 9}}};
    c.node.strings["mode"] = "linear";
    c.opset = 10;
    c.tolerance = 1e-5;
    cases.push_back(c);
  }
  {
    Case c{"opset 9 Upsample, linear along rows",
           MakeNode("Upsample", 2, 1),
           {{1, 3, 4, 6}, {4}},
           {std::nullopt, Floats({1, 1, 2, 1})},
           {{1, 3, 8, 6}}};
    c.node.strings["mode"] = "linear";
    c.opset = 9;
    c.tolerance = 1e-5;
    cases.push_back(c);
  }
  {
    Case c{"cubic resize (the runtime has none)",
           MakeNode("Resize", 3, 1),
           {{1, 2, 4, 4}, {0}, {4}},
           {std::nullopt, std::nullopt, Floats({1, 1, 2, 2})},
           {{1, 2, 8, 8}}};
    c.node.inputs[1] = "";
    c.node.strings["mode"] = "cubic";
    c.kernel = false;
    cases.push_back(c);
  }
  {
    Case c{"split in three",
           MakeNode("Split", 2, 3),
           {{2, 7, 3}, {3}},
           {std::nullopt, Ints({2, 4, 1})},
           {{2, 2, 3}, {2, 4, 3}, {2, 1, 3}}};
    c.node.ints["axis"] = {1};
    cases.push_back(c);
  }
  {
    Case c{"expand a broadcast",
           MakeNode("Expand", 2, 1),
           {{3, 1, 4}, {3}},
           {std::nullopt, Ints({2, 3, 5, 4})},
           {{2, 3, 5, 4}}};
    c.in_shapes[1] = {4};
    cases.push_back(c);
  }
  {
    Case c{"tile (a modulo, not of the form)",
           MakeNode("Tile", 2, 1),
           {{2, 3}, {2}},
           {std::nullopt, Ints({2, 2})},
           {{4, 6}}};
    c.kernel = false;
    cases.push_back(c);
  }
  {
    Case c{"gather of one row",
           MakeNode("Gather", 2, 1),
           {{4, 6}, {}},
           {std::nullopt, Constant{{}, true, {}, {2}}},
           {{6}}};
    cases.push_back(c);
  }
  {
    Case c{"depth to space",
           MakeNode("DepthToSpace", 1, 1),
           {{1, 8, 2, 3}},
           {std::nullopt},
           {{1, 2, 4, 6}}};
    c.node.ints["blocksize"] = {2};
    c.kernel = false;  // two output dimensions feed one input index
    cases.push_back(c);
  }
  {
    Case c{"a Gather with runtime indices stays native",
           MakeNode("Gather", 2, 1),
           {{4, 6}, {2}},
           {std::nullopt, std::nullopt},
           {{2, 6}}};
    c.kernel = false;
    cases.push_back(c);
  }
  return cases;
}

TEST(Rearrange, DataMoversBecomeKernelsThatWriteWhatTheOperatorWrites) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.what);
    std::vector<const Constant*> consts;
    for (const auto& k : c.in_const) consts.push_back(k ? &*k : nullptr);
    std::vector<RearrangeStep> steps =
        RearrangeOf(c.node, c.opset, c.in_shapes, consts, c.out_shapes);
    if (!c.kernel) {
      EXPECT_TRUE(steps.empty()) << ir::Describe(steps[0].workload);
      continue;
    }
    ASSERT_EQ(steps.size(), c.out_shapes.size());
    // The native operator's outputs on random data.
    std::vector<std::vector<float>> data(c.node.inputs.size()), consts_f(c.node.inputs.size());
    runtime::OpArgs<float> a;
    a.node = &c.node;
    a.opset = c.opset;
    for (size_t i = 0; i < c.node.inputs.size(); ++i) {
      a.in_shapes.push_back(c.in_shapes[i]);
      a.in_const.push_back(consts[i]);
      if (c.node.inputs[i].empty()) {
        a.in.push_back(nullptr);
      } else if (consts[i] != nullptr) {
        consts_f[i] = consts[i]->is_int
                          ? std::vector<float>(consts[i]->ints.begin(), consts[i]->ints.end())
                          : consts[i]->floats;
        a.in.push_back(consts_f[i].data());
      } else {
        for (int64_t e = 0; e < graph::Numel(c.in_shapes[i]); ++e) data[i].push_back(dist(rng));
        a.in.push_back(data[i].data());
      }
    }
    std::vector<std::vector<float>> want;
    for (const Shape& s : c.out_shapes) want.emplace_back(size_t(graph::Numel(s)), 0.f);
    for (size_t k = 0; k < want.size(); ++k) {
      a.out.push_back(want[k].data());
      a.out_shapes.push_back(c.out_shapes[k]);
    }
    ASSERT_TRUE(runtime::RunOp<float>(a).ok());
    for (const RearrangeStep& step : steps) {
      SCOPED_TRACE(ir::Describe(step.workload));
      std::vector<std::vector<float>> inputs;
      for (int i : step.inputs) inputs.push_back(data[size_t(i)]);
      absl::StatusOr<std::vector<float>> got =
          testing::RunKernel(step.workload, nullptr, codegen::HostTarget(), inputs);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->size(), want[size_t(step.output)].size());
      for (size_t e = 0; e < got->size(); ++e) {  // bit for bit (a NaN fill too)
        const float g = (*got)[e], w = want[size_t(step.output)][e];
        if (c.tolerance > 0) {
          ASSERT_LE(std::fabs(double(g) - w), c.tolerance * std::max(1.0, std::fabs(double(w))))
              << "element " << e << ": " << g << " vs " << w;
          continue;
        }
        ASSERT_EQ(std::memcmp(&g, &w, sizeof(float)), 0)
            << "element " << e << ": " << g << " vs " << w;
      }
    }
  }
}

TEST(Rearrange, NodesWithoutARuntimeInputOrOfOtherOpsAreLeftAlone) {
  Node relu = MakeNode("Relu", 1, 1);
  EXPECT_TRUE(RearrangeOf(relu, 13, {{4}}, {nullptr}, {{4}}).empty());
  Node t = MakeNode("Transpose", 1, 1);
  Constant k = Floats({1, 2, 3, 4});
  EXPECT_TRUE(RearrangeOf(t, 13, {{4}}, {&k}, {{4}}).empty());
  EXPECT_FALSE(MayRearrange("Conv"));
  EXPECT_TRUE(MayRearrange("Concat"));
}

}  // namespace
}  // namespace tunefarm::deploy
