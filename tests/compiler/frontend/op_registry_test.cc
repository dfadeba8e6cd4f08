// The ONNX operator registry: its entries are complete for their roles, the
// operators it marks native are exactly those the graph runtime computes,
// and import refuses unknown operators and operators at an opset their entry
// does not read, every one at once, naming the nodes.
#include "compiler/frontend/op_registry.h"

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
  for (const std::string& op : runner::NativeOps()) runtime.insert(op);
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
    EXPECT_TRUE(d->infer != nullptr || d->fold != nullptr);
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

// A model y = op_k(...(op_1(x))) of unary-shaped nodes, x of shape [1, 4].
std::string Chain(int64_t opset, const std::vector<std::string>& ops) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  onnx::GraphProto* g = m.mutable_graph();
  auto value = [](onnx::ValueInfoProto* v, const std::string& name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(1);
    t->mutable_shape()->add_dim()->set_dim_value(4);
  };
  value(g->add_input(), "x");
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
  value(g->add_output(), cur);
  return m.SerializeAsString();
}

TEST(OpRegistryTest, ImportNamesEveryUnsupportedOperatorAndVersionAtOnce) {
  absl::StatusOr<Model> m = ImportOnnx(Chain(13, {"Relu", "LayerNormalization", "HardSwish"}));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(),
            "unsupported operator version at opset 13: 'HardSwish' (node 'n2') is supported from "
            "opset 14 to 18, 'LayerNormalization' (node 'n1') is supported from opset 17 to 18");

  m = ImportOnnx(Chain(13, {"TopK", "LayerNormalization", "Relu"}));
  ASSERT_FALSE(m.ok());
  const std::string e(m.status().message());
  EXPECT_TRUE(absl::StartsWith(
      e, "unsupported operator 'TopK' (node 'n0', opset 13); operator versions at opset 13: "
         "'LayerNormalization' (node 'n1') is supported from opset 17 to 18; supported: Abs, "))
      << e;

  m = ImportOnnx(Chain(17, {"Relu", "LayerNormalization", "HardSwish"}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->nodes.size(), 3u);
  EXPECT_EQ(m->shapes.at("v2"), (std::vector<int64_t>{1, 4}));
}

}  // namespace
}  // namespace tunefarm::frontend
