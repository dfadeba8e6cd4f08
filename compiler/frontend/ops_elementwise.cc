// Registry entries: element-wise operators (one input, or several broadcast
// numpy-style), with the activations an anchor's kernel fuses.
#include <cfloat>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/op_registry.h"
#include "compiler/ir/map_program.h"
#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h
#include "proto/onnx_forms.h"

namespace tunefarm::frontend {
namespace {

using absl::StrCat;

//===--- Shape inference --------------------------------------------------===//

// Output 0 has input 0's shape.
absl::Status InferSameShape(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  return c.Set(n, 0, x);
}

// DynamicQuantizeLinear: the 8-bit values have the input's shape; the
// scale and the zero point are scalars.
absl::Status InferDynamicQuantize(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  if (n.outputs.size() != 3) return c.Error(n, "expected 3 outputs (y, y_scale, y_zero_point)");
  TF_RETURN_IF_ERROR(c.Set(n, 0, x));
  TF_RETURN_IF_ERROR(c.Set(n, 1, Shape{}));
  return c.Set(n, 2, Shape{});
}

// DequantizeLinear: (x - zero_point) * scale, the scale and zero point one
// value or one per index of `axis` (default 1); output x's shape.
absl::Status InferDequantize(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape s, c.In(n, 1));
  if (Elements(s) != 1) {
    TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", 1), x.size()));
    if (s.size() != 1 || s[0] != x[size_t(axis)])
      return c.Error(n, StrCat("scale of shape ", ShapeText(s), " is not one value per index of "
                                                               "axis ",
                               axis, " of ", ShapeText(x)));
  }
  return c.Set(n, 0, x);
}

// A DequantizeLinear of constants (the 8-bit weights of a QDQ model): a
// float constant.
absl::Status FoldDequantize(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr || c.Const(n, 1) == nullptr)
    return absl::OkStatus();
  const Constant& x = *c.Const(n, 0);
  const Constant& s = *c.Const(n, 1);
  const Constant* z = c.Has(n, 2) ? c.Const(n, 2) : nullptr;
  if (double(x.size()) > kMaxFoldElements || (z != nullptr && z->size() != s.size()))
    return absl::OkStatus();
  int64_t inner = 1, per = 1;  // elements per index of the axis, and the axis' extent
  if (s.size() != 1) {
    TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", 1), x.shape.size()));
    if (s.size() != x.shape[size_t(axis)]) return absl::OkStatus();  // infer names it
    per = s.size();
    for (size_t d = size_t(axis) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  }
  Constant out;
  out.shape = x.shape;
  for (int64_t i = 0; i < x.size(); ++i) {
    const int64_t k = (i / inner) % per;
    const double zp = z == nullptr ? 0 : ConstValue(*z, k);
    out.floats.push_back(float((ConstValue(x, i) - zp) * ConstValue(s, k)));
  }
  *folded = true;
  return c.SetConst(n, 0, std::move(out));
}

// Output 0 and the optional mask (output 1) have the input's shape.
absl::Status InferDropout(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) TF_RETURN_IF_ERROR(c.Set(n, 1, x));
  return c.Set(n, 0, x);
}

absl::Status InferBroadcast2(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape a, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape b, c.In(n, 1));
  TF_ASSIGN_OR_RETURN(Shape r, c.Broadcast(n, a, b));
  return c.Set(n, 0, r);
}

absl::Status InferWhere(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape a, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape b, c.In(n, 1));
  TF_ASSIGN_OR_RETURN(Shape r, c.Broadcast(n, a, b));
  TF_ASSIGN_OR_RETURN(Shape cond, c.In(n, 2));
  TF_ASSIGN_OR_RETURN(r, c.Broadcast(n, r, cond));
  return c.Set(n, 0, r);
}

// Before opset 7, Add/Sub/Mul/Div/Pow took broadcast=1 with an `axis`
// where B's dimensions start in A; as numpy broadcasting that is B with
// trailing 1s, so a constant B gets a reshaped copy.
absl::Status LegacyBroadcast(Model* m, Node* n) {
  if (!graph::HasLegacyBroadcast(m->opset) || n->Int("broadcast", 0) == 0 || !n->ints.count("axis") ||
      n->inputs.size() != 2)
    return absl::OkStatus();
  auto a = m->shapes.find(n->inputs[0]), b = m->shapes.find(n->inputs[1]);
  if (a == m->shapes.end() || b == m->shapes.end()) return absl::OkStatus();
  int64_t axis = n->Int("axis", 0);
  if (axis < 0) axis += int64_t(a->second.size());
  const int64_t pad = int64_t(a->second.size()) - axis - int64_t(b->second.size());
  if (axis < 0 || pad < 0)
    return absl::InvalidArgumentError(StrCat("node '", n->name, "': broadcast axis out of range"));
  if (pad == 0) return absl::OkStatus();
  auto c = m->constants.find(n->inputs[1]);
  if (c == m->constants.end()) {
    return absl::UnimplementedError(StrCat("node '", n->name, "' (", n->op,
                                           "): legacy broadcast with an axis needs a constant B"));
  }
  Constant copy = c->second;
  copy.shape.insert(copy.shape.end(), size_t(pad), 1);
  n->inputs[1] = AddConstant(m, StrCat(n->inputs[1], "@axis", axis), std::move(copy));
  return absl::OkStatus();
}

//===--- Folding (shape arithmetic) ---------------------------------------===//

absl::Status FoldIdentity(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr) return absl::OkStatus();
  *folded = true;
  return c.SetConst(n, 0, *c.Const(n, 0));
}

absl::Status FoldCast(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr) return absl::OkStatus();
  const Constant& a = *c.Const(n, 0);
  Constant out = a;
  int64_t to = n.Int("to", onnx::TensorProto::FLOAT);
  const bool to_int = !IsFloatElementType(to);
  if (to_int != a.is_int) {
    out.is_int = to_int;
    out.ints.clear();
    out.floats.clear();
    for (int64_t i = 0; i < a.size(); ++i) PushValue(&out, ConstValue(a, i));
  }
  // A 16-bit float keeps the value of its format (held as a float).
  if (to == onnx::TensorProto::FLOAT16 || to == onnx::TensorProto::BFLOAT16) {
    const HalfKind k =
        to == onnx::TensorProto::FLOAT16 ? HalfKind::kFloat16 : HalfKind::kBFloat16;
    for (float& v : out.floats) v = RoundToHalf(v, k);
  }
  *folded = true;
  return c.SetConst(n, 0, out);
}

// Add, Sub, Mul, Div of two constants of equal size (or one a scalar).
template <char kOp>
absl::Status FoldArithmetic(ShapeContext& c, const Node& n, bool* folded) {
  if (!c.InputsConstant(n) || c.Const(n, 0) == nullptr || c.Const(n, 1) == nullptr)
    return absl::OkStatus();
  const Constant& a = *c.Const(n, 0);
  const Constant& b = *c.Const(n, 1);
  if (a.size() != b.size() && b.size() != 1 && a.size() != 1) return absl::OkStatus();
  Constant out;
  out.is_int = a.is_int && b.is_int;
  out.shape = a.size() >= b.size() ? a.shape : b.shape;
  int64_t count = std::max(a.size(), b.size());
  for (int64_t i = 0; i < count; ++i) {
    double x = ConstValue(a, a.size() == 1 ? 0 : i), y = ConstValue(b, b.size() == 1 ? 0 : i);
    if (kOp == '/' && y == 0) return c.Error(n, "division by zero in shape arithmetic");
    double v = kOp == '*' ? x * y : kOp == '+' ? x + y : kOp == '-' ? x - y : x / y;
    if (out.is_int && kOp == '/') v = std::trunc(v);
    PushValue(&out, v);
  }
  *folded = true;
  return c.SetConst(n, 0, out);
}

// Element-wise functions of the folded operators, over the inputs' values.
double LogOf(const double* v) { return std::log(v[0]); }
double NotOf(const double* v) { return v[0] == 0 ? 1 : 0; }
double AndOf(const double* v) { return v[0] != 0 && v[1] != 0; }
double OrOf(const double* v) { return v[0] != 0 || v[1] != 0; }
double XorOf(const double* v) { return (v[0] != 0) != (v[1] != 0); }
double EqualOf(const double* v) { return v[0] == v[1]; }
double LessOf(const double* v) { return v[0] < v[1]; }
double LessOrEqualOf(const double* v) { return v[0] <= v[1]; }
double GreaterOf(const double* v) { return v[0] > v[1]; }
double GreaterOrEqualOf(const double* v) { return v[0] >= v[1]; }
double SinOf(const double* v) { return std::sin(v[0]); }
double CosOf(const double* v) { return std::cos(v[0]); }
double TanOf(const double* v) { return std::tan(v[0]); }
double AsinOf(const double* v) { return std::asin(v[0]); }
double AcosOf(const double* v) { return std::acos(v[0]); }
double AtanOf(const double* v) { return std::atan(v[0]); }
double SinhOf(const double* v) { return std::sinh(v[0]); }
double CoshOf(const double* v) { return std::cosh(v[0]); }
double AsinhOf(const double* v) { return std::asinh(v[0]); }
double AcoshOf(const double* v) { return std::acosh(v[0]); }
double AtanhOf(const double* v) { return std::atanh(v[0]); }
double SignOf(const double* v) { return v[0] > 0 ? 1 : v[0] < 0 ? -1 : 0; }
double RoundOf(const double* v) { return std::nearbyint(v[0]); }  // halves to even
double AbsOf(const double* v) { return std::fabs(v[0]); }
double NegOf(const double* v) { return -v[0]; }
double CeilOf(const double* v) { return std::ceil(v[0]); }
double FloorOf(const double* v) { return std::floor(v[0]); }
double IsNaNOf(const double* v) { return std::isnan(v[0]) ? 1 : 0; }
// Mod with fmod = 0 (integers): the remainder takes the divisor's sign.
double ModOf(const double* v) {
  if (v[1] == 0) return 0;
  const double r = std::fmod(v[0], v[1]);
  return r != 0 && (r < 0) != (v[1] < 0) ? r + v[1] : r;
}
double FmodOf(const double* v) { return std::fmod(v[0], v[1]); }

// An element-wise node whose inputs are all constant: f over them,
// broadcast; an integer result when `to_int` says so, or (nullopt) when
// every input is an integer.
absl::Status FoldElementwiseOf(ShapeContext& c, const Node& n, double (*f)(const double*),
                               std::optional<bool> to_int, bool* folded) {
  if (n.inputs.empty() || !c.InputsConstant(n)) return absl::OkStatus();
  std::vector<size_t> inputs;
  Shape out;
  bool ints = true;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    TF_ASSIGN_OR_RETURN(Shape s, c.In(n, i));
    TF_ASSIGN_OR_RETURN(out, c.Broadcast(n, out, s));
    ints &= c.Const(n, i) != nullptr && c.Const(n, i)->is_int;
    inputs.push_back(i);
  }
  return c.FoldBroadcast(n, inputs, out, to_int.value_or(ints), f, folded);
}

// FoldElementwiseOf with f; a boolean (int) result when kToInt.
template <double (*F)(const double*), bool kToInt>
absl::Status FoldElementwise(ShapeContext& c, const Node& n, bool* folded) {
  return FoldElementwiseOf(c, n, F, kToInt, folded);
}

// FoldElementwiseOf with f, the result an integer when every input is.
template <double (*F)(const double*)>
absl::Status FoldSameType(ShapeContext& c, const Node& n, bool* folded) {
  return FoldElementwiseOf(c, n, F, std::nullopt, folded);
}

// Mod: integers by the divisor's sign (fmod = 0), or C's fmod (fmod = 1,
// which float inputs require). Shape arithmetic (window partitions) folds.
absl::Status FoldMod(ShapeContext& c, const Node& n, bool* folded) {
  const int64_t fmod = n.Int("fmod", 0);
  if (fmod != 0 && fmod != 1) return c.Error(n, StrCat("fmod ", fmod, " is not 0 or 1"));
  return fmod == 1 ? FoldSameType<FmodOf>(c, n, folded) : FoldSameType<ModOf>(c, n, folded);
}

// A comparison or logical operator: two inputs broadcast, a boolean result.
template <double (*F)(const double*)>
OpDef Compare(std::string_view name, int64_t min_opset) {
  return {.name = name,
          .min_opset = min_opset,
          .fold = FoldElementwise<F, true>,
          .infer = InferBroadcast2};
}

//===--- Activations an anchor fuses --------------------------------------===//

bool ReluEpilogue(const Model&, const Node&, v1::Epilogue* e) {
  e->set_kind(v1::EPILOGUE_KIND_RELU);
  return true;
}

bool LeakyReluEpilogue(const Model&, const Node& n, v1::Epilogue* e) {
  e->set_kind(v1::EPILOGUE_KIND_LEAKY_RELU);
  e->set_alpha(n.Float("alpha", 0.01f));
  return true;
}

bool SigmoidEpilogue(const Model&, const Node&, v1::Epilogue* e) {
  e->set_kind(v1::EPILOGUE_KIND_SIGMOID);
  return true;
}

bool HardSwishEpilogue(const Model&, const Node&, v1::Epilogue* e) {
  e->set_kind(v1::EPILOGUE_KIND_HARDSWISH);
  return true;
}

// Clip with constant bounds (attributes before opset 11, inputs from 11):
// [0, 6] is ReLU6.
bool ClipEpilogue(const Model& m, const Node& n, v1::Epilogue* e) {
  float lo = -FLT_MAX, hi = FLT_MAX;
  if (!graph::ClipBoundsAreInputs(m.opset)) {
    lo = n.Float("min", lo);
    hi = n.Float("max", hi);
  } else {
    auto value = [&](size_t i, float* v) {
      if (i >= n.inputs.size() || n.inputs[i].empty()) return true;
      auto c = m.constants.find(n.inputs[i]);
      if (c == m.constants.end() || c->second.size() != 1) return false;
      *v = c->second.is_int ? float(c->second.ints[0]) : c->second.floats[0];
      return true;
    };
    if (!value(1, &lo) || !value(2, &hi)) return false;
  }
  if (lo == 0 && hi == 6) {
    e->set_kind(v1::EPILOGUE_KIND_RELU6);
  } else {
    e->set_kind(v1::EPILOGUE_KIND_CLIP);
    e->set_min(lo);
    e->set_max(hi);
  }
  return true;
}

OpDef Unary(std::string_view name, bool (*map)(const Model&, const Node&, v1::MapStep*) = nullptr) {
  return {.name = name, .infer = InferSameShape, .map = map};
}

// A Unary that also folds on a constant input, keeping its element type
// (shape arithmetic: a negated axis, a rounded size).
template <double (*F)(const double*)>
OpDef UnaryFolded(std::string_view name,
                  bool (*map)(const Model&, const Node&, v1::MapStep*) = nullptr) {
  return {.name = name, .fold = FoldSameType<F>, .infer = InferSameShape, .map = map};
}

// One input, f element by element, folded when the input is constant.
template <double (*F)(const double*)>
OpDef Folded(std::string_view name, int64_t min_opset) {
  return {.name = name,
          .min_opset = min_opset,
          .fold = FoldElementwise<F, false>,
          .infer = InferSameShape};
}

//===--- Kernels of their own ---------------------------------------------===//

// The node's inputs as the workload's, in order, in 4 dimensions (the form
// workload specs write): fewer get leading 1s, more merge neighbouring
// dimensions that every input either spans whole or broadcasts, which
// leaves the contiguous data as it is. False when an input's shape is
// unknown, or no merge keeps the broadcast.
bool ElementwiseInputs(const Model& m, const Node& n, size_t count, v1::Workload* w) {
  if (n.inputs.size() < count || n.outputs.size() != 1) return false;
  auto out = m.shapes.find(n.outputs[0]);
  if (out == m.shapes.end()) return false;
  Shape o = out->second;
  std::vector<Shape> in;
  for (size_t i = 0; i < count; ++i) {
    auto s = m.shapes.find(n.inputs[i]);
    if (n.inputs[i].empty() || s == m.shapes.end()) return false;
    in.push_back(s->second);
  }
  if (!ElementwiseForm(&o, &in)) return false;
  w->set_op(v1::OP_KIND_ELEMENTWISE);
  for (const Shape& x : in) *w->add_inputs() = FloatSpec(x);
  return true;
}

//===--- Steps of fused elementwise programs ------------------------------===//

template <v1::MapFn F>
bool MapPlain(const Model&, const Node& n, v1::MapStep* s) {
  const ir::MapFnInfo* f = ir::FindMapFn(F);
  if (n.inputs.size() != size_t(f->tensors) || n.outputs.size() != 1) return false;
  s->set_fn(F);
  return true;
}

bool MapClip(const Model& m, const Node& n, v1::MapStep* s) {
  v1::Epilogue e;
  if (n.outputs.size() != 1 || !ClipEpilogue(m, n, &e)) return false;
  s->set_fn(v1::MAP_FN_CLIP);
  const bool relu6 = e.kind() == v1::EPILOGUE_KIND_RELU6;
  s->add_args()->set_literal(relu6 ? 0.0f : e.min());
  s->add_args()->set_literal(relu6 ? 6.0f : e.max());
  return true;
}

bool MapLeakyRelu(const Model&, const Node& n, v1::MapStep* s) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  s->set_fn(v1::MAP_FN_LEAKY_RELU);
  s->add_args()->set_literal(n.Float("alpha", 0.01f));
  return true;
}

bool MapHardSigmoid(const Model&, const Node& n, v1::MapStep* s) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  s->set_fn(v1::MAP_FN_HARD_SIGMOID);
  s->add_args()->set_literal(n.Float("alpha", 0.2f));
  s->add_args()->set_literal(n.Float("beta", 0.5f));
  return true;
}

// Pow with a constant scalar exponent (any other stays native).
bool MapPow(const Model& m, const Node& n, v1::MapStep* s) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  auto c = m.constants.find(n.inputs[1]);
  if (c == m.constants.end() || ValueCount(c->second) != 1) return false;
  const double e = ConstValue(c->second, 0);
  if (!std::isfinite(e)) return false;
  s->set_fn(v1::MAP_FN_POW);
  s->add_args()->set_literal(float(e));
  return true;
}

template <v1::ElementwiseKind K>
bool UnaryAlone(const Model& m, const Node& n, v1::Workload* w) {
  w->mutable_elementwise()->set_kind(K);
  return ElementwiseInputs(m, n, 1, w);
}

// Two inputs broadcast numpy-style (either may be a constant).
template <v1::ElementwiseKind K>
bool BinaryAlone(const Model& m, const Node& n, v1::Workload* w) {
  if (n.inputs.size() != 2) return false;
  w->mutable_elementwise()->set_kind(K);
  return ElementwiseInputs(m, n, 2, w);
}

bool ClipAlone(const Model& m, const Node& n, v1::Workload* w) {
  v1::Epilogue e;
  if (!ClipEpilogue(m, n, &e)) return false;
  v1::ElementwiseAttrs* a = w->mutable_elementwise();
  a->set_kind(v1::ELEMENTWISE_KIND_CLIP);
  a->set_min(e.kind() == v1::EPILOGUE_KIND_RELU6 ? 0.0f : e.min());
  a->set_max(e.kind() == v1::EPILOGUE_KIND_RELU6 ? 6.0f : e.max());
  return ElementwiseInputs(m, n, 1, w);
}

}  // namespace

bool ElementwiseForm(std::vector<int64_t>* out, std::vector<std::vector<int64_t>>* shapes) {
  Shape& o = *out;
  std::vector<Shape>& in = *shapes;
  for (Shape& x : in) {
    if (x.size() > o.size()) return false;
    x.insert(x.begin(), o.size() - x.size(), 1);
  }
  while (o.size() < 4) {
    o.insert(o.begin(), 1);
    for (Shape& x : in) x.insert(x.begin(), 1);
  }
  while (o.size() > 4) {
    size_t d = 0;
    auto mergeable = [&](size_t k) {
      for (const Shape& x : in) {
        const bool whole = x[k] == o[k] && x[k + 1] == o[k + 1];
        if (!whole && !(x[k] == 1 && x[k + 1] == 1)) return false;
      }
      return true;
    };
    while (d + 1 < o.size() && !mergeable(d)) ++d;
    if (d + 1 >= o.size()) return false;
    o[d] *= o[d + 1];
    o.erase(o.begin() + int64_t(d) + 1);
    for (Shape& x : in) {
      x[d] *= x[d + 1];
      x.erase(x.begin() + int64_t(d) + 1);
    }
  }
  return true;
}

namespace {

// One input, apart from the activations (the registry's ElementwiseOps).
std::vector<OpDef> OneInputOps() {
  return {
      // One input.
      UnaryFolded<AbsOf>("Abs", MapPlain<v1::MAP_FN_ABS>),
      UnaryFolded<CeilOf>("Ceil"),
      Unary("Elu"),
      {.name = "ThresholdedRelu", .min_opset = 10, .infer = InferSameShape},
      {.name = "Shrink", .min_opset = 9, .infer = InferSameShape},
      {.name = "Erf", .min_opset = 9, .infer = InferSameShape, .map = MapPlain<v1::MAP_FN_ERF>},
      Unary("Exp", MapPlain<v1::MAP_FN_EXP>),
      UnaryFolded<FloorOf>("Floor"),
      Unary("Gelu"),
      Unary("HardSigmoid", MapHardSigmoid),
      {.name = "Log",
       .fold = FoldElementwise<LogOf, false>,
       .infer = InferSameShape,
       .map = MapPlain<v1::MAP_FN_LOG>},
      UnaryFolded<NegOf>("Neg", MapPlain<v1::MAP_FN_NEG>),
      {.name = "Not", .min_opset = 1, .fold = FoldElementwise<NotOf, true>, .infer = InferSameShape},
      // The slope broadcasts to the input: a program step whose second
      // operand is the slope. The pre-opset-7 per-channel form ([C] against
      // [N, C, ...]) broadcasts differently and runs natively.
      Unary("PRelu", MapPlain<v1::MAP_FN_PRELU>),
      Unary("Reciprocal", MapPlain<v1::MAP_FN_RECIPROCAL>),
      Folded<SinOf>("Sin", 7),
      Folded<CosOf>("Cos", 7),
      Folded<TanOf>("Tan", 7),
      Folded<AsinOf>("Asin", 7),
      Folded<AcosOf>("Acos", 7),
      Folded<AtanOf>("Atan", 7),
      Folded<SinhOf>("Sinh", 9),
      Folded<CoshOf>("Cosh", 9),
      Folded<AsinhOf>("Asinh", 9),
      Folded<AcoshOf>("Acosh", 9),
      Folded<AtanhOf>("Atanh", 9),
      {.name = "Sign", .min_opset = 9, .fold = FoldSameType<SignOf>, .infer = InferSameShape},
      Folded<RoundOf>("Round", 11),
      {.name = "IsNaN", .min_opset = 9, .fold = FoldElementwise<IsNaNOf, true>,
       .infer = InferSameShape},
      {.name = "IsInf", .min_opset = 10, .infer = InferSameShape},
      {.name = "Softsign", .min_opset = 1, .infer = InferSameShape},
      Unary("Selu"),
      {.name = "Softplus",
       .min_opset = 1,
       .infer = InferSameShape,
       .map = MapPlain<v1::MAP_FN_SOFTPLUS>},
      Unary("Sqrt", MapPlain<v1::MAP_FN_SQRT>),
      Unary("Tanh", MapPlain<v1::MAP_FN_TANH>),
      {.name = "Identity", .fold = FoldIdentity, .infer = InferSameShape},
      {.name = "Cast", .fold = FoldCast, .infer = InferSameShape},
      // 8-bit quantization (dynamically quantized models: uint8 values, a
      // float scale, a uint8 zero point).
      {.name = "DynamicQuantizeLinear", .min_opset = 11, .infer = InferDynamicQuantize},
      {.name = "DequantizeLinear",
       .min_opset = 10,
       .fold = FoldDequantize,
       .infer = InferDequantize},
      // round(x / scale) + zero point, saturated to the zero point's 8-bit
      // type (import records it as output_dtype; uint8 without one).
      {.name = "QuantizeLinear", .min_opset = 10, .infer = InferDequantize},
      {.name = "Dropout", .infer = InferDropout},
  };
}

// Sum and Mean of one or more inputs (numpy broadcast) as a chain of Adds,
// Mean's then divided by the count.
absl::StatusOr<std::vector<Node>> ExpandSumOrMean(Model* m, const Node& n) {
  if (n.inputs.empty() || n.outputs.empty()) {
    return absl::InvalidArgumentError(StrCat(n.op, " node '", n.name, "' has no inputs"));
  }
  const bool mean = n.op == "Mean";
  std::vector<Node> nodes;
  const std::string sum =
      BinaryChain(n, "Add", mean ? StrCat(n.outputs[0], "/sum") : n.outputs[0], &nodes);
  if (mean) {
    Constant k;
    k.floats = {float(n.inputs.size())};
    nodes.push_back(ExpandedNode(
        n, "Div", {sum, AddConstant(m, StrCat(n.outputs[0], "/count"), std::move(k))},
        n.outputs[0]));
  } else if (nodes.empty()) {
    nodes.push_back(ExpandedNode(n, "Identity", {sum}, n.outputs[0]));
  }
  return nodes;
}

// BitShift: two unsigned inputs broadcast, of a type of at most 32 bits
// (held exactly as floats) that import recorded.
absl::Status InferBitShift(ShapeContext& c, const Node& n) {
  const int64_t type = n.Int("element_type", 0);
  // TensorProto.DataType: UINT8 2, UINT16 4, UINT32 12.
  if (type != 2 && type != 4)
    return c.Error(n, "shifts only uint8 and uint16 values (the type of its input must be known)");
  auto dir = n.strings.find("direction");
  if (dir == n.strings.end() || (dir->second != "LEFT" && dir->second != "RIGHT"))
    return c.Error(n, "direction must be LEFT or RIGHT");
  return InferBroadcast2(c, n);
}

// Max and Min of other than two inputs as a chain of binary ones (one
// input: its copy); two inputs come back as they are.
absl::StatusOr<std::vector<Node>> ExpandMinMax(Model*, const Node& n) {
  if (n.inputs.empty() || n.outputs.empty()) {
    return absl::InvalidArgumentError(StrCat(n.op, " node '", n.name, "' has no inputs"));
  }
  if (n.inputs.size() == 2) return std::vector<Node>{n};
  std::vector<Node> nodes;
  const std::string result = BinaryChain(n, n.op, n.outputs[0], &nodes);
  if (nodes.empty()) nodes.push_back(ExpandedNode(n, "Identity", {result}, n.outputs[0]));
  return nodes;
}

// Activations, then two inputs broadcast, comparisons and Where.
std::vector<OpDef> ActivationAndBinaryOps() {
  return {
      // Activations.
      {.name = "Relu",
       .infer = InferSameShape,
       .fusion = FusionRole::kActivation,
       .activation = ReluEpilogue,
       .alone = UnaryAlone<v1::ELEMENTWISE_KIND_RELU>,
       .map = MapPlain<v1::MAP_FN_RELU>},
      {.name = "LeakyRelu",
       .infer = InferSameShape,
       .fusion = FusionRole::kActivation,
       .activation = LeakyReluEpilogue,
       .map = MapLeakyRelu},
      {.name = "Sigmoid",
       .infer = InferSameShape,
       .fusion = FusionRole::kActivation,
       .activation = SigmoidEpilogue,
       .gated = v1::EPILOGUE_KIND_SILU,
       .alone = UnaryAlone<v1::ELEMENTWISE_KIND_SIGMOID>,
       .map = MapPlain<v1::MAP_FN_SIGMOID>},
      {.name = "HardSwish",
       .min_opset = 14,
       .infer = InferSameShape,
       .fusion = FusionRole::kActivation,
       .activation = HardSwishEpilogue,
       .alone = UnaryAlone<v1::ELEMENTWISE_KIND_HARDSWISH>,
       .map = MapPlain<v1::MAP_FN_HARD_SWISH>},
      {.name = "Clip",
       .infer = InferSameShape,
       .fusion = FusionRole::kActivation,
       .activation = ClipEpilogue,
       .alone = ClipAlone,
       .map = MapClip},
      // Two inputs, broadcast.
      {.name = "Add",
       .normalize = LegacyBroadcast,
       .fold = FoldArithmetic<'+'>,
       .infer = InferBroadcast2,
       .fusion = FusionRole::kAdd,
       .alone = BinaryAlone<v1::ELEMENTWISE_KIND_ADD>,
       .map = MapPlain<v1::MAP_FN_ADD>},
      {.name = "Sub",
       .normalize = LegacyBroadcast,
       .fold = FoldArithmetic<'-'>,
       .infer = InferBroadcast2,
       .alone = BinaryAlone<v1::ELEMENTWISE_KIND_SUB>,
       .map = MapPlain<v1::MAP_FN_SUB>},
      {.name = "Mul",
       .normalize = LegacyBroadcast,
       .fold = FoldArithmetic<'*'>,
       .infer = InferBroadcast2,
       .fusion = FusionRole::kGateMul,
       .alone = BinaryAlone<v1::ELEMENTWISE_KIND_MUL>,
       .map = MapPlain<v1::MAP_FN_MUL>},
      {.name = "Div",
       .normalize = LegacyBroadcast,
       .fold = FoldArithmetic<'/'>,
       .infer = InferBroadcast2,
       .alone = BinaryAlone<v1::ELEMENTWISE_KIND_DIV>,
       .map = MapPlain<v1::MAP_FN_DIV>},
      {.name = "Pow", .normalize = LegacyBroadcast, .infer = InferBroadcast2, .map = MapPow},
      {.name = "Max",
       .expand = ExpandMinMax,
       .infer = InferBroadcast2,
       .map = MapPlain<v1::MAP_FN_MAX>},
      {.name = "Mod", .min_opset = 10, .fold = FoldMod, .infer = InferBroadcast2},
      {.name = "BitShift", .min_opset = 11, .infer = InferBitShift},
      {.name = "Min",
       .expand = ExpandMinMax,
       .infer = InferBroadcast2,
       .map = MapPlain<v1::MAP_FN_MIN>},
      {.name = "Sum", .expand = ExpandSumOrMean, .native = false},
      {.name = "Mean", .expand = ExpandSumOrMean, .native = false},
      // Comparisons and logical operators (booleans are 0 and 1).
      Compare<EqualOf>("Equal", kDefaultMinOpset),
      Compare<LessOf>("Less", kDefaultMinOpset),
      Compare<GreaterOf>("Greater", kDefaultMinOpset),
      Compare<LessOrEqualOf>("LessOrEqual", 12),
      Compare<GreaterOrEqualOf>("GreaterOrEqual", 12),
      Compare<AndOf>("And", 7),
      Compare<OrOf>("Or", 7),
      Compare<XorOf>("Xor", 7),
      {.name = "Where", .min_opset = 9, .infer = InferWhere},
  };
}

}  // namespace

const std::vector<OpDef>& ElementwiseOps() {
  static const auto* ops = [] {
    auto* all = new std::vector<OpDef>(OneInputOps());
    for (OpDef& d : ActivationAndBinaryOps()) all->push_back(std::move(d));
    return all;
  }();
  return *ops;
}

}  // namespace tunefarm::frontend
