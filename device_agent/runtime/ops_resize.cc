// The resize family (ops_internal.h): Resize and Upsample, nearest,
// (bi)linear and cubic. (compiler/frontend/ops_shape.cc holds their shape inference.)
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
// Cubic reads each output index's source coordinate instead, with the
// kernel's coefficient a and whether taps outside the input drop out.
struct ResizePlan {
  std::string mode;
  std::vector<std::vector<int64_t>> i0, i1;
  std::vector<std::vector<double>> w1;
  std::vector<size_t> lin;
  std::vector<std::vector<double>> src;
  double cubic_a = -0.75;
  bool exclude_outside = false;
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
    if (coord == "tf_half_pixel_for_nearest" || coord == "tf_half_pixel_for_nn")
      return (double(i) + 0.5) / s;
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
  plan->src.assign(r, {});
  for (size_t d = 0; d < r; ++d) {
    for (int64_t i = 0; i < os[d]; ++i) {
      double c = src(d, i);
      plan->src[d].push_back(c);
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
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return Error(StrCat("mode '", mode, "' is not supported"));
  if (n_.floats.count("cubic_coeff_a") && !n_.floats.at("cubic_coeff_a").empty())
    plan->cubic_a = n_.floats.at("cubic_coeff_a")[0];
  plan->exclude_outside = n_.Int("exclude_outside", 0) != 0;
  // tf_half_pixel_for_nn: the name ONNX's own reference used.
  if (coord != "half_pixel" && coord != "pytorch_half_pixel" && coord != "align_corners" &&
      coord != "asymmetric" && coord != "tf_half_pixel_for_nearest" &&
      coord != "tf_half_pixel_for_nn")
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

// Cubic: one dimension at a time, each output index the weighted sum of
// the four inputs around its source coordinate (edge values beyond the
// input, or those taps dropped and the rest renormalized with
// exclude_outside), weights from the cubic convolution kernel with
// coefficient a.
template <typename T>
void Op<T>::ResizeCubic(const ResizePlan& plan) const {
  const Shape& xs = InShape(0);
  const Shape& os = OutShape();
  const size_t r = xs.size();
  const double a = plan.cubic_a;
  std::vector<double> cur(In(0), In(0) + Numel(xs)), next;
  Shape shape = xs;
  for (size_t d = 0; d < r; ++d) {
    const int64_t in = shape[d], out = os[d];
    bool same = in == out;
    for (int64_t i = 0; same && i < out; ++i) same = plan.src[d][size_t(i)] == double(i);
    if (same) continue;
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < d; ++k) outer *= shape[k];
    for (size_t k = d + 1; k < r; ++k) inner *= shape[k];
    next.assign(size_t(outer * out * inner), 0);
    for (int64_t i = 0; i < out; ++i) {
      const double c = plan.src[d][size_t(i)];
      const double f = std::floor(c), t = c - f;
      const double s = 1 - t;
      double w[4] = {((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                     ((a + 2) * t - (a + 3)) * t * t + 1,
                     ((a + 2) * s - (a + 3)) * s * s + 1,
                     ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a};
      int64_t at[4];
      double sum = 0;
      for (int k = 0; k < 4; ++k) {
        const int64_t j = int64_t(f) - 1 + k;
        if (plan.exclude_outside && (j < 0 || j >= in)) w[k] = 0;
        at[k] = std::clamp<int64_t>(j, 0, in - 1);
        sum += w[k];
      }
      if (plan.exclude_outside && sum != 0)
        for (double& v : w) v /= sum;
      for (int64_t o = 0; o < outer; ++o) {
        const double* x = cur.data() + o * in * inner;
        double* y = next.data() + (o * out + i) * inner;
        for (int k = 0; k < 4; ++k) {
          if (w[k] == 0) continue;
          const double* row = x + at[k] * inner;
          for (int64_t e = 0; e < inner; ++e) y[e] += w[k] * row[e];
        }
      }
    }
    shape[d] = out;
    cur.swap(next);
  }
  T* y = Out();
  for (size_t i = 0; i < cur.size(); ++i) y[i] = T(cur[i]);
}

namespace {

// A grid coordinate in [-1, 1] as a pixel coordinate of an axis of `size`.
double Unnormalize(double g, int64_t size, bool align_corners) {
  return align_corners ? (g + 1) / 2 * double(size - 1) : ((g + 1) * double(size) - 1) / 2;
}

// A pixel coordinate under a padding mode: clamped into the axis (border),
// or reflected at its edges (the pixel centres with align_corners, else
// the outer edges of the end pixels) and then clamped (reflection); as it
// is for zeros.
double PadCoordinate(double x, int64_t size, const std::string& padding, bool align_corners) {
  auto clip = [&](double v) { return std::clamp(v, 0.0, double(size - 1)); };
  if (padding == "border") return clip(x);
  if (padding != "reflection") return x;
  const double lo = align_corners ? 0 : -0.5, span = align_corners ? double(size - 1) : double(size);
  if (span <= 0) return 0;
  const double d = std::fabs(x - lo);
  const double extra = std::fmod(d, span);
  const int64_t flips = int64_t(std::floor(d / span));
  return clip(flips % 2 == 0 ? lo + extra : lo + span - extra);
}

}  // namespace

// GridSample: each output pixel samples the input at the grid's (x, y) in
// [-1, 1] (nearest, bilinear or bicubic with a = -0.75), outside the input
// as padding_mode says (zeros, border, reflection).
template <typename T>
absl::Status Op<T>::GridSample() {
  const Shape& xs = InShape(0);
  const Shape& gs = InShape(1);
  if (xs.size() != 4 || gs.size() != 4 || gs[0] != xs[0] || gs[3] != 2)
    return Error("needs a 4-D input and an [N, H, W, 2] grid");
  const std::string mode = n_.strings.count("mode") ? n_.strings.at("mode") : "bilinear";
  const std::string padding =
      n_.strings.count("padding_mode") ? n_.strings.at("padding_mode") : "zeros";
  const bool align = n_.Int("align_corners", 0) != 0;
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    return Error(StrCat("mode '", mode, "' is not supported"));
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    return Error(StrCat("padding_mode '", padding, "' is not supported"));
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Ho = gs[1], Wo = gs[2];
  const T* x = In(0);
  const T* grid = In(1);
  T* y = Out();
  // The input at an integer pixel, zero outside it.
  auto at = [&](const T* plane, int64_t r, int64_t c) -> double {
    return r >= 0 && r < H && c >= 0 && c < W ? double(plane[r * W + c]) : 0.0;
  };
  auto cubic = [](double t, double w[4]) {
    const double a = -0.75;
    auto near = [&](double v) { return ((a + 2) * v - (a + 3)) * v * v + 1; };
    auto far = [&](double v) { return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a; };
    w[0] = far(t + 1);
    w[1] = near(t);
    w[2] = near(1 - t);
    w[3] = far(2 - t);
  };
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < Ho * Wo; ++i) {
      const double gx = double(grid[(n * Ho * Wo + i) * 2]);
      const double gy = double(grid[(n * Ho * Wo + i) * 2 + 1]);
      double px = Unnormalize(gx, W, align), py = Unnormalize(gy, H, align);
      if (mode != "bicubic") {
        px = PadCoordinate(px, W, padding, align);
        py = PadCoordinate(py, H, padding, align);
      }
      for (int64_t c = 0; c < C; ++c) {
        const T* plane = x + (n * C + c) * H * W;
        double v = 0;
        if (mode == "nearest") {
          v = at(plane, int64_t(std::nearbyint(py)), int64_t(std::nearbyint(px)));
        } else if (mode == "bilinear") {
          const double fx = std::floor(px), fy = std::floor(py);
          const double tx = px - fx, ty = py - fy;
          const int64_t c0 = int64_t(fx), r0 = int64_t(fy);
          v = at(plane, r0, c0) * (1 - tx) * (1 - ty) + at(plane, r0, c0 + 1) * tx * (1 - ty) +
              at(plane, r0 + 1, c0) * (1 - tx) * ty + at(plane, r0 + 1, c0 + 1) * tx * ty;
        } else {
          const double fx = std::floor(px), fy = std::floor(py);
          double wx[4], wy[4];
          cubic(px - fx, wx);
          cubic(py - fy, wy);
          for (int ky = 0; ky < 4; ++ky) {
            for (int kx = 0; kx < 4; ++kx) {
              // Each tap's own pixel under the padding mode.
              double tr = fy - 1 + ky, tc = fx - 1 + kx;
              if (padding != "zeros") {
                tr = PadCoordinate(tr, H, padding, align);
                tc = PadCoordinate(tc, W, padding, align);
              }
              v += wy[ky] * wx[kx] * at(plane, int64_t(tr), int64_t(tc));
            }
          }
        }
        y[(n * C + c) * Ho * Wo + i] = T(v);
      }
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Resize(bool upsample) {
  ResizePlan plan;
  TF_RETURN_IF_ERROR(PlanResize(upsample, &plan));
  if (plan.mode == "cubic") {
    ResizeCubic(plan);
  } else if (plan.lin.empty() && !InShape(0).empty()) {
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
      Kernel("GridSample", [](auto& o) { return o.GridSample(); }),
  };
}

}  // namespace tunefarm::runtime::ops_internal
