#include "compiler/frontend/onnx_functions.h"

#include <exception>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/frontend/op_registry.h"
#include "onnx/defs/function.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

namespace tunefarm::frontend {
namespace {

// Expansion rounds: a body may use another function operator
// (SoftmaxCrossEntropyLoss's uses NegativeLogLikelihoodLoss).
constexpr int kMaxRounds = 8;

// The schema of `n` where the registry lacks its operator and the schema
// has a function body at `opset`; null otherwise.
const onnx::OpSchema* FunctionSchema(const onnx::NodeProto& n, int64_t opset) {
  if (!n.domain().empty() && n.domain() != "ai.onnx") return nullptr;
  if (FindOp(n.op_type()) != nullptr) return nullptr;
  const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(n.op_type(), int(opset), "");
  if (s == nullptr || (!s->HasFunction() && !s->HasContextDependentFunction())) return nullptr;
  return s;
}

// Every value's type that ONNX's shape inference finds (graph inputs,
// initializers, inferred intermediates); those it cannot infer are left
// out, and a body that needs one fails to build.
std::map<std::string, onnx::TypeProto> ValueTypes(const onnx::ModelProto& model) {
  onnx::ModelProto m = model;
  try {
    onnx::shape_inference::InferShapes(m);
  } catch (const std::exception&) {
    // Keep what the model itself declares.
  }
  std::map<std::string, onnx::TypeProto> types;
  const onnx::GraphProto& g = m.graph();
  for (const onnx::TensorProto& t : g.initializer()) {
    onnx::TypeProto type;
    type.mutable_tensor_type()->set_elem_type(t.data_type());
    for (int64_t d : t.dims()) type.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    types[t.name()] = type;
  }
  for (const auto* list : {&g.input(), &g.value_info(), &g.output()}) {
    for (const onnx::ValueInfoProto& v : *list) {
      if (v.has_type()) types[v.name()] = v.type();
    }
  }
  return types;
}

}  // namespace

absl::Status ExpandFunctionOps(onnx::ModelProto* model, int64_t opset) {
  onnx::GraphProto* g = model->mutable_graph();
  for (int round = 0; round < kMaxRounds; ++round) {
    bool any = false;
    for (const onnx::NodeProto& n : g->node()) any |= FunctionSchema(n, opset) != nullptr;
    if (!any) return absl::OkStatus();
    const std::map<std::string, onnx::TypeProto> types = ValueTypes(*model);
    onnx::GraphProto out;
    for (int i = 0; i < g->node_size(); ++i) {
      const onnx::NodeProto& n = g->node(i);
      const onnx::OpSchema* s = FunctionSchema(n, opset);
      if (s == nullptr) {
        *out.add_node() = n;
        continue;
      }
      const std::string name = n.name().empty() ? absl::StrCat(n.op_type(), "#", i) : n.name();
      onnx::FunctionProto body;
      try {
        if (s->HasContextDependentFunction()) {
          std::vector<onnx::TypeProto> in_types;
          for (const std::string& in : n.input()) {
            auto it = types.find(in);
            in_types.push_back(it != types.end() ? it->second : onnx::TypeProto());
          }
          onnx::FunctionBodyBuildContextImpl ctx(n, in_types);
          if (!s->BuildContextDependentFunction(ctx, body)) body.Clear();
        } else {
          body = *s->GetFunction();
        }
        if (body.node_size() == 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(n.op_type(), " node '", name,
                           "': its ONNX function body cannot be built for these inputs"));
        }
        const int first = out.node_size();
        onnx::FunctionExpandHelper(n, body, out, absl::StrCat(name, "/r", round, "/"));
        // A body attribute that refers to one the node does not set comes
        // out with no value: it is left out, as if never written (else an
        // inner function would read SoftmaxCrossEntropyLoss's absent
        // ignore_index as 0).
        for (int k = first; k < out.node_size(); ++k) {
          auto* attrs = out.mutable_node(k)->mutable_attribute();
          for (int a = attrs->size() - 1; a >= 0; --a) {
            if (attrs->Get(a).type() == onnx::AttributeProto::UNDEFINED) attrs->DeleteSubrange(a, 1);
          }
        }
      } catch (const std::exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(
            n.op_type(), " node '", name, "': its ONNX function body does not build: ", e.what()));
      }
    }
    *g->mutable_node() = out.node();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("function operators still left after ", kMaxRounds, " rounds of expansion"));
}

}  // namespace tunefarm::frontend
