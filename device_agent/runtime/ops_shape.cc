// The shape family (ops_internal.h): the copies (Reshape and the others
// IsCopyOp names), and the operators that move elements without computing
// on them (Concat, Split, Slice, Transpose, Pad, Gather, GatherElements,
// Tile). Mirrors compiler/frontend/ops_shape.cc, less Resize
// (ops_resize.cc), the reductions (ops_reduce.cc) and Expand (a broadcast:
// ops_elementwise.cc), plus the copies Identity and Dropout, which the
// frontend lists as elementwise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#include "device_agent/runtime/ops_internal.h"
#include "proto/onnx_forms.h"

namespace tunefarm::runtime::ops_internal {
namespace {

// Three planes of `cols` floats each (x, x + cols, x + 2 cols) interleaved
// into y[3 j + p], for j in [begin, end): an RGB image's NCHW -> NHWC, at
// about memcpy's speed (docs/tuning-guide.md).
void InterleaveThreePlanes(const float* x, int64_t cols, int64_t begin, int64_t end, float* y) {
  const float *a = x, *b = x + cols, *c = x + 2 * cols;
  int64_t j = begin;
#if defined(__SSE2__)
  for (; j + 4 <= end; j += 4) {
    const __m128 va = _mm_loadu_ps(a + j), vb = _mm_loadu_ps(b + j), vc = _mm_loadu_ps(c + j);
    const __m128 ab_lo = _mm_unpacklo_ps(va, vb);                                    // a0 b0 a1 b1
    const __m128 ab_hi = _mm_unpackhi_ps(va, vb);                                    // a2 b2 a3 b3
    const __m128 c0a1 = _mm_shuffle_ps(vc, ab_lo, _MM_SHUFFLE(2, 2, 0, 0));          // c0 c0 a1 a1
    const __m128 b1c1 = _mm_shuffle_ps(ab_lo, vc, _MM_SHUFFLE(1, 1, 3, 3));          // b1 b1 c1 c1
    const __m128 c2a3 = _mm_shuffle_ps(vc, ab_hi, _MM_SHUFFLE(2, 2, 2, 2));          // c2 c2 a3 a3
    const __m128 b3c3 = _mm_shuffle_ps(ab_hi, vc, _MM_SHUFFLE(3, 3, 3, 3));          // b3 b3 c3 c3
    _mm_storeu_ps(y + 3 * j, _mm_shuffle_ps(ab_lo, c0a1, _MM_SHUFFLE(2, 0, 1, 0)));  // a0 b0 c0 a1
    _mm_storeu_ps(y + 3 * j + 4,
                  _mm_shuffle_ps(b1c1, ab_hi, _MM_SHUFFLE(1, 0, 2, 0)));  // b1 c1 a2 b2
    _mm_storeu_ps(y + 3 * j + 8,
                  _mm_shuffle_ps(c2a3, b3c3, _MM_SHUFFLE(2, 0, 2, 0)));  // c2 a3 b3 c3
  }
#elif defined(__ARM_NEON)
  for (; j + 4 <= end; j += 4) {
    float32x4x3_t v = {{vld1q_f32(a + j), vld1q_f32(b + j), vld1q_f32(c + j)}};
    vst3q_f32(y + 3 * j, v);
  }
#endif
  for (; j < end; ++j) {
    y[3 * j] = a[j];
    y[3 * j + 1] = b[j];
    y[3 * j + 2] = c[j];
  }
}

NativeOp CopyKernel(const char* name) {
  return {name, [](Op<float>& o) { return o.Copy(); }, [](Op<double>& o) { return o.Copy(); },
          true};
}

}  // namespace

// Output 0 is input 0 (Reshape, Flatten, Squeeze, Unsqueeze, Identity).
template <typename T>
absl::Status Op<T>::Copy() {
  if (In(0) == nullptr) return Error("input is not a float tensor");
  std::copy(In(0), In(0) + Numel(OutShape()), Out());
  return absl::OkStatus();
}

// Inference mode only: a copy, and a mask of ones.
template <typename T>
absl::Status Op<T>::Dropout() {
  if (In(0) == nullptr) return Error("input is not a float tensor");
  std::vector<double> training;
  if (Params(2, &training) && !training.empty() && training[0] != 0)
    return Error("training mode (random dropout) is not supported");
  std::copy(In(0), In(0) + Numel(OutShape()), Out());
  if (Out(1) != nullptr) std::fill(Out(1), Out(1) + Numel(OutShape(1)), T(1));
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Concat() {
  const Shape& os = OutShape();
  const int64_t axis = Axis(n_.Int("axis", 0), os.size());
  if (axis < 0 || axis >= int64_t(os.size())) return Error("axis out of range");
  const int64_t outer = Numel(Shape(os.begin(), os.begin() + axis));
  const int64_t inner = Numel(Shape(os.begin() + axis + 1, os.end()));
  const int64_t row = os[size_t(axis)] * inner;
  struct Part {
    const T* x;
    int64_t len, at;  // elements per output row, and where they go in it
  };
  std::vector<Part> parts;
  int64_t at = 0;
  for (size_t i = 0; i < n_.inputs.size(); ++i) {
    if (!Has(i)) continue;
    const int64_t len = InShape(i).empty() ? 1 : InShape(i)[size_t(axis)] * inner;
    const T* x = In(i);
    if (x == nullptr) return Error(StrCat("input ", i, " is not a float tensor"));
    if (len > 0) parts.push_back({x, len, at});
    at += len;
  }
  // Output rows in order, each from every input: one stream of writes. A
  // channels-last concatenation has rows of a few dozen elements, copied
  // inline rather than by a library call each.
  T* y = Out();
  ParallelRows(outer, row, [&](int64_t first, int64_t last) {
    for (int64_t o = first; o < last; ++o) {
      for (const Part& p : parts) CopyRun(y + o * row + p.at, p.x + o * p.len, p.len);
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Split() {
  const Shape& xs = InShape(0);
  const int64_t axis = Axis(n_.Int("axis", 0), xs.size());
  if (axis < 0 || axis >= int64_t(xs.size())) return Error("axis out of range");
  const int64_t outer = Numel(Shape(xs.begin(), xs.begin() + axis));
  const int64_t inner = Numel(Shape(xs.begin() + axis + 1, xs.end()));
  const T* x = In(0);
  int64_t at = 0;
  for (size_t i = 0; i < a_.out.size(); ++i) {
    const int64_t len = OutShape(i)[size_t(axis)] * inner;
    if (T* y = Out(i); y != nullptr) {
      for (int64_t o = 0; o < outer; ++o)
        std::copy(x + o * xs[size_t(axis)] * inner + at,
                  x + o * xs[size_t(axis)] * inner + at + len, y + o * len);
    }
    at += len;
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Slice() {
  const Shape& xs = InShape(0);
  const size_t r = xs.size();
  std::vector<double> starts, ends, axes, steps;
  if (!graph::SliceBoundsAreInputs(a_.opset)) {
    for (int64_t v : n_.Ints("starts")) starts.push_back(double(v));
    for (int64_t v : n_.Ints("ends")) ends.push_back(double(v));
    for (int64_t v : n_.Ints("axes")) axes.push_back(double(v));
  } else {
    if (!Params(1, &starts) || !Params(2, &ends)) return Error("starts and ends must be constant");
    Params(3, &axes);
    Params(4, &steps);
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(double(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  Shape start(r, 0), step(r, 1);
  for (size_t i = 0; i < starts.size() && i < axes.size(); ++i) {
    const int64_t ax = Axis(int64_t(axes[i]), r);
    if (ax < 0 || ax >= int64_t(r)) return Error("axis out of range");
    const int64_t dim = xs[size_t(ax)], st = int64_t(steps[i]);
    if (st == 0) return Error("a step of 0");
    double b = starts[i];
    if (b < 0) b += double(dim);
    b = st > 0 ? std::clamp(b, 0.0, double(dim)) : std::clamp(b, 0.0, double(dim - 1));
    start[size_t(ax)] = int64_t(b);
    step[size_t(ax)] = st;
  }
  const Shape& os = OutShape();
  const Shape xst = Strides(xs);
  const int64_t total = Numel(os);
  const T* x = In(0);
  T* y = Out();
  if (r == 0) {
    if (total == 1) y[0] = x[0];
    return absl::OkStatus();
  }
  // Trailing dimensions taken whole merge with the innermost one that is
  // not into runs of `count` pieces of `inner` contiguous elements; a
  // step of 1 makes the run one copy.
  size_t k = r - 1;
  int64_t inner = 1;
  while (k > 0 && start[k] == 0 && step[k] == 1 && os[k] == xs[k]) inner *= os[k--];
  const int64_t count = os[k], stride = step[k] * xst[k], run = count * inner;
  const Shape outer(os.begin(), os.begin() + int64_t(k));
  Shape idx(k, 0);
  for (int64_t row = 0; run > 0 && row < total; row += run) {
    int64_t off = start[k] * xst[k];
    for (size_t d = 0; d < k; ++d) off += (start[d] + idx[d] * step[d]) * xst[d];
    if (step[k] == 1) {
      std::memcpy(y + row, x + off, size_t(run) * sizeof(T));
    } else if (inner > 1) {
      for (int64_t j = 0; j < count; ++j)
        std::memcpy(y + row + j * inner, x + off + j * stride, size_t(inner) * sizeof(T));
    } else {
      for (int64_t j = 0; j < count; ++j) y[row + j] = x[off + j * stride];
    }
    NextIndex(&idx, outer);
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Transpose() {
  const Shape& xs = InShape(0);
  const size_t r = xs.size();
  Shape perm = n_.Ints("perm");
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(int64_t(r - 1 - i));
  if (perm.size() != r) return Error("perm does not match the rank");
  const T* x = In(0);
  T* y = Out();
  // NCHW <-> NHWC (what channels-last packages convert with): per batch, a
  // [rows, cols] matrix transposed in 16x16 blocks, so both sides are read
  // and written a cache line at a time.
  if (r == 4 && (perm == Shape{0, 2, 3, 1} || perm == Shape{0, 3, 1, 2})) {
    const bool to_last = perm[1] == 2;
    const int64_t rows = to_last ? xs[1] : xs[1] * xs[2], cols = to_last ? xs[2] * xs[3] : xs[3];
    if constexpr (std::is_same_v<T, float>) {
      if (to_last && rows == 3) {
        constexpr int64_t kChunk = 4096;
        const int64_t chunks = (cols + kChunk - 1) / kChunk;
        Parallel(xs[0] * chunks, [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) {
            const int64_t n = t / chunks, j0 = t % chunks * kChunk;
            InterleaveThreePlanes(x + n * rows * cols, cols, j0, std::min(cols, j0 + kChunk),
                                  y + n * rows * cols);
          }
        });
        return absl::OkStatus();
      }
    }
    constexpr int64_t kB = 16;
    const int64_t rb = (rows + kB - 1) / kB, cb = (cols + kB - 1) / kB;
    Parallel(xs[0] * rb * cb, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t n = t / (rb * cb), i0 = (t / cb) % rb * kB, j0 = t % cb * kB;
        const T* src = x + n * rows * cols;
        T* dst = y + n * rows * cols;
        const int64_t i1 = std::min(rows, i0 + kB), j1 = std::min(cols, j0 + kB);
        for (int64_t j = j0; j < j1; ++j)
          for (int64_t i = i0; i < i1; ++i) dst[j * rows + i] = src[i * cols + j];
      }
    });
    return absl::OkStatus();
  }
  const Shape xst = Strides(xs);
  const Shape& os = OutShape();
  Shape st(r);
  for (size_t i = 0; i < r; ++i) st[i] = xst[size_t(perm[i])];
  const int64_t inner = r ? os[r - 1] : 1, rows = Numel(os) / std::max<int64_t>(inner, 1);
  Parallel(rows, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t rem = row, off = 0;
      for (int dd = int(r) - 2; dd >= 0; --dd) {
        off += (rem % os[size_t(dd)]) * st[size_t(dd)];
        rem /= os[size_t(dd)];
      }
      const int64_t s = r ? st[r - 1] : 0;
      for (int64_t i = 0; i < inner; ++i) y[row * inner + i] = x[off + i * s];
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Pad() {
  const Shape& xs = InShape(0);
  const size_t r = xs.size();
  const std::string mode = n_.strings.count("mode") ? n_.strings.at("mode") : "constant";
  std::vector<double> pads, value, axes;
  double cval = 0;
  if (!graph::PadsAreInputs(a_.opset)) {
    for (int64_t v : n_.Ints("pads")) pads.push_back(double(v));
    cval = n_.Float("value", 0);
  } else {
    if (!Params(1, &pads)) return Error("pads must be constant");
    if (Params(2, &value) && !value.empty()) cval = value[0];
    Params(3, &axes);
  }
  Shape begin(r, 0);
  if (axes.empty()) {
    if (pads.size() != 2 * r) return Error("pads do not match the rank");
    for (size_t i = 0; i < r; ++i) begin[i] = int64_t(pads[i]);
  } else {
    if (pads.size() != 2 * axes.size()) return Error("pads do not match the axes");
    for (size_t i = 0; i < axes.size(); ++i)
      begin[size_t(Axis(int64_t(axes[i]), r))] = int64_t(pads[i]);
  }
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return Error(StrCat("mode '", mode, "' is not supported"));
  const bool constant = mode == "constant", edge = mode == "edge";
  // Source index of output index i along dim d; -1 outside (constant mode).
  auto source = [&](size_t d, int64_t i) -> int64_t {
    int64_t v = i - begin[d];
    const int64_t n = xs[d];
    if (v >= 0 && v < n) return v;
    if (constant) return -1;
    if (edge || n == 1) return std::clamp<int64_t>(v, 0, n - 1);
    const int64_t period = 2 * (n - 1);  // reflect
    if (v < 0 && v > -n) return -v;     // one reflection: no division
    if (v >= n && v < period) return period - v;
    v = ((v % period) + period) % period;
    return v >= n ? period - v : v;
  };
  const Shape& os = OutShape();
  const Shape xst = Strides(xs);
  const T* x = In(0);
  T* y = Out();
  const int64_t total = Numel(os);
  if (r == 0) {
    if (total == 1) y[0] = x[0];
    return absl::OkStatus();
  }
  // Row by row along the last dimension: the data's own run is one copy,
  // each border column takes its source through the mode's rule (-1: the
  // constant), looked up once.
  const int64_t width = os[r - 1];
  const int64_t run_lo = std::clamp<int64_t>(begin[r - 1], 0, width);
  const int64_t run_hi = std::clamp<int64_t>(begin[r - 1] + xs[r - 1], run_lo, width);
  std::vector<int64_t> border;  // columns [0, run_lo), then [run_hi, width)
  border.reserve(size_t(width - (run_hi - run_lo)));
  for (int64_t j = 0; j < run_lo; ++j) border.push_back(source(r - 1, j));
  for (int64_t j = run_hi; j < width; ++j) border.push_back(source(r - 1, j));
  Shape idx(r, 0);
  for (int64_t row = 0; width > 0 && row < total; row += width) {
    int64_t base = 0;
    bool outside = false;
    for (size_t d = 0; d + 1 < r && !outside; ++d) {
      const int64_t v = source(d, idx[d]);
      outside = v < 0;
      base += v * xst[d];
    }
    T* dst = y + row;
    if (outside) {
      std::fill(dst, dst + width, T(cval));
    } else {
      auto put = [&](int64_t j, int64_t from) { dst[j] = from < 0 ? T(cval) : x[base + from]; };
      for (int64_t j = 0; j < run_lo; ++j) put(j, border[size_t(j)]);
      if (run_hi > run_lo)
        std::memcpy(dst + run_lo, x + base + (run_lo - begin[r - 1]),
                    size_t(run_hi - run_lo) * sizeof(T));
      for (int64_t j = run_hi; j < width; ++j) put(j, border[size_t(run_lo + j - run_hi)]);
    }
    idx[r - 1] = width - 1;
    NextIndex(&idx, os);
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Gather() {
  const Shape& xs = InShape(0);
  const int64_t axis = Axis(n_.Int("axis", 0), xs.size());
  if (axis < 0 || axis >= int64_t(xs.size())) return Error("axis out of range");
  std::vector<double> idx;
  if (!Params(1, &idx)) return Error("indices are missing");
  const int64_t outer = Numel(Shape(xs.begin(), xs.begin() + axis));
  const int64_t inner = Numel(Shape(xs.begin() + axis + 1, xs.end()));
  const int64_t dim = xs[size_t(axis)];
  std::vector<int64_t> at(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) {
    int64_t k = int64_t(idx[j]);
    if (k < 0) k += dim;
    if (k < 0 || k >= dim) return Error(StrCat("index ", int64_t(idx[j]), " out of range"));
    at[j] = k;
  }
  const T* x = In(0);
  T* y = Out();
  const int64_t m = int64_t(at.size());
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = x + o * dim * inner;
    T* dst = y + o * m * inner;
    if (inner == 1) {
      for (int64_t j = 0; j < m; ++j) dst[j] = src[at[size_t(j)]];
    } else {
      for (int64_t j = 0; j < m; ++j)
        std::memcpy(dst + j * inner, src + at[size_t(j)] * inner, size_t(inner) * sizeof(T));
    }
  }
  return absl::OkStatus();
}

namespace {

// `v` as an index into a dimension of `dim` (negative: from the end);
// false outside it.
bool WrapIndex(double v, int64_t dim, int64_t* at) {
  *at = int64_t(v) < 0 ? int64_t(v) + dim : int64_t(v);
  return *at >= 0 && *at < dim;
}

// GatherElements and ScatterElements: the data offset (strides `xst`) of
// each element of indices `ind` (shape `is`, the data's rank `xs`): its own
// position, but along `axis` its value. On an index out of range, false
// with that value in *bad.
template <typename V>
bool AxisOffsets(const Shape& xs, const Shape& xst, const Shape& is, int64_t axis, const V& ind,
                 std::vector<int64_t>* offsets, int64_t* bad) {
  const int64_t total = Numel(is);
  offsets->resize(size_t(total));
  Shape idx(is.size(), 0);
  for (int64_t i = 0; i < total; ++i) {
    int64_t k;
    if (!WrapIndex(double(ind[size_t(i)]), xs[size_t(axis)], &k)) {
      *bad = int64_t(ind[size_t(i)]);
      return false;
    }
    int64_t off = 0;
    for (size_t d = 0; d < is.size(); ++d) off += (int64_t(d) == axis ? k : idx[d]) * xst[d];
    (*offsets)[size_t(i)] = off;
    NextIndex(&idx, is);
  }
  return true;
}

// GatherND and ScatterND: the offset of index tuple `tuple` (k values)
// into dimensions first .. first + k - 1 of data `xs` (strides `xst`). On
// an index out of range, false with that value in *bad.
bool TupleOffset(const Shape& xs, const Shape& xst, size_t first, const double* tuple, int64_t k,
                 int64_t* off, int64_t* bad) {
  *off = 0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t v;
    if (!WrapIndex(tuple[j], xs[first + size_t(j)], &v)) {
      *bad = int64_t(tuple[j]);
      return false;
    }
    *off += v * xst[first + size_t(j)];
  }
  return true;
}

// How a Scatter combines an update with the value at its position.
enum class ScatterReduction { kNone, kAdd, kMul, kMax, kMin };

std::optional<ScatterReduction> ParseScatterReduction(const Node& n) {
  auto it = n.strings.find("reduction");
  const std::string r = it == n.strings.end() ? "none" : it->second;
  if (r == "none") return ScatterReduction::kNone;
  if (r == "add") return ScatterReduction::kAdd;
  if (r == "mul") return ScatterReduction::kMul;
  if (r == "max") return ScatterReduction::kMax;
  if (r == "min") return ScatterReduction::kMin;
  return std::nullopt;
}

template <typename T>
void ScatterCombine(ScatterReduction r, T* at, T update) {
  switch (r) {
    case ScatterReduction::kNone:
      *at = update;
      break;
    case ScatterReduction::kAdd:
      *at += update;
      break;
    case ScatterReduction::kMul:
      *at *= update;
      break;
    case ScatterReduction::kMax:
      *at = std::max(*at, update);
      break;
    case ScatterReduction::kMin:
      *at = std::min(*at, update);
      break;
  }
}

}  // namespace

// Each output element is the data element at the same position but along
// `axis`, where it is the index (negative: from the end).
template <typename T>
absl::Status Op<T>::GatherElements() {
  const Shape& xs = InShape(0);
  const Shape& is = InShape(1);
  const int64_t axis = Axis(n_.Int("axis", 0), xs.size());
  if (axis < 0 || axis >= int64_t(xs.size()) || is.size() != xs.size())
    return Error("axis or indices rank do not match the data");
  if (In(1) == nullptr) return Error("indices are missing");
  const Shape xst = Strides(xs);
  const T* x = In(0);
  const T* ind = In(1);
  T* y = Out();
  std::vector<int64_t> offsets;
  int64_t bad = 0;
  if (!AxisOffsets(xs, xst, is, axis, ind, &offsets, &bad))
    return Error(StrCat("index ", bad, " out of range"));
  for (size_t i = 0; i < offsets.size(); ++i) y[i] = x[offsets[i]];
  return absl::OkStatus();
}

// GatherND: the last dimension of the indices (k) addresses the data's
// dimensions after the first `batch_dims` (shared with the indices); each
// index tuple copies the slice of the data's remaining dimensions.
template <typename T>
absl::Status Op<T>::GatherND() {
  const Shape& xs = InShape(0);
  const Shape& is = InShape(1);
  const int64_t b = n_.Int("batch_dims", 0);
  std::vector<double> ind;
  if (!Params(1, &ind)) return Error("indices are missing");
  if (is.empty() || b < 0 || b >= int64_t(is.size()) || b > int64_t(xs.size()))
    return Error("batch_dims does not fit the inputs' ranks");
  const int64_t k = is.back();
  if (k < 1 || b + k > int64_t(xs.size()))
    return Error(StrCat("index tuples of ", k, " do not fit data of rank ", xs.size()));
  const Shape xst = Strides(xs);
  int64_t batches = 1, slice = 1;
  for (int64_t d = 0; d < b; ++d) batches *= xs[size_t(d)];
  for (size_t d = size_t(b + k); d < xs.size(); ++d) slice *= xs[d];
  const int64_t per_batch = Numel(is) / std::max<int64_t>(k, 1) / std::max<int64_t>(batches, 1);
  const int64_t batch_stride = b > 0 ? xst[size_t(b - 1)] : 0;
  const T* x = In(0);
  T* y = Out();
  for (int64_t bi = 0; bi < batches; ++bi) {
    for (int64_t t = 0; t < per_batch; ++t) {
      int64_t off = 0, bad = 0;
      if (!TupleOffset(xs, xst, size_t(b), ind.data() + (bi * per_batch + t) * k, k, &off, &bad))
        return Error(StrCat("index ", bad, " out of range"));
      off += bi * batch_stride;
      std::copy(x + off, x + off + slice, y + (bi * per_batch + t) * slice);
    }
  }
  return absl::OkStatus();
}

// Each update goes to the data position of its own index but along `axis`,
// where it is the index's value (negative: from the end).
template <typename T>
absl::Status Op<T>::ScatterElements() {
  const Shape& xs = InShape(0);
  const Shape& is = InShape(1);
  const std::optional<ScatterReduction> reduction = ParseScatterReduction(n_);
  if (!reduction) return Error(StrCat("reduction '", n_.strings.at("reduction"), "' is not supported"));
  const int64_t axis = Axis(n_.Int("axis", 0), xs.size());
  std::vector<double> ind;
  if (!Params(1, &ind)) return Error("indices are missing");
  if (axis < 0 || axis >= int64_t(xs.size()) || is.size() != xs.size() || InShape(2) != is)
    return Error("axis, indices and updates do not match the data");
  std::vector<int64_t> offsets;
  int64_t bad = 0;
  if (!AxisOffsets(xs, Strides(xs), is, axis, ind, &offsets, &bad))
    return Error(StrCat("index ", bad, " out of range"));
  T* y = Out();
  std::copy(In(0), In(0) + Numel(xs), y);
  const T* u = In(2);
  for (size_t i = 0; i < offsets.size(); ++i) ScatterCombine(*reduction, y + offsets[i], u[i]);
  return absl::OkStatus();
}

// Each index tuple (the indices' last dimension, k) addresses a slice of
// the data's dimensions after the first k; the update's slice goes there.
template <typename T>
absl::Status Op<T>::ScatterND() {
  const Shape& xs = InShape(0);
  const Shape& is = InShape(1);
  const std::optional<ScatterReduction> reduction = ParseScatterReduction(n_);
  if (!reduction) return Error(StrCat("reduction '", n_.strings.at("reduction"), "' is not supported"));
  std::vector<double> ind;
  if (!Params(1, &ind)) return Error("indices are missing");
  if (is.empty() || is.back() < 1 || is.back() > int64_t(xs.size()))
    return Error("index tuples do not fit the data's rank");
  const int64_t k = is.back();
  const Shape xst = Strides(xs);
  int64_t slice = 1;
  for (size_t d = size_t(k); d < xs.size(); ++d) slice *= xs[d];
  const int64_t tuples = Numel(is) / k;
  if (Numel(InShape(2)) != tuples * slice) return Error("updates do not match the indices");
  T* y = Out();
  std::copy(In(0), In(0) + Numel(xs), y);
  const T* u = In(2);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0, bad = 0;
    if (!TupleOffset(xs, xst, 0, ind.data() + t * k, k, &off, &bad))
      return Error(StrCat("index ", bad, " out of range"));
    for (int64_t e = 0; e < slice; ++e) ScatterCombine(*reduction, y + off + e, u[t * slice + e]);
  }
  return absl::OkStatus();
}

// Each batch's first sequence_lens[b] elements along the time axis in
// reverse order; the rest as they are.
template <typename T>
absl::Status Op<T>::ReverseSequence() {
  const Shape& xs = InShape(0);
  const int64_t batch_axis = n_.Int("batch_axis", 1), time_axis = n_.Int("time_axis", 0);
  std::vector<double> lens;
  if (!Params(1, &lens)) return Error("sequence_lens are missing");
  if (xs.size() < 2 || batch_axis < 0 || time_axis < 0 || batch_axis >= int64_t(xs.size()) ||
      time_axis >= int64_t(xs.size()) || batch_axis == time_axis ||
      int64_t(lens.size()) != xs[size_t(batch_axis)])
    return Error("batch_axis, time_axis and sequence_lens do not fit the input");
  const Shape st = Strides(xs);
  const T* x = In(0);
  T* y = Out();
  const int64_t total = Numel(xs), steps = xs[size_t(time_axis)];
  Shape idx(xs.size(), 0);
  for (int64_t i = 0; i < total; ++i) {
    const int64_t len = int64_t(lens[size_t(idx[size_t(batch_axis)])]);
    if (len < 0 || len > steps) return Error(StrCat("sequence length ", len, " out of range"));
    const int64_t t = idx[size_t(time_axis)];
    const int64_t from = t < len ? len - 1 - t : t;
    y[i] = x[i + (from - t) * st[size_t(time_axis)]];
    NextIndex(&idx, xs);
  }
  return absl::OkStatus();
}

// Zeros of the output's shape, each input value written at its index.
// An index flattens a position of the shape the pooling attributes give
// (as MaxPool's second output does); a larger output_shape keeps each
// value at the same coordinates.
template <typename T>
absl::Status Op<T>::MaxUnpool() {
  std::vector<double> ind;
  if (!Params(1, &ind)) return Error("indices are missing");
  const Shape& xs = InShape(0);
  const Shape& os = OutShape();
  const int64_t n = Numel(xs), total = Numel(os);
  if (int64_t(ind.size()) != n) return Error("indices do not match the input");
  const std::vector<int64_t> kernel = n_.Ints("kernel_shape");
  const size_t r = kernel.size();
  std::vector<int64_t> strides = n_.Ints("strides"), pads = n_.Ints("pads");
  if (strides.empty()) strides.assign(r, 1);
  if (pads.empty()) pads.assign(2 * r, 0);
  if (xs.size() != r + 2 || os.size() != r + 2 || strides.size() != r || pads.size() != 2 * r)
    return Error("kernel_shape, strides or pads do not fit the input");
  Shape pooled = {xs[0], xs[1]};
  for (size_t d = 0; d < r; ++d)
    pooled.push_back((xs[d + 2] - 1) * strides[d] + kernel[d] - pads[d] - pads[d + r]);
  const Shape ost = Strides(os);
  const T* x = In(0);
  T* y = Out();
  std::fill(y, y + total, T(0));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = int64_t(ind[size_t(i)]), at = 0;
    if (rest < 0 || rest >= Numel(pooled)) return Error(StrCat("index ", rest, " out of range"));
    for (int64_t d = int64_t(pooled.size()) - 1; d >= 0; --d) {
      const int64_t coord = rest % pooled[size_t(d)];
      rest /= pooled[size_t(d)];
      if (coord >= os[size_t(d)]) return Error("output_shape is smaller than the pooled input");
      at += coord * ost[size_t(d)];
    }
    y[at] = x[i];
  }
  return absl::OkStatus();
}

// Output index i reads the input at i modulo the input's dimensions.
template <typename T>
absl::Status Op<T>::Tile() {
  const Shape& xs = InShape(0);
  const Shape& os = OutShape();
  if (xs.size() != os.size()) return Error("repeats do not match the input's rank");
  const T* x = In(0);
  T* y = Out();
  const int64_t total = Numel(os);
  Shape idx(os.size(), 0);
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < os.size(); ++d) off = off * xs[d] + idx[d] % xs[d];
    y[i] = x[off];
    NextIndex(&idx, os);
  }
  return absl::OkStatus();
}

// The index of the largest (smallest) value along `axis`: the first such

// Zeros above diagonal k (upper = 0) or below it (upper = 1, the
// default) of each matrix of the last two dimensions; k is input 1, 0 when
// absent.
template <typename T>
absl::Status Op<T>::Trilu() {
  const Shape& xs = InShape(0);
  if (xs.size() < 2) return Error("input is not a matrix");
  std::vector<double> kv;
  const int64_t k = Params(1, &kv) && !kv.empty() ? int64_t(std::llround(kv[0])) : 0;
  const bool upper = n_.Int("upper", 1) != 0;
  const int64_t rows = xs[xs.size() - 2], cols = xs.back();
  const int64_t mats = Numel(xs) / std::max<int64_t>(rows * cols, 1);
  const T* x = In(0);
  T* y = Out();
  for (int64_t m = 0; m < mats; ++m) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t at = (m * rows + i) * cols + j;
        const bool keep = upper ? j - i >= k : j - i <= k;
        y[at] = keep ? x[at] : T(0);
      }
    }
  }
  return absl::OkStatus();
}

// The shape family's operators.
std::vector<NativeOp> ShapeOps() {
  return {
      // Copies.
      CopyKernel("Flatten"),
      CopyKernel("Identity"),
      CopyKernel("Reshape"),
      CopyKernel("Squeeze"),
      CopyKernel("Unsqueeze"),
      {"Dropout", [](Op<float>& o) { return o.Dropout(); },
       [](Op<double>& o) { return o.Dropout(); }, true},
      // Layout.
      Kernel("Concat", [](auto& o) { return o.Concat(); }),
      Kernel("Gather", [](auto& o) { return o.Gather(); }),
      Kernel("GatherElements", [](auto& o) { return o.GatherElements(); }),
      Kernel("GatherND", [](auto& o) { return o.GatherND(); }),
      Kernel("ReverseSequence", [](auto& o) { return o.ReverseSequence(); }),
      Kernel("MaxUnpool", [](auto& o) { return o.MaxUnpool(); }),
      Kernel("Scatter", [](auto& o) { return o.ScatterElements(); }),
      Kernel("ScatterElements", [](auto& o) { return o.ScatterElements(); }),
      Kernel("ScatterND", [](auto& o) { return o.ScatterND(); }),
      Kernel("Tile", [](auto& o) { return o.Tile(); }),
      Kernel("Trilu", [](auto& o) { return o.Trilu(); }),
      Kernel("Pad", [](auto& o) { return o.Pad(); }),
      Kernel("Slice", [](auto& o) { return o.Slice(); }),
      Kernel("Split", [](auto& o) { return o.Split(); }),
      Kernel("Transpose", [](auto& o) { return o.Transpose(); }),
  };
}

}  // namespace tunefarm::runtime::ops_internal
