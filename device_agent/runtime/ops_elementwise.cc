// The elementwise family (ops_internal.h): operators of one input element
// by element (Map, MapInT), and those over broadcast inputs (Broadcast:
// the binary ones, Where, Max/Min, Pow, PRelu, Expand). Mirrors
// compiler/frontend/ops_elementwise.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/float16.h"
#include "device_agent/runtime/ops_internal.h"
#include "proto/onnx_forms.h"

namespace tunefarm::runtime::ops_internal {

template <typename T>
template <typename F>
absl::Status Op<T>::Map(F f) {
  return MapInT([&f](T v) { return T(f(double(v))); });
}

// A constant exponent of 2 squares (as std::pow does, exactly); any other
// exponent broadcasts through std::pow.
template <typename T>
absl::Status Op<T>::Pow() {
  std::vector<double> e;
  if (a_.in_const.size() > 1 && a_.in_const[1] != nullptr && Params(1, &e) && e.size() == 1 &&
      e[0] == 2 && InShape(0) == OutShape())
    return Map([](double v) { return v * v; });
  return Zip([](auto a, auto b) { return std::pow(a, b); });
}

// Bounds: attributes before opset 11, inputs from 11 (absent: unbounded).
template <typename T>
absl::Status Op<T>::Clip() {
  double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
  if (!graph::ClipBoundsAreInputs(a_.opset)) {
    if (n_.floats.count("min")) lo = n_.Float("min", 0);
    if (n_.floats.count("max")) hi = n_.Float("max", 0);
  } else {
    std::vector<double> v;
    if (Params(1, &v) && !v.empty()) lo = v[0];
    if (Params(2, &v) && !v.empty()) hi = v[0];
  }
  return Map([lo, hi](double v) { return std::min(hi, std::max(lo, v)); });
}

// To BOOL: 0 or 1; to an integer type: truncation toward zero; to a float type: unchanged.
template <typename T>
absl::Status Op<T>::Cast() {
  const int64_t to = n_.Int("to", 1);
  if (to == 9) {  // BOOL
    return Map([](double v) { return v != 0 ? 1.0 : 0.0; });
  } else if (to == 2 || to == 3 || to == 4 || to == 5 || to == 6 || to == 7 || to == 12 ||
             to == 13) {
    return Map([](double v) { return std::trunc(v); });
  } else if (to == 1 || to == 11) {
    return Map([](double v) { return v; });
  } else if (to == 10 || to == 16) {  // FLOAT16, BFLOAT16: the format's value, held as T
    const HalfKind k = to == 10 ? HalfKind::kFloat16 : HalfKind::kBFloat16;
    return Map([k](double v) { return double(RoundToHalf(float(v), k)); });
  }
  return Error(StrCat("cast to element type ", to, " is not supported"));
}

// To uint8 over the range of x and 0: scale (max - min) / 255 and zero
// point round(-min / scale) in float32, each value round(x / scale) plus
// the zero point, saturated; halves round to even. All zeros: scale 1 (as
// ONNX Runtime has it), zero point 0, values 0.
template <typename T>
absl::Status Op<T>::DynamicQuantize() {
  if (a_.out.size() != 3 || Out(1) == nullptr || Out(2) == nullptr)
    return Error("needs its three outputs");
  const T* x = In(0);
  const int64_t n = Numel(InShape(0));
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, float(x[i]));
    hi = std::max(hi, float(x[i]));
  }
  const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  const float zp = std::nearbyint(std::clamp(0.0f - lo / scale, 0.0f, 255.0f));
  T* y = Out(0);
  ParallelElements(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      y[i] = T(std::clamp(std::nearbyint(float(x[i]) / scale) + zp, 0.0f, 255.0f));
  });
  Out(1)[0] = T(scale);
  Out(2)[0] = T(zp);
  return absl::OkStatus();
}

// y = f(x, scale, zero point) element by element, with the scale and zero
// point (inputs 1 and 2; no zero point: 0) per tensor or per index of
// `axis`.
template <typename T>
template <typename F>
absl::Status Op<T>::PerAxisAffine(F f) {
  std::vector<double> s, z;
  if (!Params(1, &s) || s.empty()) return Error("no scale");
  Params(2, &z);
  if (!z.empty() && z.size() != s.size()) return Error("scale and zero point differ in size");
  const Shape& xs = InShape(0);
  int64_t inner = 1, per = 1;
  if (s.size() > 1) {
    int64_t axis = n_.Int("axis", 1);
    if (axis < 0) axis += int64_t(xs.size());
    if (axis < 0 || axis >= int64_t(xs.size()) || xs[size_t(axis)] != int64_t(s.size()))
      return Error("scale is not one value per index of the axis");
    per = int64_t(s.size());
    for (size_t d = size_t(axis) + 1; d < xs.size(); ++d) inner *= xs[d];
  }
  const T* x = In(0);
  T* y = Out();
  ParallelElements(Numel(xs), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const size_t k = size_t((i / inner) % per);
      y[i] = T(f(x[i], s[k], z.empty() ? 0.0 : z[k]));
    }
  });
  return absl::OkStatus();
}

// (x - zero_point) * scale.
template <typename T>
absl::Status Op<T>::Dequantize() {
  return PerAxisAffine([](T x, double s, double z) { return (double(x) - z) * s; });
}

// round(x / scale) + zero point (halves to even), saturated to the range
// of output_dtype (TensorProto's UINT8 = 2, the default, or INT8 = 3).
template <typename T>
absl::Status Op<T>::Quantize() {
  const int64_t dtype = n_.Int("output_dtype", 2);
  if (dtype != 2 && dtype != 3) return Error("the output type is not uint8 or int8");
  const double lo = dtype == 3 ? -128 : 0, hi = dtype == 3 ? 127 : 255;
  return PerAxisAffine([lo, hi](T x, double s, double z) {
    // The quotient in float32, as the operator is defined on float
    // inputs: in double a quotient just off .5 rounds the other way.
    return std::clamp(std::nearbyint(float(x) / float(s)) + z, lo, hi);
  });
}

template <typename T>
absl::Status Op<T>::Gelu() {
  const std::string approx = n_.strings.count("approximate") ? n_.strings.at("approximate") : "";
  if (approx == "tanh") {
    return Map([](double v) {
      return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    });
  }
  return Map([](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
}

// A slope that broadcasts, or one per channel (the pre-opset-7 form: [C] as
// [C, 1, ..., 1]).
template <typename T>
absl::Status Op<T>::PRelu() {
  auto f = [](const T* v) { return v[0] < 0 ? T(v[0] * v[1]) : v[0]; };
  const auto& shapes = a_.in_shapes;
  if (shapes.size() == 2 && shapes[0].size() > 2 && shapes[1].size() == 1 &&
      shapes[1][0] == shapes[0][1] && shapes[1][0] != shapes[0].back()) {
    OpArgs<T> per_channel = a_;
    per_channel.in_shapes[1].resize(shapes[0].size() - 1, 1);
    return Op<T>(per_channel).template Broadcast<true>(0, 2, f);
  }
  return Broadcast<true>(0, 2, f);
}

// Max or Min of 1 to 4 broadcast inputs.
template <typename T>
absl::Status Op<T>::MinMax(bool mx) {
  if (n_.inputs.size() == 1) {
    std::copy(In(0), In(0) + Numel(OutShape()), Out());
    return absl::OkStatus();
  }
  if (n_.inputs.size() > 4) return Error("more than 4 inputs");
  if (n_.inputs.size() == 2) {
    return mx ? Broadcast<true>(0, 2, [](const T* v) { return std::max(v[0], v[1]); })
              : Broadcast<true>(0, 2, [](const T* v) { return std::min(v[0], v[1]); });
  }
  const size_t cnt = n_.inputs.size();
  return Broadcast(0, cnt, [cnt, mx](const T* v) {
    T r = v[0];
    for (size_t k = 1; k < cnt; ++k) r = mx ? std::max(r, v[k]) : std::min(r, v[k]);
    return r;
  });
}

// The inner loop of Broadcast over `n` elements whose inputs advance by
// `step[k]` each (0: one value for the whole run). A binary f over unit or
// zero steps gets loops of its own, which the compiler vectorizes.
template <bool kBinary, typename T, typename F>
void BroadcastRun(F& f, size_t count, const T* const* in, const int64_t* step, T* y, int64_t n) {
  if (kBinary && step[0] <= 1 && step[1] <= 1) {
    const T* a = in[0];
    const T* b = in[1];
    if (step[0] == 1 && step[1] == 1) {
      for (int64_t i = 0; i < n; ++i) {
        const T v[2] = {a[i], b[i]};
        y[i] = f(v);
      }
    } else if (step[0] == 1) {
      const T bv = b[0];
      for (int64_t i = 0; i < n; ++i) {
        const T v[2] = {a[i], bv};
        y[i] = f(v);
      }
    } else if (step[1] == 1) {
      const T av = a[0];
      for (int64_t i = 0; i < n; ++i) {
        const T v[2] = {av, b[i]};
        y[i] = f(v);
      }
    } else {
      const T v[2] = {a[0], b[0]};
      std::fill(y, y + n, f(v));
    }
    return;
  }
  T v[4] = {};
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < count; ++k) v[k] = in[k][i * step[k]];
    y[i] = f(v);
  }
}

template <typename T>
template <bool kBinary, typename F>
absl::Status Op<T>::Broadcast(size_t first, size_t count, F f) {
  if (kBinary && count != 2) return Error("a binary kernel over other than 2 inputs");
  const Shape& os = OutShape();
  const size_t r = os.size();
  const int64_t total = Numel(os);
  std::vector<const T*> ptr(count);
  std::vector<Shape> st(count, Shape(r, 0));
  for (size_t k = 0; k < count; ++k) {
    ptr[k] = In(first + k);
    if (ptr[k] == nullptr) return Error(StrCat("input ", first + k, " is missing"));
    const Shape& s = InShape(first + k);
    if (s.size() > r) return Error("input has more dimensions than the output");
    Shape full(r - s.size(), 1);
    full.insert(full.end(), s.begin(), s.end());
    Shape fs = Strides(full);
    for (size_t d = 0; d < r; ++d) {
      if (full[d] != os[d] && full[d] != 1) return Error("shapes do not broadcast");
      st[k][d] = full[d] == 1 ? 0 : fs[d];
    }
  }
  if (total == 0) return absl::OkStatus();
  // Dimensions merged where every input continues contiguously (or stays
  // put) from one into the next: [1,C,H,W] + [1,C,1,1] is C rows of H*W
  // against one value each. dims/step: innermost first.
  Shape dims;
  std::vector<Shape> step(count);
  for (size_t d = r; d-- > 0;) {
    if (os[d] == 1) continue;
    bool merge = !dims.empty();
    for (size_t k = 0; k < count && merge; ++k) merge = st[k][d] == step[k].back() * dims.back();
    if (merge) {
      dims.back() *= os[d];
    } else {
      dims.push_back(os[d]);
      for (size_t k = 0; k < count; ++k) step[k].push_back(st[k][d]);
    }
  }
  if (dims.empty()) {  // one element
    dims.push_back(1);
    for (size_t k = 0; k < count; ++k) step[k].push_back(0);
  }
  // Work items: each row (the innermost merged dimension) in chunks, so a
  // single long row is split across threads too.
  constexpr int64_t kChunk = 16384;
  const int64_t inner = dims[0];
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  const int64_t rows = total / inner;
  T* y = Out();
  Parallel(rows * chunks, [&](int64_t b, int64_t e) {
    const T* in[4];
    int64_t inner_step[4];
    for (size_t k = 0; k < count; ++k) inner_step[k] = step[k][0];
    for (int64_t item = b; item < e; ++item) {
      const int64_t row = item / chunks, begin = (item % chunks) * kChunk;
      const int64_t n = std::min(kChunk, inner - begin);
      int64_t rem = row;
      for (size_t k = 0; k < count; ++k) in[k] = ptr[k] + begin * inner_step[k];
      for (size_t d = 1; d < dims.size(); ++d) {
        const int64_t idx = rem % dims[d];
        rem /= dims[d];
        for (size_t k = 0; k < count; ++k) in[k] += idx * step[k][d];
      }
      BroadcastRun<kBinary>(f, count, in, inner_step, y + row * inner + begin, n);
    }
  });
  return absl::OkStatus();
}

// Input 0 broadcast to the output's shape.
template <typename T>
absl::Status Op<T>::Expand() {
  return Broadcast(0, 1, [](const T* v) { return v[0]; });
}

// Trigonometric, hyperbolic, sign, rounding and classification (computed in
// double; MapInT where float is exact).
static std::vector<NativeOp> MathOps() {
  return {
      Kernel("Sin", [](auto& o) { return o.MapInT([](auto v) { return std::sin(v); }); }),
      Kernel("Cos", [](auto& o) { return o.MapInT([](auto v) { return std::cos(v); }); }),
      Kernel("Tan", [](auto& o) { return o.Map([](double v) { return std::tan(v); }); }),
      Kernel("Asin", [](auto& o) { return o.Map([](double v) { return std::asin(v); }); }),
      Kernel("Acos", [](auto& o) { return o.Map([](double v) { return std::acos(v); }); }),
      Kernel("Atan", [](auto& o) { return o.Map([](double v) { return std::atan(v); }); }),
      Kernel("Sinh", [](auto& o) { return o.Map([](double v) { return std::sinh(v); }); }),
      Kernel("Cosh", [](auto& o) { return o.Map([](double v) { return std::cosh(v); }); }),
      Kernel("Asinh", [](auto& o) { return o.Map([](double v) { return std::asinh(v); }); }),
      Kernel("Acosh", [](auto& o) { return o.Map([](double v) { return std::acosh(v); }); }),
      Kernel("Atanh", [](auto& o) { return o.Map([](double v) { return std::atanh(v); }); }),
      Kernel("Sign",
             [](auto& o) {
               return o.Map([](double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0; });
             }),
      // Halves to even (the default rounding mode).
      Kernel("Round", [](auto& o) { return o.Map([](double v) { return std::nearbyint(v); }); }),
      Kernel("Softsign",
             [](auto& o) { return o.Map([](double v) { return v / (1 + std::fabs(v)); }); }),
      Kernel("IsNaN",
             [](auto& o) { return o.Map([](double v) { return std::isnan(v) ? 1.0 : 0.0; }); }),
      Kernel("IsInf",
             [](auto& o) {
               const bool neg = o.node().Int("detect_negative", 1) != 0;
               const bool pos = o.node().Int("detect_positive", 1) != 0;
               return o.Map([neg, pos](double v) {
                 return std::isinf(v) && (v > 0 ? pos : neg) ? 1.0 : 0.0;
               });
             }),
  };
}

// The elementwise family's operators.
std::vector<NativeOp> ElementwiseOps() {
  std::vector<NativeOp> ops = {
      // One input, element by element (computed in double; MapInT where float is exact).
      Kernel("Abs", [](auto& o) { return o.MapInT([](auto v) { return std::fabs(v); }); }),
      Kernel("Cast", [](auto& o) { return o.Cast(); }),
      Kernel("DynamicQuantizeLinear", [](auto& o) { return o.DynamicQuantize(); }),
      Kernel("DequantizeLinear", [](auto& o) { return o.Dequantize(); }),
      Kernel("QuantizeLinear", [](auto& o) { return o.Quantize(); }),
      Kernel("Ceil", [](auto& o) { return o.Map([](double v) { return std::ceil(v); }); }),
      Kernel("Clip", [](auto& o) { return o.Clip(); }),
      Kernel("ThresholdedRelu",
             [](auto& o) {
               const double alpha = o.node().Float("alpha", 1.0f);
               return o.Map([alpha](double v) { return v > alpha ? v : 0.0; });
             }),
      Kernel("Shrink",
             [](auto& o) {
               const double lambd = o.node().Float("lambd", 0.5f), bias = o.node().Float("bias", 0.0f);
               return o.Map([lambd, bias](double v) {
                 return v < -lambd ? v + bias : v > lambd ? v - bias : 0.0;
               });
             }),
      Kernel("Elu",
             [](auto& o) {
               const double alpha = o.node().Float("alpha", 1.0f);
               return o.Map([alpha](double v) { return v >= 0 ? v : alpha * (std::exp(v) - 1); });
             }),
      Kernel("Erf", [](auto& o) { return o.Map([](double v) { return std::erf(v); }); }),
      Kernel("Exp", [](auto& o) { return o.MapInT([](auto v) { return std::exp(v); }); }),
      Kernel("Floor", [](auto& o) { return o.Map([](double v) { return std::floor(v); }); }),
      Kernel("Log", [](auto& o) { return o.Map([](double v) { return std::log(v); }); }),
      Kernel("Gelu", [](auto& o) { return o.Gelu(); }),
      Kernel("HardSigmoid",
             [](auto& o) {
               const double alpha = o.node().Float("alpha", 0.2f);
               const double beta = o.node().Float("beta", 0.5f);
               return o.Map([alpha, beta](double v) {
                 return std::max(0.0, std::min(1.0, alpha * v + beta));
               });
             }),
      Kernel("HardSwish",
             [](auto& o) {
               return o.Map(
                   [](double v) { return v * std::max(0.0, std::min(1.0, v / 6 + 0.5)); });
             }),
      Kernel("LeakyRelu",
             [](auto& o) {
               const double alpha = o.node().Float("alpha", 0.01f);
               return o.Map([alpha](double v) { return v >= 0 ? v : alpha * v; });
             }),
      Kernel("Neg", [](auto& o) { return o.MapInT([](auto v) { return -v; }); }),
      Kernel("Not", [](auto& o) { return o.Map([](double v) { return v == 0 ? 1.0 : 0.0; }); }),
      Kernel("Reciprocal", [](auto& o) { return o.Map([](double v) { return 1.0 / v; }); }),
      Kernel("Relu",
             [](auto& o) { return o.MapInT([](auto v) { return v > 0 ? v : decltype(v)(0); }); }),
      Kernel("Selu",
             [](auto& o) {
               const double alpha = o.node().Float("alpha", 1.67326319217681884765625f);
               const double gamma = o.node().Float("gamma", 1.05070102214813232421875f);
               return o.Map([alpha, gamma](double v) {
                 return v > 0 ? gamma * v : gamma * alpha * (std::exp(v) - 1);
               });
             }),
      Kernel("Sigmoid",
             [](auto& o) { return o.MapInT([](auto v) { return 1 / (1 + std::exp(-v)); }); }),
      Kernel("Softplus",
             [](auto& o) {
               return o.Map([](double v) { return v > 30 ? v : std::log1p(std::exp(v)); });
             }),
      Kernel("Sqrt", [](auto& o) { return o.MapInT([](auto v) { return std::sqrt(v); }); }),
      Kernel("Tanh", [](auto& o) { return o.MapInT([](auto v) { return std::tanh(v); }); }),
      // Broadcast inputs (computed in T).
      Kernel("Add", [](auto& o) { return o.Zip([](auto a, auto b) { return a + b; }); }),
      Kernel("Div", [](auto& o) { return o.Zip([](auto a, auto b) { return a / b; }); }),
      Kernel("Equal", [](auto& o) { return o.Zip([](auto a, auto b) { return a == b; }); }),
      Kernel("Greater", [](auto& o) { return o.Zip([](auto a, auto b) { return a > b; }); }),
      Kernel("Less", [](auto& o) { return o.Zip([](auto a, auto b) { return a < b; }); }),
      Kernel("LessOrEqual", [](auto& o) { return o.Zip([](auto a, auto b) { return a <= b; }); }),
      Kernel("GreaterOrEqual",
             [](auto& o) { return o.Zip([](auto a, auto b) { return a >= b; }); }),
      // Booleans are 0 and 1; any non-zero value reads as true.
      Kernel("And", [](auto& o) { return o.Zip([](auto a, auto b) { return a != 0 && b != 0; }); }),
      Kernel("Or", [](auto& o) { return o.Zip([](auto a, auto b) { return a != 0 || b != 0; }); }),
      Kernel("Xor",
             [](auto& o) { return o.Zip([](auto a, auto b) { return (a != 0) != (b != 0); }); }),
      Kernel("Max", [](auto& o) { return o.MinMax(true); }),
      Kernel("Min", [](auto& o) { return o.MinMax(false); }),
      Kernel("Mul", [](auto& o) { return o.Zip([](auto a, auto b) { return a * b; }); }),
      // Unsigned values of element_type's width (uint8, uint16): a left
      // shift wraps at it.
      Kernel("BitShift",
             [](auto& o) {
               const double wrap = o.node().Int("element_type", 2) == 4 ? 65536.0 : 256.0;
               if (o.node().strings.count("direction") &&
                   o.node().strings.at("direction") == "LEFT")
                 return o.Zip([wrap](auto a, auto b) {
                   return decltype(a)(std::fmod(std::ldexp(double(a), int(b)), wrap));
                 });
               return o.Zip([](auto a, auto b) {
                 return decltype(a)(std::floor(std::ldexp(double(a), -int(b))));
               });
             }),
      // fmod = 1: C's fmod; fmod = 0 (integers): the remainder takes the divisor's sign.
      Kernel("Mod",
             [](auto& o) {
               if (o.node().Int("fmod", 0) == 1)
                 return o.Zip([](auto a, auto b) { return std::fmod(a, b); });
               return o.Zip([](auto a, auto b) {
                 if (b == 0) return decltype(a)(0);
                 const auto r = std::fmod(a, b);
                 return r != 0 && (r < 0) != (b < 0) ? r + b : r;
               });
             }),
      Kernel("Pow", [](auto& o) { return o.Pow(); }),
      Kernel("PRelu", [](auto& o) { return o.PRelu(); }),
      Kernel("Sub", [](auto& o) { return o.Zip([](auto a, auto b) { return a - b; }); }),
      Kernel("Where",
             [](auto& o) {
               return o.Broadcast(0, 3, [](const auto* v) { return v[0] != 0 ? v[1] : v[2]; });
             }),
      Kernel("Expand", [](auto& o) { return o.Expand(); }),
  };
  for (NativeOp& op : MathOps()) ops.push_back(std::move(op));
  return ops;
}

}  // namespace tunefarm::runtime::ops_internal
