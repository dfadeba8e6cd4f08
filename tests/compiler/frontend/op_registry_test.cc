// The ONNX operator registry: its entries are complete for their roles, the
// operators it marks native are exactly those the graph runtime computes,
// and import refuses unknown operators and operators at an opset their entry
// does not read, every one at once, naming the nodes.
#include "compiler/frontend/op_registry.h"

#include <cmath>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "device_agent/runtime/ops.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace tunefarm::frontend {
namespace {

TEST(OpRegistryTest, NativeOpsAreExactlyTheRuntimeTable) {
  std::set<std::string> frontend_native, runtime;
  for (const OpDef* d : AllOps()) {
    if (d->native) frontend_native.emplace(d->name);
  }
  for (const std::string& op : runtime::NativeOps()) runtime.insert(op);
  for (const std::string& op : frontend_native) {
    EXPECT_TRUE(runtime.count(op)) << op << " is native in the registry but the runtime has no kernel";
  }
  for (const std::string& op : runtime) {
    const OpDef* d = FindOp(op);
    EXPECT_TRUE(d != nullptr && d->native)
        << op << " has a runtime kernel but the registry does not mark it native";
  }
}

TEST(OpRegistryTest, EveryEntryIsCompleteForItsRole) {
  std::set<std::string> names;
  for (const OpDef* d : AllOps()) {
    const std::string name(d->name);
    SCOPED_TRACE(name);
    EXPECT_TRUE(names.insert(name).second) << "two entries";
    EXPECT_EQ(FindOp(name), d);
    EXPECT_LE(kMinOpset, d->min_opset);
    EXPECT_LE(d->min_opset, d->max_opset);
    EXPECT_LE(d->max_opset, kMaxOpset);
    EXPECT_TRUE(d->infer != nullptr || d->fold != nullptr || d->expand != nullptr);
    // A node import keeps needs its output shapes, and a kernel to run it.
    if (d->infer == nullptr) {
      EXPECT_FALSE(d->native);
    }
    if (!d->native) {
      EXPECT_TRUE(d->infer == nullptr);
    }
    EXPECT_EQ(d->anchor != nullptr, d->fusion == FusionRole::kAnchor);
    EXPECT_EQ(d->activation != nullptr, d->fusion == FusionRole::kActivation);
    if (d->fusion != FusionRole::kAnchor) {
      EXPECT_EQ(d->scale_weights, nullptr);
      EXPECT_EQ(d->bias_input, -1);
    }
    if (d->gated != v1::EPILOGUE_KIND_UNSPECIFIED) {
      EXPECT_EQ(d->fusion, FusionRole::kActivation);
    }
  }
  // The list in error messages is the registry's, sorted without case.
  ASSERT_EQ(SupportedOps().size(), AllOps().size());
  for (size_t i = 0; i < AllOps().size(); ++i) EXPECT_EQ(SupportedOps()[i], AllOps()[i]->name);
  EXPECT_EQ(SupportedOps().front(), "Abs");
}

// Names `v` and gives it a tensor type of element `type` and shape `dims`
// (none: a scalar, which still has a shape).
void SetValue(onnx::ValueInfoProto* v, const std::string& name, int type,
              const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  t->mutable_shape();
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

// A model y = op_k(...(op_1(x))) of unary-shaped nodes, x of shape [1, 4].
std::string Chain(int64_t opset, const std::vector<std::string>& ops) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  onnx::GraphProto* g = m.mutable_graph();
  SetValue(g->add_input(), "x", onnx::TensorProto::FLOAT, {1, 4});
  onnx::TensorProto* scale = g->add_initializer();
  scale->set_name("scale");
  scale->add_dims(4);
  for (int i = 0; i < 4; ++i) scale->add_float_data(1.0f);
  scale->set_data_type(onnx::TensorProto::FLOAT);
  std::string cur = "x";
  for (size_t i = 0; i < ops.size(); ++i) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(ops[i]);
    n->set_name("n" + std::to_string(i));
    n->add_input(cur);
    if (ops[i] == "LayerNormalization") n->add_input("scale");
    cur = "v" + std::to_string(i);
    n->add_output(cur);
  }
  SetValue(g->add_output(), cur, onnx::TensorProto::FLOAT, {1, 4});
  return m.SerializeAsString();
}

TEST(OpRegistryTest, ImportNamesEveryUnsupportedOperatorAndVersionAtOnce) {
  absl::StatusOr<Model> m = ImportOnnx(Chain(13, {"Relu", "LayerNormalization", "HardSwish"}));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "unsupported operator version at opset 13: 'HardSwish' (node 'n2') is supported from "
            "opset 14 to 18, 'LayerNormalization' (node 'n1') is supported from opset 17 to 18");

  m = ImportOnnx(Chain(13, {"Unique", "LayerNormalization", "Relu"}));
  ASSERT_FALSE(m.ok());
  const std::string e(m.status().message());
  EXPECT_TRUE(absl::StartsWith(
      e, "unsupported operator 'Unique' (node 'n0', opset 13); operator versions at opset 13: "
         "'LayerNormalization' (node 'n1') is supported from opset 17 to 18; supported: Abs, "))
      << e;

  m = ImportOnnx(Chain(17, {"Relu", "LayerNormalization", "HardSwish"}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->nodes.size(), 3u);
  EXPECT_EQ(m->shapes.at("v2"), (std::vector<int64_t>{1, 4}));
}

// Recurrent layers are refused with their own reason, naming the nodes; next
// to an unknown operator, the reason follows the list.
TEST(OpRegistryTest, ControlFlowIsRefusedWithAReason) {
  absl::StatusOr<Model> m = ImportOnnx(Chain(14, {"Scan", "Relu", "Loop"}));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "Loop node 'n2': control flow (Loop, Scan) is not supported; export the model with "
            "static control flow (e.g. torch.onnx.export of a traced model); Scan node 'n0': "
            "control flow (Loop, Scan) is not supported; export the model with static control "
            "flow (e.g. torch.onnx.export of a traced model)");
  m = ImportOnnx(Chain(14, {"Scan", "Unique"}));
  ASSERT_FALSE(m.ok());
  const std::string e(m.status().message());
  EXPECT_TRUE(absl::StartsWith(e, "2 unsupported operators (opset 14): 'Scan' (node 'n0'), "
                                  "'Unique' (node 'n1'); control flow (Loop, Scan) is not "
                                  "supported"))
      << e;
}

// y = If(cond, then: op_then(x), else: op_else(x)) with x of shape [1, 4]:
// cond = (dimension 1 of x == `dim`), folded at import when `folded`, else
// an input of the graph.
std::string IfModel(bool folded, int64_t dim, const std::string& op_then,
                    const std::string& op_else,
                    std::vector<int64_t> cond_dims = {}) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  SetValue(g->add_input(), "x", onnx::TensorProto::FLOAT, {1, 4});
  auto node = [](onnx::GraphProto* graph, const std::string& op, std::vector<std::string> in,
                 const std::string& out) {
    onnx::NodeProto* n = graph->add_node();
    n->set_op_type(op);
    for (const std::string& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  if (folded) {
    auto ints = [g](const std::string& name, int64_t v) {
      onnx::TensorProto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::INT64);
      t->add_int64_data(v);
    };
    ints("one", 1);
    ints("dim", dim);
    node(g, "Shape", {"x"}, "s");
    node(g, "Gather", {"s", "one"}, "d");
    node(g, "Equal", {"d", "dim"}, "cond");
  } else {
    SetValue(g->add_input(), "cond", onnx::TensorProto::BOOL, cond_dims);
  }
  onnx::NodeProto* n = node(g, "If", {"cond"}, "y");
  n->set_name("branch");
  for (const auto& [attr, op] : {std::pair<std::string, std::string>{"then_branch", op_then},
                                 {"else_branch", op_else}}) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* b = a->mutable_g();
    b->set_name(attr);
    node(b, op, {"x"}, attr + "_out")->set_name(attr + "_node");  // x from the outer scope
    SetValue(b->add_output(), attr + "_out", onnx::TensorProto::FLOAT, {1, 4});
  }
  SetValue(g->add_output(), "y", onnx::TensorProto::FLOAT, {1, 4});
  return m.SerializeAsString();
}

// A shape chosen by an If on a runtime condition, read by a Reshape: the
// Where between the branches' shapes is not a constant, and the error
// says which If that comes from and how to fix its condition.
TEST(OpRegistryTest, ShapesFromARuntimeIfNameTheIf) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  SetValue(g->add_input(), "x", onnx::TensorProto::FLOAT, {6});
  SetValue(g->add_input(), "cond", onnx::TensorProto::BOOL, {});
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("If");
  n->set_name("pick_shape");
  n->add_input("cond");
  n->add_output("dims");
  for (const auto& [attr, dims] :
       {std::pair<std::string, std::vector<int64_t>>{"then_branch", {2, 3}},
        {"else_branch", {3, 2}}}) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(attr);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* b = a->mutable_g();
    b->set_name(attr);
    onnx::TensorProto* t = b->add_initializer();
    t->set_name("d");
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(2);
    for (int64_t d : dims) t->add_int64_data(d);
    onnx::NodeProto* id = b->add_node();
    id->set_op_type("Identity");
    id->add_input("d");
    id->add_output("out");
    SetValue(b->add_output(), "out", onnx::TensorProto::INT64, {2});
  }
  onnx::NodeProto* r = g->add_node();
  r->set_op_type("Reshape");
  r->set_name("reshape");
  r->add_input("x");
  r->add_input("dims");
  r->add_output("y");
  SetValue(g->add_output(), "y", onnx::TensorProto::FLOAT, {});
  absl::StatusOr<Model> model = ImportOnnx(m.SerializeAsString());
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(absl::StrContains(model.status().message(), "Reshape node 'reshape'"))
      << model.status();
  EXPECT_TRUE(absl::StrContains(model.status().message(), "must be constant")) << model.status();
  EXPECT_TRUE(absl::StrContains(model.status().message(),
                                "it is computed from If node 'pick_shape', whose condition is "
                                "only known at run time: fix the inputs the condition depends "
                                "on with --value NAME=V"))
      << model.status();
}

TEST(OpRegistryTest, IfWithAConstantConditionIsItsTakenBranch) {
  for (int64_t dim : {4, 5}) {
    absl::StatusOr<Model> m = ImportOnnx(IfModel(true, dim, "Relu", "Neg"));
    ASSERT_TRUE(m.ok()) << m.status();
    // Shape, Gather and Equal folded; the branch's node, then an Identity to y.
    ASSERT_EQ(m->nodes.size(), 2u);
    EXPECT_EQ(m->nodes[0].op, dim == 4 ? "Relu" : "Neg");
    EXPECT_EQ(m->nodes[0].name, dim == 4 ? "then_branch_node" : "else_branch_node");
    EXPECT_EQ(m->nodes[1].op, "Identity");
    EXPECT_EQ(m->nodes[1].outputs, std::vector<std::string>{"y"});
    EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{1, 4}));
  }
  // A condition known only at run time: both branches (their values and
  // node names apart), then a Where on the condition.
  absl::StatusOr<Model> m = ImportOnnx(IfModel(false, 0, "Relu", "Neg"));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->nodes.size(), 3u);
  EXPECT_EQ(m->nodes[0].name, "branch/then/then_branch_node");
  EXPECT_EQ(m->nodes[0].outputs, std::vector<std::string>{"branch/then/then_branch_out"});
  EXPECT_EQ(m->nodes[1].name, "branch/else/else_branch_node");
  EXPECT_EQ(m->nodes[2].op, "Where");
  EXPECT_EQ(m->nodes[2].inputs, (std::vector<std::string>{"cond", "branch/then/then_branch_out",
                                                           "branch/else/else_branch_out"}));
  EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{1, 4}));
  // A one-element condition of higher rank than the outputs is made a
  // scalar first, so the Where keeps the outputs' shape.
  m = ImportOnnx(IfModel(false, 0, "Relu", "Neg", {1, 1, 1}));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->nodes.size(), 4u);
  EXPECT_EQ(m->nodes[2].op, "Reshape");
  EXPECT_EQ(m->nodes[3].op, "Where");
  EXPECT_EQ(m->nodes[3].inputs[0], m->nodes[2].outputs[0]);
  EXPECT_EQ(m->shapes.at(m->nodes[2].outputs[0]), std::vector<int64_t>{});
  EXPECT_EQ(m->shapes.at("y"), (std::vector<int64_t>{1, 4}));
  // Both branches must import; the error says which did not and why.
  m = ImportOnnx(IfModel(false, 0, "Relu", "Unique"));
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StartsWith(
      m.status().message(),
      "If node 'branch': its condition is only known at run time, so both branches are "
      "imported, and else_branch does not import: unsupported operator 'Unique' (node "
      "'branch/else/else_branch_node', opset 13)"))
      << m.status();
  EXPECT_TRUE(absl::EndsWith(m.status().message(),
                             "; fix the inputs the condition depends on with --value NAME=V"))
      << m.status();
  // The taken branch's operators are checked like the graph's.
  m = ImportOnnx(IfModel(true, 4, "Unique", "Relu"));
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StartsWith(
      m.status().message(), "unsupported operator 'Unique' (node 'then_branch_node', opset 13)"))
      << m.status();
}

// Booleans are 0 and 1 in the runtime; the logical kernels read any non-zero
// value as true (node tests bind boolean inputs as constants, which fold).
TEST(OpRegistryTest, LogicalKernelsComputeOnRuntimeValues) {
  const std::vector<float> a = {0, 1, 2, 0}, b = {0, 0, 1, 3};
  for (const auto& [op, want] : std::vector<std::pair<std::string, std::vector<float>>>{
           {"And", {0, 0, 1, 0}}, {"Or", {0, 1, 1, 1}}, {"Xor", {0, 1, 0, 1}},
           {"Not", {1, 0, 0, 1}}}) {
    SCOPED_TRACE(op);
    Node n;
    n.op = op;
    n.name = "n";
    n.inputs = op == "Not" ? std::vector<std::string>{"a"} : std::vector<std::string>{"a", "b"};
    n.outputs = {"y"};
    std::vector<float> y(4, -1);
    runtime::OpArgs<float> args;
    args.node = &n;
    args.opset = 13;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      args.in.push_back(i == 0 ? a.data() : b.data());
      args.in_shapes.push_back({4});
      args.in_const.push_back(nullptr);
    }
    args.out = {y.data()};
    args.out_shapes = {{4}};
    ASSERT_TRUE(runtime::RunOp(args).ok());
    EXPECT_EQ(y, want);
  }
}

// ReduceLogSumExp of values whose exp overflows a double: log(2) + 1000,
// not inf.
TEST(OpRegistryTest, LogSumExpOfLargeValuesDoesNotOverflow) {
  Node n;
  n.op = "ReduceLogSumExp";
  n.name = "n";
  n.inputs = {"a"};
  n.outputs = {"y"};
  n.ints["axes"] = {1};
  n.ints["keepdims"] = {0};
  const std::vector<double> a = {1000, 1000, -5, 3};  // two rows of two
  std::vector<double> y(2, -1);
  runtime::OpArgs<double> args;
  args.node = &n;
  args.opset = 13;
  args.in = {a.data()};
  args.in_shapes = {{2, 2}};
  args.in_const = {nullptr};
  args.out = {y.data()};
  args.out_shapes = {{2}};
  ASSERT_TRUE(runtime::RunOp(args).ok());
  EXPECT_NEAR(y[0], 1000 + std::log(2.0), 1e-9);
  EXPECT_NEAR(y[1], std::log(std::exp(-5.0) + std::exp(3.0)), 1e-12);
}

}  // namespace
}  // namespace tunefarm::frontend
