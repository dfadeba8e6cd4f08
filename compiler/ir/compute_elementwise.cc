// Operator compute definitions without a reduction: elementwise ops, the
// epilogue activations, map programs and rearrange (a data mover), written
// as stages of the tensor IR (see compute_internal.h).
#include "compiler/ir/compute_internal.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/workload.h"

namespace tunefarm::ir::compute_internal {

using absl::StrCat;

// ---- elementwise and epilogues ----

Expr Activation(v1::EpilogueKind kind, Expr x, const v1::Epilogue& e) {
  switch (kind) {
    case v1::EPILOGUE_KIND_RELU:
      return Max(x, F(0));
    case v1::EPILOGUE_KIND_RELU6:
      return Min(Max(x, F(0)), F(6));
    case v1::EPILOGUE_KIND_CLIP:
      return Min(Max(x, F(e.min())), F(e.max()));
    case v1::EPILOGUE_KIND_LEAKY_RELU:
      return Select(x < F(0), x * F(e.alpha()), x);
    case v1::EPILOGUE_KIND_SIGMOID:
      return F(1) / (F(1) + Call(Op::kExp, F(0) - x));
    case v1::EPILOGUE_KIND_SILU:
      return x / (F(1) + Call(Op::kExp, F(0) - x));
    case v1::EPILOGUE_KIND_HARDSWISH:
      return x * Min(Max(x + F(3), F(0)), F(6)) * F(1.0 / 6.0);
    default:
      return x;
  }
}

namespace {

// erf(x) as Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7):
// 1 - (a1 t + ... + a5 t^5) exp(-x^2), t = 1 / (1 + p |x|), odd in x.
Expr Erf(Expr x) {
  Expr ax = Call(Op::kAbs, x);
  Expr t = F(1) / (F(1) + F(0.3275911) * ax);
  Expr poly = F(1.061405429);
  for (double c : {-1.453152027, 1.421413741, -0.284496736, 0.254829592}) poly = poly * t + F(c);
  Expr y = F(1) - poly * t * Call(Op::kExp, F(0) - ax * ax);
  return Select(x < F(0), F(0) - y, y);
}

// x to a literal power: products for small integers, sqrt for halves,
// exp(e log x) otherwise (NaN for x < 0, as numpy gives).
Expr Pow(Expr x, double e) {
  if (e == 0) return F(1);
  if (e == 0.5) return Call(Op::kSqrt, x);
  if (e == -0.5) return F(1) / Call(Op::kSqrt, x);
  if (e == std::trunc(e) && std::fabs(e) <= 4) {
    Expr p = x;
    for (int i = 1; i < int(std::fabs(e)); ++i) p = p * x;
    return e > 0 ? p : F(1) / p;
  }
  return Call(Op::kExp, F(e) * Call(Op::kLog, x));
}

// One step of a map program over its tensor operands `t` and literals `lit`.
Expr MapStepExpr(const v1::MapStep& s, const std::vector<Expr>& t, const std::vector<double>& lit,
                 const v1::Epilogue& e) {
  switch (s.fn()) {
    case v1::MAP_FN_ADD:
      return t[0] + t[1];
    case v1::MAP_FN_SUB:
      return t[0] - t[1];
    case v1::MAP_FN_MUL:
      return t[0] * t[1];
    case v1::MAP_FN_DIV:
      return t[0] / t[1];
    case v1::MAP_FN_MIN:
      return Min(t[0], t[1]);
    case v1::MAP_FN_MAX:
      return Max(t[0], t[1]);
    case v1::MAP_FN_PRELU:
      return Select(t[0] < F(0), t[0] * t[1], t[0]);
    case v1::MAP_FN_NEG:
      return F(0) - t[0];
    case v1::MAP_FN_ABS:
      return Call(Op::kAbs, t[0]);
    case v1::MAP_FN_SQRT:
      return Call(Op::kSqrt, t[0]);
    case v1::MAP_FN_EXP:
      return Call(Op::kExp, t[0]);
    case v1::MAP_FN_LOG:
      return Call(Op::kLog, t[0]);
    case v1::MAP_FN_TANH:
      return Call(Op::kTanh, t[0]);
    case v1::MAP_FN_SIGMOID:
      return Activation(v1::EPILOGUE_KIND_SIGMOID, t[0], e);
    case v1::MAP_FN_RELU:
      return Max(t[0], F(0));
    case v1::MAP_FN_RECIPROCAL:
      return F(1) / t[0];
    case v1::MAP_FN_ERF:
      return Erf(t[0]);
    case v1::MAP_FN_SOFTPLUS:  // log(1 + e^x) without overflow
      return Max(t[0], F(0)) + Call(Op::kLog, F(1) + Call(Op::kExp, F(0) - Call(Op::kAbs, t[0])));
    case v1::MAP_FN_HARD_SWISH:
      return Activation(v1::EPILOGUE_KIND_HARDSWISH, t[0], e);
    case v1::MAP_FN_POW:
      return Pow(t[0], lit[0]);
    case v1::MAP_FN_CLIP:
      return Min(Max(t[0], F(lit[0])), F(lit[1]));
    case v1::MAP_FN_LEAKY_RELU:
      return Select(t[0] < F(0), t[0] * F(lit[0]), t[0]);
    case v1::MAP_FN_HARD_SIGMOID:
      return Min(Max(F(lit[0]) * t[0] + F(lit[1]), F(0)), F(1));
    default:
      return t.empty() ? F(0) : t[0];  // CanonicalizeMap refuses any other function
  }
}

}  // namespace

// The value of a MAP epilogue's program applied to `in`; `input(k)` reads
// map input k at the current output element.
Expr MapExpr(const v1::Epilogue& e, Expr in, const std::function<Expr(int)>& input) {
  std::vector<Expr> values = {std::move(in)};
  for (const v1::MapStep& s : e.steps()) {
    std::vector<Expr> t;
    std::vector<double> lit;
    for (const v1::MapOperand& a : s.args()) {
      if (a.source_case() == v1::MapOperand::kValue)
        t.push_back(values[size_t(a.value())]);
      else if (a.source_case() == v1::MapOperand::kInput)
        t.push_back(input(a.input()));
      else
        lit.push_back(a.literal());
    }
    values.push_back(MapStepExpr(s, t, lit, e));
  }
  return values.back();
}

int Elementwise(Builder& b, const v1::Workload& w) {
  const auto& a = w.elementwise();
  std::vector<int64_t> s0(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  int x = b.AddInput("x", s0);
  std::vector<int64_t> out = s0;
  int y = -1;
  std::vector<int64_t> s1;
  if (w.inputs_size() == 2) {
    s1.assign(w.inputs(1).shape().begin(), w.inputs(1).shape().end());
    y = b.AddInput("y", s1);
    size_t rank = std::max(s0.size(), s1.size());
    out.assign(rank, 1);
    for (size_t i = 0; i < rank; ++i) {
      int64_t u = i < rank - s0.size() ? 1 : s0[i - (rank - s0.size())];
      int64_t v = i < rank - s1.size() ? 1 : s1[i - (rank - s1.size())];
      out[i] = std::max(u, v);
    }
  }
  std::vector<IterVar> axes = b.Axes(out, {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"});
  // Broadcast: align at the innermost dimension; size-1 dimensions read index 0.
  auto bcast = [&](const std::vector<int64_t>& shape) {
    std::vector<Expr> idx;
    size_t off = out.size() - shape.size();
    for (size_t d = 0; d < shape.size(); ++d)
      idx.push_back(shape[d] == 1 ? I(0) : axes[off + d].var);
    return idx;
  };
  Expr vx = b.Read(x, bcast(s0));
  Expr value;
  switch (a.kind()) {
    case v1::ELEMENTWISE_KIND_ADD:
      value = vx + b.Read(y, bcast(s1));
      break;
    case v1::ELEMENTWISE_KIND_SUB:
      value = vx - b.Read(y, bcast(s1));
      break;
    case v1::ELEMENTWISE_KIND_MUL:
      value = vx * b.Read(y, bcast(s1));
      break;
    case v1::ELEMENTWISE_KIND_DIV:
      value = vx / b.Read(y, bcast(s1));
      break;
    case v1::ELEMENTWISE_KIND_RELU:
      value = Max(vx, F(0));
      break;
    case v1::ELEMENTWISE_KIND_SIGMOID:
      value = Activation(v1::EPILOGUE_KIND_SIGMOID, vx, v1::Epilogue());
      break;
    case v1::ELEMENTWISE_KIND_SILU:
      value = Activation(v1::EPILOGUE_KIND_SILU, vx, v1::Epilogue());
      break;
    case v1::ELEMENTWISE_KIND_HARDSWISH:
      value = Activation(v1::EPILOGUE_KIND_HARDSWISH, vx, v1::Epilogue());
      break;
    case v1::ELEMENTWISE_KIND_CLIP:
      value = Min(Max(vx, F(a.min())), F(a.max()));
      break;
    case v1::ELEMENTWISE_KIND_COPY:
    default:
      value = vx;
      break;
  }
  return b.AddStage("elementwise", axes, {}, ReduceKind::kNone, value, true);
}

namespace {

// The linear form of a rearrange: along each dimension with div > 1 the coordinate
// t / div (t = mul * o + add) lies between floor(t / div) and the next
// index, weighted by (t mod div) / div; both are clamped into the input
// where the range can leave it. The output sums the 2^k corners.
int RearrangeLinear(Builder& b, const v1::Workload& w, int x, const std::vector<IterVar>& axes) {
  const v1::RearrangeAttrs& a = w.rearrange();
  const std::vector<int64_t>& shape = b.Shape(x);
  std::vector<Expr> lo, hi, frac;  // frac unset: no interpolation along d
  for (size_t d = 0; d < shape.size(); ++d) {
    const v1::RearrangeIndex& m = a.index(int(d));
    const int64_t last = a.out_shape(int(m.source())) - 1;
    // floor(t / div) at the first and last output (a constant's too).
    const int64_t at0 = FloorDivInt(m.add(), m.div()),
                  at_last = FloorDivInt(m.mul() * last + m.add(), m.div());
    const int64_t lo_min = std::min(at0, at_last), lo_max = std::max(at0, at_last);
    auto inside = [&](Expr e, int64_t min, int64_t max) {
      return min < 0 || max >= shape[d] ? Clamp(std::move(e), 0, shape[d] - 1) : e;
    };
    Expr t = m.mul() == 0 ? I(m.add()) : I(m.mul()) * axes[size_t(m.source())].var + I(m.add());
    if (m.div() == 1) {
      lo.push_back(inside(t, lo_min, lo_max));
      hi.push_back(lo.back());
      frac.push_back(Expr());
      continue;
    }
    Expr i0 = FloorDiv(t, I(m.div()));
    lo.push_back(inside(i0, lo_min, lo_max));
    hi.push_back(inside(i0 + I(1), lo_min + 1, lo_max + 1));
    frac.push_back(Cast(kF32, FloorMod(t, I(m.div()))) / F(double(m.div())));
  }
  std::vector<size_t> interp;
  for (size_t d = 0; d < frac.size(); ++d)
    if (frac[d].defined()) interp.push_back(d);
  Expr v;
  for (size_t corner = 0; corner < (size_t{1} << interp.size()); ++corner) {
    std::vector<Expr> idx = lo;
    Expr weight;
    for (size_t k = 0; k < interp.size(); ++k) {
      const size_t d = interp[k];
      const bool upper = (corner >> k) & 1;
      if (upper) idx[d] = hi[d];
      Expr f = upper ? frac[d] : F(1) - frac[d];
      weight = weight.defined() ? weight * f : f;
    }
    Expr term = weight.defined() ? weight * b.Read(x, idx) : b.Read(x, idx);
    v = v.defined() ? v + term : term;
  }
  return b.AddStage("rearrange", axes, {}, ReduceKind::kNone, v, /*inlinable=*/true);
}

}  // namespace

// A data mover: out[o] = the first input whose mapped index is inside it,
// else the fill value. An index whose range over the output lies inside its
// input is read as it is; any other is bounds-checked and clamped, so no
// load leaves its tensor even where the select does not take it.
int Rearrange(Builder& b, const v1::Workload& w) {
  const v1::RearrangeAttrs& a = w.rearrange();
  const std::vector<int64_t> out(a.out_shape().begin(), a.out_shape().end());
  std::vector<int> inputs;
  for (int k = 0; k < w.inputs_size(); ++k) {
    inputs.push_back(b.AddInput(StrCat("x", k), std::vector<int64_t>(w.inputs(k).shape().begin(),
                                                                     w.inputs(k).shape().end())));
  }
  std::vector<IterVar> axes = b.Axes(out, {"o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7"});
  if (a.linear()) return RearrangeLinear(b, w, inputs[0], axes);
  std::vector<int> first(size_t(w.inputs_size()) + 1, 0);  // each input's first index map
  for (int k = 0; k < w.inputs_size(); ++k)
    first[size_t(k) + 1] = first[size_t(k)] + w.inputs(k).shape_size();
  Expr v = F(a.fill());
  for (int k = w.inputs_size() - 1; k >= 0; --k) {
    const std::vector<int64_t>& shape = b.Shape(inputs[size_t(k)]);
    Expr inside = BoolImm(true);
    bool checked = false;
    std::vector<Expr> idx;
    for (size_t d = 0; d < shape.size(); ++d) {
      const v1::RearrangeIndex& m = a.index(first[size_t(k)] + int(d));
      const int64_t last = out[size_t(m.source())] - 1, at0 = RearrangeIndexAt(m, 0),
                    at_last = RearrangeIndexAt(m, last);
      const int64_t lo = std::min(at0, at_last), hi = std::max(at0, at_last);
      Expr x = I(m.add());
      if (m.mul() != 0) {
        x = axes[size_t(m.source())].var;
        if (m.mul() != 1) x = I(m.mul()) * x;
        if (m.add() != 0) x = x + I(m.add());
        if (m.div() != 1) x = FloorDiv(x, I(m.div()));
      }
      if (lo < 0 || hi >= shape[d]) {
        inside = And(inside, And(x >= I(0), x < I(shape[d])));
        x = Clamp(x, 0, shape[d] - 1);
        checked = true;
      }
      idx.push_back(x);
    }
    Expr read = b.Read(inputs[size_t(k)], idx);
    v = checked ? Select(inside, read, v) : read;
  }
  return b.AddStage("rearrange", axes, {}, ReduceKind::kNone, v, /*inlinable=*/true);
}

}  // namespace tunefarm::ir::compute_internal
