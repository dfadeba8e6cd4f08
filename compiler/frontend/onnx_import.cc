#include "compiler/frontend/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/model_rewrites.h"
#include "compiler/frontend/onnx_functions.h"
#include "compiler/frontend/onnx_import_internal.h"
#include "compiler/frontend/onnx_tensor.h"
#include "compiler/frontend/op_registry.h"
#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h

namespace tunefarm::frontend {

using absl::InvalidArgumentError;
using absl::StrCat;
using import_internal::Branches;
using import_internal::CheckOpsSupported;
using import_internal::ImportNodes;
using import_internal::InlineIf;
using import_internal::kIf;
using import_internal::LocalNames;
using import_internal::ReadGraphNodes;

namespace {

constexpr int64_t kMaxIrVersion = 10;


// Shape inference and folding of one node, as its registry entry says;
// *folded when import computed its outputs (the node is then dropped).
absl::Status RunNode(const OpDef& def, ShapeContext& ctx, const Node& n, bool* folded) {
  *folded = false;
  if (def.fold != nullptr) TF_RETURN_IF_ERROR(def.fold(ctx, n, folded));
  if (*folded && (def.infer == nullptr || (!n.outputs.empty() && ctx.HasShape(n.outputs[0]))))
    return absl::OkStatus();
  if (def.infer == nullptr) return ctx.Error(n, "the node cannot be folded");
  return def.infer(ctx, n);
}

}  // namespace

absl::StatusOr<std::pair<std::string, std::vector<int64_t>>> ParseShapeOverride(
    const std::string& text) {
  std::string name, dims = text;
  if (size_t eq = text.rfind('='); eq != std::string::npos) {
    name = text.substr(0, eq);
    dims = text.substr(eq + 1);
  }
  std::vector<int64_t> shape;
  for (absl::string_view d : absl::StrSplit(dims, 'x')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v) || v < 0 || v > kMaxDim) {
      return InvalidArgumentError(
          StrCat("shape '", text, "': expected NAME=D1xD2x... with dimensions of 0 or more"));
    }
    shape.push_back(v);
  }
  return std::make_pair(name, shape);
}

absl::StatusOr<std::pair<std::string, std::vector<double>>> ParseValueOverride(
    const std::string& text) {
  const size_t eq = text.find('=');
  std::vector<double> values;
  bool ok = eq != std::string::npos && eq > 0 && eq + 1 < text.size();
  if (ok) {
    for (absl::string_view v : absl::StrSplit(text.substr(eq + 1), ',')) {
      double d = 0;
      ok = ok && absl::SimpleAtod(v, &d) && std::isfinite(d);
      values.push_back(d);
    }
  }
  if (!ok) {
    return InvalidArgumentError(
        StrCat("value '", text, "': expected NAME=V or NAME=V1,V2,... with finite numbers"));
  }
  return std::make_pair(text.substr(0, eq), values);
}

namespace import_internal {

// Every node whose operator this build cannot import, named in one error:
// unknown operators (sorted), up to three node names each, then known
// operators whose registry entry does not read this opset.
absl::Status CheckOpsSupported(const std::vector<Node>& nodes, int64_t opset) {
  std::map<std::string, std::vector<std::string>> missing;    // op -> node names
  std::map<std::string, std::vector<std::string>> wrong_set;  // op -> node names
  for (const Node& n : nodes) {
    const OpDef* def = FindOp(n.op);
    if (n.op == kIf) continue;  // inlined by InlineIf
    if (def == nullptr) {
      missing[n.op].push_back(n.name);
    } else if (opset < def->min_opset || opset > def->max_opset) {
      wrong_set[n.op].push_back(n.name);
    }
  }
  if (missing.empty() && wrong_set.empty()) return absl::OkStatus();
  auto nodes_of = [](const std::vector<std::string>& names) {
    std::vector<std::string> quoted;
    for (size_t i = 0; i < names.size() && i < 3; ++i) quoted.push_back(StrCat("'", names[i], "'"));
    std::string text = StrCat(names.size() == 1 ? "node " : "nodes ", absl::StrJoin(quoted, ", "));
    if (names.size() > 3) absl::StrAppend(&text, " and ", names.size() - 3, " more");
    return text;
  };
  // Known operators at an opset their entry does not read.
  std::string versions;
  if (!wrong_set.empty()) {
    std::vector<std::string> parts;
    for (const auto& [op, names] : wrong_set) {
      const OpDef& def = *FindOp(op);
      parts.push_back(StrCat("'", op, "' (", nodes_of(names), ") is supported from opset ",
                             def.min_opset, " to ", def.max_opset));
    }
    versions = StrCat("at opset ", opset, ": ", absl::StrJoin(parts, ", "));
  }
  if (missing.empty())
    return InvalidArgumentError(StrCat("unsupported operator version ", versions));
  // Operators refused for a reason of their own. When they are all that is
  // missing, the error names each of their nodes with the reason; otherwise
  // the reasons follow the list.
  struct Refusal {
    std::vector<std::string> ops;
    const char* reason;
  };
  static const auto* kRefusals = new std::vector<Refusal>{
      {{"Loop", "Scan"},
       "control flow (Loop, Scan) is not supported; export the model with static control "
       "flow (e.g. torch.onnx.export of a traced model)"},
  };
  auto reason_of = [](const std::string& op) -> const Refusal* {
    for (const Refusal& r : *kRefusals) {
      if (std::find(r.ops.begin(), r.ops.end(), op) != r.ops.end()) return &r;
    }
    return nullptr;
  };
  std::vector<const Refusal*> reasons;  // of the missing operators, in table order
  bool all_refused = wrong_set.empty();
  for (const Refusal& r : *kRefusals) {
    for (const std::string& op : r.ops) {
      if (missing.count(op)) {
        reasons.push_back(&r);
        break;
      }
    }
  }
  for (const auto& [op, names] : missing) all_refused = all_refused && reason_of(op) != nullptr;
  if (all_refused) {
    std::vector<std::string> parts;
    for (const auto& [op, names] : missing)
      parts.push_back(StrCat(op, " ", nodes_of(names), ": ", reason_of(op)->reason));
    return InvalidArgumentError(absl::StrJoin(parts, "; "));
  }
  std::string msg;
  if (missing.size() == 1) {
    const auto& [op, names] = *missing.begin();
    msg = StrCat("unsupported operator '", op, "' (", nodes_of(names), ", opset ", opset, ")");
  } else {
    std::vector<std::string> parts;
    for (const auto& [op, names] : missing)
      parts.push_back(StrCat("'", op, "' (", nodes_of(names), ")"));
    msg = StrCat(missing.size(), " unsupported operators (opset ", opset,
                 "): ", absl::StrJoin(parts, ", "));
  }
  for (const Refusal* r : reasons) absl::StrAppend(&msg, "; ", r->reason);
  if (!versions.empty()) absl::StrAppend(&msg, "; operator versions ", versions);
  return InvalidArgumentError(StrCat(msg, "; supported: ", absl::StrJoin(SupportedOps(), ", ")));
}

}  // namespace import_internal

namespace {

// The model's IR version, producer and default-domain opset, checked.
absl::Status ReadHeader(const onnx::ModelProto& proto, Model* m) {
  m->ir_version = proto.ir_version();
  m->producer = proto.producer_name();
  if (m->ir_version < 3 || m->ir_version > kMaxIrVersion) {
    return InvalidArgumentError(
        StrCat("ONNX IR version ", m->ir_version, " is not supported (3 to ", kMaxIrVersion, ")"));
  }
  for (const onnx::OperatorSetIdProto& o : proto.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") m->opset = o.version();
  }
  if (m->opset < kMinOpset || m->opset > kMaxOpset) {
    return InvalidArgumentError(
        StrCat("opset ", m->opset, " is not supported (", kMinOpset, " to ", kMaxOpset, ")"));
  }
  return absl::OkStatus();
}

// Input `in` fixed to `values`: a constant of the shape --shape gives, else
// the model's (a dynamic dimension takes what the values leave), else one
// dimension; integer unless the input's element type is floating point.
absl::Status FixInput(const onnx::ValueInfoProto& in, const std::vector<double>& values,
                      const ImportOptions& options, Model* m) {
  const std::string what = StrCat("--value for input '", in.name(), "'");
  Constant c;
  if (auto o = options.input_shapes.find(in.name()); o != options.input_shapes.end()) {
    c.shape = o->second;
  } else if (in.type().tensor_type().has_shape()) {
    int64_t known = 1, dynamic = -1;
    const auto& dims = in.type().tensor_type().shape().dim();
    for (int i = 0; i < dims.size(); ++i) {
      const bool fixed = dims[i].has_dim_value() && dims[i].dim_value() > 0;
      if (!fixed && dynamic >= 0) {
        return InvalidArgumentError(
            StrCat(what, ": the input has several dynamic dimensions; give its shape with --shape ",
                   in.name(), "=D1xD2x..."));
      }
      if (!fixed) dynamic = i;
      c.shape.push_back(fixed ? dims[i].dim_value() : 0);
      if (fixed) known *= dims[i].dim_value();
    }
    if (dynamic >= 0) c.shape[size_t(dynamic)] = known > 0 ? int64_t(values.size()) / known : 0;
  } else {
    c.shape = {int64_t(values.size())};
  }
  TF_RETURN_IF_ERROR(CheckShape(c.shape, what));
  if (c.size() != int64_t(values.size())) {
    return InvalidArgumentError(StrCat(what, ": ", values.size(), " values for shape ",
                                       ShapeText(c.shape), " (", c.size(), " needed)"));
  }
  c.is_int = !IsFloatElementType(in.type().tensor_type().elem_type());
  for (double v : values) {
    if (c.is_int && v != std::floor(v)) {
      return InvalidArgumentError(StrCat(what, ": ", v, " is not an integer, and the input is"));
    }
    if (c.is_int && std::fabs(v) >= 9.2e18)
      return InvalidArgumentError(StrCat(what, ": ", v, " is out of the integer range"));
    PushValue(&c, v);
  }
  m->shapes[in.name()] = c.shape;
  m->constants[in.name()] = std::move(c);
  return absl::OkStatus();
}

// Initializers as constants; inputs with their shapes (from the model, or
// from `options`, which may only name inputs).
absl::Status ReadInputs(const onnx::GraphProto& g, const ImportOptions& options, Model* mp) {
  Model& m = *mp;
  for (const onnx::TensorProto& t : g.initializer()) {
    TF_ASSIGN_OR_RETURN(Constant c, FromTensor(t, StrCat("initializer '", t.name(), "'")));
    m.shapes[t.name()] = c.shape;
    m.constants[t.name()] = std::move(c);
  }
  // A --shape for something that is not an input is a typo: say so first.
  std::vector<std::string> input_names;
  for (const onnx::ValueInfoProto& in : g.input()) {
    if (!m.constants.count(in.name())) input_names.push_back(in.name());
  }
  auto not_an_input = [&](const char* flag, const std::string& name) {
    return InvalidArgumentError(StrCat(
        flag, " names '", name,
        "', which is not an input of the model (inputs: ", absl::StrJoin(input_names, ", "), ")"));
  };
  auto is_input = [&](const std::string& name) {
    return std::find(input_names.begin(), input_names.end(), name) != input_names.end();
  };
  for (const auto& [name, shape] : options.input_shapes) {
    if (!name.empty() && !is_input(name)) return not_an_input("--shape", name);
  }
  for (const auto& [name, values] : options.input_values) {
    if (!is_input(name)) return not_an_input("--value", name);
  }
  for (const onnx::ValueInfoProto& in : g.input()) {
    if (m.constants.count(in.name())) continue;  // an initializer listed as input
    if (in.has_type() && !in.type().has_tensor_type()) {
      return InvalidArgumentError(StrCat("input '", in.name(),
                                         "' is not a tensor (sequences, maps and optionals are not "
                                         "supported)"));
    }
    if (auto v = options.input_values.find(in.name()); v != options.input_values.end()) {
      TF_RETURN_IF_ERROR(FixInput(in, v->second, options, &m));
      continue;
    }
    m.inputs.push_back(in.name());
    auto o = options.input_shapes.find(in.name());
    if (o == options.input_shapes.end() && options.input_shapes.count("")) {
      o = options.input_shapes.find("");
    }
    if (o != options.input_shapes.end()) {
      TF_RETURN_IF_ERROR(CheckShape(o->second, StrCat("input '", in.name(), "'")));
      m.shapes[in.name()] = o->second;
      continue;
    }
    if (!in.type().has_tensor_type() || !in.type().tensor_type().has_shape()) {
      return InvalidArgumentError(StrCat("input '", in.name(),
                                         "' has no shape; give one with "
                                         "--shape ",
                                         in.name(), "=D1xD2x..."));
    }
    Shape s;
    std::vector<std::string> dynamic;
    const auto& dims = in.type().tensor_type().shape().dim();
    for (int i = 0; i < dims.size(); ++i) {
      if (dims[i].has_dim_value() && dims[i].dim_value() > 0) {
        s.push_back(dims[i].dim_value());
      } else {
        dynamic.push_back(
            StrCat(i, dims[i].has_dim_param() ? " ('" + dims[i].dim_param() + "')" : ""));
        s.push_back(-1);
      }
    }
    if (!dynamic.empty()) {
      return InvalidArgumentError(StrCat(
          "input '", in.name(), "' has dynamic dimension", dynamic.size() > 1 ? "s " : " ",
          absl::StrJoin(dynamic, ", "), "; give its shape with --shape ", in.name(), "=D1xD2x..."));
    }
    TF_RETURN_IF_ERROR(CheckShape(s, StrCat("input '", in.name(), "'")));
    m.shapes[in.name()] = s;
  }

  for (const onnx::ValueInfoProto& out : g.output()) m.outputs.push_back(out.name());
  return absl::OkStatus();
}

// Node `i` of the graph with its attributes; a `value` tensor attribute is
// read by the op's registry entry (into the node or the model's constants).
absl::StatusOr<Node> ReadNode(const onnx::NodeProto& np, int i, Model* m) {
  Node n;
  n.op = np.op_type();
  n.name = np.name().empty() ? StrCat(n.op, "#", i) : np.name();
  if (!np.domain().empty() && np.domain() != "ai.onnx") {
    return InvalidArgumentError(StrCat("node '", n.name, "' is operator '", n.op, "' of domain '",
                                       np.domain(), "', which is not supported"));
  }
  n.inputs.assign(np.input().begin(), np.input().end());
  n.outputs.assign(np.output().begin(), np.output().end());
  const OpDef* def = FindOp(n.op);
  Constant value;  // the `value` tensor attribute, for def->read_value
  bool has_value = false;
  for (const onnx::AttributeProto& a : np.attribute()) {
    switch (a.type()) {
      case onnx::AttributeProto::INT:
        n.ints[a.name()] = {a.i()};
        break;
      case onnx::AttributeProto::INTS:
        n.ints[a.name()].assign(a.ints().begin(), a.ints().end());
        break;
      case onnx::AttributeProto::FLOAT:
        n.floats[a.name()] = {a.f()};
        break;
      case onnx::AttributeProto::FLOATS:
        n.floats[a.name()].assign(a.floats().begin(), a.floats().end());
        break;
      case onnx::AttributeProto::STRING:
        n.strings[a.name()] = a.s();
        break;
      case onnx::AttributeProto::STRINGS:
        // Names (a recurrent layer's activations), comma-separated.
        n.strings[a.name()] = absl::StrJoin(a.strings(), ",");
        break;
      case onnx::AttributeProto::TENSOR:
        if (def != nullptr && def->read_value != nullptr && a.name() == "value") {
          TF_ASSIGN_OR_RETURN(value, FromTensor(a.t(), StrCat(n.op, " node '", n.name, "'")));
          has_value = true;
        }
        break;
      case onnx::AttributeProto::GRAPH:
      case onnx::AttributeProto::GRAPHS:
        break;  // If branches: ReadGraphNodes; Loop and Scan bodies are refused
      default:
        break;
    }
  }
  if (def != nullptr && def->read_value != nullptr) {
    TF_RETURN_IF_ERROR(def->read_value(has_value ? &value : nullptr, &n, m));
  }
  return n;
}

// The nodes in an order where every value is produced before it is used;
// an error names a value produced twice, one nothing produces, or a cycle.
absl::StatusOr<std::vector<int>> TopologicalOrder(const std::vector<Node>& nodes, const Model& m) {
  // Kahn's algorithm over value producers.
  std::map<std::string, int> producer;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const std::string& o : nodes[i].outputs) {
      if (o.empty()) continue;
      if (producer.count(o) || m.shapes.count(o)) {
        return InvalidArgumentError(
            StrCat("value '", o, "' is produced twice (node '", nodes[i].name, "')"));
      }
      producer[o] = int(i);
    }
  }
  std::vector<int> pending(nodes.size(), 0);
  std::vector<std::vector<int>> users(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const std::string& in : nodes[i].inputs) {
      if (in.empty() || m.shapes.count(in)) continue;
      auto p = producer.find(in);
      if (p == producer.end()) {
        return InvalidArgumentError(StrCat("node '", nodes[i].name, "' uses '", in,
                                           "', which no node, input or initializer produces"));
      }
      ++pending[i];
      users[size_t(p->second)].push_back(int(i));
    }
  }
  std::vector<int> order, ready;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (pending[i] == 0) ready.push_back(int(i));
  }
  while (!ready.empty()) {
    int i = ready.front();
    ready.erase(ready.begin());
    order.push_back(i);
    for (int u : users[size_t(i)]) {
      if (--pending[size_t(u)] == 0) ready.push_back(u);
    }
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (pending[i] > 0) {
        return InvalidArgumentError(
            StrCat("the graph has a cycle through node '", nodes[i].name, "'"));
      }
    }
  }
  return order;
}

// Adds to *out the values a graph uses from outside it: inputs of its nodes
// (and of their subgraphs) that the graph does not define.
void OuterNames(const onnx::GraphProto& g, std::set<std::string>* out) {
  std::set<std::string> defined, used;
  LocalNames(g, &defined);
  for (const onnx::NodeProto& n : g.node()) {
    used.insert(n.input().begin(), n.input().end());
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.has_g()) OuterNames(a.g(), &used);
      for (const onnx::GraphProto& sub : a.graphs()) OuterNames(sub, &used);
    }
  }
  for (const std::string& u : used) {
    if (!u.empty() && !defined.count(u)) out->insert(u);
  }
}

}  // namespace

namespace import_internal {

// The nodes of graph `g` (the model's, or an If branch, whose unnamed nodes
// get `prefix`), with each If's branches recorded in *branches. An If lists
// the outer values its branches use after its condition, so that the
// topological order computes them first.
absl::Status ReadGraphNodes(const onnx::GraphProto& g, const std::string& prefix, Model* m,
                            Branches* branches, std::vector<Node>* nodes) {
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& np = g.node(i);
    TF_ASSIGN_OR_RETURN(Node n, ReadNode(np, i, m));
    if (np.name().empty()) n.name = StrCat(prefix, n.name);
    if (n.op == kIf) {
      const onnx::GraphProto *then_g = nullptr, *else_g = nullptr;
      for (const onnx::AttributeProto& a : np.attribute()) {
        if (a.name() == "then_branch" && a.has_g()) then_g = &a.g();
        if (a.name() == "else_branch" && a.has_g()) else_g = &a.g();
      }
      if (then_g == nullptr || else_g == nullptr || n.inputs.size() != 1 || n.outputs.empty())
        return InvalidArgumentError(StrCat("If node '", n.name,
                                           "' needs one condition, an output, and then_branch "
                                           "and else_branch graphs"));
      std::set<std::string> outer;
      OuterNames(*then_g, &outer);
      OuterNames(*else_g, &outer);
      n.inputs.insert(n.inputs.end(), outer.begin(), outer.end());
      (*branches)[n.outputs[0]] = {then_g, else_g};
    }
    nodes->push_back(std::move(n));
  }
  return absl::OkStatus();
}

// Shape inference and constant folding of `nodes` in topological order: the
// nodes that remain go to the model; each If goes to InlineIf.
absl::Status ImportNodes(std::vector<Node>& nodes, const Branches& branches, ShapeContext& ctx,
                         Model* mp) {
  Model& m = *mp;
  TF_ASSIGN_OR_RETURN(std::vector<int> order, TopologicalOrder(nodes, m));
  std::function<absl::Status(Node&)> import = [&](Node& n) -> absl::Status {
    const OpDef* def = FindOp(n.op);  // CheckOpsSupported found every op of the file
    if (def == nullptr) return ctx.Error(n, StrCat("expands into unknown operator ", n.op));
    if (def->expand != nullptr) {
      TF_ASSIGN_OR_RETURN(std::vector<Node> parts, def->expand(&m, n));
      // A node already in the form its entry reads comes back alone.
      const bool as_is = parts.size() == 1 && parts[0].op == n.op && parts[0].outputs == n.outputs;
      if (!as_is) {
        for (Node& part : parts) TF_RETURN_IF_ERROR(import(part));
        return absl::OkStatus();
      }
      n = std::move(parts[0]);
    }
    bool folded = false;
    if (def->normalize != nullptr) TF_RETURN_IF_ERROR(def->normalize(&m, &n));
    // The runtime If this node's inputs come from, if any.
    std::string runtime_if;
    for (const std::string& in : n.inputs) {
      if (auto r = m.decided_at_run_time.find(in); r != m.decided_at_run_time.end()) {
        runtime_if = r->second;
        break;
      }
    }
    if (absl::Status s = RunNode(*def, ctx, n, &folded); !s.ok()) {
      if (runtime_if.empty() || !absl::StrContains(s.message(), "must be constant")) return s;
      return absl::Status(
          s.code(), StrCat(s.message(), "; it is computed from If node '", runtime_if,
                           "', whose condition is only known at run time: fix the inputs the "
                           "condition depends on with --value NAME=V"));
    }
    if (!folded && !runtime_if.empty()) {
      for (const std::string& o : n.outputs) {
        if (!o.empty()) m.decided_at_run_time[o] = runtime_if;
      }
    }
    if (folded) {
      // A folded reshape-like op keeps its values under the inferred shape.
      for (const std::string& o : n.outputs) {
        auto c = m.constants.find(o);
        if (c != m.constants.end() && m.shapes.count(o)) c->second.shape = m.shapes[o];
      }
      return absl::OkStatus();
    }
    m.nodes.push_back(std::move(n));
    return absl::OkStatus();
  };
  for (int i : order) {
    Node& n = nodes[size_t(i)];
    if (n.op == kIf) {
      TF_RETURN_IF_ERROR(InlineIf(n, branches, ctx, &m));
      continue;
    }
    TF_RETURN_IF_ERROR(import(n));
  }
  return absl::OkStatus();
}

}  // namespace import_internal

namespace {

// The model's nodes imported, its outputs checked, and every value's consumers.
absl::Status InferShapes(std::vector<Node>& nodes, const Branches& branches, Model* mp) {
  Model& m = *mp;
  ShapeContext ctx(&m);
  TF_RETURN_IF_ERROR(ImportNodes(nodes, branches, ctx, &m));
  for (const std::string& o : m.outputs) {
    if (!m.shapes.count(o))
      return InvalidArgumentError(StrCat("output '", o, "' is never produced"));
  }
  RewriteLoneBatchNorms(&m);
  FoldPadsIntoConvs(&m);
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    for (const std::string& in : m.nodes[i].inputs) {
      if (!in.empty()) m.consumers[in].push_back(int(i));
    }
  }
  return absl::OkStatus();
}

// A BitShift's width (where a left shift wraps) is its input's unsigned
// type, which the model's constants (values only) lose: recorded as the
// node's element_type attribute when an initializer, a graph input or a
// value_info names it.
void RecordBitShiftTypes(onnx::GraphProto* g) {
  std::map<std::string, int> types;
  for (const onnx::TensorProto& t : g->initializer()) types[t.name()] = t.data_type();
  for (const auto* list : {&g->input(), &g->value_info()}) {
    for (const onnx::ValueInfoProto& v : *list) {
      if (v.type().has_tensor_type()) types[v.name()] = v.type().tensor_type().elem_type();
    }
  }
  for (onnx::NodeProto& n : *g->mutable_node()) {
    if (n.op_type() != "BitShift") continue;
    for (const std::string& in : n.input()) {
      auto it = types.find(in);
      if (it == types.end()) continue;
      onnx::AttributeProto* a = n.add_attribute();
      a->set_name("element_type");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(it->second);
      break;
    }
  }
}

// The runtime holds every value as floats: an integer input is exact
// there, and so is Mod of it (fmod is exact), but a Div of it is not the
// truncating integer division ONNX means: each Div that reads an integer
// graph input gets a Cast to that type (truncating) after it.
void TruncateIntegerDivisions(onnx::GraphProto* g) {
  std::set<std::string> bound;
  for (const onnx::TensorProto& t : g->initializer()) bound.insert(t.name());
  std::map<std::string, int> int_inputs;
  for (const onnx::ValueInfoProto& in : g->input()) {
    const int type = in.type().tensor_type().elem_type();
    if (in.type().has_tensor_type() && !IsFloatElementType(type) && !bound.count(in.name()))
      int_inputs[in.name()] = type;
  }
  std::vector<onnx::NodeProto> casts;
  for (onnx::NodeProto& n : *g->mutable_node()) {
    if (n.op_type() != "Div" || n.output_size() != 1) continue;
    int type = 0;
    for (const std::string& in : n.input()) {
      if (auto it = int_inputs.find(in); it != int_inputs.end()) type = it->second;
    }
    if (type == 0) continue;
    const std::string out = n.output(0);
    n.set_output(0, StrCat(out, "/quotient"));
    onnx::NodeProto cast;
    cast.set_op_type("Cast");
    cast.set_name(StrCat(n.name().empty() ? out : n.name(), "/truncate"));
    cast.add_input(n.output(0));
    cast.add_output(out);
    onnx::AttributeProto* to = cast.add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(type);
    casts.push_back(std::move(cast));
  }
  for (onnx::NodeProto& c : casts) *g->add_node() = std::move(c);
}

// A QuantizeLinear's output type is its zero point's (uint8 without one),
// a fact of the protobuf that the model's constants (values only) lose:
// recorded as the node's output_dtype attribute, as opset 21 writes it.
// QLinearConv and QLinearMatMul (output zero point: input 7) get it too,
// for the QuantizeLinear they expand into.
void RecordQuantizeOutputTypes(onnx::GraphProto* g) {
  std::map<std::string, int> types;
  for (const onnx::TensorProto& t : g->initializer()) types[t.name()] = t.data_type();
  for (const onnx::ValueInfoProto& v : g->input()) {
    if (v.type().has_tensor_type()) types[v.name()] = v.type().tensor_type().elem_type();
  }
  for (const onnx::NodeProto& n : g->node()) {
    if (n.op_type() != "Constant" || n.output_size() != 1) continue;
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.name() == "value" && a.has_t()) types[n.output(0)] = a.t().data_type();
    }
  }
  for (onnx::NodeProto& n : *g->mutable_node()) {
    const int zp = n.op_type() == "QuantizeLinear" ? 2
                   : n.op_type() == "QLinearConv" || n.op_type() == "QLinearMatMul" ? 7
                                                                                     : -1;
    if (zp < 0 || n.input_size() <= zp || n.input(zp).empty()) continue;
    bool has = false;
    for (const onnx::AttributeProto& a : n.attribute()) has |= a.name() == "output_dtype";
    auto it = types.find(n.input(zp));
    if (has || it == types.end()) continue;
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name("output_dtype");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(it->second);
  }
}

}  // namespace

absl::StatusOr<Model> ImportOnnx(const std::string& bytes, const ImportOptions& options) {
  onnx::ModelProto proto;
  if (bytes.empty() || !proto.ParseFromString(bytes)) {
    return InvalidArgumentError("not an ONNX model (the protobuf does not parse)");
  }
  if (!proto.has_graph()) return InvalidArgumentError("not an ONNX model (no graph)");
  Model m;
  TF_RETURN_IF_ERROR(ReadHeader(proto, &m));
  TF_RETURN_IF_ERROR(ExpandFunctionOps(&proto, m.opset));
  RecordQuantizeOutputTypes(proto.mutable_graph());
  TruncateIntegerDivisions(proto.mutable_graph());
  RecordBitShiftTypes(proto.mutable_graph());
  const onnx::GraphProto& g = proto.graph();
  TF_RETURN_IF_ERROR(ReadInputs(g, options, &m));
  std::vector<Node> nodes;
  Branches branches;
  TF_RETURN_IF_ERROR(ReadGraphNodes(g, "", &m, &branches, &nodes));
  TF_RETURN_IF_ERROR(CheckOpsSupported(nodes, m.opset));
  TF_RETURN_IF_ERROR(InferShapes(nodes, branches, &m));
  return m;
}

absl::StatusOr<Model> ImportOnnxFile(const std::string& path, const ImportOptions& options) {
  TF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  absl::StatusOr<Model> m = ImportOnnx(bytes, options);
  if (!m.ok()) return absl::Status(m.status().code(), StrCat(path, ": ", m.status().message()));
  return m;
}

}  // namespace tunefarm::frontend
