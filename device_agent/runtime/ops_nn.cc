// The neural-network family (ops_internal.h): convolutions, dense layers,
// normalizations, pooling and softmax. Mirrors compiler/frontend/ops_nn.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "device_agent/runtime/ops_internal.h"
#include "proto/onnx_forms.h"

namespace tunefarm::runtime::ops_internal {
namespace {

// A 1-D convolution or pooling as a 2-D one with H = 1: data and output
// [N, C, L] become [N, C, 1, L]; strides, dilations and pads gain the H entries.
void LiftTo2D(Shape* x, Shape* y, Shape* strides, Shape* dilations, Shape* pads) {
  x->insert(x->begin() + 2, 1);
  y->insert(y->begin() + 2, 1);
  strides->insert(strides->begin(), 1);
  dilations->insert(dilations->begin(), 1);
  *pads = {0, (*pads)[0], 0, (*pads)[1]};
}

}  // namespace

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

// Local response normalization across channels: each value divided by
// (bias + alpha / size * the sum of squares of the `size` channels around
// it) ^ beta.
template <typename T>
absl::Status Op<T>::Lrn() {
  const Shape& xs = InShape(0);
  const int64_t size = n_.Int("size", 0);
  if (xs.size() < 2 || size < 1) return Error("needs an input of rank >= 2 and size >= 1");
  const double alpha = n_.Float("alpha", 1e-4f), beta = n_.Float("beta", 0.75f),
               bias = n_.Float("bias", 1.0f);
  const int64_t N = xs[0], C = xs[1], inner = Numel(xs) / std::max<int64_t>(N * C, 1);
  const int64_t below = (size - 1) / 2, above = size / 2;
  const T* x = In(0);
  T* y = Out();
  Parallel(N * C, [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      const int64_t n = nc / C, c = nc % C;
      const int64_t lo = std::max<int64_t>(0, c - below), hi = std::min<int64_t>(C - 1, c + above);
      for (int64_t i = 0; i < inner; ++i) {
        double sq = 0;
        for (int64_t k = lo; k <= hi; ++k) {
          const double v = double(x[(n * C + k) * inner + i]);
          sq += v * v;
        }
        y[nc * inner + i] =
            T(double(x[nc * inner + i]) / std::pow(bias + alpha / double(size) * sq, beta));
      }
    }
  });
  return absl::OkStatus();
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
  if (sp < 1) return Error("the input has no spatial dimensions");
  Shape k = n_.Ints("kernel_shape"), s = n_.Ints("strides"), d = n_.Ints("dilations"), pads;
  if (k.size() != sp) return Error("kernel_shape does not match the input");
  if (s.empty()) s.assign(sp, 1);
  if (d.empty()) d.assign(sp, 1);
  TF_RETURN_IF_ERROR(
      SpatialPads(Shape(x.begin() + 2, x.end()), Shape(y.begin() + 2, y.end()), k, s, d, &pads));
  if (sp > 2 || Out(1) != nullptr) return PoolAnyRank(is_max, k, s, d, pads);
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
absl::Status Op<T>::PoolAnyRank(bool is_max, const Shape& k, const Shape& s, const Shape& d,
                                const Shape& pads) {
  const Shape& x = InShape(0);
  const Shape& y = OutShape();
  const size_t sp = x.size() - 2;
  const Shape xs(x.begin() + 2, x.end()), ys(y.begin() + 2, y.end());
  const int64_t plane = Numel(xs), out_plane = Numel(ys), taps = Numel(k);
  const bool include_pad = n_.Int("count_include_pad", 0) != 0;
  const bool column_major = n_.Int("storage_order", 0) != 0;
  const T* in = In(0);
  T* out = Out();
  T* indices = Out(1);
  Parallel(x[0] * x[1], [&](int64_t b, int64_t e) {
    Shape o(sp), t(sp);
    for (int64_t nc = b; nc < e; ++nc) {
      const T* ip = in + nc * plane;
      std::fill(o.begin(), o.end(), 0);
      for (int64_t oi = 0; oi < out_plane; ++oi) {
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t count = 0, padded = 0, best = -1;
        std::fill(t.begin(), t.end(), 0);
        for (int64_t ti = 0; ti < taps; ++ti) {
          bool inside = true, in_pads = true;
          int64_t at = 0, at_col = 0, stride_col = 1;
          for (size_t j = 0; j < sp; ++j) {
            const int64_t c = o[j] * s[j] - pads[j] + t[j] * d[j];
            inside = inside && c >= 0 && c < xs[j];
            in_pads = in_pads && c >= -pads[j] && c < xs[j] + pads[j + sp];
            at = at * xs[j] + c;
            at_col += c * stride_col;
            stride_col *= xs[j];
          }
          if (inside) {
            const double v = double(ip[at]);
            if (!is_max) {
              acc += v;
              ++count;
            } else if (best < 0 || v > acc) {
              acc = v;
              best = column_major ? at_col : at;
            }
          } else if (in_pads) {
            ++padded;
          }
          NextIndex(&t, k);
        }
        if (!is_max) acc /= double(include_pad ? count + padded : std::max<int64_t>(count, 1));
        out[nc * out_plane + oi] = T(acc);
        if (indices != nullptr) indices[nc * out_plane + oi] = T(nc * plane + std::max<int64_t>(best, 0));
        NextIndex(&o, ys);
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status Op<T>::Softmax(bool log) {
  const Shape& xs = InShape(0);
  const int64_t axis = Axis(n_.Int("axis", graph::SoftmaxDefaultAxis(a_.opset)), xs.size());
  if (axis < 0 || axis >= int64_t(xs.size())) return Error("axis out of range");
  // Before opset 13 the input is coerced to 2-D at `axis`; from 13 on the
  // reduction is over `axis` alone.
  int64_t len, inner;
  if (graph::SoftmaxCoercesTo2D(a_.opset)) {
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

// Zero points: a scalar for either operand, or one per row of A
// (MatMulInteger) and one per output channel of W (ConvInteger) or column
// of B (MatMulInteger). The products of 8-bit values less zero points are
// integers that T holds exactly; Conv sums them in T, MatMul in double.
template <typename T>
absl::Status Op<T>::IntegerProduct(bool conv) {
  const Shape& as = InShape(0);
  const Shape& bs = InShape(1);
  std::vector<double> za, zb;
  Params(2, &za);
  Params(3, &zb);
  std::vector<T> a(size_t(Numel(as))), b(size_t(Numel(bs)));
  const int64_t K = as.empty() ? 1 : as.back();
  const int64_t rows = as.size() < 2 ? 1 : as[as.size() - 2];
  if (za.size() > 1 && (conv || int64_t(za.size()) != rows))
    return Error("a zero point of the first operand that is not one value or one per row");
  for (size_t i = 0; i < a.size(); ++i) {
    const double z = za.empty() ? 0 : za.size() == 1 ? za[0] : za[(int64_t(i) / K) % rows];
    a[i] = T(double(In(0)[i]) - z);
  }
  // Per output channel (the first dimension of W) or column (B's last).
  const int64_t per = conv ? bs[0] : bs.back();
  const int64_t inner = conv ? Numel(bs) / std::max<int64_t>(bs[0], 1) : 1;
  if (zb.size() > 1 && int64_t(zb.size()) != per)
    return Error("a zero point of the second operand that is not one value or one per output "
                 "channel");
  for (size_t i = 0; i < b.size(); ++i) {
    const double z = zb.empty() ? 0 : zb.size() == 1 ? zb[0] : zb[(int64_t(i) / inner) % per];
    b[i] = T(double(In(1)[i]) - z);
  }
  Node two = n_;
  two.inputs.resize(2);
  OpArgs<T> shifted = a_;
  shifted.node = &two;
  shifted.in = {a.data(), b.data()};
  shifted.in_shapes = {as, bs};
  shifted.in_const = {nullptr, nullptr};
  return conv ? Op<T>(shifted).Conv() : Op<T>(shifted).MatMul();
}

// The neural-network family's operators.
std::vector<NativeOp> NnOps() {
  return {
      // Convolution, dense, normalization, pooling.
      Kernel("Conv", [](auto& o) { return o.Conv(); }),
      Kernel("ConvTranspose", [](auto& o) { return o.ConvTranspose(); }),
      Kernel("Gemm", [](auto& o) { return o.Gemm(); }),
      Kernel("MatMul", [](auto& o) { return o.MatMul(); }),
      Kernel("ConvInteger", [](auto& o) { return o.IntegerProduct(true); }),
      Kernel("MatMulInteger", [](auto& o) { return o.IntegerProduct(false); }),
      Kernel("BatchNormalization", [](auto& o) { return o.BatchNorm(); }),
      Kernel("InstanceNormalization", [](auto& o) { return o.InstanceNorm(); }),
      Kernel("LRN", [](auto& o) { return o.Lrn(); }),
      Kernel("LayerNormalization", [](auto& o) { return o.LayerNorm(); }),
      Kernel("AveragePool", [](auto& o) { return o.Pool(false, false); }),
      Kernel("GlobalAveragePool", [](auto& o) { return o.Pool(true, false); }),
      Kernel("GlobalMaxPool", [](auto& o) { return o.Pool(true, true); }),
      Kernel("MaxPool", [](auto& o) { return o.Pool(false, true); }),
      Kernel("Softmax", [](auto& o) { return o.Softmax(false); }),
      Kernel("LogSoftmax", [](auto& o) { return o.Softmax(true); }),
  };
}

}  // namespace tunefarm::runtime::ops_internal
