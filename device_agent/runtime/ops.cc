#include "device_agent/runtime/ops.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tunefarm::runtime {
namespace {

using Shape = std::vector<int64_t>;
using absl::StrCat;

Shape Strides(const Shape& s) {
  Shape st(s.size(), 1);
  for (int i = int(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i) + 1] * s[size_t(i) + 1];
  return st;
}

int64_t Axis(int64_t a, size_t rank) { return a < 0 ? a + int64_t(rank) : a; }

// Steps a row-major multi-index over `dims` to the next element.
void NextIndex(Shape* idx, const Shape& dims) {
  for (int d = int(dims.size()) - 1; d >= 0; --d) {
    if (++(*idx)[size_t(d)] < dims[size_t(d)]) return;
    (*idx)[size_t(d)] = 0;
  }
}

// A 1-D convolution or pooling as a 2-D one with H = 1: data and output
// [N, C, L] become [N, C, 1, L]; strides, dilations and pads gain the H entries.
void LiftTo2D(Shape* x, Shape* y, Shape* strides, Shape* dilations, Shape* pads) {
  x->insert(x->begin() + 2, 1);
  y->insert(y->begin() + 2, 1);
  strides->insert(strides->begin(), 1);
  dilations->insert(dilations->begin(), 1);
  *pads = {0, (*pads)[0], 0, (*pads)[1]};
}

template <typename F>
void ParallelFor(int32_t (*par)(void*, int64_t, void*, TFParallelBody), void* ctx, int64_t n, F f) {
  if (par == nullptr || n < 2) {
    f(int64_t(0), n);
    return;
  }
  par(ctx, n, &f, [](void* c, int64_t b, int64_t e) { (*static_cast<F*>(c))(b, e); });
}

// n elements from src to dst: a library call for long runs, inline for the
// few dozen of a channels-last pixel (a call each costs more than the copy).
template <typename T>
void CopyRun(T* dst, const T* src, int64_t n) {
  if (n >= 256) {
    std::memcpy(dst, src, size_t(n) * sizeof(T));
  } else {
    for (int64_t k = 0; k < n; ++k) dst[k] = src[k];
  }
}

enum class ReduceKind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

// One node's computation: the kernels the table of native operators
// (NativeTable below) names, over the node's arguments.
template <typename T>
class Op {
 public:
  explicit Op(const OpArgs<T>& a) : a_(a), n_(*a.node) {}

  const Node& node() const { return n_; }
  absl::Status Error(const std::string& what) const {
    return absl::UnimplementedError(StrCat("node '", n_.name, "' (", n_.op, "): ", what));
  }
  // The checks every kernel relies on: an output, and data for every input.
  absl::Status CheckArgs() const;
  // For kernels other than copies: input 0 is a float tensor.
  absl::Status CheckDataInput() const;

  // y = f(x) element by element, computed in double.
  template <typename F>
  absl::Status Map(F f);
  // y = f(x) element by element, computed in T (float math in the runtime,
  // double in the reference interpreter).
  template <typename F>
  absl::Status MapInT(F f) {
    const T* x = In(0);
    T* y = Out();
    ParallelElements(Numel(OutShape()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
    });
    return absl::OkStatus();
  }
  // Applies f to the broadcast inputs [first, first + count) elementwise;
  // kBinary: count is 2 and f reads v[0] and v[1] only.
  template <bool kBinary = false, typename F>
  absl::Status Broadcast(size_t first, size_t count, F f);
  // y = f(a, b) over two broadcast inputs, computed in T.
  template <typename F>
  absl::Status Zip(F f) {
    return Broadcast<true>(0, 2, [f](const T* v) { return T(f(v[0], v[1])); });
  }
  absl::Status Copy();
  absl::Status Dropout();
  absl::Status Clip();
  absl::Status Cast();
  absl::Status Gelu();
  absl::Status PRelu();
  absl::Status MinMax(bool max);
  absl::Status Pow();
  absl::Status Conv();
  absl::Status ConvTranspose();
  absl::Status Gemm();
  absl::Status MatMul();
  absl::Status BatchNorm();
  absl::Status InstanceNorm();
  absl::Status LayerNorm();
  absl::Status Pool(bool global, bool is_max);
  absl::Status Concat();
  absl::Status Split();
  absl::Status Slice();
  absl::Status Transpose();
  absl::Status Pad();
  absl::Status Resize(bool upsample);
  absl::Status Softmax(bool log);
  // Axes are an input from opset `axes_input_from` on, an attribute before.
  absl::Status Reduce(ReduceKind kind, int64_t axes_input_from);
  absl::Status Gather();
  absl::Status GatherElements();
  absl::Status Expand();
  absl::Status Tile();
  absl::Status ArgReduce(bool max);
  absl::Status TopK();

 private:
  bool Has(size_t i) const { return i < n_.inputs.size() && !n_.inputs[i].empty(); }
  const T* In(size_t i) const { return a_.in[i]; }
  const Shape& InShape(size_t i) const { return a_.in_shapes[i]; }
  T* Out(size_t i = 0) const { return i < a_.out.size() ? a_.out[i] : nullptr; }
  const Shape& OutShape(size_t i = 0) const { return a_.out_shapes[i]; }
  // An input read as parameters: an integer or float constant, or a runtime
  // value (converted).
  bool Params(size_t i, std::vector<double>* v) const {
    v->clear();
    if (!Has(i)) return false;
    if (const Constant* c = a_.in_const[i]; c != nullptr) {
      if (c->is_int) {
        v->assign(c->ints.begin(), c->ints.end());
      } else {
        v->assign(c->floats.begin(), c->floats.end());
      }
      return true;
    }
    if (a_.in[i] == nullptr) return false;
    int64_t n = Numel(a_.in_shapes[i]);
    for (int64_t k = 0; k < n; ++k) v->push_back(double(a_.in[i][k]));
    return true;
  }
  template <typename F>
  void Parallel(int64_t n, F f) const {
    ParallelFor(a_.parallel, a_.parallel_ctx, n, f);
  }
  // f over [0, n) element ranges, in chunks of kElementChunk: fewer
  // elements run on the calling thread (waking the pool costs more).
  static constexpr int64_t kElementChunk = 4096;
  template <typename F>
  void ParallelElements(int64_t n, F f) const {
    Parallel((n + kElementChunk - 1) / kElementChunk,
             [&](int64_t b, int64_t e) { f(b * kElementChunk, std::min(n, e * kElementChunk)); });
  }

  // f over [first, last) ranges of `rows` rows of `width` elements, in
  // chunks of about kElementChunk elements (ParallelElements by whole rows).
  template <typename F>
  void ParallelRows(int64_t rows, int64_t width, F f) const {
    const int64_t per_chunk = std::max<int64_t>(1, kElementChunk / std::max<int64_t>(width, 1));
    Parallel((rows + per_chunk - 1) / per_chunk,
             [&](int64_t b, int64_t e) { f(b * per_chunk, std::min(rows, e * per_chunk)); });
  }

  // Spatial pads [begin..., end...] of a conv or pool node with `sp` spatial dims.
  absl::Status SpatialPads(const Shape& in, const Shape& out, const Shape& k, const Shape& s,
                           const Shape& d, Shape* pads) const;

  const OpArgs<T>& a_;
  const Node& n_;
};

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
  if (a_.opset < 11) {
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
  }
  return Error(StrCat("cast to element type ", to, " is not supported"));
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

template <typename T>
absl::Status Op<T>::SpatialPads(const Shape& in, const Shape& out, const Shape& k, const Shape& s,
                                const Shape& d, Shape* pads) const {
  const size_t sp = k.size();
  const std::string ap = n_.strings.count("auto_pad") ? n_.strings.at("auto_pad") : "NOTSET";
  *pads = n_.Ints("pads");
  if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    pads->assign(2 * sp, 0);
    for (size_t i = 0; i < sp; ++i) {
      int64_t total = std::max<int64_t>(0, (out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in[i]);
      int64_t small = total / 2, big = total - small;
      (*pads)[i] = ap == "SAME_UPPER" ? small : big;
      (*pads)[i + sp] = ap == "SAME_UPPER" ? big : small;
    }
  } else if (ap == "VALID" || pads->empty()) {
    pads->assign(2 * sp, 0);
  }
  if (pads->size() != 2 * sp) return Error("pads do not match the spatial dimensions");
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Conv() {
  Shape x = InShape(0), w = InShape(1), y = OutShape();
  const size_t sp = x.size() - 2;
  if (sp < 1 || sp > 2) return Error(StrCat(sp, " spatial dimensions are not supported"));
  Shape k(w.begin() + 2, w.end()), s = n_.Ints("strides"), d = n_.Ints("dilations"), pads;
  if (s.empty()) s.assign(sp, 1);
  if (d.empty()) d.assign(sp, 1);
  TF_RETURN_IF_ERROR(
      SpatialPads(Shape(x.begin() + 2, x.end()), Shape(y.begin() + 2, y.end()), k, s, d, &pads));
  if (sp == 1) {  // as 2-D with H = 1
    LiftTo2D(&x, &y, &s, &d, &pads);
    w.insert(w.begin() + 2, 1);
  }
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], K = y[1], OH = y[2], OW = y[3];
  const int64_t G = n_.Int("group", 1);
  if (G < 1 || C % G != 0 || K % G != 0 || w[1] != C / G)
    return Error("group does not divide the channels");
  const int64_t Cg = C / G, Kg = K / G, R = w[2], S = w[3];
  const T* in = In(0);
  const T* wt = In(1);
  const T* bias = Has(2) ? In(2) : nullptr;
  T* out = Out();
  Parallel(N * K, [&](int64_t b, int64_t e) {
    for (int64_t nk = b; nk < e; ++nk) {
      const int64_t n = nk / K, oc = nk % K, g = oc / Kg;
      T* o = out + nk * OH * OW;
      std::fill(o, o + OH * OW, bias ? bias[oc] : T(0));
      for (int64_t c = 0; c < Cg; ++c) {
        const T* ip = in + (n * C + g * Cg + c) * H * W;
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t q = 0; q < S; ++q) {
            const T wv = wt[((oc * Cg + c) * R + r) * S + q];
            const int64_t ho = r * d[0] - pads[0], wo = q * d[1] - pads[1];
            for (int64_t oh = 0; oh < OH; ++oh) {
              const int64_t ih = oh * s[0] + ho;
              if (ih < 0 || ih >= H) continue;
              T* orow = o + oh * OW;
              const T* irow = ip + ih * W;
              // ow with 0 <= ow * s1 + wo < W
              int64_t lo = wo >= 0 ? 0 : (-wo + s[1] - 1) / s[1];
              int64_t hi = W - 1 - wo < 0 ? 0 : std::min(OW, (W - 1 - wo) / s[1] + 1);
              for (int64_t ow = lo; ow < hi; ++ow) orow[ow] += wv * irow[ow * s[1] + wo];
            }
          }
        }
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::ConvTranspose() {
  Shape x = InShape(0), w = InShape(1), y = OutShape();
  const size_t sp = x.size() - 2;
  if (sp < 1 || sp > 2) return Error(StrCat(sp, " spatial dimensions are not supported"));
  Shape k(w.begin() + 2, w.end()), s = n_.Ints("strides"), d = n_.Ints("dilations");
  if (s.empty()) s.assign(sp, 1);
  if (d.empty()) d.assign(sp, 1);
  Shape pads = n_.Ints("pads");
  const std::string ap = n_.strings.count("auto_pad") ? n_.strings.at("auto_pad") : "NOTSET";
  Shape op = n_.Ints("output_padding");
  if (op.empty()) op.assign(sp, 0);
  if (!n_.Ints("output_shape").empty() || ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    pads.assign(2 * sp, 0);
    for (size_t i = 0; i < sp; ++i) {
      int64_t total = s[i] * (x[2 + i] - 1) + op[i] + ((k[i] - 1) * d[i] + 1) - y[2 + i];
      total = std::max<int64_t>(total, 0);
      if (ap == "SAME_UPPER") {
        pads[i] = total / 2;
        pads[i + sp] = total - total / 2;
      } else {
        pads[i] = total - total / 2;
        pads[i + sp] = total / 2;
      }
    }
  }
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (sp == 1) {
    LiftTo2D(&x, &y, &s, &d, &pads);
    w.insert(w.begin() + 2, 1);
  }
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], K = y[1], OH = y[2], OW = y[3];
  const int64_t G = n_.Int("group", 1);
  if (G < 1 || C % G != 0 || w[0] != C || w[1] * G != K) return Error("group does not match");
  const int64_t Cg = C / G, Kg = K / G, R = w[2], S = w[3];
  const T* in = In(0);
  const T* wt = In(1);
  const T* bias = Has(2) ? In(2) : nullptr;
  T* out = Out();
  Parallel(N * K, [&](int64_t b, int64_t e) {
    for (int64_t nk = b; nk < e; ++nk) {
      const int64_t n = nk / K, oc = nk % K, g = oc / Kg, kk = oc % Kg;
      T* o = out + nk * OH * OW;
      std::fill(o, o + OH * OW, bias ? bias[oc] : T(0));
      for (int64_t c = 0; c < Cg; ++c) {
        const T* ip = in + (n * C + g * Cg + c) * H * W;
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t q = 0; q < S; ++q) {
            const T wv = wt[(((g * Cg + c) * Kg + kk) * R + r) * S + q];
            for (int64_t ih = 0; ih < H; ++ih) {
              const int64_t oh = ih * s[0] - pads[0] + r * d[0];
              if (oh < 0 || oh >= OH) continue;
              for (int64_t iw = 0; iw < W; ++iw) {
                const int64_t ow = iw * s[1] - pads[1] + q * d[1];
                if (ow >= 0 && ow < OW) o[oh * OW + ow] += wv * ip[ih * W + iw];
              }
            }
          }
        }
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Gemm() {
  const Shape &as = InShape(0), &bs = InShape(1);
  if (as.size() != 2 || bs.size() != 2) return Error("Gemm needs 2-D inputs");
  const bool ta = n_.Int("transA", 0), tb = n_.Int("transB", 0);
  const double alpha = n_.Float("alpha", 1), beta = n_.Float("beta", 1);
  const int64_t M = ta ? as[1] : as[0], K = ta ? as[0] : as[1], N = tb ? bs[0] : bs[1];
  const T* A = In(0);
  const T* B = In(1);
  T* Y = Out();
  Shape cst(2, 0);
  const T* C = Has(2) ? In(2) : nullptr;
  if (C != nullptr) {
    Shape cs = InShape(2);
    while (cs.size() < 2) cs.insert(cs.begin(), 1);
    cst = {cs[0] == 1 ? 0 : cs[1], cs[1] == 1 ? 0 : 1};
  }
  Parallel(M, [&](int64_t b, int64_t e) {
    std::vector<double> acc(static_cast<size_t>(N));
    for (int64_t m = b; m < e; ++m) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = 0; k < K; ++k) {
        const double av = double(ta ? A[k * M + m] : A[m * K + k]);
        if (tb) {
          for (int64_t n = 0; n < N; ++n) acc[size_t(n)] += av * double(B[n * K + k]);
        } else {
          const T* br = B + k * N;
          for (int64_t n = 0; n < N; ++n) acc[size_t(n)] += av * double(br[n]);
        }
      }
      for (int64_t n = 0; n < N; ++n) {
        double v = alpha * acc[size_t(n)];
        if (C != nullptr) v += beta * double(C[m * cst[0] + n * cst[1]]);
        Y[m * N + n] = T(v);
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::MatMul() {
  Shape as = InShape(0), bs = InShape(1);
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K) return Error("inner dimensions differ");
  const size_t r = std::max(as.size(), bs.size());
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  ab.insert(ab.begin(), r - as.size(), 1);
  bb.insert(bb.begin(), r - bs.size(), 1);
  Shape ob(r - 2);
  for (size_t i = 0; i + 2 < r; ++i) ob[i] = std::max(ab[i], bb[i]);
  const int64_t batches = Numel(ob);
  const Shape ast = Strides(ab), bst = Strides(bb);
  const T* A = In(0);
  const T* B = In(1);
  T* Y = Out();
  Parallel(batches * M, [&](int64_t b, int64_t e) {
    std::vector<double> acc(static_cast<size_t>(N));
    for (int64_t bm = b; bm < e; ++bm) {
      const int64_t bi = bm / M, m = bm % M;
      int64_t rem = bi, aoff = 0, boff = 0;
      for (int i = int(ob.size()) - 1; i >= 0; --i) {
        int64_t idx = rem % ob[size_t(i)];
        rem /= ob[size_t(i)];
        if (ab[size_t(i)] != 1) aoff += idx * ast[size_t(i)];
        if (bb[size_t(i)] != 1) boff += idx * bst[size_t(i)];
      }
      const T* ar = A + aoff * M * K + m * K;
      const T* bp = B + boff * K * N;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t k = 0; k < K; ++k) {
        const double av = double(ar[k]);
        const T* br = bp + k * N;
        for (int64_t n = 0; n < N; ++n) acc[size_t(n)] += av * double(br[n]);
      }
      T* yr = Y + bm * N;
      for (int64_t n = 0; n < N; ++n) yr[n] = T(acc[size_t(n)]);
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::BatchNorm() {
  const Shape& xs = InShape(0);
  const T* x = In(0);
  T* y = Out();
  {
    if (n_.Int("training_mode", 0) != 0) return Error("training_mode is not supported");
    const double eps = n_.Float("epsilon", 1e-5f);
    const int64_t N = xs[0], C = xs.size() > 1 ? xs[1] : 1;
    const int64_t inner = Numel(xs) / std::max<int64_t>(N * C, 1);
    const T *sc = In(1), *bi = In(2), *mean = In(3), *var = In(4);
    Parallel(N * C, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t c = nc % C;
        const double mul = double(sc[c]) / std::sqrt(double(var[c]) + eps);
        const double add = double(bi[c]) - double(mean[c]) * mul;
        for (int64_t i = 0; i < inner; ++i)
          y[nc * inner + i] = T(double(x[nc * inner + i]) * mul + add);
      }
    });
    return absl::OkStatus();
  }
}

template <typename T>
absl::Status Op<T>::InstanceNorm() {
  const Shape& xs = InShape(0);
  const T* x = In(0);
  T* y = Out();
  {
    const double eps = n_.Float("epsilon", 1e-5f);
    const int64_t N = xs[0], C = xs[1], inner = Numel(xs) / (N * C);
    const T *sc = In(1), *bi = In(2);
    Parallel(N * C, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t c = nc % C;
        const T* p = x + nc * inner;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < inner; ++i) mean += double(p[i]);
        mean /= double(inner);
        for (int64_t i = 0; i < inner; ++i) var += (double(p[i]) - mean) * (double(p[i]) - mean);
        var /= double(inner);
        const double inv = 1 / std::sqrt(var + eps);
        for (int64_t i = 0; i < inner; ++i)
          y[nc * inner + i] = T((double(p[i]) - mean) * inv * double(sc[c]) + double(bi[c]));
      }
    });
    return absl::OkStatus();
  }
}

// Over the dimensions from `axis` on.
template <typename T>
absl::Status Op<T>::LayerNorm() {
  const Shape& xs = InShape(0);
  const T* x = In(0);
  T* y = Out();
  const int64_t axis = Axis(n_.Int("axis", -1), xs.size());
  if (axis < 0 || axis >= int64_t(xs.size())) return Error("axis out of range");
  const double eps = n_.Float("epsilon", 1e-5f);
  const int64_t inner = Numel(Shape(xs.begin() + axis, xs.end()));
  const int64_t outer = Numel(xs) / std::max<int64_t>(inner, 1);
  const T* sc = In(1);
  const T* bi = Has(2) ? In(2) : nullptr;
  // Element i of a normalized row reads scale and bias at these offsets:
  // each broadcasts (numpy, aligned at the last dimension) over the
  // normalized dimensions.
  const Shape norm(xs.begin() + axis, xs.end());
  auto offsets = [&](size_t input, std::vector<int64_t>* at) -> bool {
    const Shape& s = InShape(input);
    if (s.size() > norm.size()) return false;
    at->assign(size_t(inner), 0);
    int64_t stride = 1, period = 1;  // the scale's stride, the row's
    for (size_t k = 0; k < norm.size(); ++k) {
      const size_t d = norm.size() - 1 - k;
      const int64_t own = k < s.size() ? s[s.size() - 1 - k] : 1;
      if (own != 1 && own != norm[d]) return false;
      if (own != 1) {
        for (int64_t i = 0; i < inner; ++i) (*at)[size_t(i)] += (i / period) % own * stride;
        stride *= own;
      }
      period *= norm[d];
    }
    return true;
  };
  std::vector<int64_t> sc_at, bi_at;
  if (!offsets(1, &sc_at) || (bi && !offsets(2, &bi_at)))
    return Error("scale or bias does not broadcast over the normalized dimensions");
  T* mean_out = Out(1);
  T* inv_out = Out(2);
  Parallel(outer, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const T* p = x + o * inner;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < inner; ++i) mean += double(p[i]);
      mean /= double(inner);
      for (int64_t i = 0; i < inner; ++i) var += (double(p[i]) - mean) * (double(p[i]) - mean);
      var /= double(inner);
      const double inv = 1 / std::sqrt(var + eps);
      for (int64_t i = 0; i < inner; ++i) {
        double v = (double(p[i]) - mean) * inv * double(sc[sc_at[size_t(i)]]);
        if (bi) v += double(bi[bi_at[size_t(i)]]);
        y[o * inner + i] = T(v);
      }
      if (mean_out) mean_out[o] = T(mean);
      if (inv_out) inv_out[o] = T(inv);
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Pool(bool global, bool is_max) {
  Shape x = InShape(0), y = OutShape();
  if (Out(1) != nullptr) return Error("the Indices output is not supported");
  const size_t sp = x.size() - 2;
  const T* in = In(0);
  T* out = Out();
  if (global) {
    const int64_t NC = x[0] * x[1], inner = Numel(x) / NC;
    Parallel(NC, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T* p = in + i * inner;
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t j = 0; j < inner; ++j)
          acc = is_max ? std::max(acc, double(p[j])) : acc + double(p[j]);
        out[i] = T(is_max ? acc : acc / double(inner));
      }
    });
    return absl::OkStatus();
  }
  if (sp < 1 || sp > 2) return Error(StrCat(sp, " spatial dimensions are not supported"));
  Shape k = n_.Ints("kernel_shape"), s = n_.Ints("strides"), d = n_.Ints("dilations"), pads;
  if (k.size() != sp) return Error("kernel_shape does not match the input");
  if (s.empty()) s.assign(sp, 1);
  if (d.empty()) d.assign(sp, 1);
  TF_RETURN_IF_ERROR(
      SpatialPads(Shape(x.begin() + 2, x.end()), Shape(y.begin() + 2, y.end()), k, s, d, &pads));
  if (sp == 1) {
    LiftTo2D(&x, &y, &s, &d, &pads);
    k.insert(k.begin(), 1);
  }
  const bool include_pad = n_.Int("count_include_pad", 0) != 0;
  const int64_t H = x[2], W = x[3], OH = y[2], OW = y[3];
  if (is_max) {
    // Separable: per output row, the max over the window's rows of each
    // input column (contiguous, vectorized), then the max over the window's
    // columns of that row. Windows entirely in the padding give -inf.
    Parallel(x[0] * x[1], [&](int64_t b, int64_t e) {
      std::vector<T> col(static_cast<size_t>(W));
      const T lowest = -std::numeric_limits<T>::infinity();
      for (int64_t nc = b; nc < e; ++nc) {
        const T* ip = in + nc * H * W;
        T* op = out + nc * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          std::fill(col.begin(), col.end(), lowest);
          for (int64_t r = 0; r < k[0]; ++r) {
            const int64_t ih = oh * s[0] - pads[0] + r * d[0];
            if (ih < 0 || ih >= H) continue;
            const T* row = ip + ih * W;
            T* c = col.data();
            for (int64_t iw = 0; iw < W; ++iw) c[iw] = std::max(c[iw], row[iw]);
          }
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t iw0 = ow * s[1] - pads[1];
            T m = lowest;
            if (iw0 >= 0 && iw0 + (k[1] - 1) * d[1] < W) {
              for (int64_t q = 0; q < k[1]; ++q) m = std::max(m, col[size_t(iw0 + q * d[1])]);
            } else {
              for (int64_t q = 0; q < k[1]; ++q) {
                const int64_t iw = iw0 + q * d[1];
                if (iw >= 0 && iw < W) m = std::max(m, col[size_t(iw)]);
              }
            }
            op[oh * OW + ow] = m;
          }
        }
      }
    });
    return absl::OkStatus();
  }
  Parallel(x[0] * x[1], [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      const T* ip = in + nc * H * W;
      T* op = out + nc * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0.0;
          int64_t count = 0, padded = 0;
          for (int64_t r = 0; r < k[0]; ++r) {
            const int64_t ih = oh * s[0] - pads[0] + r * d[0];
            for (int64_t q = 0; q < k[1]; ++q) {
              const int64_t iw = ow * s[1] - pads[1] + q * d[1];
              if (ih < 0 || iw < 0 || ih >= H || iw >= W) {
                // Inside the explicit padding (not past it, for ceil_mode).
                if (ih >= -pads[0] && iw >= -pads[1] && ih < H + pads[2] && iw < W + pads[3])
                  ++padded;
                continue;
              }
              acc += double(ip[ih * W + iw]);
              ++count;
            }
          }
          acc /= double(include_pad ? count + padded : std::max<int64_t>(count, 1));
          op[oh * OW + ow] = T(acc);
        }
      }
    }
  });
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
  if (a_.opset < 10) {
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

// Three planes of `cols` floats each (x, x + cols, x + 2 cols) interleaved
// into y[3 j + p], for j in [begin, end): an RGB image's NCHW -> NHWC, at
// about memcpy's speed (640x640, 1 thread: 0.42 ms against 1.2-1.9 ms for
// the element loops).
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
  if (a_.opset < 11) {
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
absl::Status Op<T>::Resize(bool upsample) {
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
  } else if (a_.opset < 11) {
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
  std::vector<std::vector<int64_t>> i0(r), i1(r);
  std::vector<std::vector<double>> w1(r);
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
  const Shape xst = Strides(xs);
  const T* x = In(0);
  T* y = Out();
  const int64_t total = Numel(os);
  // Dims that interpolate (linear, with a fractional weight somewhere).
  std::vector<size_t> lin;
  if (mode == "linear") {
    for (size_t d = 0; d < r; ++d)
      if (xs[d] != os[d] || scales[d] != 1) lin.push_back(d);
  }
  if (lin.empty() && r > 0) {
    // Nearest (or linear with whole weights): one source row per output row,
    // then a copy through the last dimension's index table.
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
    return absl::OkStatus();
  }
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
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Softmax(bool log) {
  const Shape& xs = InShape(0);
  const int64_t axis = Axis(n_.Int("axis", a_.opset < 13 ? 1 : -1), xs.size());
  if (axis < 0 || axis >= int64_t(xs.size())) return Error("axis out of range");
  // Before opset 13 the input is coerced to 2-D at `axis`; from 13 on the
  // reduction is over `axis` alone.
  int64_t len, inner;
  if (a_.opset < 13) {
    len = Numel(Shape(xs.begin() + axis, xs.end()));
    inner = 1;
  } else {
    len = xs[size_t(axis)];
    inner = Numel(Shape(xs.begin() + axis + 1, xs.end()));
  }
  const int64_t outer = Numel(xs) / std::max<int64_t>(len * inner, 1);
  const T* x = In(0);
  T* y = Out();
  Parallel(outer * inner, [&](int64_t b, int64_t e) {
    for (int64_t oi = b; oi < e; ++oi) {
      const int64_t o = oi / inner, i = oi % inner;
      const T* p = x + o * len * inner + i;
      T* q = y + o * len * inner + i;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < len; ++k) mx = std::max(mx, double(p[k * inner]));
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) sum += std::exp(double(p[k * inner]) - mx);
      for (int64_t k = 0; k < len; ++k) {
        const double v = double(p[k * inner]) - mx;
        q[k * inner] = T(log ? v - std::log(sum) : std::exp(v) / sum);
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Reduce(ReduceKind kind, int64_t axes_input_from) {
  const Shape& xs = InShape(0);
  const size_t r = xs.size();
  std::vector<double> axes;
  const bool axes_input = a_.opset >= axes_input_from;
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
  const int64_t total = Numel(is), dim = xs[size_t(axis)];
  Shape idx(is.size(), 0);
  for (int64_t i = 0; i < total; ++i) {
    int64_t k = int64_t(ind[i]);
    if (k < 0) k += dim;
    if (k < 0 || k >= dim) return Error(StrCat("index ", int64_t(ind[i]), " out of range"));
    int64_t off = 0;
    for (size_t d = 0; d < is.size(); ++d) off += (int64_t(d) == axis ? k : idx[d]) * xst[d];
    y[i] = x[off];
    NextIndex(&idx, is);
  }
  return absl::OkStatus();
}

// Input 0 broadcast to the output's shape.
template <typename T>
absl::Status Op<T>::Expand() {
  return Broadcast(0, 1, [](const T* v) { return v[0]; });
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

template <typename T>
absl::Status Op<T>::CheckArgs() const {
  if (a_.out.empty() || Out() == nullptr) return Error("no output");
  for (size_t i = 0; i < n_.inputs.size(); ++i) {
    if (Has(i) && a_.in[i] == nullptr && a_.in_const[i] == nullptr)
      return Error(StrCat("input '", n_.inputs[i], "' has no data"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::CheckDataInput() const {
  if (Has(0) && In(0) == nullptr) return Error("the data input is not a float tensor");
  return absl::OkStatus();
}

//===--- The native operators ---------------------------------------------===//

// One operator the runtime computes: its kernel for each element type.
struct NativeOp {
  const char* name;
  absl::Status (*f32)(Op<float>&);
  absl::Status (*f64)(Op<double>&);
  bool copies_input = false;  // output 0 is a copy of input 0 (IsCopyOp)
};

// `kernel` is a generic lambda [](auto& op) -> absl::Status.
template <typename K>
NativeOp Kernel(const char* name, K kernel) {
  return {name, kernel, kernel};
}
NativeOp CopyKernel(const char* name) {
  return {name, [](Op<float>& o) { return o.Copy(); }, [](Op<double>& o) { return o.Copy(); },
          true};
}

// Every operator RunOp computes, by name; the frontend's registry marks the
// same set native (tests/compiler/frontend/op_registry_test.cc).
const std::vector<NativeOp>& NativeTable() {
  static const auto* table = new std::vector<NativeOp>{
      // Copies.
      CopyKernel("Flatten"),
      CopyKernel("Identity"),
      CopyKernel("Reshape"),
      CopyKernel("Squeeze"),
      CopyKernel("Unsqueeze"),
      {"Dropout", [](Op<float>& o) { return o.Dropout(); },
       [](Op<double>& o) { return o.Dropout(); }, true},
      // One input, element by element (computed in double; MapInT where float is exact).
      Kernel("Abs", [](auto& o) { return o.MapInT([](auto v) { return std::fabs(v); }); }),
      Kernel("Cast", [](auto& o) { return o.Cast(); }),
      Kernel("Ceil", [](auto& o) { return o.Map([](double v) { return std::ceil(v); }); }),
      Kernel("Clip", [](auto& o) { return o.Clip(); }),
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
      Kernel("Pow", [](auto& o) { return o.Pow(); }),
      Kernel("PRelu", [](auto& o) { return o.PRelu(); }),
      Kernel("Sub", [](auto& o) { return o.Zip([](auto a, auto b) { return a - b; }); }),
      Kernel("Where",
             [](auto& o) {
               return o.Broadcast(0, 3, [](const auto* v) { return v[0] != 0 ? v[1] : v[2]; });
             }),
      // Convolution, dense, normalization, pooling.
      Kernel("Conv", [](auto& o) { return o.Conv(); }),
      Kernel("ConvTranspose", [](auto& o) { return o.ConvTranspose(); }),
      Kernel("Gemm", [](auto& o) { return o.Gemm(); }),
      Kernel("MatMul", [](auto& o) { return o.MatMul(); }),
      Kernel("BatchNormalization", [](auto& o) { return o.BatchNorm(); }),
      Kernel("InstanceNormalization", [](auto& o) { return o.InstanceNorm(); }),
      Kernel("LayerNormalization", [](auto& o) { return o.LayerNorm(); }),
      Kernel("AveragePool", [](auto& o) { return o.Pool(false, false); }),
      Kernel("GlobalAveragePool", [](auto& o) { return o.Pool(true, false); }),
      Kernel("GlobalMaxPool", [](auto& o) { return o.Pool(true, true); }),
      Kernel("MaxPool", [](auto& o) { return o.Pool(false, true); }),
      Kernel("Softmax", [](auto& o) { return o.Softmax(false); }),
      Kernel("LogSoftmax", [](auto& o) { return o.Softmax(true); }),
      // Layout and reductions.
      Kernel("Concat", [](auto& o) { return o.Concat(); }),
      Kernel("Gather", [](auto& o) { return o.Gather(); }),
      Kernel("GatherElements", [](auto& o) { return o.GatherElements(); }),
      Kernel("Expand", [](auto& o) { return o.Expand(); }),
      Kernel("Tile", [](auto& o) { return o.Tile(); }),
      Kernel("TopK", [](auto& o) { return o.TopK(); }),
      Kernel("ArgMax", [](auto& o) { return o.ArgReduce(true); }),
      Kernel("ArgMin", [](auto& o) { return o.ArgReduce(false); }),
      Kernel("Pad", [](auto& o) { return o.Pad(); }),
      Kernel("Resize", [](auto& o) { return o.Resize(false); }),
      Kernel("Upsample", [](auto& o) { return o.Resize(true); }),
      Kernel("Slice", [](auto& o) { return o.Slice(); }),
      Kernel("Split", [](auto& o) { return o.Split(); }),
      Kernel("Transpose", [](auto& o) { return o.Transpose(); }),
      Kernel("ReduceMax", [](auto& o) { return o.Reduce(ReduceKind::kMax, 18); }),
      Kernel("ReduceMean", [](auto& o) { return o.Reduce(ReduceKind::kMean, 18); }),
      Kernel("ReduceSum", [](auto& o) { return o.Reduce(ReduceKind::kSum, 13); }),
      Kernel("ReduceMin", [](auto& o) { return o.Reduce(ReduceKind::kMin, 18); }),
      Kernel("ReduceProd", [](auto& o) { return o.Reduce(ReduceKind::kProd, 18); }),
      Kernel("ReduceL1", [](auto& o) { return o.Reduce(ReduceKind::kL1, 18); }),
      Kernel("ReduceL2", [](auto& o) { return o.Reduce(ReduceKind::kL2, 18); }),
      Kernel("ReduceSumSquare", [](auto& o) { return o.Reduce(ReduceKind::kSumSquare, 18); }),
      Kernel("ReduceLogSum", [](auto& o) { return o.Reduce(ReduceKind::kLogSum, 18); }),
      Kernel("ReduceLogSumExp", [](auto& o) { return o.Reduce(ReduceKind::kLogSumExp, 18); }),
  };
  return *table;
}

const NativeOp* FindNative(const std::string& op) {
  static const auto* by_name = [] {
    auto* m = new std::map<std::string, const NativeOp*>;
    for (const NativeOp& k : NativeTable()) m->emplace(k.name, &k);
    return m;
  }();
  auto it = by_name->find(op);
  return it == by_name->end() ? nullptr : it->second;
}

absl::Status Call(const NativeOp& k, Op<float>& o) { return k.f32(o); }
absl::Status Call(const NativeOp& k, Op<double>& o) { return k.f64(o); }

}  // namespace

bool IsCopyOp(const std::string& op) {
  const NativeOp* k = FindNative(op);
  return k != nullptr && k->copies_input;
}

bool IsViewOp(const std::string& op) { return op != "Dropout" && IsCopyOp(op); }

std::vector<std::string> NativeOps() {
  std::vector<std::string> names;
  for (const NativeOp& k : NativeTable()) names.emplace_back(k.name);
  std::sort(names.begin(), names.end());
  return names;
}

template <typename T>
absl::Status RunOp(const OpArgs<T>& args) {
  if (args.node == nullptr) return absl::InvalidArgumentError("no node");
  if (args.in.size() != args.node->inputs.size() || args.in_const.size() != args.in.size() ||
      args.in_shapes.size() != args.in.size() || args.out.size() != args.out_shapes.size())
    return absl::InvalidArgumentError(
        StrCat("node '", args.node->name, "': argument counts do not match"));
  Op<T> op(args);
  TF_RETURN_IF_ERROR(op.CheckArgs());
  const NativeOp* k = static_cast<const NativeOp*>(args.resolved);
  if (k == nullptr) k = FindNative(args.node->op);
  if (k == nullptr) return op.Error("not an operator the runtime computes");
  args.resolved = k;
  if (!k->copies_input) TF_RETURN_IF_ERROR(op.CheckDataInput());
  return Call(*k, op);
}

template absl::Status RunOp<float>(const OpArgs<float>&);
template absl::Status RunOp<double>(const OpArgs<double>&);

}  // namespace tunefarm::runtime
