// If nodes at import: the taken branch of a constant condition, or both
// branches and a Where per output (see InlineIf in onnx_import_internal.h).
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/frontend/onnx_import_internal.h"
#include "compiler/frontend/onnx_tensor.h"
#include "compiler/frontend/op_registry.h"

namespace tunefarm::frontend::import_internal {

using absl::StrCat;

void LocalNames(const onnx::GraphProto& g, std::set<std::string>* out) {
  for (const onnx::TensorProto& t : g.initializer()) out->insert(t.name());
  for (const onnx::ValueInfoProto& v : g.input()) out->insert(v.name());
  for (const onnx::NodeProto& n : g.node()) {
    for (const std::string& o : n.output()) {
      if (!o.empty()) out->insert(o);
    }
  }
}

namespace {

// The names graph `g` and the graphs inside it define (initializers, inputs,
// node outputs).
void DefinedNames(const onnx::GraphProto& g, std::set<std::string>* out) {
  LocalNames(g, out);
  for (const onnx::NodeProto& n : g.node()) {
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.has_g()) DefinedNames(a.g(), out);
      for (const onnx::GraphProto& sub : a.graphs()) DefinedNames(sub, out);
    }
  }
}

// `g` with every name in `names` and every node name prefixed by `prefix`,
// in the graphs inside it too: a branch's values kept apart from its
// sibling's, which may use the same names.
void PrefixNames(onnx::GraphProto* g, const std::set<std::string>& names,
                 const std::string& prefix) {
  auto rename = [&](std::string* v) {
    if (!v->empty() && names.count(*v)) *v = prefix + *v;
  };
  for (onnx::TensorProto& t : *g->mutable_initializer()) rename(t.mutable_name());
  for (onnx::ValueInfoProto& v : *g->mutable_input()) rename(v.mutable_name());
  for (onnx::ValueInfoProto& v : *g->mutable_output()) rename(v.mutable_name());
  for (onnx::ValueInfoProto& v : *g->mutable_value_info()) rename(v.mutable_name());
  for (onnx::NodeProto& n : *g->mutable_node()) {
    for (std::string& v : *n.mutable_input()) rename(&v);
    for (std::string& v : *n.mutable_output()) rename(&v);
    if (!n.name().empty()) n.set_name(prefix + n.name());
    for (onnx::AttributeProto& a : *n.mutable_attribute()) {
      if (a.has_g()) PrefixNames(a.mutable_g(), names, prefix);
      for (onnx::GraphProto& sub : *a.mutable_graphs()) PrefixNames(&sub, names, prefix);
    }
  }
}

// Branch `g` of If node `n` imported in place: its initializers become
// constants and its nodes are imported (unnamed ones named under
// `prefix`). Returns the values it gives the If's outputs.
absl::StatusOr<std::vector<std::string>> ImportBranch(const Node& n, const onnx::GraphProto& g,
                                                      const std::string& prefix,
                                                      ShapeContext& ctx, Model* m) {
  if (g.output_size() != int(n.outputs.size())) {
    return ctx.Error(n, StrCat("the branch has ", g.output_size(), " outputs, the node ",
                               n.outputs.size()));
  }
  for (const onnx::TensorProto& t : g.initializer()) {
    TF_ASSIGN_OR_RETURN(
        Constant c, FromTensor(t, StrCat("If node '", n.name, "' initializer '", t.name(), "'")));
    m->shapes[t.name()] = c.shape;
    m->constants[t.name()] = std::move(c);
  }
  Branches inner;
  std::vector<Node> nodes;
  TF_RETURN_IF_ERROR(ReadGraphNodes(g, prefix, m, &inner, &nodes));
  TF_RETURN_IF_ERROR(CheckOpsSupported(nodes, m->opset));
  TF_RETURN_IF_ERROR(ImportNodes(nodes, inner, ctx, m));
  std::vector<std::string> outs;
  for (int k = 0; k < g.output_size(); ++k) {
    const std::string& from = g.output(k).name();
    if (!m->shapes.count(from))
      return ctx.Error(n, StrCat("the branch never produces its output '", from, "'"));
    outs.push_back(from);
  }
  return outs;
}

}  // namespace

// An If. With a constant condition, the taken branch is imported in place
// of the If and its outputs become the If's (a constant, or an Identity
// node). With a condition known only at run time, both branches are
// imported (their values renamed apart) and each output of the If is a
// Where on the condition between the two branches' values: both branches
// run, and the one the condition names gives the outputs, so the branches
// must give outputs of the same shapes.
absl::Status InlineIf(const Node& n, const Branches& branches, ShapeContext& ctx, Model* m) {
  const auto& [then_g, else_g] = branches.at(n.outputs[0]);
  const Constant* cond = ctx.Const(n, 0);
  if (cond != nullptr) {
    if (cond->size() != 1) return ctx.Error(n, "the condition must have one element");
    const onnx::GraphProto& g = ConstValue(*cond, 0) != 0 ? *then_g : *else_g;
    TF_ASSIGN_OR_RETURN(std::vector<std::string> outs,
                        ImportBranch(n, g, StrCat(n.name, "/"), ctx, m));
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string& from = outs[k];
      const std::string& to = n.outputs[k];
      if (to.empty() || to == from) continue;
      m->shapes[to] = m->shapes.at(from);
      if (auto c = m->constants.find(from); c != m->constants.end()) {
        m->constants[to] = c->second;
        continue;
      }
      Node copy;
      copy.op = "Identity";
      copy.name = StrCat(n.name, "/output", k);
      copy.inputs = {from};
      copy.outputs = {to};
      m->nodes.push_back(std::move(copy));
    }
    return absl::OkStatus();
  }
  if (!m->shapes.count(n.inputs[0]) || Elements(m->shapes.at(n.inputs[0])) != 1)
    return ctx.Error(n, "the condition must have one element");
  // The condition as a scalar, so the Where broadcasts it to each output's
  // own shape.
  std::string c = n.inputs[0];
  std::vector<Node> selects;
  if (!m->shapes.at(c).empty()) {
    const std::string scalar_shape = StrCat(n.name, "/condition_shape");
    Constant shape;
    shape.is_int = true;
    shape.shape = {0};
    m->shapes[scalar_shape] = shape.shape;
    m->constants[scalar_shape] = std::move(shape);
    Node reshape;
    reshape.op = "Reshape";
    reshape.name = StrCat(n.name, "/condition");
    reshape.inputs = {c, scalar_shape};
    c = StrCat(n.name, "/condition");
    reshape.outputs = {c};
    selects.push_back(std::move(reshape));
  }
  std::vector<std::string> outs[2];
  for (int b = 0; b < 2; ++b) {
    const std::string prefix = StrCat(n.name, b == 0 ? "/then/" : "/else/");
    onnx::GraphProto g = b == 0 ? *then_g : *else_g;
    std::set<std::string> names;
    DefinedNames(g, &names);
    PrefixNames(&g, names, prefix);
    absl::StatusOr<std::vector<std::string>> o = ImportBranch(n, g, prefix, ctx, m);
    if (!o.ok()) {
      return absl::Status(
          o.status().code(),
          StrCat("If node '", n.name, "': its condition is only known at run time, so both "
                 "branches are imported, and ", b == 0 ? "then_branch" : "else_branch",
                 " does not import: ", o.status().message(),
                 "; fix the inputs the condition depends on with --value NAME=V"));
    }
    outs[b] = *std::move(o);
  }
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (n.outputs[k].empty()) continue;
    const Shape& t = m->shapes.at(outs[0][k]);
    const Shape& e = m->shapes.at(outs[1][k]);
    if (t != e) {
      return ctx.Error(
          n, StrCat("its condition is only known at run time, so both branches run and their "
                    "outputs must have the same shapes, but output ", k, " is ", ShapeText(t),
                    " in then_branch and ", ShapeText(e),
                    " in else_branch; fix the inputs the condition depends on with --value "
                    "NAME=V"));
    }
    m->decided_at_run_time[n.outputs[k]] = n.name;
    Node select;
    select.op = "Where";
    select.name = StrCat(n.name, "/output", k);
    select.inputs = {c, outs[0][k], outs[1][k]};
    select.outputs = {n.outputs[k]};
    selects.push_back(std::move(select));
  }
  return ImportNodes(selects, {}, ctx, m);
}

}  // namespace tunefarm::frontend::import_internal
