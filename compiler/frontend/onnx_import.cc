#include "compiler/frontend/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "compiler/ir/workload.h"
#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h

namespace tunefarm::frontend {

using absl::InvalidArgumentError;
using absl::StrCat;
using Shape = std::vector<int64_t>;

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr double kMaxElements = 1e12;
constexpr int64_t kMinOpset = 6, kMaxOpset = 18, kMaxIrVersion = 10;

std::string ShapeText(const Shape& s) { return s.empty() ? "scalar" : absl::StrJoin(s, "x"); }

double Elements(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= double(d);
  return n;
}

absl::Status CheckShape(const Shape& s, const std::string& what) {
  for (int64_t d : s) {
    if (d < 0 || d > kMaxDim) return InvalidArgumentError(StrCat(what, " has dimension ", d));
  }
  if (s.size() > 8 || Elements(s) > kMaxElements) {
    return InvalidArgumentError(StrCat(what, " is too large (", ShapeText(s), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Constant> FromTensor(const onnx::TensorProto& t, const std::string& what) {
  Constant c;
  for (int64_t d : t.dims()) c.shape.push_back(d);
  TF_RETURN_IF_ERROR(CheckShape(c.shape, what));
  const int64_t n = c.size();
  if (t.has_data_location() && t.data_location() == onnx::TensorProto::EXTERNAL) {
    return InvalidArgumentError(StrCat(what, ": external data is not supported"));
  }
  const std::string& raw = t.raw_data();
  auto need = [&](size_t got, size_t want) -> absl::Status {
    if (got != want) {
      return InvalidArgumentError(StrCat(what, ": ", got, " values for shape ", ShapeText(c.shape),
                                         " (", want, " needed)"));
    }
    return absl::OkStatus();
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (!raw.empty()) {
        TF_RETURN_IF_ERROR(need(raw.size(), size_t(n) * 4));
        c.floats.resize(size_t(n));
        std::memcpy(c.floats.data(), raw.data(), raw.size());
      } else {
        TF_RETURN_IF_ERROR(need(size_t(t.float_data_size()), size_t(n)));
        c.floats.assign(t.float_data().begin(), t.float_data().end());
      }
      return c;
    case onnx::TensorProto::DOUBLE:
      if (!raw.empty()) {
        TF_RETURN_IF_ERROR(need(raw.size(), size_t(n) * 8));
        for (int64_t i = 0; i < n; ++i) {
          double v;
          std::memcpy(&v, raw.data() + 8 * i, 8);
          c.floats.push_back(float(v));
        }
      } else {
        TF_RETURN_IF_ERROR(need(size_t(t.double_data_size()), size_t(n)));
        for (double v : t.double_data()) c.floats.push_back(float(v));
      }
      return c;
    case onnx::TensorProto::INT64:
      c.is_int = true;
      if (!raw.empty()) {
        TF_RETURN_IF_ERROR(need(raw.size(), size_t(n) * 8));
        c.ints.resize(size_t(n));
        std::memcpy(c.ints.data(), raw.data(), raw.size());
      } else {
        TF_RETURN_IF_ERROR(need(size_t(t.int64_data_size()), size_t(n)));
        c.ints.assign(t.int64_data().begin(), t.int64_data().end());
      }
      return c;
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL:
      c.is_int = true;
      if (!raw.empty()) {
        const size_t width = t.data_type() == onnx::TensorProto::INT32 ? 4 : 1;
        TF_RETURN_IF_ERROR(need(raw.size(), size_t(n) * width));
        for (int64_t i = 0; i < n; ++i) {
          if (width == 4) {
            int32_t v;
            std::memcpy(&v, raw.data() + 4 * i, 4);
            c.ints.push_back(v);
          } else if (t.data_type() == onnx::TensorProto::INT8) {
            c.ints.push_back(int8_t(raw[size_t(i)]));
          } else {
            c.ints.push_back(uint8_t(raw[size_t(i)]));
          }
        }
      } else {
        TF_RETURN_IF_ERROR(need(size_t(t.int32_data_size()), size_t(n)));
        c.ints.assign(t.int32_data().begin(), t.int32_data().end());
      }
      return c;
    default:
      return InvalidArgumentError(StrCat(what, ": element type ", t.data_type(),
                                         " is not supported (float, double and integers are)"));
  }
}

// Per-op shape inference and folding, over one model under construction.
class Importer {
 public:
  explicit Importer(Model* m) : m_(*m) {}

  absl::Status Run(const Node& node, bool* folded);

 private:
  absl::Status Error(const Node& n, const std::string& msg) {
    return InvalidArgumentError(StrCat(n.op, " node '", n.name, "': ", msg));
  }
  bool Has(const Node& n, size_t i) const { return i < n.inputs.size() && !n.inputs[i].empty(); }
  absl::StatusOr<Shape> In(const Node& n, size_t i) {
    if (!Has(n, i)) return Error(n, StrCat("input ", i, " is missing"));
    auto it = m_.shapes.find(n.inputs[i]);
    if (it == m_.shapes.end()) return Error(n, StrCat("no shape for '", n.inputs[i], "'"));
    return it->second;
  }
  const Constant* Const(const Node& n, size_t i) const {
    if (!Has(n, i)) return nullptr;
    auto it = m_.constants.find(n.inputs[i]);
    return it == m_.constants.end() ? nullptr : &it->second;
  }
  // An input that decides a shape must be constant.
  absl::StatusOr<std::vector<int64_t>> ConstInts(const Node& n, size_t i) {
    const Constant* c = Const(n, i);
    if (c == nullptr) {
      return Error(n, StrCat("input ", i, " ('", Has(n, i) ? n.inputs[i] : "",
                             "') decides a shape "
                             "and must be constant once input shapes are fixed"));
    }
    if (c->is_int) return c->ints;
    std::vector<int64_t> v;
    for (float f : c->floats) v.push_back(int64_t(f));
    return v;
  }
  absl::StatusOr<std::vector<float>> ConstFloats(const Node& n, size_t i) {
    const Constant* c = Const(n, i);
    if (c == nullptr) return Error(n, StrCat("input ", i, " must be constant"));
    if (!c->is_int) return c->floats;
    return std::vector<float>(c->ints.begin(), c->ints.end());
  }
  absl::StatusOr<int64_t> Axis(const Node& n, int64_t axis, size_t rank) {
    int64_t r = int64_t(rank);
    if (axis < -r || axis >= r)
      return Error(n, StrCat("axis ", axis, " out of range for rank ", r));
    return axis < 0 ? axis + r : axis;
  }
  absl::Status Set(const Node& n, size_t out, Shape s) {
    if (out >= n.outputs.size() || n.outputs[out].empty()) return absl::OkStatus();
    TF_RETURN_IF_ERROR(CheckShape(s, StrCat(n.op, " node '", n.name, "' output")));
    m_.shapes[n.outputs[out]] = std::move(s);
    return absl::OkStatus();
  }
  absl::Status SetConst(const Node& n, size_t out, Constant c) {
    TF_RETURN_IF_ERROR(Set(n, out, c.shape));
    m_.constants[n.outputs[out]] = std::move(c);
    return absl::OkStatus();
  }
  absl::StatusOr<Shape> Broadcast(const Node& n, const Shape& a, const Shape& b) {
    size_t rank = std::max(a.size(), b.size());
    Shape r(rank);
    for (size_t i = 0; i < rank; ++i) {
      int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
      int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
      if (x != y && x != 1 && y != 1) {
        return Error(n,
                     StrCat("shapes ", ShapeText(a), " and ", ShapeText(b), " do not broadcast"));
      }
      r[i] = x == 1 ? y : x;
    }
    return r;
  }
  absl::Status Conv(const Node& n, bool transpose);
  absl::Status Pool(const Node& n);
  absl::Status FoldOrShape(const Node& n, bool* folded);

  Model& m_;
};

absl::Status Importer::Conv(const Node& n, bool transpose) {
  TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape w, In(n, 1));
  if (x.size() != 3 && x.size() != 4) {
    return Error(n,
                 StrCat("only 1-D and 2-D convolutions are supported (input ", ShapeText(x), ")"));
  }
  if (w.size() != x.size()) return Error(n, "weight rank differs from the input's");
  const size_t sp = x.size() - 2;
  const int64_t group = n.Int("group", 1);
  if (group <= 0 || x[1] % group != 0)
    return Error(n, StrCat("group ", group, " does not divide ", x[1]));
  std::vector<int64_t> strides = n.Ints("strides"), dil = n.Ints("dilations"),
                       pads = n.Ints("pads");
  if (strides.empty()) strides.assign(sp, 1);
  if (dil.empty()) dil.assign(sp, 1);
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp) {
    return Error(n, "strides, dilations or pads have the wrong length");
  }
  for (size_t i = 0; i < sp; ++i) {
    if (strides[i] <= 0 || dil[i] <= 0) return Error(n, "strides and dilations must be positive");
  }
  const std::string auto_pad = n.strings.count("auto_pad") ? n.strings.at("auto_pad") : "NOTSET";
  Shape out = {x[0], 0};
  if (!transpose) {
    if (w[1] * group != x[1]) {
      return Error(n, StrCat("weight ", ShapeText(w), " does not match ", x[1],
                             " input channels in ", group, " groups"));
    }
    out[1] = w[0];
    for (size_t i = 0; i < sp; ++i) {
      int64_t k = (w[2 + i] - 1) * dil[i] + 1, in = x[2 + i];
      int64_t o;
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        o = (in + strides[i] - 1) / strides[i];
      } else if (auto_pad == "VALID") {
        o = (in - k) / strides[i] + 1;
      } else if (auto_pad == "NOTSET") {
        o = (in + pads[i] + pads[i + sp] - k) / strides[i] + 1;
      } else {
        return Error(n, StrCat("auto_pad '", auto_pad,
                               "' is not one of NOTSET, SAME_UPPER, "
                               "SAME_LOWER, VALID"));
      }
      if (o <= 0) return Error(n, "the output would be empty");
      out.push_back(o);
    }
  } else {
    if (w[0] != x[1]) return Error(n, "ConvTranspose weight does not match the input channels");
    out[1] = w[1] * group;
    std::vector<int64_t> outpad = n.Ints("output_padding");
    if (outpad.empty()) outpad.assign(sp, 0);
    std::vector<int64_t> oshape = n.Ints("output_shape");
    for (size_t i = 0; i < sp; ++i) {
      int64_t o = oshape.size() == sp ? oshape[i]
                  : (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
                      ? x[2 + i] * strides[i]
                      : strides[i] * (x[2 + i] - 1) + outpad[i] + (w[2 + i] - 1) * dil[i] + 1 -
                            (auto_pad == "VALID" ? 0 : pads[i] + pads[i + sp]);
      if (o <= 0) return Error(n, "the output would be empty");
      out.push_back(o);
    }
  }
  return Set(n, 0, out);
}

absl::Status Importer::Pool(const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
  if (x.size() < 3) return Error(n, StrCat("input ", ShapeText(x), " has no spatial dimensions"));
  const size_t sp = x.size() - 2;
  if (n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool") {
    Shape out = {x[0], x[1]};
    out.resize(x.size(), 1);
    return Set(n, 0, out);
  }
  std::vector<int64_t> k = n.Ints("kernel_shape"), strides = n.Ints("strides"),
                       pads = n.Ints("pads"), dil = n.Ints("dilations");
  if (k.size() != sp) return Error(n, "kernel_shape is missing or of the wrong length");
  if (strides.empty()) strides.assign(sp, 1);
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (dil.empty()) dil.assign(sp, 1);
  if (strides.size() != sp || pads.size() != 2 * sp || dil.size() != sp) {
    return Error(n, "strides, pads or dilations have the wrong length");
  }
  const bool ceil = n.Int("ceil_mode", 0) != 0;
  const std::string auto_pad = n.strings.count("auto_pad") ? n.strings.at("auto_pad") : "NOTSET";
  Shape out = {x[0], x[1]};
  for (size_t i = 0; i < sp; ++i) {
    if (strides[i] <= 0 || k[i] <= 0 || dil[i] <= 0)
      return Error(n, "non-positive kernel or stride");
    int64_t ek = (k[i] - 1) * dil[i] + 1;
    int64_t o;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      o = (x[2 + i] + strides[i] - 1) / strides[i];
    } else if (auto_pad == "VALID") {
      o = (x[2 + i] - ek) / strides[i] + 1;
    } else {
      o = ir::WindowOutput(x[2 + i], pads[i], pads[i + sp], k[i], strides[i], dil[i], ceil);
    }
    if (o <= 0) return Error(n, "the output would be empty");
    out.push_back(o);
  }
  return Set(n, 0, out);
}

// Shape arithmetic on constants: computed here and the node dropped.
absl::Status Importer::FoldOrShape(const Node& n, bool* folded) {
  *folded = false;
  bool all_const = true;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (Has(n, i) && Const(n, i) == nullptr) all_const = false;
  }
  if (n.op == "Shape") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    int64_t r = int64_t(x.size());
    int64_t start = n.Int("start", 0), end = n.Int("end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, start, r);
    Constant c;
    c.is_int = true;
    c.ints.assign(x.begin() + start, x.begin() + end);
    c.shape = {int64_t(c.ints.size())};
    *folded = true;
    return SetConst(n, 0, c);
  }
  if (n.op == "ConstantOfShape") {
    const Constant* shape = Const(n, 0);
    if (shape == nullptr || !shape->is_int) return Error(n, "the shape input must be constant");
    Constant c;
    c.shape = shape->ints;
    TF_RETURN_IF_ERROR(CheckShape(c.shape, StrCat("node '", n.name, "' output")));
    c.is_int = n.ints.count("value") > 0;
    if (c.is_int) {
      c.ints.assign(size_t(c.size()), n.ints.at("value")[0]);
    } else {
      c.floats.assign(size_t(c.size()), n.Float("value", 0.0f));
    }
    *folded = true;
    return SetConst(n, 0, c);
  }
  if (!all_const) return absl::OkStatus();
  static const std::set<std::string> kFoldable = {
      "Gather", "Concat", "Unsqueeze", "Squeeze", "Cast",    "Slice",  "Identity",
      "Mul",    "Add",    "Sub",       "Div",     "Reshape", "Flatten"};
  if (!kFoldable.count(n.op)) return absl::OkStatus();
  const Constant& a = *Const(n, 0);
  // Element-wise arithmetic and Cast/Identity keep values; the rest move them.
  Constant out;
  out.is_int = a.is_int;
  auto value = [](const Constant& c, int64_t i) -> double {
    return c.is_int ? double(c.ints[size_t(i)]) : double(c.floats[size_t(i)]);
  };
  auto push = [&](double v) {
    if (out.is_int) {
      out.ints.push_back(int64_t(v));
    } else {
      out.floats.push_back(float(v));
    }
  };
  if (n.op == "Identity" || n.op == "Cast") {
    out = a;
    if (n.op == "Cast") {
      int64_t to = n.Int("to", onnx::TensorProto::FLOAT);
      bool to_int = to != onnx::TensorProto::FLOAT && to != onnx::TensorProto::DOUBLE &&
                    to != onnx::TensorProto::FLOAT16;
      if (to_int != a.is_int) {
        out.is_int = to_int;
        out.ints.clear();
        out.floats.clear();
        for (int64_t i = 0; i < a.size(); ++i) push(value(a, i));
      }
    }
  } else if (n.op == "Mul" || n.op == "Add" || n.op == "Sub" || n.op == "Div") {
    const Constant& b = *Const(n, 1);
    if (a.size() != b.size() && b.size() != 1 && a.size() != 1) return absl::OkStatus();
    out.is_int = a.is_int && b.is_int;
    out.shape = a.size() >= b.size() ? a.shape : b.shape;
    int64_t count = std::max(a.size(), b.size());
    for (int64_t i = 0; i < count; ++i) {
      double x = value(a, a.size() == 1 ? 0 : i), y = value(b, b.size() == 1 ? 0 : i);
      if (n.op == "Div" && y == 0) return Error(n, "division by zero in shape arithmetic");
      double v = n.op == "Mul" ? x * y : n.op == "Add" ? x + y : n.op == "Sub" ? x - y : x / y;
      if (out.is_int && n.op == "Div") v = std::trunc(v);
      push(v);
    }
    *folded = true;
    return SetConst(n, 0, out);
  } else if (n.op == "Gather") {
    const Constant& idx = *Const(n, 1);
    if (a.shape.size() != 1 || !idx.is_int) return absl::OkStatus();  // data tensors: a node
    for (int64_t i : idx.ints) {
      int64_t j = i < 0 ? i + a.size() : i;
      if (j < 0 || j >= a.size()) return Error(n, StrCat("index ", i, " out of range"));
      push(value(a, j));
    }
    out.shape = idx.shape;
  } else if (n.op == "Concat") {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Constant& c = *Const(n, i);
      if (c.shape.size() > 1) return absl::OkStatus();
      out.is_int = out.is_int && c.is_int;
      for (int64_t j = 0; j < c.size(); ++j) push(value(c, j));
    }
    out.shape = {int64_t(out.is_int ? out.ints.size() : out.floats.size())};
  } else if (n.op == "Unsqueeze" || n.op == "Squeeze" || n.op == "Reshape" || n.op == "Flatten") {
    // Values stay; the shape is what the op's own inference gives (Run).
    *folded = true;
    m_.constants[n.outputs[0]] = a;
    return absl::OkStatus();
  } else if (n.op == "Slice") {
    if (a.shape.size() != 1) return absl::OkStatus();
    std::vector<int64_t> starts, ends, axes, steps;
    if (m_.opset < 10) {
      starts = n.Ints("starts");
      ends = n.Ints("ends");
    } else {
      TF_ASSIGN_OR_RETURN(starts, ConstInts(n, 1));
      TF_ASSIGN_OR_RETURN(ends, ConstInts(n, 2));
      if (Has(n, 4)) {
        TF_ASSIGN_OR_RETURN(steps, ConstInts(n, 4));
      }
    }
    if (starts.size() != 1 || ends.size() != 1) return absl::OkStatus();
    int64_t step = steps.empty() ? 1 : steps[0];
    if (step == 0) return Error(n, "slice step 0");
    int64_t len = a.size();
    auto clampi = [&](int64_t v) {
      if (v < 0) v += len;
      return step > 0 ? std::clamp<int64_t>(v, 0, len) : std::clamp<int64_t>(v, -1, len - 1);
    };
    int64_t s = clampi(starts[0]), e = clampi(ends[0]);
    for (int64_t i = s; step > 0 ? i < e : i > e; i += step) push(value(a, i));
    out.shape = {int64_t(out.is_int ? out.ints.size() : out.floats.size())};
  }
  *folded = true;
  return SetConst(n, 0, out);
}

absl::Status Importer::Run(const Node& n, bool* folded) {
  *folded = false;
  const std::string& op = n.op;
  if (op == "If" || op == "Loop" || op == "Scan") {
    return Error(n,
                 "control flow (If, Loop, Scan) is not supported; export the model with "
                 "static control flow (e.g. torch.onnx.export of a traced model)");
  }
  if (op == "Constant") {
    auto it = m_.constants.find(n.outputs.empty() ? "" : n.outputs[0]);
    if (it == m_.constants.end()) return Error(n, "a Constant without a value");
    *folded = true;
    return Set(n, 0, it->second.shape);
  }
  TF_RETURN_IF_ERROR(FoldOrShape(n, folded));
  if (*folded && m_.shapes.count(n.outputs[0])) return absl::OkStatus();

  static const std::set<std::string> kUnary = {"Relu",       "LeakyRelu",
                                               "Sigmoid",    "HardSigmoid",
                                               "HardSwish",  "Erf",
                                               "Sqrt",       "Tanh",
                                               "Exp",        "Neg",
                                               "Abs",        "Identity",
                                               "Dropout",    "Cast",
                                               "Gelu",       "Softmax",
                                               "LogSoftmax", "BatchNormalization",
                                               "Clip",       "LayerNormalization",
                                               "Floor",      "Ceil",
                                               "Reciprocal", "Softplus",
                                               "Elu",        "Selu",
                                               "PRelu",      "InstanceNormalization"};
  static const std::set<std::string> kBinary = {"Add", "Sub",   "Mul",  "Div",     "Pow",  "Max",
                                                "Min", "Equal", "Less", "Greater", "Where"};
  if (kUnary.count(op)) {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    if (op == "BatchNormalization" || op == "InstanceNormalization") {
      if (x.size() < 2) return Error(n, "input needs a channel dimension");
      for (size_t i = 1; i < n.inputs.size() && i < 5; ++i) {
        TF_ASSIGN_OR_RETURN(Shape p, In(n, i));
        if (Elements(p) != double(x[1])) {
          return Error(n,
                       StrCat("parameter ", i, " has ", ShapeText(p), ", not ", x[1], " values"));
        }
      }
    }
    if (op == "Softmax" || op == "LogSoftmax" || op == "LayerNormalization") {
      TF_RETURN_IF_ERROR(Axis(n, n.Int("axis", -1), x.size()).status());
    }
    if (op == "LayerNormalization") {  // Mean and InvStdDev: x's shape, 1 from `axis` on
      TF_ASSIGN_OR_RETURN(int64_t axis, Axis(n, n.Int("axis", -1), x.size()));
      Shape stat = x;
      for (size_t d = size_t(axis); d < stat.size(); ++d) stat[d] = 1;
      for (size_t o = 1; o < n.outputs.size() && o < 3; ++o)
        if (!n.outputs[o].empty()) TF_RETURN_IF_ERROR(Set(n, o, stat));
    } else if (op == "Dropout" && n.outputs.size() > 1 && !n.outputs[1].empty()) {
      TF_RETURN_IF_ERROR(Set(n, 1, x));  // the mask
    } else if (op == "BatchNormalization" && n.outputs.size() > 1) {
      for (size_t o = 1; o < n.outputs.size(); ++o)
        if (!n.outputs[o].empty()) return Error(n, "training-mode outputs are not supported");
    }
    return Set(n, 0, x);
  }
  if (kBinary.count(op)) {
    TF_ASSIGN_OR_RETURN(Shape a, In(n, 0));
    TF_ASSIGN_OR_RETURN(Shape b, In(n, 1));
    TF_ASSIGN_OR_RETURN(Shape r, Broadcast(n, a, b));
    if (op == "Where") {
      TF_ASSIGN_OR_RETURN(Shape c, In(n, 2));
      TF_ASSIGN_OR_RETURN(r, Broadcast(n, r, c));
    }
    return Set(n, 0, r);
  }
  if (op == "Conv") return Conv(n, false);
  if (op == "ConvTranspose") return Conv(n, true);
  if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "GlobalMaxPool")
    return Pool(n);
  if (op == "Gemm") {
    TF_ASSIGN_OR_RETURN(Shape a, In(n, 0));
    TF_ASSIGN_OR_RETURN(Shape b, In(n, 1));
    if (a.size() != 2 || b.size() != 2) return Error(n, "Gemm takes 2-D inputs");
    bool ta = n.Int("transA", 0), tb = n.Int("transB", 0);
    int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
    int64_t kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
    if (k != kb) return Error(n, StrCat("inner dimensions differ (", k, " vs ", kb, ")"));
    if (Has(n, 2)) {
      TF_ASSIGN_OR_RETURN(Shape c, In(n, 2));
      TF_RETURN_IF_ERROR(Broadcast(n, {m, nn}, c).status());
    }
    return Set(n, 0, {m, nn});
  }
  if (op == "MatMul") {
    TF_ASSIGN_OR_RETURN(Shape a, In(n, 0));
    TF_ASSIGN_OR_RETURN(Shape b, In(n, 1));
    if (a.empty() || b.empty()) return Error(n, "MatMul of a scalar");
    Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a, b2 = b.size() == 1 ? Shape{b[0], 1} : b;
    if (a2.back() != b2[b2.size() - 2]) {
      return Error(n, StrCat("inner dimensions differ (", ShapeText(a), " x ", ShapeText(b), ")"));
    }
    Shape ba(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2);
    TF_ASSIGN_OR_RETURN(Shape batch, Broadcast(n, ba, bb));
    Shape out = batch;
    if (a.size() > 1) out.push_back(a2[a2.size() - 2]);
    if (b.size() > 1) out.push_back(b2.back());
    return Set(n, 0, out);
  }
  if (op == "Flatten") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    TF_ASSIGN_OR_RETURN(int64_t axis, Axis(n, n.Int("axis", 1), x.size() + 1));
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < x.size(); ++i) (int64_t(i) < axis ? outer : inner) *= x[i];
    return Set(n, 0, {outer, inner});
  }
  if (op == "Reshape") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    TF_ASSIGN_OR_RETURN(std::vector<int64_t> want, ConstInts(n, 1));
    const bool allowzero = n.Int("allowzero", 0) != 0;
    Shape out;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < want.size(); ++i) {
      int64_t d = want[i];
      if (d == 0 && !allowzero) {
        if (i >= x.size()) return Error(n, "0 in the shape copies a dimension the input lacks");
        d = x[i];
      }
      if (d == -1) {
        if (infer >= 0) return Error(n, "more than one -1 in the shape");
        infer = int64_t(i);
        d = 1;
      } else if (d < 0) {
        return Error(n, StrCat("dimension ", d, " in the shape"));
      }
      out.push_back(d);
      known *= d;
    }
    double total = Elements(x);
    if (infer >= 0) {
      if (known == 0 || std::fmod(total, double(known)) != 0) {
        return Error(n, StrCat("cannot reshape ", ShapeText(x), " to ", absl::StrJoin(want, "x")));
      }
      out[size_t(infer)] = int64_t(total / double(known));
    } else if (double(known) != total) {
      return Error(n, StrCat("cannot reshape ", ShapeText(x), " to ", ShapeText(out)));
    }
    return Set(n, 0, out);
  }
  if (op == "Transpose") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    std::vector<int64_t> perm = n.Ints("perm");
    if (perm.empty()) {
      for (int64_t i = int64_t(x.size()) - 1; i >= 0; --i) perm.push_back(i);
    }
    if (perm.size() != x.size()) return Error(n, "perm has the wrong length");
    Shape out;
    std::vector<bool> seen(x.size(), false);
    for (int64_t p : perm) {
      if (p < 0 || p >= int64_t(x.size()) || seen[size_t(p)])
        return Error(n, "perm is not a permutation");
      seen[size_t(p)] = true;
      out.push_back(x[size_t(p)]);
    }
    return Set(n, 0, out);
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    std::vector<int64_t> axes;
    if (m_.opset < 13) {
      axes = n.Ints("axes");
    } else if (Has(n, 1)) {
      TF_ASSIGN_OR_RETURN(axes, ConstInts(n, 1));
    }
    Shape out;
    if (op == "Unsqueeze") {
      size_t rank = x.size() + axes.size();
      std::vector<bool> ins(rank, false);
      for (int64_t a : axes) {
        TF_ASSIGN_OR_RETURN(int64_t ax, Axis(n, a, rank));
        ins[size_t(ax)] = true;
      }
      for (size_t i = 0, j = 0; i < rank; ++i) out.push_back(ins[i] ? 1 : x[j++]);
    } else {
      std::vector<bool> drop(x.size(), axes.empty());
      for (int64_t a : axes) {
        TF_ASSIGN_OR_RETURN(int64_t ax, Axis(n, a, x.size()));
        if (x[size_t(ax)] != 1)
          return Error(n, StrCat("cannot squeeze dimension ", ax, " of ", x[size_t(ax)]));
        drop[size_t(ax)] = true;
      }
      for (size_t i = 0; i < x.size(); ++i) {
        if (!(drop[i] && x[i] == 1)) out.push_back(x[i]);
      }
    }
    return Set(n, 0, out);
  }
  if (op == "Concat") {
    TF_ASSIGN_OR_RETURN(Shape out, In(n, 0));
    TF_ASSIGN_OR_RETURN(int64_t axis, Axis(n, n.Int("axis", 0), out.size()));
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      TF_ASSIGN_OR_RETURN(Shape s, In(n, i));
      if (s.size() != out.size()) return Error(n, "inputs of different rank");
      for (size_t d = 0; d < s.size(); ++d) {
        if (int64_t(d) != axis && s[d] != out[d]) {
          return Error(
              n, StrCat("input ", i, " is ", ShapeText(s), ", not matching ", ShapeText(out)));
        }
      }
      out[size_t(axis)] += s[size_t(axis)];
    }
    return Set(n, 0, out);
  }
  if (op == "Split") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    TF_ASSIGN_OR_RETURN(int64_t axis, Axis(n, n.Int("axis", 0), x.size()));
    std::vector<int64_t> parts = m_.opset < 13 ? n.Ints("split") : std::vector<int64_t>();
    if (m_.opset >= 13 && Has(n, 1)) {
      TF_ASSIGN_OR_RETURN(parts, ConstInts(n, 1));
    }
    const int64_t outs = int64_t(n.outputs.size());
    if (parts.empty()) {
      if (outs <= 0) return Error(n, "no outputs");
      int64_t each = (x[size_t(axis)] + outs - 1) / outs;
      for (int64_t i = 0, left = x[size_t(axis)]; i < outs; ++i, left -= each)
        parts.push_back(std::min(each, left));
    }
    if (int64_t(parts.size()) != outs ||
        std::accumulate(parts.begin(), parts.end(), int64_t{0}) != x[size_t(axis)]) {
      return Error(n, "split sizes do not add up to the dimension");
    }
    for (int64_t i = 0; i < outs; ++i) {
      Shape s = x;
      s[size_t(axis)] = parts[size_t(i)];
      TF_RETURN_IF_ERROR(Set(n, size_t(i), s));
    }
    return absl::OkStatus();
  }
  if (op == "Slice") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    std::vector<int64_t> starts, ends, axes, steps;
    if (m_.opset < 10) {
      starts = n.Ints("starts");
      ends = n.Ints("ends");
      axes = n.Ints("axes");
    } else {
      TF_ASSIGN_OR_RETURN(starts, ConstInts(n, 1));
      TF_ASSIGN_OR_RETURN(ends, ConstInts(n, 2));
      if (Has(n, 3)) {
        TF_ASSIGN_OR_RETURN(axes, ConstInts(n, 3));
      }
      if (Has(n, 4)) {
        TF_ASSIGN_OR_RETURN(steps, ConstInts(n, 4));
      }
    }
    if (axes.empty()) {
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
    }
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (starts.size() != ends.size() || axes.size() != starts.size() ||
        steps.size() != starts.size())
      return Error(n, "starts, ends, axes and steps differ in length");
    Shape out = x;
    for (size_t i = 0; i < starts.size(); ++i) {
      TF_ASSIGN_OR_RETURN(int64_t ax, Axis(n, axes[i], x.size()));
      int64_t len = x[size_t(ax)], st = steps[i];
      if (st == 0) return Error(n, "step 0");
      auto fix = [&](int64_t v) {
        if (v < 0) v += len;
        return st > 0 ? std::clamp<int64_t>(v, 0, len) : std::clamp<int64_t>(v, -1, len - 1);
      };
      int64_t s = fix(starts[i]), e = fix(ends[i]);
      int64_t count = st > 0 ? (e - s + st - 1) / st : (s - e + (-st) - 1) / (-st);
      out[size_t(ax)] = std::max<int64_t>(0, count);
    }
    return Set(n, 0, out);
  }
  if (op == "Pad") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    std::vector<int64_t> pads = m_.opset < 11 ? n.Ints("pads") : std::vector<int64_t>();
    if (m_.opset >= 11) {
      TF_ASSIGN_OR_RETURN(pads, ConstInts(n, 1));
    }
    if (pads.size() != 2 * x.size()) return Error(n, "pads has the wrong length");
    Shape out = x;
    for (size_t i = 0; i < x.size(); ++i) out[i] += pads[i] + pads[i + x.size()];
    return Set(n, 0, out);
  }
  if (op == "Resize" || op == "Upsample") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    std::vector<float> scales;
    std::vector<int64_t> sizes;
    if (op == "Upsample" && m_.opset < 9) {
      scales = n.floats.count("scales") ? n.floats.at("scales") : std::vector<float>();
    } else if (op == "Upsample" || m_.opset < 11) {
      TF_ASSIGN_OR_RETURN(scales, ConstFloats(n, 1));
    } else {
      if (Has(n, 3)) {
        TF_ASSIGN_OR_RETURN(sizes, ConstInts(n, 3));
      } else {
        TF_ASSIGN_OR_RETURN(scales, ConstFloats(n, 2));
      }
    }
    Shape out = x;
    if (!sizes.empty()) {
      if (sizes.size() != x.size()) return Error(n, "sizes has the wrong length");
      out = sizes;
    } else {
      if (scales.size() != x.size()) return Error(n, "scales has the wrong length");
      for (size_t i = 0; i < x.size(); ++i) out[i] = int64_t(std::floor(double(x[i]) * scales[i]));
    }
    return Set(n, 0, out);
  }
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    std::vector<int64_t> axes = n.Ints("axes");
    if (Has(n, 1)) {
      TF_ASSIGN_OR_RETURN(axes, ConstInts(n, 1));
    }
    const bool keep = n.Int("keepdims", 1) != 0;
    if (axes.empty() && n.Int("noop_with_empty_axes", 0) != 0) return Set(n, 0, x);
    std::vector<bool> reduce(x.size(), axes.empty());
    for (int64_t a : axes) {
      TF_ASSIGN_OR_RETURN(int64_t ax, Axis(n, a, x.size()));
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
    return Set(n, 0, out);
  }
  if (op == "Gather") {
    TF_ASSIGN_OR_RETURN(Shape x, In(n, 0));
    TF_ASSIGN_OR_RETURN(Shape idx, In(n, 1));
    TF_ASSIGN_OR_RETURN(int64_t axis, Axis(n, n.Int("axis", 0), x.size()));
    Shape out(x.begin(), x.begin() + axis);
    out.insert(out.end(), idx.begin(), idx.end());
    out.insert(out.end(), x.begin() + axis + 1, x.end());
    return Set(n, 0, out);
  }
  return InvalidArgumentError(StrCat("unsupported operator '", op, "' (node '", n.name, "', opset ",
                                     m_.opset,
                                     "); supported: ", absl::StrJoin(SupportedOps(), ", ")));
}

// Before opset 7, Add/Sub/Mul/Div/Pow took broadcast=1 with an `axis`
// where B's dimensions start in A; as numpy broadcasting that is B with
// trailing 1s, so a constant B gets a reshaped copy.
absl::Status LegacyBroadcast(Model* m, Node* n) {
  static const std::set<std::string> kOps = {"Add", "Sub", "Mul", "Div", "Pow"};
  if (m->opset >= 7 || !kOps.count(n->op) || n->Int("broadcast", 0) == 0 ||
      !n->ints.count("axis") || n->inputs.size() != 2)
    return absl::OkStatus();
  auto a = m->shapes.find(n->inputs[0]), b = m->shapes.find(n->inputs[1]);
  if (a == m->shapes.end() || b == m->shapes.end()) return absl::OkStatus();
  int64_t axis = n->Int("axis", 0);
  if (axis < 0) axis += int64_t(a->second.size());
  const int64_t pad = int64_t(a->second.size()) - axis - int64_t(b->second.size());
  if (axis < 0 || pad < 0)
    return InvalidArgumentError(StrCat("node '", n->name, "': broadcast axis out of range"));
  if (pad == 0) return absl::OkStatus();
  auto c = m->constants.find(n->inputs[1]);
  if (c == m->constants.end()) {
    return absl::UnimplementedError(StrCat("node '", n->name, "' (", n->op,
                                           "): legacy broadcast with an axis needs a constant B"));
  }
  Constant copy = c->second;
  copy.shape.insert(copy.shape.end(), size_t(pad), 1);
  const std::string name = StrCat(n->inputs[1], "@axis", axis);
  m->shapes[name] = copy.shape;
  m->constants[name] = std::move(copy);
  n->inputs[1] = name;
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& SupportedOps() {
  static const auto* ops = new std::vector<std::string>{"Abs",
                                                        "Add",
                                                        "AveragePool",
                                                        "BatchNormalization",
                                                        "Cast",
                                                        "Ceil",
                                                        "Clip",
                                                        "Concat",
                                                        "Constant",
                                                        "ConstantOfShape",
                                                        "Conv",
                                                        "ConvTranspose",
                                                        "Div",
                                                        "Dropout",
                                                        "Elu",
                                                        "Equal",
                                                        "Erf",
                                                        "Exp",
                                                        "Flatten",
                                                        "Floor",
                                                        "Gather",
                                                        "Gelu",
                                                        "Gemm",
                                                        "GlobalAveragePool",
                                                        "GlobalMaxPool",
                                                        "Greater",
                                                        "HardSigmoid",
                                                        "HardSwish",
                                                        "Identity",
                                                        "InstanceNormalization",
                                                        "LayerNormalization",
                                                        "LeakyRelu",
                                                        "Less",
                                                        "LogSoftmax",
                                                        "MatMul",
                                                        "Max",
                                                        "MaxPool",
                                                        "Min",
                                                        "Mul",
                                                        "Neg",
                                                        "Pad",
                                                        "Pow",
                                                        "PRelu",
                                                        "Reciprocal",
                                                        "ReduceMax",
                                                        "ReduceMean",
                                                        "ReduceSum",
                                                        "Relu",
                                                        "Reshape",
                                                        "Resize",
                                                        "Selu",
                                                        "Shape",
                                                        "Sigmoid",
                                                        "Slice",
                                                        "Softmax",
                                                        "Softplus",
                                                        "Split",
                                                        "Sqrt",
                                                        "Squeeze",
                                                        "Sub",
                                                        "Tanh",
                                                        "Transpose",
                                                        "Unsqueeze",
                                                        "Upsample",
                                                        "Where"};
  return *ops;
}

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
    if (!absl::SimpleAtoi(d, &v) || v <= 0 || v > kMaxDim) {
      return InvalidArgumentError(
          StrCat("shape '", text, "': expected NAME=D1xD2x... with positive dimensions"));
    }
    shape.push_back(v);
  }
  return std::make_pair(name, shape);
}

namespace {

// Every node whose operator this build cannot import, named in one error:
// by operator (sorted), up to three node names each.
absl::Status CheckOpsSupported(const std::vector<Node>& nodes, int64_t opset) {
  const std::vector<std::string>& supported = SupportedOps();
  std::map<std::string, std::vector<std::string>> missing;  // op -> node names
  for (const Node& n : nodes) {
    if (std::find(supported.begin(), supported.end(), n.op) == supported.end())
      missing[n.op].push_back(n.name);
  }
  if (missing.empty()) return absl::OkStatus();
  const bool control_flow = missing.count("If") || missing.count("Loop") || missing.count("Scan");
  constexpr char kStaticFlow[] =
      "control flow (If, Loop, Scan) is not supported; export the model with static control "
      "flow (e.g. torch.onnx.export of a traced model)";
  if (missing.size() == 1 && control_flow) {
    const auto& [op, names] = *missing.begin();
    return InvalidArgumentError(StrCat(op, " node '", names[0], "': ", kStaticFlow));
  }
  auto nodes_of = [](const std::vector<std::string>& names) {
    std::vector<std::string> quoted;
    for (size_t i = 0; i < names.size() && i < 3; ++i) quoted.push_back(StrCat("'", names[i], "'"));
    std::string text = StrCat(names.size() == 1 ? "node " : "nodes ", absl::StrJoin(quoted, ", "));
    if (names.size() > 3) absl::StrAppend(&text, " and ", names.size() - 3, " more");
    return text;
  };
  std::string msg;
  if (missing.size() == 1) {
    const auto& [op, names] = *missing.begin();
    msg = StrCat("unsupported operator '", op, "' (", nodes_of(names), ", opset ", opset, ")");
  } else {
    std::vector<std::string> parts;
    for (const auto& [op, names] : missing) parts.push_back(StrCat("'", op, "' (", nodes_of(names), ")"));
    msg = StrCat(missing.size(), " unsupported operators (opset ", opset, "): ",
                 absl::StrJoin(parts, ", "));
    if (control_flow) absl::StrAppend(&msg, "; ", kStaticFlow);
  }
  return InvalidArgumentError(
      StrCat(msg, "; supported: ", absl::StrJoin(supported, ", ")));
}

}  // namespace

absl::StatusOr<Model> ImportOnnx(const std::string& bytes, const ImportOptions& options) {
  onnx::ModelProto proto;
  if (bytes.empty() || !proto.ParseFromString(bytes)) {
    return InvalidArgumentError("not an ONNX model (the protobuf does not parse)");
  }
  if (!proto.has_graph()) return InvalidArgumentError("not an ONNX model (no graph)");
  Model m;
  m.ir_version = proto.ir_version();
  m.producer = proto.producer_name();
  if (m.ir_version < 3 || m.ir_version > kMaxIrVersion) {
    return InvalidArgumentError(
        StrCat("ONNX IR version ", m.ir_version, " is not supported (3 to ", kMaxIrVersion, ")"));
  }
  for (const onnx::OperatorSetIdProto& o : proto.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") m.opset = o.version();
  }
  if (m.opset < kMinOpset || m.opset > kMaxOpset) {
    return InvalidArgumentError(
        StrCat("opset ", m.opset, " is not supported (", kMinOpset, " to ", kMaxOpset, ")"));
  }
  const onnx::GraphProto& g = proto.graph();

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
  for (const auto& [name, shape] : options.input_shapes) {
    if (!name.empty() &&
        std::find(input_names.begin(), input_names.end(), name) == input_names.end()) {
      return InvalidArgumentError(StrCat("--shape names '", name,
                                         "', which is not an input of the "
                                         "model (inputs: ",
                                         absl::StrJoin(input_names, ", "), ")"));
    }
  }
  for (const onnx::ValueInfoProto& in : g.input()) {
    if (m.constants.count(in.name())) continue;  // an initializer listed as input
    if (in.has_type() && !in.type().has_tensor_type()) {
      return InvalidArgumentError(StrCat("input '", in.name(),
                                         "' is not a tensor (sequences, maps and optionals are not "
                                         "supported)"));
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

  // Nodes, converted; then put in topological order.
  std::vector<Node> nodes;
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& np = g.node(i);
    Node n;
    n.op = np.op_type();
    n.name = np.name().empty() ? StrCat(n.op, "#", i) : np.name();
    if (!np.domain().empty() && np.domain() != "ai.onnx") {
      return InvalidArgumentError(StrCat("node '", n.name, "' is operator '", n.op, "' of domain '",
                                         np.domain(), "', which is not supported"));
    }
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
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
        case onnx::AttributeProto::TENSOR:
          if (n.op == "ConstantOfShape" && a.name() == "value") {
            TF_ASSIGN_OR_RETURN(Constant c,
                                FromTensor(a.t(), StrCat("ConstantOfShape node '", n.name, "'")));
            if (c.size() != 1) {
              return InvalidArgumentError(
                  StrCat("ConstantOfShape node '", n.name, "': value must have one element"));
            }
            if (c.is_int) {
              n.ints["value"] = {c.ints[0]};
            } else {
              n.floats["value"] = {c.floats[0]};
            }
          }
          if (n.op == "Constant" && a.name() == "value" && !n.outputs.empty()) {
            TF_ASSIGN_OR_RETURN(Constant c,
                                FromTensor(a.t(), StrCat("Constant node '", n.name, "'")));
            m.constants[n.outputs[0]] = std::move(c);
          }
          break;
        case onnx::AttributeProto::GRAPH:
        case onnx::AttributeProto::GRAPHS:
          break;  // If/Loop bodies: refused below with a clear error
        default:
          break;
      }
    }
    if (n.op == "Constant" && !n.outputs.empty() && !m.constants.count(n.outputs[0])) {
      // value_float / value_int / value_ints / value_floats forms (opset 12+).
      Constant c;
      if (n.floats.count("value_float")) {
        c.floats = n.floats["value_float"];
      } else if (n.floats.count("value_floats")) {
        c.floats = n.floats["value_floats"];
        c.shape = {int64_t(c.floats.size())};
      } else if (n.ints.count("value_int")) {
        c.is_int = true;
        c.ints = n.ints["value_int"];
      } else if (n.ints.count("value_ints")) {
        c.is_int = true;
        c.ints = n.ints["value_ints"];
        c.shape = {int64_t(c.ints.size())};
      } else {
        return InvalidArgumentError(StrCat("Constant node '", n.name, "' has no value we read"));
      }
      m.constants[n.outputs[0]] = std::move(c);
    }
    nodes.push_back(std::move(n));
  }
  TF_RETURN_IF_ERROR(CheckOpsSupported(nodes, m.opset));
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
  Importer imp(&m);
  for (int i : order) {
    bool folded = false;
    TF_RETURN_IF_ERROR(LegacyBroadcast(&m, &nodes[size_t(i)]));
    TF_RETURN_IF_ERROR(imp.Run(nodes[size_t(i)], &folded));
    if (folded) {
      // A folded reshape-like op keeps its values under the inferred shape.
      for (const std::string& o : nodes[size_t(i)].outputs) {
        auto c = m.constants.find(o);
        if (c != m.constants.end() && m.shapes.count(o)) c->second.shape = m.shapes[o];
      }
      continue;
    }
    m.nodes.push_back(std::move(nodes[size_t(i)]));
  }
  for (const std::string& o : m.outputs) {
    if (!m.shapes.count(o))
      return InvalidArgumentError(StrCat("output '", o, "' is never produced"));
  }
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    for (const std::string& in : m.nodes[i].inputs) {
      if (!in.empty()) m.consumers[in].push_back(int(i));
    }
  }
  return m;
}

absl::StatusOr<Model> ImportOnnxFile(const std::string& path, const ImportOptions& options) {
  TF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  absl::StatusOr<Model> m = ImportOnnx(bytes, options);
  if (!m.ok()) return absl::Status(m.status().code(), StrCat(path, ": ", m.status().message()));
  return m;
}

}  // namespace tunefarm::frontend
