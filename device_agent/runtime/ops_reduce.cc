// The reduction family (ops_internal.h): Reduce* over a set of axes, and
// ArgMax, ArgMin and TopK along one. (compiler/frontend/ops_shape.cc holds
// their shape inference.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "device_agent/runtime/ops_internal.h"
#include "proto/onnx_forms.h"

namespace tunefarm::runtime::ops_internal {

template <typename T>
absl::Status Op<T>::Reduce(ReduceKind kind) {
  const Shape& xs = InShape(0);
  const size_t r = xs.size();
  std::vector<double> axes;
  const bool axes_input = graph::ReduceAxesAreAnInput(n_.op, a_.opset);
  if (axes_input) {
    Params(1, &axes);
  } else {
    for (int64_t v : n_.Ints("axes")) axes.push_back(double(v));
  }
  std::vector<bool> reduced(r, false);
  if (axes.empty()) {
    if (axes_input && n_.Int("noop_with_empty_axes", 0) != 0) {
      std::copy(In(0), In(0) + Numel(xs), Out());
      return absl::OkStatus();
    }
    reduced.assign(r, true);
  }
  for (double a : axes) {
    const int64_t ax = Axis(int64_t(a), r);
    if (ax < 0 || ax >= int64_t(r)) return Error("axis out of range");
    reduced[size_t(ax)] = true;
  }
  // Output strides over the input's dims (0 where reduced).
  Shape kept;
  for (size_t d = 0; d < r; ++d) kept.push_back(reduced[d] ? 1 : xs[d]);
  const Shape kst = Strides(kept);
  const int64_t out_n = Numel(kept), in_n = Numel(xs);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double init = kind == ReduceKind::kMax ? -kInf
                      : kind == ReduceKind::kMin ? kInf
                      : kind == ReduceKind::kProd ? 1.0
                                                  : 0.0;
  std::vector<double> acc(size_t(out_n), init);
  const T* x = In(0);
  Shape idx(r, 0);
  // LogSumExp sums exp(v - max) and adds the max back, so large inputs
  // do not overflow.
  std::vector<double> shift(size_t(out_n), 0.0);
  if (kind == ReduceKind::kLogSumExp) {
    std::fill(shift.begin(), shift.end(), -kInf);
    for (int64_t i = 0; i < in_n; ++i) {
      int64_t o = 0;
      for (size_t d = 0; d < r; ++d)
        if (!reduced[d]) o += idx[d] * kst[d];
      shift[size_t(o)] = std::max(shift[size_t(o)], double(x[i]));
      NextIndex(&idx, xs);
    }
    for (double& m : shift) m = std::isfinite(m) ? m : 0.0;
    std::fill(idx.begin(), idx.end(), 0);
  }
  for (int64_t i = 0; i < in_n; ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < r; ++d)
      if (!reduced[d]) o += idx[d] * kst[d];
    double& a = acc[size_t(o)];
    const double v = double(x[i]);
    switch (kind) {
      case ReduceKind::kMax: a = std::max(a, v); break;
      case ReduceKind::kMin: a = std::min(a, v); break;
      case ReduceKind::kProd: a *= v; break;
      case ReduceKind::kL1: a += std::fabs(v); break;
      case ReduceKind::kL2:
      case ReduceKind::kSumSquare: a += v * v; break;
      case ReduceKind::kLogSumExp: a += std::exp(v - shift[size_t(o)]); break;
      default: a += v; break;
    }
    NextIndex(&idx, xs);
  }
  const double count = double(in_n) / double(std::max<int64_t>(out_n, 1));
  T* y = Out();
  for (int64_t o = 0; o < out_n; ++o) {
    const double a = acc[size_t(o)];
    switch (kind) {
      case ReduceKind::kMean: y[o] = T(a / count); break;
      case ReduceKind::kL2: y[o] = T(std::sqrt(a)); break;
      case ReduceKind::kLogSum: y[o] = T(std::log(a)); break;
      case ReduceKind::kLogSumExp: y[o] = T(std::log(a) + shift[size_t(o)]); break;
      default: y[o] = T(a); break;
    }
  }
  return absl::OkStatus();
}

// The index of the largest (smallest) value along `axis`: the first such
// index, or the last with select_last_index.
template <typename T>
absl::Status Op<T>::ArgReduce(bool max) {
  const Shape& xs = InShape(0);
  const int64_t axis = Axis(n_.Int("axis", 0), xs.size());
  if (axis < 0 || axis >= int64_t(xs.size())) return Error("axis out of range");
  const bool last = n_.Int("select_last_index", 0) != 0;
  const int64_t len = xs[size_t(axis)];
  if (len == 0) return Error("reduces an empty dimension");
  const int64_t inner = Numel(Shape(xs.begin() + axis + 1, xs.end()));
  const int64_t outer = Numel(xs) / std::max<int64_t>(len * inner, 1);
  const T* x = In(0);
  T* y = Out();
  Parallel(outer * inner, [&](int64_t b, int64_t e) {
    for (int64_t oi = b; oi < e; ++oi) {
      const T* p = x + (oi / inner) * len * inner + oi % inner;
      int64_t best = 0;
      for (int64_t k = 1; k < len; ++k) {
        const T v = p[k * inner], w = p[best * inner];
        const bool better = max ? (last ? v >= w : v > w) : (last ? v <= w : v < w);
        if (better) best = k;
      }
      y[oi] = T(best);
    }
  });
  return absl::OkStatus();
}

// `on` at each index's place along the output's `axis` (a negative index
// counts from the end), `off` elsewhere; an index outside [-depth, depth)
// marks nothing.
template <typename T>
absl::Status Op<T>::OneHot() {
  const Shape& os = OutShape();
  const int64_t axis = Axis(n_.Int("axis", -1), os.size());
  if (axis < 0 || axis >= int64_t(os.size())) return Error("axis out of range");
  std::vector<double> values;
  if (!Params(2, &values) || values.size() != 2) return Error("values must be [off, on]");
  const int64_t depth = os[size_t(axis)];
  const int64_t inner = Numel(Shape(os.begin() + axis + 1, os.end()));
  const int64_t outer = Numel(InShape(0)) / std::max<int64_t>(inner, 1);
  const T* x = In(0);
  T* y = Out();
  std::fill(y, y + Numel(os), T(values[0]));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t idx = int64_t(std::llround(double(x[o * inner + i])));
      if (idx < 0) idx += depth;
      if (idx >= 0 && idx < depth) y[(o * depth + idx) * inner + i] = T(values[1]);
    }
  }
  return absl::OkStatus();
}

// k = the output's length along `axis`; values in order (largest first, or
// smallest first with largest = 0), ties by lower index, for sorted = 0 too.
template <typename T>
absl::Status Op<T>::TopK() {
  const Shape& xs = InShape(0);
  const int64_t axis = Axis(n_.Int("axis", -1), xs.size());
  if (axis < 0 || axis >= int64_t(xs.size())) return Error("axis out of range");
  const bool largest = n_.Int("largest", 1) != 0;
  const int64_t len = xs[size_t(axis)], k = OutShape()[size_t(axis)];
  const int64_t inner = Numel(Shape(xs.begin() + axis + 1, xs.end()));
  const int64_t outer = Numel(xs) / std::max<int64_t>(len * inner, 1);
  const T* x = In(0);
  T* values = Out(0);
  T* indices = Out(1);
  Parallel(outer * inner, [&](int64_t b, int64_t e) {
    std::vector<int64_t> order(static_cast<size_t>(len));
    for (int64_t oi = b; oi < e; ++oi) {
      const int64_t o = oi / inner, i = oi % inner;
      const T* p = x + o * len * inner + i;
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t u, int64_t v) {
                          const T a = p[u * inner], c = p[v * inner];
                          if (a != c) return largest ? a > c : a < c;
                          return u < v;
                        });
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = (o * k + j) * inner + i;
        values[at] = p[order[size_t(j)] * inner];
        if (indices != nullptr) indices[at] = T(order[size_t(j)]);
      }
    }
  });
  return absl::OkStatus();
}

// The reduction family's operators.
// The determinant of each matrix of the last two dimensions: LU
// decomposition with partial pivoting, in double.
template <typename T>
absl::Status Op<T>::Det() {
  const Shape& xs = InShape(0);
  if (xs.size() < 2 || xs[xs.size() - 1] != xs[xs.size() - 2])
    return Error("input is not a batch of square matrices");
  const int64_t m = xs.back(), count = Numel(xs) / std::max<int64_t>(m * m, 1);
  const T* x = In(0);
  T* y = Out();
  std::vector<double> a(size_t(m * m));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < m * m; ++i) a[size_t(i)] = double(x[b * m * m + i]);
    double det = 1;
    for (int64_t col = 0; col < m && det != 0; ++col) {
      int64_t pivot = col;
      for (int64_t r = col + 1; r < m; ++r)
        if (std::fabs(a[size_t(r * m + col)]) > std::fabs(a[size_t(pivot * m + col)])) pivot = r;
      if (a[size_t(pivot * m + col)] == 0) {
        det = 0;
        break;
      }
      if (pivot != col) {
        for (int64_t k = 0; k < m; ++k) std::swap(a[size_t(pivot * m + k)], a[size_t(col * m + k)]);
        det = -det;
      }
      const double p = a[size_t(col * m + col)];
      det *= p;
      for (int64_t r = col + 1; r < m; ++r) {
        const double f = a[size_t(r * m + col)] / p;
        for (int64_t k = col; k < m; ++k) a[size_t(r * m + k)] -= f * a[size_t(col * m + k)];
      }
    }
    y[b] = T(det);
  }
  return absl::OkStatus();
}

std::vector<NativeOp> ReduceOps() {
  return {
      Kernel("Det", [](auto& o) { return o.Det(); }),
      Kernel("TopK", [](auto& o) { return o.TopK(); }),
      Kernel("OneHot", [](auto& o) { return o.OneHot(); }),
      Kernel("ArgMax", [](auto& o) { return o.ArgReduce(true); }),
      Kernel("ArgMin", [](auto& o) { return o.ArgReduce(false); }),
      Kernel("ReduceMax", [](auto& o) { return o.Reduce(ReduceKind::kMax); }),
      Kernel("ReduceMean", [](auto& o) { return o.Reduce(ReduceKind::kMean); }),
      Kernel("ReduceSum", [](auto& o) { return o.Reduce(ReduceKind::kSum); }),
      Kernel("ReduceMin", [](auto& o) { return o.Reduce(ReduceKind::kMin); }),
      Kernel("ReduceProd", [](auto& o) { return o.Reduce(ReduceKind::kProd); }),
      Kernel("ReduceL1", [](auto& o) { return o.Reduce(ReduceKind::kL1); }),
      Kernel("ReduceL2", [](auto& o) { return o.Reduce(ReduceKind::kL2); }),
      Kernel("ReduceSumSquare", [](auto& o) { return o.Reduce(ReduceKind::kSumSquare); }),
      Kernel("ReduceLogSum", [](auto& o) { return o.Reduce(ReduceKind::kLogSum); }),
      Kernel("ReduceLogSumExp", [](auto& o) { return o.Reduce(ReduceKind::kLogSumExp); }),
  };
}

}  // namespace tunefarm::runtime::ops_internal
