// The resize family (ops_internal.h): Resize and Upsample, nearest and
// (bi)linear. (compiler/frontend/ops_shape.cc holds their shape inference.)
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "device_agent/runtime/ops_internal.h"
#include "proto/onnx_forms.h"

namespace tunefarm::runtime::ops_internal {

// Per dimension, the two source indices of each output index and the
// second's weight (nearest: the same index twice, weight 0), and the
// dimensions that interpolate (linear, with a fractional weight somewhere).
struct ResizePlan {
  std::string mode;
  std::vector<std::vector<int64_t>> i0, i1;
  std::vector<std::vector<double>> w1;
  std::vector<size_t> lin;
};

namespace {

// Fills plan->i0, i1, w1 for input `xs` resized to `os` by `scales` (given:
// the node's own, else os / xs), under the coordinate transformation `coord`
// and, for nearest, the rounding `nearest`.
void ResizeTables(const Shape& xs, const Shape& os, const std::vector<double>& scales, bool given,
                  const std::string& coord, const std::string& nearest, ResizePlan* plan) {
  const size_t r = xs.size();
  const std::string& mode = plan->mode;
  // Source coordinate of output index i along dim d. With scales given, the
  // resized length in the formulas is in * scale, not rounded.
  auto src = [&](size_t d, int64_t i) {
    const double s = scales[d], in = double(xs[d]);
    const double out = given ? in * s : double(os[d]);
    if (coord == "half_pixel") return (double(i) + 0.5) / s - 0.5;
    if (coord == "pytorch_half_pixel") return out > 1 ? (double(i) + 0.5) / s - 0.5 : 0.0;
    if (coord == "align_corners") return out > 1 ? double(i) * (in - 1) / (out - 1) : 0.0;
    if (coord == "tf_half_pixel_for_nearest") return (double(i) + 0.5) / s;
    return double(i) / s;
  };
  auto round = [&](double v) -> int64_t {
    if (nearest == "floor") return int64_t(std::floor(v));
    if (nearest == "ceil") return int64_t(std::ceil(v));
    if (nearest == "round_prefer_ceil") return int64_t(std::floor(v + 0.5));
    // round_prefer_floor
    return v == std::floor(v) + 0.5 ? int64_t(std::floor(v)) : int64_t(std::round(v));
  };
  // Per dim: two source indices and weights.
  std::vector<std::vector<int64_t>>& i0 = plan->i0;
  std::vector<std::vector<int64_t>>& i1 = plan->i1;
  std::vector<std::vector<double>>& w1 = plan->w1;
  i0.assign(r, {});
  i1.assign(r, {});
  w1.assign(r, {});
  for (size_t d = 0; d < r; ++d) {
    for (int64_t i = 0; i < os[d]; ++i) {
      double c = src(d, i);
      if (mode == "nearest") {
        int64_t k = std::clamp<int64_t>(round(c), 0, xs[d] - 1);
        i0[d].push_back(k);
        i1[d].push_back(k);
        w1[d].push_back(0);
      } else {
        c = std::clamp(c, 0.0, double(xs[d] - 1));
        int64_t lo = int64_t(std::floor(c));
        int64_t hi = std::min<int64_t>(lo + 1, xs[d] - 1);
        i0[d].push_back(lo);
        i1[d].push_back(hi);
        w1[d].push_back(c - double(lo));
      }
    }
  }
}

}  // namespace

// The node's attributes and scales (Upsample: the scales attribute, else
// input 1; Resize: input 1 before opset 11, input 2 from 11), checked, as
// index tables.
template <typename T>
absl::Status Op<T>::PlanResize(bool upsample, ResizePlan* plan) const {
  const Shape& xs = InShape(0);
  const Shape& os = OutShape();
  const size_t r = xs.size();
  std::string mode = n_.strings.count("mode") ? n_.strings.at("mode") : "nearest";
  std::string coord = "asymmetric", nearest = "floor";
  std::vector<double> scales;
  if (upsample) {
    if (n_.floats.count("scales")) {
      for (float f : n_.floats.at("scales")) scales.push_back(f);
    } else {
      Params(1, &scales);
    }
  } else if (!graph::ResizeHasRoi(a_.opset)) {
    Params(1, &scales);
    nearest = "round_prefer_floor";
  } else {
    coord = n_.strings.count("coordinate_transformation_mode")
                ? n_.strings.at("coordinate_transformation_mode")
                : "half_pixel";
    nearest =
        n_.strings.count("nearest_mode") ? n_.strings.at("nearest_mode") : "round_prefer_floor";
    Params(2, &scales);
    if (n_.Int("antialias", 0) != 0) return Error("antialias is not supported");
    if (!n_.Ints("axes").empty()) return Error("the axes attribute is not supported");
  }
  if (mode == "bilinear") mode = "linear";
  if (mode != "nearest" && mode != "linear")
    return Error(StrCat("mode '", mode, "' is not supported"));
  if (coord != "half_pixel" && coord != "pytorch_half_pixel" && coord != "align_corners" &&
      coord != "asymmetric" && coord != "tf_half_pixel_for_nearest")
    return Error(StrCat("coordinate_transformation_mode '", coord, "' is not supported"));
  const bool given = scales.size() == r;
  if (!given) {
    scales.assign(r, 1);
    for (size_t i = 0; i < r; ++i) scales[i] = double(os[i]) / double(xs[i]);
  }
  plan->mode = mode;
  ResizeTables(xs, os, scales, given, coord, nearest, plan);
  // Dims that interpolate (linear, with a fractional weight somewhere).
  plan->lin.clear();
  if (mode == "linear") {
    for (size_t d = 0; d < r; ++d)
      if (xs[d] != os[d] || scales[d] != 1) plan->lin.push_back(d);
  }
  return absl::OkStatus();
}

// Nearest (or linear with whole weights): one source row per output row,
// then a copy through the last dimension's index table.
template <typename T>
void Op<T>::ResizeRows(const ResizePlan& plan) const {
  const Shape& xs = InShape(0);
  const Shape& os = OutShape();
  const size_t r = xs.size();
  const std::vector<std::vector<int64_t>>& i0 = plan.i0;
  const Shape xst = Strides(xs);
  const T* x = In(0);
  T* y = Out();
  const int64_t total = Numel(os);
  // A last dimension kept as it is (channels-last data) copies whole rows.
  const std::vector<int64_t>& col = i0[r - 1];
  const int64_t width = os[r - 1];
  bool same_row = xs[r - 1] == width;
  for (int64_t j = 0; same_row && j < width; ++j) same_row = col[size_t(j)] == j;
  // Rows in parallel chunks; short rows (channels-last pixels) copied
  // inline rather than by a library call each.
  const int64_t rows = width > 0 ? total / width : 0;
  ParallelRows(rows, width, [&](int64_t first, int64_t last) {
    Shape idx(r, 0);
    for (int64_t d = int64_t(r) - 2, rest = first; d >= 0; --d) {
      idx[size_t(d)] = rest % os[size_t(d)];
      rest /= os[size_t(d)];
    }
    for (int64_t row = first; row < last; ++row) {
      int64_t base = 0;
      for (size_t d = 0; d + 1 < r; ++d) base += i0[d][size_t(idx[d])] * xst[d];
      const T* src = x + base;
      T* dst = y + row * width;
      if (same_row) {
        CopyRun(dst, src, width);
      } else {
        for (int64_t j = 0; j < width; ++j) dst[j] = src[col[size_t(j)]];
      }
      idx[r - 1] = width - 1;
      NextIndex(&idx, os);
    }
  });
}

// Every output element as the weighted sum of its 2^|lin| source corners
// (one source element where no dimension interpolates: a scalar).
template <typename T>
void Op<T>::ResizeInterpolate(const ResizePlan& plan) const {
  const Shape& xs = InShape(0);
  const Shape& os = OutShape();
  const size_t r = xs.size();
  const std::vector<std::vector<int64_t>>& i0 = plan.i0;
  const std::vector<std::vector<int64_t>>& i1 = plan.i1;
  const std::vector<std::vector<double>>& w1 = plan.w1;
  const std::vector<size_t>& lin = plan.lin;
  const Shape xst = Strides(xs);
  const T* x = In(0);
  T* y = Out();
  const int64_t total = Numel(os);
  Shape idx(r, 0);
  for (int64_t i = 0; i < total; ++i) {
    int64_t base = 0;
    for (size_t d = 0; d < r; ++d) base += i0[d][size_t(idx[d])] * xst[d];
    double v;
    if (lin.empty()) {
      v = double(x[base]);
    } else {
      v = 0;
      const size_t corners = size_t(1) << lin.size();
      for (size_t cmask = 0; cmask < corners; ++cmask) {
        double w = 1;
        int64_t off = base;
        for (size_t j = 0; j < lin.size(); ++j) {
          const size_t d = lin[j];
          const double f = w1[d][size_t(idx[d])];
          if (cmask & (size_t(1) << j)) {
            w *= f;
            off += (i1[d][size_t(idx[d])] - i0[d][size_t(idx[d])]) * xst[d];
          } else {
            w *= 1 - f;
          }
        }
        if (w != 0) v += w * double(x[off]);
      }
    }
    y[i] = T(v);
    NextIndex(&idx, os);
  }
}

template <typename T>
absl::Status Op<T>::Resize(bool upsample) {
  ResizePlan plan;
  TF_RETURN_IF_ERROR(PlanResize(upsample, &plan));
  if (plan.lin.empty() && !InShape(0).empty()) {
    ResizeRows(plan);
  } else {
    ResizeInterpolate(plan);
  }
  return absl::OkStatus();
}

// The resize family's operators.
std::vector<NativeOp> ResizeOps() {
  return {
      Kernel("Resize", [](auto& o) { return o.Resize(false); }),
      Kernel("Upsample", [](auto& o) { return o.Resize(true); }),
  };
}

}  // namespace tunefarm::runtime::ops_internal
