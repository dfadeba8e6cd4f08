// Registry entries: reductions (ReduceSum and its kin, ArgMax/ArgMin,
// TopK). A reduction over one run of neighbouring axes becomes a kernel of
// its own; axes apart are expanded into one reduction per run.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/op_registry.h"
#include "proto/onnx_forms.h"

namespace tunefarm::frontend {
namespace {

using absl::StrCat;

// ArgMax, ArgMin: `axis` (default 0) reduced, kept as 1 when keepdims.
absl::Status InferArgReduce(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", 0), x.size()));
  if (!graph::ArgHasSelectLastIndex(c.opset()) && n.ints.count("select_last_index"))
    return c.Error(n, "select_last_index needs opset 12");
  Shape out = x;
  if (n.Int("keepdims", 1) != 0) {
    out[size_t(axis)] = 1;
  } else {
    out.erase(out.begin() + axis);
  }
  return c.Set(n, 0, out);
}

// Hardmax (the opset 13 form): 1 at the first largest value along `axis`,
// 0 elsewhere, as OneHot(ArgMax(x, axis), its length, [0, 1], axis).
absl::StatusOr<std::vector<Node>> ExpandHardmax(Model* m, const Node& n) {
  auto it = m->shapes.find(n.inputs.empty() ? "" : n.inputs[0]);
  if (it == m->shapes.end() || n.outputs.empty())
    return absl::InvalidArgumentError(StrCat("Hardmax node '", n.name, "' needs an input"));
  const Shape& x = it->second;
  int64_t axis = n.Int("axis", -1);
  if (axis < 0) axis += int64_t(x.size());
  if (axis < 0 || axis >= int64_t(x.size()))
    return absl::InvalidArgumentError(StrCat("Hardmax node '", n.name, "': axis out of range"));
  const std::string base = StrCat(n.outputs[0], "/hardmax");
  Node arg = ExpandedNode(n, "ArgMax", {n.inputs[0]}, base + "_index");
  arg.ints["axis"] = {axis};
  arg.ints["keepdims"] = {0};
  Constant off_on;
  off_on.shape = {2};
  off_on.floats = {0, 1};
  Node hot = ExpandedNode(n, "OneHot",
                          {arg.outputs[0], AddIntConstant(m, base + "_depth", {x[size_t(axis)]}),
                           AddConstant(m, base + "_values", std::move(off_on))},
                          n.outputs[0]);
  hot.ints["axis"] = {axis};
  return std::vector<Node>{arg, hot};
}

// OneHot: indices [...] -> the same with a dimension of `depth` inserted at
// `axis` of the output (default last); depth and values [off, on] are
// constants.
absl::Status InferOneHot(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  const Constant* depth = c.Const(n, 1);
  const Constant* values = c.Const(n, 2);
  if (depth == nullptr || depth->size() != 1) return c.Error(n, "depth must be constant: a scalar");
  if (values == nullptr || values->size() != 2)
    return c.Error(n, "values must be constant: a pair [off, on]");
  const int64_t d = int64_t(ConstValue(*depth, 0));
  if (d < 1) return c.Error(n, StrCat("depth ", d, " is below 1"));
  TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", -1), x.size() + 1));
  x.insert(x.begin() + axis, d);
  return c.Set(n, 0, x);
}

// Values and indices of the k largest (or smallest) along `axis`; k is an
// attribute before opset 10, a one-element constant input from 10.
absl::Status InferTopK(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", -1), x.size()));
  int64_t k = n.Int("k", -1);
  if (graph::TopKIsAnInput(c.opset())) {
    TF_ASSIGN_OR_RETURN(std::vector<int64_t> kv, c.ConstInts(n, 1));
    if (kv.size() != 1) return c.Error(n, "k must have one element");
    k = kv[0];
  } else if (!n.ints.count("k")) {
    return c.Error(n, "no k attribute");
  }
  if (!graph::TopKHasOrder(c.opset()) && (n.ints.count("largest") || n.ints.count("sorted")))
    return c.Error(n, "largest and sorted need opset 11");
  if (k < 0 || k > x[size_t(axis)])
    return c.Error(n, StrCat("k = ", k, " for a dimension of ", x[size_t(axis)]));
  Shape out = x;
  out[size_t(axis)] = k;
  TF_RETURN_IF_ERROR(c.Set(n, 0, out));
  return c.Set(n, 1, out);
}

// axes: the attribute, or input 1 when given; keepdims (default 1).
absl::Status InferReduce(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  std::vector<int64_t> axes = n.Ints("axes");
  if (c.Has(n, 1)) {
    TF_ASSIGN_OR_RETURN(axes, c.ConstInts(n, 1));
  }
  const bool keep = n.Int("keepdims", 1) != 0;
  if (axes.empty() && n.Int("noop_with_empty_axes", 0) != 0) return c.Set(n, 0, x);
  std::vector<bool> reduce(x.size(), axes.empty());
  for (int64_t a : axes) {
    TF_ASSIGN_OR_RETURN(int64_t ax, c.Axis(n, a, x.size()));
    reduce[size_t(ax)] = true;
  }
  Shape out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!reduce[i]) {
      out.push_back(x[i]);
    } else if (keep) {
      out.push_back(1);
    }
  }
  return c.Set(n, 0, out);
}

// The reduced axes of node `n` (a Reduce*) over an input of shape `x`;
// nullopt when its axes are not known constants or are out of range, or it
// is a copy (noop_with_empty_axes and no axes).
std::optional<std::vector<bool>> ReducedAxes(const Model& m, const Node& n, const Shape& x) {
  std::vector<int64_t> axes = n.Ints("axes");
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    auto c = m.constants.find(n.inputs[1]);
    if (c == m.constants.end() || !c->second.is_int) return std::nullopt;
    axes = c->second.ints;
  }
  if (axes.empty() && n.Int("noop_with_empty_axes", 0) != 0) return std::nullopt;
  std::vector<bool> reduced(x.size(), axes.empty());
  for (int64_t ax : axes) {
    if (ax < 0) ax += int64_t(x.size());
    if (ax < 0 || ax >= int64_t(x.size())) return std::nullopt;
    reduced[size_t(ax)] = true;
  }
  return reduced;
}

// A reduction over axes apart, as one reduction per run of neighbouring
// axes (each a kernel, ReduceAlone): every run but the last reduced with
// keepdims, then the node's own axes and keepdims over what is left. The
// first pass computes the op; the ones after combine partial results, so
// the op changes where partials combine differently (L1 and SumSquare:
// partial sums added; LogSum: sums, then the log of their sum). A node over
// one run comes back as it is.
absl::StatusOr<std::vector<Node>> ExpandReduce(Model* m, const Node& n) {
  auto s = m->shapes.find(n.inputs.empty() ? "" : n.inputs[0]);
  if (s == m->shapes.end() || n.outputs.size() != 1) return std::vector<Node>{n};
  const Shape& x = s->second;
  std::optional<std::vector<bool>> reduced = ReducedAxes(*m, n, x);
  if (!reduced) return std::vector<Node>{n};
  const std::vector<std::vector<int64_t>> runs = ReducedRuns(x, *reduced);
  if (runs.size() < 2) return std::vector<Node>{n};
  // The op of the first pass and of the passes that combine its partials.
  std::string first = n.op, rest = n.op;
  if (n.op == "ReduceL1" || n.op == "ReduceSumSquare") rest = "ReduceSum";
  if (n.op == "ReduceLogSum") first = "ReduceSum";
  auto make = [&](const std::string& op, const std::vector<int64_t>& axes, int64_t keep,
                  const std::string& in, const std::string& out, int k) {
    Node r;
    r.op = op;
    r.name = StrCat(n.name, "/run", k);
    r.inputs = {in};
    r.outputs = {out};
    r.ints["keepdims"] = {keep};
    if (graph::ReduceAxesAreAnInput(op, m->opset)) {
      r.inputs.push_back(AddIntConstant(m, StrCat(out, "/axes"), axes));
    } else {
      r.ints["axes"] = axes;
    }
    return r;
  };
  std::vector<Node> parts;
  std::string value = n.inputs[0];
  for (size_t k = 0; k + 1 < runs.size(); ++k) {
    const std::string out = StrCat(n.outputs[0], "/run", k);
    parts.push_back(make(k == 0 ? first : rest, runs[k], 1, value, out, int(k)));
    value = out;
  }
  std::vector<int64_t> all;
  for (size_t d = 0; d < x.size(); ++d)
    if ((*reduced)[d]) all.push_back(int64_t(d));
  parts.push_back(make(rest, all, n.Int("keepdims", 1), value, n.outputs[0], int(runs.size() - 1)));
  return parts;
}

// A reduction over one run of neighbouring axes (axes of extent 1 do not
// count) as a kernel of its own: the input as [A, N, B] around the run,
// whatever keepdims. Axes apart are expanded into one reduction per run
// first (ExpandReduce); a copy (nothing of extent > 1 reduced) stays native.
template <v1::ReduceOp kOp>
bool ReduceAlone(const Model& m, const Node& n, v1::Workload* w) {
  auto s = m.shapes.find(n.inputs[0]);
  if (s == m.shapes.end() || s->second.empty() || n.outputs.size() != 1) return false;
  const Shape& x = s->second;
  std::optional<std::vector<bool>> reduced = ReducedAxes(m, n, x);
  if (!reduced) return false;
  std::optional<Shape> form = ReduceRunForm(x, *reduced);
  if (!form) return false;
  w->set_op(v1::OP_KIND_REDUCE);
  *w->add_inputs() = FloatSpec(*form);
  w->mutable_reduce()->set_op(kOp);
  return true;
}

// Det: square matrices in the last two dimensions; one value per matrix.
absl::Status InferDet(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  if (x.size() < 2 || x[x.size() - 1] != x[x.size() - 2])
    return c.Error(n, StrCat("input ", ShapeText(x), " is not a batch of square matrices"));
  return c.Set(n, 0, Shape(x.begin(), x.end() - 2));
}

}  // namespace

const std::vector<OpDef>& ReduceOps() {
  static const auto* ops = new std::vector<OpDef>{
      {.name = "Det", .min_opset = 11, .infer = InferDet},
      {.name = "TopK", .infer = InferTopK},
      // (Earlier opsets' Hardmax flattens the input to 2-D first.)
      {.name = "Hardmax", .min_opset = 13, .expand = ExpandHardmax, .native = false},
      {.name = "OneHot", .min_opset = 9, .infer = InferOneHot},
      {.name = "ArgMax", .infer = InferArgReduce},
      {.name = "ArgMin", .infer = InferArgReduce},
      {.name = "ReduceL1",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_L1>},
      {.name = "ReduceL2",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_L2>},
      {.name = "ReduceLogSum",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_LOG_SUM>},
      {.name = "ReduceLogSumExp",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_LOG_SUM_EXP>},
      {.name = "ReduceMax",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_MAX>},
      {.name = "ReduceMean",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_MEAN>},
      {.name = "ReduceMin",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_MIN>},
      {.name = "ReduceProd",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_PROD>},
      {.name = "ReduceSum",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_SUM>},
      {.name = "ReduceSumSquare",
       .expand = ExpandReduce,
       .infer = InferReduce,
       .alone = ReduceAlone<v1::REDUCE_OP_SUM_SQUARE>},
  };
  return *ops;
}

}  // namespace tunefarm::frontend
