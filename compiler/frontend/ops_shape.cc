// Registry entries: constants, shape arithmetic and layout (reshape,
// transpose, concat, split, slice, pad, resize, gather). Shape subgraphs
// (Shape -> Gather/Slice -> Concat -> Reshape) fold at import.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/op_registry.h"
#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h
#include "proto/onnx_forms.h"

namespace tunefarm::frontend {
namespace {

using absl::StrCat;

//===--- Constant, ConstantOfShape, Shape ---------------------------------===//

// The `value` tensor, or one of the value_float / value_floats / value_int /
// value_ints forms (opset 12+).
absl::Status ReadConstantValue(const Constant* value, Node* n, Model* m) {
  if (n->outputs.empty()) return absl::OkStatus();
  if (value != nullptr) m->constants[n->outputs[0]] = *value;
  if (m->constants.count(n->outputs[0])) return absl::OkStatus();
  Constant c;
  if (n->floats.count("value_float")) {
    c.floats = n->floats["value_float"];
  } else if (n->floats.count("value_floats")) {
    c.floats = n->floats["value_floats"];
    c.shape = {int64_t(c.floats.size())};
  } else if (n->ints.count("value_int")) {
    c.is_int = true;
    c.ints = n->ints["value_int"];
  } else if (n->ints.count("value_ints")) {
    c.is_int = true;
    c.ints = n->ints["value_ints"];
    c.shape = {int64_t(c.ints.size())};
  } else {
    return absl::InvalidArgumentError(
        StrCat("Constant node '", n->name, "' has no value we read"));
  }
  m->constants[n->outputs[0]] = std::move(c);
  return absl::OkStatus();
}

// The value was read with the attributes (ReadConstantValue).
absl::Status FoldConstant(ShapeContext& c, const Node& n, bool* folded) {
  const Constant* value = c.Value(n.outputs.empty() ? "" : n.outputs[0]);
  if (value == nullptr) return c.Error(n, "a Constant without a value");
  *folded = true;
  return c.Set(n, 0, value->shape);
}

// The one value fills the output (float 0 when absent).
absl::Status ReadConstantOfShapeValue(const Constant* value, Node* n, Model*) {
  if (value == nullptr) return absl::OkStatus();
  if (value->size() != 1) {
    return absl::InvalidArgumentError(
        StrCat("ConstantOfShape node '", n->name, "': value must have one element"));
  }
  if (value->is_int) {
    n->ints["value"] = {value->ints[0]};
  } else {
    n->floats["value"] = {value->floats[0]};
  }
  return absl::OkStatus();
}

absl::Status FoldConstantOfShape(ShapeContext& c, const Node& n, bool* folded) {
  const Constant* shape = c.Const(n, 0);
  if (shape == nullptr || !shape->is_int) return c.Error(n, "the shape input must be constant");
  Constant out;
  out.shape = shape->ints;
  TF_RETURN_IF_ERROR(CheckShape(out.shape, StrCat("node '", n.name, "' output")));
  out.is_int = n.ints.count("value") > 0;
  if (out.is_int) {
    out.ints.assign(size_t(out.size()), n.ints.at("value")[0]);
  } else {
    out.floats.assign(size_t(out.size()), n.Float("value", 0.0f));
  }
  *folded = true;
  return c.SetConst(n, 0, out);
}

// The input's dimensions [start, end) as an int64 constant.
absl::Status FoldShape(ShapeContext& c, const Node& n, bool* folded) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  int64_t r = int64_t(x.size());
  int64_t start = n.Int("start", 0), end = n.Int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, start, r);
  Constant out;
  out.is_int = true;
  out.ints.assign(x.begin() + start, x.begin() + end);
  out.shape = {int64_t(out.ints.size())};
  *folded = true;
  return c.SetConst(n, 0, out);
}

// The input's element count as an int64 scalar (shapes are fixed at
// import, so Size always folds).
absl::Status FoldSize(ShapeContext& c, const Node& n, bool* folded) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  Constant out;
  out.is_int = true;
  out.ints = {int64_t(Elements(x))};
  *folded = true;
  return c.SetConst(n, 0, out);
}

absl::Status InferTrilu(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  if (x.size() < 2) return c.Error(n, StrCat("input of shape ", ShapeText(x), " is not a matrix"));
  if (c.Has(n, 1) && (c.Const(n, 1) == nullptr || c.Const(n, 1)->size() != 1))
    return c.Error(n, "k must be a constant scalar");
  return c.Set(n, 0, x);
}

// EyeLike: ones on diagonal `k` of the input's 2-D shape, known at import.
absl::Status FoldEyeLike(ShapeContext& c, const Node& n, bool* folded) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  if (x.size() != 2) return c.Error(n, StrCat("input of shape ", ShapeText(x), " is not 2-D"));
  if (Elements(x) > kMaxFoldElements) return c.Error(n, StrCat(ShapeText(x), " is too large"));
  const int64_t k = n.Int("k", 0);
  const int64_t dtype = n.Int("dtype", onnx::TensorProto::FLOAT);
  Constant out;
  out.is_int = dtype != onnx::TensorProto::FLOAT && dtype != onnx::TensorProto::DOUBLE &&
               dtype != onnx::TensorProto::FLOAT16 && dtype != onnx::TensorProto::BFLOAT16;
  out.shape = x;
  for (int64_t i = 0; i < x[0]; ++i)
    for (int64_t j = 0; j < x[1]; ++j) PushValue(&out, j - i == k ? 1 : 0);
  *folded = true;
  return c.SetConst(n, 0, out);
}

// DepthToSpace (DCR or CRD) and SpaceToDepth of [N, C, H, W] by
// `blocksize`, as ONNX defines them: a Reshape to 6-D, a Transpose, a
// Reshape back.
absl::StatusOr<std::vector<Node>> ExpandDepthSpace(Model* m, const Node& n) {
  auto it = m->shapes.find(n.inputs.empty() ? "" : n.inputs[0]);
  const int64_t b = n.Int("blocksize", 0);
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(StrCat(n.op, " node '", n.name, "': ", what));
  };
  if (it == m->shapes.end() || it->second.size() != 4 || n.outputs.empty())
    return error("needs one 4-D input and an output");
  if (b < 1) return error("blocksize must be at least 1");
  const Shape x = it->second;
  const int64_t batch = x[0], ch = x[1], h = x[2], w = x[3];
  std::vector<int64_t> six, perm, out;
  if (n.op == "DepthToSpace") {
    if (ch % (b * b) != 0) return error(StrCat(ch, " channels are not a multiple of ", b * b));
    auto mode = n.strings.find("mode");
    const bool crd = mode != n.strings.end() && mode->second == "CRD";
    six = crd ? std::vector<int64_t>{batch, ch / (b * b), b, b, h, w}
              : std::vector<int64_t>{batch, b, b, ch / (b * b), h, w};
    perm = crd ? std::vector<int64_t>{0, 1, 4, 2, 5, 3} : std::vector<int64_t>{0, 3, 4, 1, 5, 2};
    out = {batch, ch / (b * b), h * b, w * b};
  } else {
    if (h % b != 0 || w % b != 0) return error(StrCat(ShapeText(x), " is not divisible by ", b));
    six = {batch, ch, h / b, b, w / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    out = {batch, ch * b * b, h / b, w / b};
  }
  const std::string base = StrCat(n.outputs[0], "/", n.op);
  std::vector<Node> nodes;
  nodes.push_back(ExpandedNode(n, "Reshape", {n.inputs[0], AddIntConstant(m, base + "_6d", six)},
                               base + "_blocks"));
  nodes.push_back(ExpandedNode(n, "Transpose", {base + "_blocks"}, base + "_moved"));
  nodes.back().ints["perm"] = perm;
  nodes.push_back(ExpandedNode(n, "Reshape",
                               {base + "_moved", AddIntConstant(m, base + "_4d", out)},
                               n.outputs[0]));
  return nodes;
}

//===--- Reshape-like: values kept, shape inferred ------------------------===//

absl::Status FoldKeepValues(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr) return absl::OkStatus();
  *folded = true;
  c.SetValues(n, *c.Const(n, 0));
  return absl::OkStatus();
}

absl::Status InferFlatten(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  // axis in [-r, r]: a negative one counts from the back (-1: all but the
  // last dimension in the first), so it is normalized by r, not r + 1.
  int64_t axis = n.Int("axis", 1);
  if (axis < 0) axis += int64_t(x.size());
  TF_ASSIGN_OR_RETURN(axis, c.Axis(n, axis, x.size() + 1));
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < x.size(); ++i) (int64_t(i) < axis ? outer : inner) *= x[i];
  return c.Set(n, 0, {outer, inner});
}

absl::Status InferReshape(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> want, c.ConstInts(n, 1));
  const bool allowzero = n.Int("allowzero", 0) != 0;
  Shape out;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    int64_t d = want[i];
    if (d == 0 && !allowzero) {
      if (i >= x.size()) return c.Error(n, "0 in the shape copies a dimension the input lacks");
      d = x[i];
    }
    if (d == -1) {
      if (infer >= 0) return c.Error(n, "more than one -1 in the shape");
      infer = int64_t(i);
      d = 1;
    } else if (d < 0) {
      return c.Error(n, StrCat("dimension ", d, " in the shape"));
    }
    out.push_back(d);
    known *= d;
  }
  double total = Elements(x);
  if (infer >= 0) {
    if (known == 0 || std::fmod(total, double(known)) != 0) {
      return c.Error(n, StrCat("cannot reshape ", ShapeText(x), " to ", absl::StrJoin(want, "x")));
    }
    out[size_t(infer)] = int64_t(total / double(known));
  } else if (double(known) != total) {
    return c.Error(n, StrCat("cannot reshape ", ShapeText(x), " to ", ShapeText(out)));
  }
  return c.Set(n, 0, out);
}

// Axes: an attribute before opset 13, an optional input from 13.
absl::StatusOr<std::vector<int64_t>> SqueezeAxes(ShapeContext& c, const Node& n) {
  if (!graph::SqueezeAxesAreAnInput(c.opset())) return n.Ints("axes");
  if (c.Has(n, 1)) return c.ConstInts(n, 1);
  return std::vector<int64_t>();
}

absl::Status InferUnsqueeze(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> axes, SqueezeAxes(c, n));
  Shape out;
  size_t rank = x.size() + axes.size();
  std::vector<bool> ins(rank, false);
  for (int64_t a : axes) {
    TF_ASSIGN_OR_RETURN(int64_t ax, c.Axis(n, a, rank));
    ins[size_t(ax)] = true;
  }
  for (size_t i = 0, j = 0; i < rank; ++i) out.push_back(ins[i] ? 1 : x[j++]);
  return c.Set(n, 0, out);
}

absl::Status InferSqueeze(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> axes, SqueezeAxes(c, n));
  Shape out;
  std::vector<bool> drop(x.size(), axes.empty());
  for (int64_t a : axes) {
    TF_ASSIGN_OR_RETURN(int64_t ax, c.Axis(n, a, x.size()));
    if (x[size_t(ax)] != 1)
      return c.Error(n, StrCat("cannot squeeze dimension ", ax, " of ", x[size_t(ax)]));
    drop[size_t(ax)] = true;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(drop[i] && x[i] == 1)) out.push_back(x[i]);
  }
  return c.Set(n, 0, out);
}

//===--- Transpose, Concat, Split, Slice, Pad, Resize, Gather -------------===//

absl::Status InferTranspose(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  std::vector<int64_t> perm = n.Ints("perm");
  if (perm.empty()) {
    for (int64_t i = int64_t(x.size()) - 1; i >= 0; --i) perm.push_back(i);
  }
  if (perm.size() != x.size()) return c.Error(n, "perm has the wrong length");
  Shape out;
  std::vector<bool> seen(x.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(x.size()) || seen[size_t(p)])
      return c.Error(n, "perm is not a permutation");
    seen[size_t(p)] = true;
    out.push_back(x[size_t(p)]);
  }
  return c.Set(n, 0, out);
}

// 1-D constants (shape vectors) are joined at import.
absl::Status FoldConcat(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr) return absl::OkStatus();
  Constant out;
  out.is_int = c.Const(n, 0)->is_int;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Constant* in = c.Const(n, i);
    if (in == nullptr || in->shape.size() > 1) return absl::OkStatus();
    out.is_int = out.is_int && in->is_int;
    for (int64_t j = 0; j < in->size(); ++j) PushValue(&out, ConstValue(*in, j));
  }
  out.shape = {ValueCount(out)};
  *folded = true;
  return c.SetConst(n, 0, out);
}

absl::Status InferConcat(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape out, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", 0), out.size()));
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    TF_ASSIGN_OR_RETURN(Shape s, c.In(n, i));
    if (s.size() != out.size()) return c.Error(n, "inputs of different rank");
    for (size_t d = 0; d < s.size(); ++d) {
      if (int64_t(d) != axis && s[d] != out[d]) {
        return c.Error(
            n, StrCat("input ", i, " is ", ShapeText(s), ", not matching ", ShapeText(out)));
      }
    }
    out[size_t(axis)] += s[size_t(axis)];
  }
  return c.Set(n, 0, out);
}

// Sizes: an attribute before opset 13, an optional input from 13; equal
// parts (the last smaller) when absent.
// The extent of each output of Split node `n` along `axis` of its input `x`.
absl::StatusOr<std::vector<int64_t>> SplitParts(ShapeContext& c, const Node& n, const Shape& x,
                                                int64_t axis) {
  const bool sizes_input = graph::SplitSizesAreAnInput(c.opset());
  std::vector<int64_t> parts = sizes_input ? std::vector<int64_t>() : n.Ints("split");
  if (sizes_input && c.Has(n, 1)) {
    TF_ASSIGN_OR_RETURN(parts, c.ConstInts(n, 1));
  }
  const int64_t outs = int64_t(n.outputs.size());
  if (parts.empty()) {
    if (outs <= 0) return c.Error(n, "no outputs");
    int64_t each = (x[size_t(axis)] + outs - 1) / outs;
    for (int64_t i = 0, left = x[size_t(axis)]; i < outs; ++i, left -= each)
      parts.push_back(std::min(each, left));
  }
  if (int64_t(parts.size()) != outs ||
      std::accumulate(parts.begin(), parts.end(), int64_t{0}) != x[size_t(axis)]) {
    return c.Error(n, "split sizes do not add up to the dimension");
  }
  return parts;
}

absl::Status InferSplit(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", 0), x.size()));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> parts, SplitParts(c, n, x, axis));
  const int64_t outs = int64_t(n.outputs.size());
  for (int64_t i = 0; i < outs; ++i) {
    Shape s = x;
    s[size_t(axis)] = parts[size_t(i)];
    TF_RETURN_IF_ERROR(c.Set(n, size_t(i), s));
  }
  return absl::OkStatus();
}

// The distance in elements between neighbours along each dimension of a
// row-major tensor of `shape`.
Shape RowMajorStrides(const Shape& shape) {
  Shape st(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    st[size_t(d)] = st[size_t(d) + 1] * shape[size_t(d) + 1];
  return st;
}

// A constant of shape `out` whose element idx is a's row-major element
// base + sum(idx[d] * stride[d]): a strided view of `a` (slices, transposes).
Constant StridedValues(const Constant& a, const Shape& out, int64_t base, const Shape& stride) {
  Constant result;
  result.is_int = a.is_int;
  result.shape = out;
  Shape idx(out.size(), 0);
  for (int64_t k = 0, total = int64_t(Elements(out)); k < total; ++k) {
    int64_t at = base;
    for (size_t d = 0; d < out.size(); ++d) at += idx[d] * stride[d];
    PushValue(&result, ConstValue(a, at));
    for (int64_t d = int64_t(out.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < out[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  return result;
}

// A Split of a constant (tf2onnx writes pads and shapes as one constant
// split into parts and concatenated back): each output a constant.
absl::Status FoldSplit(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr) return absl::OkStatus();
  const Constant& a = *c.Const(n, 0);
  if (double(a.size()) > kMaxFoldElements) return absl::OkStatus();
  TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", 0), a.shape.size()));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> parts, SplitParts(c, n, a.shape, axis));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= a.shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < a.shape.size(); ++d) inner *= a.shape[d];
  const int64_t dim = a.shape[size_t(axis)];
  int64_t start = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    Constant out;
    out.is_int = a.is_int;
    out.shape = a.shape;
    out.shape[size_t(axis)] = parts[k];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = (o * dim + start) * inner, e = i + parts[k] * inner; i < e; ++i)
        PushValue(&out, ConstValue(a, i));
    start += parts[k];
    if (!n.outputs[k].empty()) TF_RETURN_IF_ERROR(c.SetConst(n, k, std::move(out)));
  }
  *folded = true;
  return absl::OkStatus();
}

// A slice of a constant (shape vectors, and the pads PyTorch's F.pad
// writes as reshape, reversing slice, transpose, reshape).
absl::Status FoldSlice(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr) return absl::OkStatus();
  const Constant& a = *c.Const(n, 0);
  const Shape& in = a.shape;
  if (in.empty() || double(a.size()) > kMaxFoldElements) return absl::OkStatus();
  std::vector<int64_t> starts, ends, axes, steps;
  if (!graph::SliceBoundsAreInputs(c.opset())) {
    starts = n.Ints("starts");
    ends = n.Ints("ends");
    axes = n.Ints("axes");
  } else {
    TF_ASSIGN_OR_RETURN(starts, c.ConstInts(n, 1));
    TF_ASSIGN_OR_RETURN(ends, c.ConstInts(n, 2));
    if (c.Has(n, 3)) {
      TF_ASSIGN_OR_RETURN(axes, c.ConstInts(n, 3));
    }
    if (c.Has(n, 4)) {
      TF_ASSIGN_OR_RETURN(steps, c.ConstInts(n, 4));
    }
  }
  if (starts.size() != ends.size() || (!axes.empty() && axes.size() != starts.size()) ||
      (!steps.empty() && steps.size() != starts.size()))
    return absl::OkStatus();  // InferSlice names what is wrong
  const int64_t r = int64_t(in.size());
  Shape first(in.size(), 0), step(in.size(), 1), out = in;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t ax = axes.empty() ? int64_t(i) : axes[i];
    if (ax < 0) ax += r;
    if (ax < 0 || ax >= r) return absl::OkStatus();
    const int64_t dim = in[size_t(ax)], st = steps.empty() ? 1 : steps[i];
    if (st == 0) return c.Error(n, "slice step 0");
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (st > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
    }
    const int64_t count = st > 0 ? (e - b + st - 1) / st : (b - e + (-st) - 1) / (-st);
    first[size_t(ax)] = b;
    step[size_t(ax)] = st;
    out[size_t(ax)] = std::max<int64_t>(count, 0);
  }
  const Shape strides = RowMajorStrides(in);
  int64_t base = 0;
  Shape stride(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    base += first[d] * strides[d];
    stride[d] = step[d] * strides[d];
  }
  *folded = true;
  return c.SetConst(n, 0, StridedValues(a, out, base, stride));
}

// A transpose of a constant.
absl::Status FoldTranspose(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr) return absl::OkStatus();
  const Constant& a = *c.Const(n, 0);
  const Shape& in = a.shape;
  std::vector<int64_t> perm = n.Ints("perm");
  if (perm.empty()) {
    for (int64_t i = int64_t(in.size()) - 1; i >= 0; --i) perm.push_back(i);
  }
  if (perm.size() != in.size() || double(a.size()) > kMaxFoldElements) return absl::OkStatus();
  const Shape strides = RowMajorStrides(in);
  Shape out, stride;
  for (int64_t p : perm) {
    if (p < 0 || p >= int64_t(in.size())) return absl::OkStatus();  // InferTranspose names it
    out.push_back(in[size_t(p)]);
    stride.push_back(strides[size_t(p)]);
  }
  *folded = true;
  return c.SetConst(n, 0, StridedValues(a, out, 0, stride));
}

// starts, ends, axes, steps: attributes before opset 10, inputs from 10.
absl::Status InferSlice(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  std::vector<int64_t> starts, ends, axes, steps;
  if (!graph::SliceBoundsAreInputs(c.opset())) {
    starts = n.Ints("starts");
    ends = n.Ints("ends");
    axes = n.Ints("axes");
  } else {
    TF_ASSIGN_OR_RETURN(starts, c.ConstInts(n, 1));
    TF_ASSIGN_OR_RETURN(ends, c.ConstInts(n, 2));
    if (c.Has(n, 3)) {
      TF_ASSIGN_OR_RETURN(axes, c.ConstInts(n, 3));
    }
    if (c.Has(n, 4)) {
      TF_ASSIGN_OR_RETURN(steps, c.ConstInts(n, 4));
    }
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return c.Error(n, "starts, ends, axes and steps differ in length");
  Shape out = x;
  for (size_t i = 0; i < starts.size(); ++i) {
    TF_ASSIGN_OR_RETURN(int64_t ax, c.Axis(n, axes[i], x.size()));
    int64_t len = x[size_t(ax)], st = steps[i];
    if (st == 0) return c.Error(n, "step 0");
    auto fix = [&](int64_t v) {
      if (v < 0) v += len;
      return st > 0 ? std::clamp<int64_t>(v, 0, len) : std::clamp<int64_t>(v, -1, len - 1);
    };
    int64_t s = fix(starts[i]), e = fix(ends[i]);
    int64_t count = st > 0 ? (e - s + st - 1) / st : (s - e + (-st) - 1) / (-st);
    out[size_t(ax)] = std::max<int64_t>(0, count);
  }
  return c.Set(n, 0, out);
}

// pads: an attribute before opset 11, an input from 11.
absl::Status InferPad(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  const bool pads_input = graph::PadsAreInputs(c.opset());
  std::vector<int64_t> pads = pads_input ? std::vector<int64_t>() : n.Ints("pads");
  if (pads_input) {
    TF_ASSIGN_OR_RETURN(pads, c.ConstInts(n, 1));
  }
  if (pads.size() != 2 * x.size()) return c.Error(n, "pads has the wrong length");
  Shape out = x;
  for (size_t i = 0; i < x.size(); ++i) out[i] += pads[i] + pads[i + x.size()];
  return c.Set(n, 0, out);
}

// The output is `sizes` when given, else floor(input * scales).
absl::Status SetResized(ShapeContext& c, const Node& n, const Shape& x,
                        const std::vector<float>& scales, const std::vector<int64_t>& sizes) {
  Shape out = x;
  if (!sizes.empty()) {
    if (sizes.size() != x.size()) return c.Error(n, "sizes has the wrong length");
    out = sizes;
  } else {
    if (scales.size() != x.size()) return c.Error(n, "scales has the wrong length");
    for (size_t i = 0; i < x.size(); ++i) out[i] = int64_t(std::floor(double(x[i]) * scales[i]));
  }
  return c.Set(n, 0, out);
}

// scales: input 1 before opset 11; from 11, sizes (input 3) or scales (input 2).
absl::Status InferResize(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  std::vector<float> scales;
  std::vector<int64_t> sizes;
  if (!graph::ResizeHasRoi(c.opset())) {
    TF_ASSIGN_OR_RETURN(scales, c.ConstFloats(n, 1));
  } else if (c.Has(n, 3)) {
    TF_ASSIGN_OR_RETURN(sizes, c.ConstInts(n, 3));
  } else {
    TF_ASSIGN_OR_RETURN(scales, c.ConstFloats(n, 2));
  }
  return SetResized(c, n, x, scales, sizes);
}

// scales: an attribute before opset 9, input 1 from 9.
absl::Status InferUpsample(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  std::vector<float> scales;
  if (!graph::UpsampleScalesAreAnInput(c.opset())) {
    scales = n.floats.count("scales") ? n.floats.at("scales") : std::vector<float>();
  } else {
    TF_ASSIGN_OR_RETURN(scales, c.ConstFloats(n, 1));
  }
  return SetResized(c, n, x, scales, {});
}

// Indices into a 1-D constant (a shape vector) are looked up at import.
absl::Status FoldGather(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr || c.Const(n, 1) == nullptr)
    return absl::OkStatus();
  const Constant& a = *c.Const(n, 0);
  const Constant& idx = *c.Const(n, 1);
  if (a.shape.size() != 1 || !idx.is_int) return absl::OkStatus();  // data tensors: a node
  Constant out;
  out.is_int = a.is_int;
  for (int64_t i : idx.ints) {
    int64_t j = i < 0 ? i + a.size() : i;
    if (j < 0 || j >= a.size()) return c.Error(n, StrCat("index ", i, " out of range"));
    PushValue(&out, ConstValue(a, j));
  }
  out.shape = idx.shape;
  *folded = true;
  return c.SetConst(n, 0, out);
}

absl::Status InferGather(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape idx, c.In(n, 1));
  TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", 0), x.size()));
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  return c.Set(n, 0, out);
}

// Input 0 broadcast to the shape input (bidirectionally: a 1 in the shape
// keeps the input's dimension).
absl::Status InferExpand(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.ConstInts(n, 1));
  for (int64_t d : shape) {
    if (d < 0) return c.Error(n, StrCat("dimension ", d, " in the shape"));
  }
  TF_ASSIGN_OR_RETURN(Shape out, c.Broadcast(n, x, shape));
  return c.Set(n, 0, out);
}

double First(const double* v) { return v[0]; }

absl::Status FoldExpand(ShapeContext& c, const Node& n, bool* folded) {
  if (c.Const(n, 0) == nullptr || c.Const(n, 1) == nullptr) return absl::OkStatus();
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.ConstInts(n, 1));
  TF_ASSIGN_OR_RETURN(Shape out, c.Broadcast(n, x, shape));
  return c.FoldBroadcast(n, {0}, out, c.Const(n, 0)->is_int, First, folded);
}

// repeats (input 1): one non-negative count per dimension.
absl::Status InferTile(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, c.ConstInts(n, 1));
  if (repeats.size() != x.size())
    return c.Error(n, StrCat(repeats.size(), " repeats for an input of rank ", x.size()));
  Shape out = x;
  for (size_t i = 0; i < x.size(); ++i) {
    if (repeats[i] < 0) return c.Error(n, StrCat("repeat ", repeats[i]));
    out[i] *= repeats[i];
  }
  return c.Set(n, 0, out);
}

// A constant input tiled at import, once InferTile has checked the repeats.
absl::Status FoldTile(ShapeContext& c, const Node& n, bool* folded) {
  const Constant* x = c.Const(n, 0);
  if (x == nullptr || c.Const(n, 1) == nullptr) return absl::OkStatus();
  TF_RETURN_IF_ERROR(InferTile(c, n));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, c.ConstInts(n, 1));
  Shape os = x->shape;
  for (size_t i = 0; i < os.size(); ++i) os[i] *= repeats[i];
  if (Elements(os) > kMaxFoldElements) return absl::OkStatus();
  Constant y;
  y.is_int = x->is_int;
  y.shape = os;
  const size_t r = os.size();
  Shape idx(r, 0);
  for (int64_t e = 0, total = int64_t(Elements(os)); e < total; ++e) {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) off = off * x->shape[d] + idx[d] % x->shape[d];
    PushValue(&y, ConstValue(*x, off));
    for (int64_t d = int64_t(r) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < os[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  *folded = true;
  return c.SetConst(n, 0, std::move(y));
}

// GridSample: input [N, C, H, W] sampled at grid [N, Ho, Wo, 2] gives
// [N, C, Ho, Wo].
absl::Status InferGridSample(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape g, c.In(n, 1));
  if (x.size() != 4 || g.size() != 4 || g[0] != x[0] || g[3] != 2)
    return c.Error(n, StrCat("input ", ShapeText(x), " and grid ", ShapeText(g),
                             " are not [N, C, H, W] and [N, Ho, Wo, 2]"));
  return c.Set(n, 0, {x[0], x[1], g[1], g[2]});
}

// start, limit and delta are scalars that decide the output's length:
// always folded.
absl::Status FoldRange(ShapeContext& c, const Node& n, bool* folded) {
  bool is_int = true;
  double v[3];
  for (size_t i = 0; i < 3; ++i) {
    const Constant* k = c.Const(n, i);
    if (k == nullptr || k->size() != 1) {
      return c.Error(n, StrCat("input ", i, " ('", c.Has(n, i) ? n.inputs[i] : "",
                               "') decides the output's length and must be a constant scalar"));
    }
    is_int = is_int && k->is_int;
    v[i] = ConstValue(*k, 0);
  }
  if (v[2] == 0) return c.Error(n, "delta is 0");
  const double count = std::max(0.0, std::ceil((v[1] - v[0]) / v[2]));
  if (count > kMaxFoldElements) return c.Error(n, StrCat("range of ", count, " values"));
  Constant out;
  out.is_int = is_int;
  out.shape = {int64_t(count)};
  for (int64_t i = 0; i < int64_t(count); ++i) PushValue(&out, v[0] + double(i) * v[2]);
  *folded = true;
  return c.SetConst(n, 0, std::move(out));
}

}  // namespace

const std::vector<OpDef>& ShapeOps() {
  static const auto* ops = new std::vector<OpDef>{
      {.name = "Constant", .read_value = ReadConstantValue, .fold = FoldConstant, .native = false},
      {.name = "ConstantOfShape",
       .min_opset = 9,
       .read_value = ReadConstantOfShapeValue,
       .fold = FoldConstantOfShape,
       .native = false},
      {.name = "Shape", .fold = FoldShape, .native = false},
      {.name = "Size", .fold = FoldSize, .native = false},
      {.name = "EyeLike", .min_opset = 9, .fold = FoldEyeLike, .native = false},
      {.name = "DepthToSpace", .expand = ExpandDepthSpace, .native = false},
      {.name = "SpaceToDepth", .expand = ExpandDepthSpace, .native = false},
      // Zeros above or below diagonal k (an input, 0 by default) of the
      // last two dimensions.
      {.name = "Trilu", .min_opset = 14, .infer = InferTrilu},
      {.name = "Flatten", .fold = FoldKeepValues, .infer = InferFlatten},
      {.name = "Reshape", .fold = FoldKeepValues, .infer = InferReshape},
      {.name = "Squeeze", .fold = FoldKeepValues, .infer = InferSqueeze},
      {.name = "Unsqueeze", .fold = FoldKeepValues, .infer = InferUnsqueeze},
      {.name = "Transpose", .fold = FoldTranspose, .infer = InferTranspose},
      {.name = "Concat", .fold = FoldConcat, .infer = InferConcat},
      {.name = "Split", .fold = FoldSplit, .infer = InferSplit},
      {.name = "Slice", .fold = FoldSlice, .infer = InferSlice},
      {.name = "Pad", .infer = InferPad},
      {.name = "Resize", .min_opset = 10, .infer = InferResize},
      {.name = "Upsample", .infer = InferUpsample},
      {.name = "GridSample", .min_opset = 16, .infer = InferGridSample},
      {.name = "Gather", .fold = FoldGather, .infer = InferGather},
      {.name = "Expand", .min_opset = 8, .fold = FoldExpand, .infer = InferExpand},
      {.name = "Tile", .fold = FoldTile, .infer = InferTile},
      {.name = "Range", .min_opset = 11, .fold = FoldRange, .native = false},
  };
  return *ops;
}

}  // namespace tunefarm::frontend
