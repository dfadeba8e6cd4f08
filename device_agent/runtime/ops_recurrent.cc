// The recurrent family (ops_internal.h): RNN, GRU and LSTM, one time step
// after another, in double.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "device_agent/runtime/ops_internal.h"

namespace tunefarm::runtime::ops_internal {

namespace {

// A recurrent layer's activation by its ONNX name, with its alpha and beta
// (the defaults where the node gives none); nullopt for an unknown name.
std::optional<std::function<double(double)>> RecurrentActivation(const std::string& name,
                                                                 std::optional<double> alpha,
                                                                 std::optional<double> beta) {
  auto a = [&](double d) { return alpha.value_or(d); };
  auto b = [&](double d) { return beta.value_or(d); };
  if (name == "Sigmoid") return [](double v) { return 1 / (1 + std::exp(-v)); };
  if (name == "Tanh") return [](double v) { return std::tanh(v); };
  if (name == "Relu") return [](double v) { return std::max(v, 0.0); };
  if (name == "Softsign") return [](double v) { return v / (1 + std::fabs(v)); };
  if (name == "Softplus") return [](double v) { return std::log1p(std::exp(v)); };
  if (name == "Affine") return [al = a(1), be = b(0)](double v) { return al * v + be; };
  if (name == "LeakyRelu") return [al = a(0.01)](double v) { return v < 0 ? al * v : v; };
  if (name == "ThresholdedRelu") return [al = a(1)](double v) { return v > al ? v : 0.0; };
  if (name == "ScaledTanh") return [al = a(1), be = b(1)](double v) { return al * std::tanh(be * v); };
  if (name == "HardSigmoid")
    return [al = a(0.2), be = b(0.5)](double v) { return std::clamp(al * v + be, 0.0, 1.0); };
  if (name == "Elu") return [al = a(1)](double v) { return v < 0 ? al * (std::exp(v) - 1) : v; };
  return std::nullopt;
}

bool TakesAlpha(const std::string& f) {
  return f == "Affine" || f == "LeakyRelu" || f == "ThresholdedRelu" || f == "ScaledTanh" ||
         f == "HardSigmoid" || f == "Elu";
}
bool TakesBeta(const std::string& f) {
  return f == "Affine" || f == "ScaledTanh" || f == "HardSigmoid";
}

}  // namespace

template <typename T>
absl::Status Op<T>::Recurrent() {
  const std::string& op = n_.op;
  const int gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  const Shape& xs = InShape(0);
  const int64_t hidden = n_.Int("hidden_size", 0);
  const std::string direction =
      n_.strings.count("direction") ? n_.strings.at("direction") : "forward";
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batch_first = n_.Int("layout", 0) != 0;
  if (xs.size() != 3 || hidden < 1 || InShape(1) != Shape{dirs, gates * hidden, xs[2]})
    return Error("input, weights and hidden_size do not fit");
  if (n_.Int("input_forget", 0) != 0) return Error("input_forget is not supported");
  const int64_t steps = batch_first ? xs[1] : xs[0], batch = batch_first ? xs[0] : xs[1];
  const int64_t in = xs[2], H = hidden;
  // The activations: per direction, f (and g, h) as the node names them.
  std::vector<std::string> names;
  if (n_.strings.count("activations") && !n_.strings.at("activations").empty())
    names = absl::StrSplit(n_.strings.at("activations"), ',');
  const std::vector<std::string> defaults =
      op == "LSTM"  ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
      : op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                    : std::vector<std::string>{"Tanh"};
  const size_t per_dir = defaults.size();
  if (names.empty()) {
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  }
  if (names.size() != per_dir * size_t(dirs)) return Error("activations do not fit the direction");
  const std::vector<float> alphas =
      n_.floats.count("activation_alpha") ? n_.floats.at("activation_alpha") : std::vector<float>{};
  const std::vector<float> betas =
      n_.floats.count("activation_beta") ? n_.floats.at("activation_beta") : std::vector<float>{};
  std::vector<std::function<double(double)>> act;
  for (size_t i = 0, ai = 0, bi = 0; i < names.size(); ++i) {
    std::optional<double> alpha, beta;
    if (TakesAlpha(names[i]) && ai < alphas.size()) alpha = alphas[ai++];
    if (TakesBeta(names[i]) && bi < betas.size()) beta = betas[bi++];
    auto f = RecurrentActivation(names[i], alpha, beta);
    if (!f) return Error(StrCat("activation '", names[i], "' is not supported"));
    act.push_back(*f);
  }
  const double clip = n_.Float("clip", 0);
  auto clipped = [&](double v) { return clip > 0 ? std::clamp(v, -clip, clip) : v; };
  std::vector<double> lens;
  const bool has_lens = Params(4, &lens);
  const T* x = In(0);
  const T* W = In(1);
  const T* R = In(2);
  const T* B = Has(3) ? In(3) : nullptr;
  const T* h0 = Has(5) ? In(5) : nullptr;
  const T* c0 = op == "LSTM" && Has(6) ? In(6) : nullptr;
  const T* P = op == "LSTM" && Has(7) ? In(7) : nullptr;
  const bool linear_before_reset = n_.Int("linear_before_reset", 0) != 0;
  T* Y = Out(0);
  T* Yh = Out(1);
  T* Yc = op == "LSTM" ? Out(2) : nullptr;
  if (Y != nullptr) std::fill(Y, Y + steps * dirs * batch * H, T(0));
  auto xat = [&](int64_t t, int64_t b) {
    return x + (batch_first ? (b * steps + t) : (t * batch + b)) * in;
  };
  auto yat = [&](int64_t t, int64_t d, int64_t b) {
    return Y + (batch_first ? ((b * steps + t) * dirs + d) : ((t * dirs + d) * batch + b)) * H;
  };
  const size_t width = static_cast<size_t>(H), all_gates = static_cast<size_t>(gates * H);
  std::vector<double> h(width), c(width), g(all_gates), rg(all_gates);
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const T* w = W + d * gates * H * in;
    const T* r = R + d * gates * H * H;
    const T* wb = B != nullptr ? B + d * 2 * gates * H : nullptr;
    const T* rb = wb != nullptr ? wb + gates * H : nullptr;
    const T* p = P != nullptr ? P + d * 3 * H : nullptr;
    const auto* f = &act[size_t(d) * per_dir];
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = has_lens ? int64_t(lens[size_t(b)]) : steps;
      if (len < 0 || len > steps) return Error(StrCat("sequence length ", len, " out of range"));
      // States: [directions, batch, hidden], [batch, directions, hidden]
      // with layout 1.
      const int64_t state = (batch_first ? b * dirs + d : d * batch + b) * H;
      for (int64_t k = 0; k < H; ++k) {
        h[size_t(k)] = h0 != nullptr ? double(h0[state + k]) : 0;
        c[size_t(k)] = c0 != nullptr ? double(c0[state + k]) : 0;
      }
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = reverse ? len - 1 - s : s;
        const T* xt = xat(t, b);
        // g: x W^T + Wb; rg: h R^T + Rb, per gate row.
        for (int64_t j = 0; j < gates * H; ++j) {
          double a = wb != nullptr ? double(wb[j]) : 0, e = rb != nullptr ? double(rb[j]) : 0;
          for (int64_t i = 0; i < in; ++i) a += double(xt[i]) * double(w[j * in + i]);
          for (int64_t i = 0; i < H; ++i) e += h[size_t(i)] * double(r[j * H + i]);
          g[size_t(j)] = a;
          rg[size_t(j)] = e;
        }
        if (op == "RNN") {
          for (int64_t k = 0; k < H; ++k) h[size_t(k)] = f[0](clipped(g[size_t(k)] + rg[size_t(k)]));
        } else if (op == "GRU") {
          // Gates z, r, h; the reset gate applies to h before the
          // recurrent product, or to its result (linear_before_reset).
          std::vector<double> z(width), rr(width), hn(width);
          for (int64_t k = 0; k < H; ++k) {
            z[size_t(k)] = f[0](clipped(g[size_t(k)] + rg[size_t(k)]));
            rr[size_t(k)] = f[0](clipped(g[size_t(H + k)] + rg[size_t(H + k)]));
          }
          for (int64_t k = 0; k < H; ++k) {
            double cand;
            if (linear_before_reset) {
              cand = g[size_t(2 * H + k)] + rr[size_t(k)] * rg[size_t(2 * H + k)];
            } else {
              double e = rb != nullptr ? double(rb[2 * H + k]) : 0;
              for (int64_t i = 0; i < H; ++i)
                e += rr[size_t(i)] * h[size_t(i)] * double(r[(2 * H + k) * H + i]);
              cand = g[size_t(2 * H + k)] + e;
            }
            hn[size_t(k)] = (1 - z[size_t(k)]) * f[1](clipped(cand)) + z[size_t(k)] * h[size_t(k)];
          }
          h = hn;
        } else {
          // Gates i, o, f, c; peepholes i, o, f.
          for (int64_t k = 0; k < H; ++k) {
            const double pi = p != nullptr ? double(p[k]) : 0, po = p != nullptr ? double(p[H + k]) : 0,
                         pf = p != nullptr ? double(p[2 * H + k]) : 0;
            const double ig = f[0](clipped(g[size_t(k)] + rg[size_t(k)] + pi * c[size_t(k)]));
            const double fg =
                f[0](clipped(g[size_t(2 * H + k)] + rg[size_t(2 * H + k)] + pf * c[size_t(k)]));
            const double cg = f[1](clipped(g[size_t(3 * H + k)] + rg[size_t(3 * H + k)]));
            c[size_t(k)] = fg * c[size_t(k)] + ig * cg;
            const double og =
                f[0](clipped(g[size_t(H + k)] + rg[size_t(H + k)] + po * c[size_t(k)]));
            g[size_t(k)] = og * f[2](c[size_t(k)]);  // h, written once every gate is read
          }
          for (int64_t k = 0; k < H; ++k) h[size_t(k)] = g[size_t(k)];
        }
        if (Y != nullptr)
          for (int64_t k = 0; k < H; ++k) yat(t, d, b)[k] = T(h[size_t(k)]);
      }
      for (int64_t k = 0; k < H; ++k) {
        if (Yh != nullptr) Yh[state + k] = T(h[size_t(k)]);
        if (Yc != nullptr) Yc[state + k] = T(c[size_t(k)]);
      }
    }
  }
  return absl::OkStatus();
}

// The recurrent family's operators.
std::vector<NativeOp> RecurrentOps() {
  return {
      Kernel("RNN", [](auto& o) { return o.Recurrent(); }),
      Kernel("GRU", [](auto& o) { return o.Recurrent(); }),
      Kernel("LSTM", [](auto& o) { return o.Recurrent(); }),
  };
}

}  // namespace tunefarm::runtime::ops_internal
