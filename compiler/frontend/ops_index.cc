// Registry entries: operators that index into their data (GatherElements,
// GatherND, the Scatter family, ReverseSequence, MaxUnpool), and Compress
// and NonZero, whose indices come from a constant.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/op_registry.h"

namespace tunefarm::frontend {
namespace {

using absl::StrCat;

// The output has the indices' shape; data and indices have the same rank.
absl::Status InferGatherElements(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape idx, c.In(n, 1));
  if (x.size() != idx.size())
    return c.Error(n, StrCat("indices ", ShapeText(idx), " and data ", ShapeText(x),
                             " differ in rank"));
  TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", 0), x.size()));
  for (size_t d = 0; d < x.size(); ++d) {
    if (int64_t(d) != axis && idx[d] > x[d])
      return c.Error(n, StrCat("indices ", ShapeText(idx), " exceed data ", ShapeText(x)));
  }
  return c.Set(n, 0, idx);
}

// GatherND: indices [B..., M..., k] address data [B..., D1..Dk, R...]
// (B: the first batch_dims dimensions, shared); the output is
// [B..., M..., R...].
absl::Status InferGatherND(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape idx, c.In(n, 1));
  const int64_t b = n.Int("batch_dims", 0);
  if (idx.empty() || b < 0 || b >= int64_t(idx.size()) || b > int64_t(x.size()))
    return c.Error(n, StrCat("batch_dims ", b, " does not fit indices ", ShapeText(idx),
                             " and data ", ShapeText(x)));
  const int64_t k = idx.back();
  if (k < 1 || b + k > int64_t(x.size()))
    return c.Error(n, StrCat("index tuples of ", k, " do not fit data ", ShapeText(x)));
  for (int64_t d = 0; d < b; ++d) {
    if (idx[size_t(d)] != x[size_t(d)])
      return c.Error(n, StrCat("indices ", ShapeText(idx), " and data ", ShapeText(x),
                               " differ in their batch dimensions"));
  }
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), x.begin() + b + k, x.end());
  return c.Set(n, 0, out);
}

// Scatter, ScatterElements: the data's shape; indices and updates share
// theirs, of the data's rank.
absl::Status InferScatterElements(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape idx, c.In(n, 1));
  TF_ASSIGN_OR_RETURN(Shape upd, c.In(n, 2));
  if (idx != upd || idx.size() != x.size())
    return c.Error(n, StrCat("indices ", ShapeText(idx), ", updates ", ShapeText(upd),
                             " and data ", ShapeText(x), " do not match"));
  TF_RETURN_IF_ERROR(c.Axis(n, n.Int("axis", 0), x.size()).status());
  return c.Set(n, 0, x);
}

// ScatterND: the data's shape; updates are the indices' shape less its
// last dimension k, then the data's dimensions after the first k.
absl::Status InferScatterND(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape idx, c.In(n, 1));
  TF_ASSIGN_OR_RETURN(Shape upd, c.In(n, 2));
  if (idx.empty() || idx.back() < 1 || idx.back() > int64_t(x.size()))
    return c.Error(n, StrCat("indices ", ShapeText(idx), " do not fit data ", ShapeText(x)));
  Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), x.begin() + idx.back(), x.end());
  if (upd != want)
    return c.Error(n, StrCat("updates ", ShapeText(upd), " should be ", ShapeText(want)));
  return c.Set(n, 0, x);
}

// ReverseSequence: the input's shape; one length per batch.
absl::Status InferReverseSequence(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape lens, c.In(n, 1));
  const int64_t b = n.Int("batch_axis", 1), t = n.Int("time_axis", 0);
  if (x.size() < 2 || b < 0 || t < 0 || b >= int64_t(x.size()) || t >= int64_t(x.size()) ||
      b == t || lens != Shape{x[size_t(b)]})
    return c.Error(n, StrCat("batch_axis ", b, ", time_axis ", t, " and sequence_lens ",
                             ShapeText(lens), " do not fit input ", ShapeText(x)));
  return c.Set(n, 0, x);
}

// MaxUnpool: output_shape (a constant input) when given, else each spatial
// dimension (in - 1) * stride + kernel - the pads at its two ends.
absl::Status InferMaxUnpool(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape idx, c.In(n, 1));
  if (idx != x) return c.Error(n, StrCat("indices ", ShapeText(idx), " differ from input ", ShapeText(x)));
  if (c.Has(n, 2)) {
    const Constant* k = c.Const(n, 2);
    if (k == nullptr || ValueCount(*k) != int64_t(x.size()))
      return c.Error(n, "output_shape must be a constant of the input's rank");
    Shape out;
    for (int64_t i = 0; i < ValueCount(*k); ++i) out.push_back(int64_t(ConstValue(*k, i)));
    TF_RETURN_IF_ERROR(CheckShape(out, "MaxUnpool's output_shape"));
    return c.Set(n, 0, out);
  }
  const std::vector<int64_t> kernel = n.Ints("kernel_shape");
  const size_t r = kernel.size();
  if (r == 0 || x.size() != r + 2) return c.Error(n, "kernel_shape does not fit the input");
  std::vector<int64_t> strides = n.Ints("strides"), pads = n.Ints("pads");
  if (strides.empty()) strides.assign(r, 1);
  if (pads.empty()) pads.assign(2 * r, 0);
  if (strides.size() != r || pads.size() != 2 * r)
    return c.Error(n, "strides or pads do not fit kernel_shape");
  Shape out = {x[0], x[1]};
  for (size_t d = 0; d < r; ++d)
    out.push_back((x[d + 2] - 1) * strides[d] + kernel[d] - pads[d] - pads[d + r]);
  TF_RETURN_IF_ERROR(CheckShape(out, StrCat("MaxUnpool node '", n.name, "' output")));
  return c.Set(n, 0, out);
}

// Compress with a constant condition: a Gather of the selected indices
// along `axis` (of the flattened input without one).
absl::StatusOr<std::vector<Node>> ExpandCompress(Model* m, const Node& n) {
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(StrCat("Compress node '", n.name, "': ", what));
  };
  auto shape = m->shapes.find(n.inputs.empty() ? "" : n.inputs[0]);
  auto cond = m->constants.find(n.inputs.size() > 1 ? n.inputs[1] : "");
  if (shape == m->shapes.end() || n.outputs.empty()) return error("needs an input and an output");
  if (cond == m->constants.end())
    return absl::UnimplementedError(StrCat(
        "Compress node '", n.name,
        "': the condition decides the output's shape and must be constant once input shapes are fixed"));
  const bool flat = !n.ints.count("axis");
  Shape x = shape->second;
  int64_t axis = flat ? 0 : n.Int("axis", 0);
  if (!flat && axis < 0) axis += int64_t(x.size());
  if (axis < 0 || axis >= int64_t(std::max<size_t>(x.size(), 1))) return error("axis out of range");
  const int64_t dim = flat ? int64_t(Elements(x)) : x[size_t(axis)];
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < std::min(dim, ValueCount(cond->second)); ++i)
    if (ConstValue(cond->second, i) != 0) picked.push_back(i);
  if (picked.empty()) return error("the condition selects nothing (zero-size tensors are not supported)");
  const std::string base = StrCat(n.outputs[0], "/Compress");
  std::vector<Node> nodes;
  std::string data = n.inputs[0];
  if (flat) {
    nodes.push_back(ExpandedNode(n, "Reshape", {data, AddIntConstant(m, base + "_flat", {-1})},
                                 base + "_flat_data"));
    data = nodes.back().outputs[0];
  }
  nodes.push_back(ExpandedNode(n, "Gather", {data, AddIntConstant(m, base + "_picked", picked)},
                               n.outputs[0]));
  nodes.back().ints["axis"] = {axis};
  return nodes;
}

// NonZero of a constant: the indices of its nonzero values, one row per
// dimension (a run-time input would decide the output's shape).
absl::Status FoldNonZero(ShapeContext& c, const Node& n, bool* folded) {
  const Constant* x = c.Const(n, 0);
  if (x == nullptr)
    return c.Error(n, "the input decides the output's shape and must be constant once input shapes are fixed");
  const Shape xs = x->shape;
  if (xs.empty()) return c.Error(n, "the input is a scalar");
  std::vector<std::vector<int64_t>> rows(xs.size());
  Shape idx(xs.size(), 0);
  for (int64_t i = 0; i < ValueCount(*x); ++i) {
    if (ConstValue(*x, i) != 0) {
      for (size_t d = 0; d < xs.size(); ++d) rows[d].push_back(idx[d]);
    }
    for (int64_t d = int64_t(xs.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < xs[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  Constant out;
  out.is_int = true;
  out.shape = {int64_t(rows.size()), int64_t(rows[0].size())};
  for (const auto& r : rows) out.ints.insert(out.ints.end(), r.begin(), r.end());
  *folded = true;
  return c.SetConst(n, 0, std::move(out));
}

}  // namespace

const std::vector<OpDef>& IndexOps() {
  static const auto* ops = new std::vector<OpDef>{
      {.name = "GatherElements", .min_opset = 11, .infer = InferGatherElements},
      {.name = "GatherND", .min_opset = 11, .infer = InferGatherND},
      // Scatter is opset 9's ScatterElements (deprecated at 11).
      {.name = "Scatter", .min_opset = 9, .max_opset = 10, .infer = InferScatterElements},
      {.name = "ScatterElements", .min_opset = 11, .infer = InferScatterElements},
      {.name = "ScatterND", .min_opset = 11, .infer = InferScatterND},
      {.name = "ReverseSequence", .min_opset = 10, .infer = InferReverseSequence},
      {.name = "MaxUnpool", .min_opset = 9, .infer = InferMaxUnpool},
      {.name = "Compress", .min_opset = 9, .expand = ExpandCompress, .native = false},
      {.name = "NonZero", .min_opset = 9, .fold = FoldNonZero, .native = false},
  };
  return *ops;
}

}  // namespace tunefarm::frontend
