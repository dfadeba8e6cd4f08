// Operator compute definitions that reduce over a row: softmax, reduce and
// normalize, built on ReduceRows, written as stages of the tensor IR (see
// compute_internal.h).
#include "compiler/ir/compute_internal.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tunefarm::ir::compute_internal {
namespace {

using absl::StrCat;

// How ReduceRows reads rows when x has no B: as 16-wide slices once N
// reaches `slice_from`, padded with the pass's fill. Passes over the same x
// with the same fill share one padded copy through `padded` (-1: none yet).
struct RowSlices {
  int64_t slice_from = 32;
  int* padded = nullptr;
};

// The reduction by `kind` of f(x[a, j(, k)], row) over j of x [A, N] or
// [A, N, B], into [A] or [A, B]; `row` holds the result's index (a or a, k).
// Rows read as slices (see RowSlices) are padded with `fill` (a value of x
// whose f is the reduction's identity) and keep one partial per slice lane,
// combined after, so the pass over the row is contiguous vector work.
int ReduceRows(Builder& b, int x, const std::string& name, ReduceKind kind, double fill,
               const std::function<Expr(Expr, const std::vector<Expr>&)>& f,
               RowSlices slices = {}) {
  constexpr int64_t kL = 16;
  const std::vector<int64_t> s = b.Shape(x);
  const int64_t a = s[0], n = s[1];
  const bool with_b = s.size() == 3;
  std::vector<IterVar> out =
      b.Axes(with_b ? std::vector<int64_t>{a, s[2]} : std::vector<int64_t>{a}, {"a", "k"});
  if (with_b || n < slices.slice_from) {
    IterVar j{Var("j"), n};
    std::vector<Expr> row = {out[0].var}, at = {out[0].var, j.var};
    if (with_b) {
      row.push_back(out[1].var);
      at.push_back(out[1].var);
    }
    return b.AddStage(name, out, {j}, kind, f(b.Read(x, at), row), false);
  }
  const int64_t o = (n + kL - 1) / kL;
  int xp = slices.padded != nullptr ? *slices.padded : -1;
  if (xp < 0) xp = b.Pad(x, {{0, 0}, {0, o * kL - n}}, fill);
  if (slices.padded != nullptr) *slices.padded = xp;
  std::vector<IterVar> al = b.Axes({a, kL}, {"a", "l"});
  IterVar r{Var("o"), o};
  Expr v = f(b.Read(xp, {al[0].var, r.var * I(kL) + al[1].var}), {al[0].var});
  const int part = b.AddStage(StrCat(name, "_part"), al, {r}, kind, v, false);
  IterVar l{Var("l"), kL};
  return b.AddStage(name, out, {l}, kind, b.Read(part, {out[0].var, l.var}), false);
}

}  // namespace

// Softmax over N of x [A, N] or [A, N, B]: the max and then the sum of
// exp(x - max) over each row (rows of at least one slice read as slices
// when there is no B, padded with the lowest float, whose exp adds
// nothing; a shorter row is read as it is, as 16 lanes per row would
// compute mostly padding: an SSD head's softmax over 2 classes, 4420 rows,
// took 0.108 ms as slices).
int Softmax(Builder& b, const v1::Workload& w) {
  const std::vector<int64_t> s(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  const int x = b.AddInput("x", s);
  const bool log = w.softmax().log();
  const double lowest = -std::numeric_limits<float>::max();
  int padded = -1;
  const RowSlices slices{16, &padded};
  const int mx = ReduceRows(
      b, x, "softmax_max", ReduceKind::kMax, lowest,
      [](Expr v, const std::vector<Expr>&) { return v; }, slices);
  const int sum = ReduceRows(
      b, x, "softmax_sum", ReduceKind::kSum, lowest,
      [&](Expr v, const std::vector<Expr>& row) { return Call(Op::kExp, v - b.Read(mx, row)); },
      slices);
  std::vector<IterVar> out_axes = b.Axes(s, {"a", "j", "k"});
  std::vector<Expr> at;
  for (const IterVar& v : out_axes) at.push_back(v.var);
  std::vector<Expr> row = {at[0]};  // the reductions' index: a, or a and k
  if (s.size() == 3) row.push_back(at[2]);
  const Expr m_at = b.Read(mx, row), s_at = b.Read(sum, row);
  Expr d = b.Read(x, at) - m_at;
  Expr y = log ? d - Call(Op::kLog, s_at) : Call(Op::kExp, d) / s_at;
  return b.AddStage("softmax", out_axes, {}, ReduceKind::kNone, y, false);
}

// A reduction over N of x [A, N] or [A, N, B] into [A] or [A, B]. Every op
// is a sum, a max or a product of a function of x followed by a function
// of the result: min is -max(-x), mean sum / N, l2 sqrt(sum x^2), log_sum_exp
// m + log(sum exp(x - m)) with m the max.
int Reduce(Builder& b, const v1::Workload& w) {
  const std::vector<int64_t> s(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  const int x = b.AddInput("x", s);
  const v1::ReduceOp op = w.reduce().op();
  const double big = std::numeric_limits<float>::max();
  int mx = -1, padded = -1;
  RowSlices slices;  // log_sum_exp's two passes share x padded with -big
  if (op == v1::REDUCE_OP_LOG_SUM_EXP) {
    slices.padded = &padded;
    mx = ReduceRows(
        b, x, "reduce_max", ReduceKind::kMax, -big,
        [](Expr v, const std::vector<Expr>&) { return v; }, slices);
  }
  auto element = [&](Expr v, const std::vector<Expr>& row) -> Expr {
    switch (op) {
      case v1::REDUCE_OP_MIN:
        return F(0) - v;
      case v1::REDUCE_OP_L1:
        return Call(Op::kAbs, v);
      case v1::REDUCE_OP_L2:
      case v1::REDUCE_OP_SUM_SQUARE:
        return v * v;
      case v1::REDUCE_OP_LOG_SUM_EXP:
        return Call(Op::kExp, v - b.Read(mx, row));
      default:
        return v;
    }
  };
  const bool is_max = op == v1::REDUCE_OP_MAX || op == v1::REDUCE_OP_MIN;
  const bool is_prod = op == v1::REDUCE_OP_PROD;
  const double fill = op == v1::REDUCE_OP_MIN                                      ? big
                      : op == v1::REDUCE_OP_MAX || op == v1::REDUCE_OP_LOG_SUM_EXP ? -big
                      : is_prod                                                    ? 1.0
                                                                                   : 0.0;
  const int acc = ReduceRows(b, x,
                             is_max    ? "reduce_max"
                             : is_prod ? "reduce_prod"
                                       : "reduce_sum",
                             is_max    ? ReduceKind::kMax
                             : is_prod ? ReduceKind::kProd
                                       : ReduceKind::kSum,
                             fill, element, slices);
  std::vector<IterVar> out = b.Axes(b.Shape(acc), {"a", "k"});
  std::vector<Expr> at;
  for (const IterVar& v : out) at.push_back(v.var);
  const Expr r = b.Read(acc, at);
  Expr y;
  switch (op) {
    case v1::REDUCE_OP_MEAN:
      y = r / F(double(s[1]));
      break;
    case v1::REDUCE_OP_MIN:
      y = F(0) - r;
      break;
    case v1::REDUCE_OP_L2:
      y = Call(Op::kSqrt, r);
      break;
    case v1::REDUCE_OP_LOG_SUM:
      y = Call(Op::kLog, r);
      break;
    case v1::REDUCE_OP_LOG_SUM_EXP:
      y = b.Read(mx, at) + Call(Op::kLog, r);
      break;
    default:
      return acc;
  }
  return b.AddStage("reduce", out, {}, ReduceKind::kNone, y, true);
}

// Each row of x [A, N] normalized by its mean and biased variance (two
// passes: the variance sums squares of x - mean), then scaled and shifted.
int Normalize(Builder& b, const v1::Workload& w) {
  const std::vector<int64_t> s(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  const int x = b.AddInput("x", s);
  const bool per_row = w.normalize().per_row();
  const int64_t params = w.inputs(1).shape(0);
  const int scale = b.AddInput("scale", {params});
  const int bias = w.inputs_size() > 2 ? b.AddInput("shift", {params}) : -1;
  const double n = double(s[1]);
  const int sum = ReduceRows(b, x, "norm_sum", ReduceKind::kSum, 0.0,
                             [](Expr v, const std::vector<Expr>&) { return v; });
  std::vector<IterVar> a1 = b.Axes({s[0]}, {"a"});
  const int mean =
      b.AddStage("norm_mean", a1, {}, ReduceKind::kNone, b.Read(sum, {a1[0].var}) / F(n), true);
  std::vector<IterVar> ax = b.Axes(s, {"a", "j"});
  const Expr a = ax[0].var, j = ax[1].var;
  // x - mean, padded with 0 where the rows are read in slices.
  const int diff = b.AddStage("norm_diff", ax, {}, ReduceKind::kNone,
                              b.Read(x, {a, j}) - b.Read(mean, {a}), true);
  const int sq = ReduceRows(b, diff, "norm_sq", ReduceKind::kSum, 0.0,
                            [](Expr v, const std::vector<Expr>&) { return v * v; });
  std::vector<IterVar> ay = b.Axes(s, {"a", "j"});
  const Expr ya = ay[0].var, yj = ay[1].var;
  Expr y = b.Read(diff, {ya, yj}) /
           Call(Op::kSqrt, b.Read(sq, {ya}) / F(n) + F(w.normalize().epsilon()));
  // Parameter i mod P of the axis they follow.
  Expr at = per_row ? ya : yj;
  if (params != (per_row ? s[0] : s[1])) at = FloorMod(at, I(params));
  y = y * b.Read(scale, {at});
  if (bias >= 0) y = y + b.Read(bias, {at});
  return b.AddStage("normalize", ay, {}, ReduceKind::kNone, y, true);
}

}  // namespace tunefarm::ir::compute_internal
