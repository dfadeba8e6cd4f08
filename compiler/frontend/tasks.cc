#include "compiler/frontend/tasks.h"

#include <cfloat>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ir/workload.h"

namespace tunefarm::frontend {
namespace {

namespace v1 = ::tunefarm::v1;
using Shape = std::vector<int64_t>;

double Elements(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= double(d);
  return n;
}

v1::TensorSpec Spec(const Shape& s) {
  v1::TensorSpec t;
  for (int64_t d : s) t.add_shape(d);
  t.set_dtype(v1::DTYPE_FLOAT32);
  return t;
}

// Whether a constant of shape `s` broadcast against `out` varies only along
// dimension `axis` (a bias per channel), e.g. [C,1,1] against [N,C,H,W].
bool PerChannel(Shape s, const Shape& out, size_t axis) {
  if (s.size() > out.size()) return false;
  s.insert(s.begin(), out.size() - s.size(), 1);
  for (size_t d = 0; d < out.size(); ++d) {
    if (s[d] != (d == axis ? out[d] : 1)) return false;
  }
  return true;
}

class Extractor {
 public:
  explicit Extractor(const Model& m) : m_(m) {}

  // The anchor's workload (without epilogues); false when the node is not
  // tunable in its form (then it runs untuned).
  bool Anchor(const Node& n, v1::Workload* w);
  // Follows single-consumer chains from the anchor's output and adds the
  // epilogues that fuse; returns the nodes taken.
  // Nodes already fused into an earlier kernel are never taken again.
  std::vector<int> Fuse(int anchor, v1::Workload* w, const std::set<int>& fused);

 private:
  const Shape& S(const std::string& v) const { return m_.shapes.at(v); }
  bool IsConst(const std::string& v) const { return m_.constants.count(v) > 0; }
  // The one consumer of `v`, or -1 (several, none, or a graph output).
  int OnlyConsumer(const std::string& v) const {
    for (const std::string& o : m_.outputs) {
      if (o == v) return -1;
    }
    auto it = m_.consumers.find(v);
    if (it == m_.consumers.end() || it->second.size() != 1) return -1;
    return it->second[0];
  }
  const Model& m_;
};

bool Extractor::Anchor(const Node& n, v1::Workload* w) {
  if (n.op == "Conv" || n.op == "ConvTranspose") {
    if (n.inputs.size() < 2 || !IsConst(n.inputs[1])) return false;  // kernels pack their weights
    if (n.inputs.size() > 2 && !n.inputs[2].empty() && !IsConst(n.inputs[2])) return false;
    Shape x = S(n.inputs[0]), k = S(n.inputs[1]);
    const bool conv1d = x.size() == 3;
    if (conv1d) {  // as 2-D with H = 1
      x.insert(x.begin() + 2, 1);
      k.insert(k.begin() + 2, 1);
    }
    if (x.size() != 4) return false;
    const std::string pad = n.strings.count("auto_pad") ? n.strings.at("auto_pad") : "NOTSET";
    std::vector<int64_t> strides = n.Ints("strides"), dil = n.Ints("dilations"), p = n.Ints("pads");
    const size_t sp = conv1d ? 1 : 2;
    if (strides.empty()) strides.assign(sp, 1);
    if (dil.empty()) dil.assign(sp, 1);
    if (p.empty()) p.assign(2 * sp, 0);
    if (pad == "SAME_UPPER" || pad == "SAME_LOWER") {
      if (n.op != "Conv") return false;
      const Shape& out = S(n.outputs[0]);
      for (size_t i = 0; i < sp; ++i) {
        int64_t in = S(n.inputs[0])[2 + i], o = out[2 + i];
        int64_t total = std::max<int64_t>(
            0, (o - 1) * strides[i] + (k[k.size() - sp + i] - 1) * dil[i] + 1 - in);
        int64_t small = total / 2, big = total - small;
        p[i] = pad == "SAME_UPPER" ? small : big;
        p[i + sp] = pad == "SAME_UPPER" ? big : small;
      }
    }
    if (conv1d) {
      strides.insert(strides.begin(), 1);
      dil.insert(dil.begin(), 1);
      p = {0, p[0], 0, p[1]};
    }
    if (n.op == "ConvTranspose" &&
        (!n.Ints("output_padding").empty() || !n.Ints("output_shape").empty()))
      return false;
    w->set_op(n.op == "Conv" ? v1::OP_KIND_CONV2D : v1::OP_KIND_CONV2D_TRANSPOSE);
    *w->add_inputs() = Spec(x);
    *w->add_inputs() = Spec(k);
    auto* c = w->mutable_conv2d();
    c->set_layout(v1::DATA_LAYOUT_NCHW);
    for (int64_t v : strides) c->add_strides(v);
    for (int64_t v : p) c->add_pads(v);
    for (int64_t v : dil) c->add_dilations(v);
    c->set_groups(n.Int("group", 1));
    return true;
  }
  if (n.op == "Gemm") {
    if (n.Float("alpha", 1) != 1.0f) return false;
    const bool ta = n.Int("transA", 0), tb = n.Int("transB", 0);
    const Shape a = S(n.inputs[0]), b = S(n.inputs[1]);
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      // C must be a bias per output column added once (the bias epilogue).
      const Shape& out = S(n.outputs[0]);
      if (!IsConst(n.inputs[2]) || n.Float("beta", 1) != 1.0f ||
          !PerChannel(S(n.inputs[2]), out, out.size() - 1))
        return false;
    }
    if (!ta && tb && IsConst(n.inputs[1])) {
      w->set_op(v1::OP_KIND_DENSE);
    } else {
      w->set_op(v1::OP_KIND_MATMUL);
      w->mutable_matmul()->set_transpose_a(ta);
      w->mutable_matmul()->set_transpose_b(tb);
    }
    *w->add_inputs() = Spec(a);
    *w->add_inputs() = Spec(b);
    return true;
  }
  if (n.op == "MatMul") {
    Shape a = S(n.inputs[0]), b = S(n.inputs[1]);
    if (a.size() < 2 || b.size() < 2) return false;
    if (b.size() == 2) {
      // [..., M, K] x [K, N]: the leading dimensions fold into M.
      Shape a2 = {int64_t(Elements(a) / double(a.back())), a.back()};
      w->set_op(v1::OP_KIND_MATMUL);
      *w->add_inputs() = Spec(a2);
      *w->add_inputs() = Spec(b);
      return true;
    }
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i + 2 < a.size(); ++i) {
      if (a[i] != b[i]) return false;  // broadcast batches: untuned
    }
    double batch = Elements(Shape(a.begin(), a.end() - 2));
    w->set_op(v1::OP_KIND_BATCH_MATMUL);
    *w->add_inputs() = Spec({int64_t(batch), a[a.size() - 2], a.back()});
    *w->add_inputs() = Spec({int64_t(batch), b[b.size() - 2], b.back()});
    return true;
  }
  return false;
}

std::vector<int> Extractor::Fuse(int anchor, v1::Workload* w, const std::set<int>& fused) {
  std::vector<int> taken = {anchor};
  const Node& a = m_.nodes[size_t(anchor)];
  const bool is_conv = a.op == "Conv" || a.op == "ConvTranspose";
  const Shape out = S(a.outputs[0]);
  bool bias = false, residual = false, activation = false;
  auto add = [&](v1::EpilogueKind k) {
    v1::Epilogue* e = w->add_epilogue();
    e->set_kind(k);
    return e;
  };
  // Bias: the op's own bias input (Conv B, Gemm C per column; Anchor
  // refused any other C).
  if ((is_conv || a.op == "Gemm") && a.inputs.size() > 2 && !a.inputs[2].empty()) {
    add(v1::EPILOGUE_KIND_BIAS_ADD);
    bias = true;
  }
  const size_t ch_axis = is_conv ? 1 : out.size() - 1;
  std::string cur = a.outputs[0];
  while (true) {
    int next = OnlyConsumer(cur);
    // SiLU: y * sigmoid(y), where y has exactly the two consumers.
    if (next < 0 && !activation) {
      auto it = m_.consumers.find(cur);
      if (it != m_.consumers.end() && it->second.size() == 2) {
        const Node& s = m_.nodes[size_t(it->second[0])];
        const Node& mul = m_.nodes[size_t(it->second[1])];
        auto is_silu = [&](const Node& sig, const Node& mu, int si, int mi) {
          return sig.op == "Sigmoid" && mu.op == "Mul" && OnlyConsumer(sig.outputs[0]) == mi &&
                 mu.inputs.size() == 2 &&
                 ((mu.inputs[0] == cur && mu.inputs[1] == sig.outputs[0]) ||
                  (mu.inputs[1] == cur && mu.inputs[0] == sig.outputs[0])) &&
                 si >= 0;
        };
        int si = it->second[0], mi = it->second[1];
        if (!is_silu(s, mul, si, mi)) std::swap(si, mi);
        if (is_silu(m_.nodes[size_t(si)], m_.nodes[size_t(mi)], si, mi)) {
          add(v1::EPILOGUE_KIND_SILU);
          taken.push_back(si);
          taken.push_back(mi);
          activation = true;
          cur = m_.nodes[size_t(mi)].outputs[0];
          continue;
        }
      }
      break;
    }
    if (next < 0 || fused.count(next)) break;
    const Node& n = m_.nodes[size_t(next)];
    auto consts_from = [&](size_t first) {
      for (size_t i = first; i < n.inputs.size(); ++i)
        if (n.inputs[i].empty() || !IsConst(n.inputs[i])) return false;
      return n.inputs.size() == 5 && n.outputs.size() == 1 && n.Int("training_mode", 0) == 0;
    };
    if (n.op == "BatchNormalization" && is_conv && !activation && !residual && consts_from(1)) {
      // Folded into the weights and a bias at build time.
      if (!bias) add(v1::EPILOGUE_KIND_BIAS_ADD);
      bias = true;
    } else if ((n.op == "Add" || n.op == "Sub") && n.inputs.size() == 2) {
      const std::string& other = n.inputs[0] == cur ? n.inputs[1] : n.inputs[0];
      if (IsConst(other) && PerChannel(S(other), out, ch_axis) && !activation && !residual &&
          n.op == "Add" && S(n.outputs[0]) == out) {
        if (!bias) add(v1::EPILOGUE_KIND_BIAS_ADD);
        bias = true;
      } else if (!IsConst(other) && other != cur && S(other) == out && !residual && n.op == "Add") {
        add(v1::EPILOGUE_KIND_RESIDUAL_ADD);
        residual = true;
      } else {
        break;
      }
    } else if (activation) {
      break;
    } else if (n.op == "Relu") {
      add(v1::EPILOGUE_KIND_RELU);
      activation = true;
    } else if (n.op == "LeakyRelu") {
      add(v1::EPILOGUE_KIND_LEAKY_RELU)->set_alpha(n.Float("alpha", 0.01f));
      activation = true;
    } else if (n.op == "Sigmoid") {
      add(v1::EPILOGUE_KIND_SIGMOID);
      activation = true;
    } else if (n.op == "HardSwish") {
      add(v1::EPILOGUE_KIND_HARDSWISH);
      activation = true;
    } else if (n.op == "Clip") {
      float lo = -FLT_MAX, hi = FLT_MAX;
      if (m_.opset < 11) {
        lo = n.Float("min", lo);
        hi = n.Float("max", hi);
      } else {
        auto value = [&](size_t i, float* v) {
          if (i >= n.inputs.size() || n.inputs[i].empty()) return true;
          auto c = m_.constants.find(n.inputs[i]);
          if (c == m_.constants.end() || c->second.size() != 1) return false;
          *v = c->second.is_int ? float(c->second.ints[0]) : c->second.floats[0];
          return true;
        };
        if (!value(1, &lo) || !value(2, &hi)) break;
      }
      if (lo == 0 && hi == 6) {
        add(v1::EPILOGUE_KIND_RELU6);
      } else {
        v1::Epilogue* e = add(v1::EPILOGUE_KIND_CLIP);
        e->set_min(lo);
        e->set_max(hi);
      }
      activation = true;
    } else {
      break;
    }
    taken.push_back(next);
    cur = n.outputs[0];
  }
  return taken;
}

double NodeFlops(const Model& m, const Node& n) {
  if (n.outputs.empty() || !m.shapes.count(n.outputs[0])) return 0;
  double out = Elements(m.shapes.at(n.outputs[0]));
  if (n.op == "Conv" || n.op == "ConvTranspose") {
    const Shape& w = m.shapes.at(n.inputs[1]);
    double per = 2 * Elements(Shape(w.begin() + 1, w.end()));
    if (n.op == "ConvTranspose")
      return 2 * Elements(m.shapes.at(n.inputs[0])) * Elements(Shape(w.begin() + 1, w.end()));
    return out * per;
  }
  if (n.op == "Gemm" || n.op == "MatMul") {
    const Shape& a = m.shapes.at(n.inputs[0]);
    bool ta = n.op == "Gemm" && n.Int("transA", 0);
    double k = ta ? double(a[0]) : double(a.back());
    return 2 * out * k;
  }
  if (n.op == "MaxPool" || n.op == "AveragePool") {
    double k = 1;
    for (int64_t d : n.Ints("kernel_shape")) k *= double(d);
    return out * k;
  }
  if (n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool") {
    return Elements(m.shapes.at(n.inputs[0]));
  }
  return out;
}

}  // namespace

absl::StatusOr<TaskExtraction> ExtractTasks(const Model& model) {
  TaskExtraction ex;
  Extractor x(model);
  std::map<std::string, size_t> by_key;
  std::set<int> fused;
  for (size_t i = 0; i < model.nodes.size(); ++i)
    ex.model_flops += NodeFlops(model, model.nodes[i]);
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const Node& n = model.nodes[i];
    if (fused.count(int(i))) continue;
    v1::Workload w;
    if (!x.Anchor(n, &w)) continue;
    std::vector<int> taken = x.Fuse(int(i), &w, fused);
    absl::StatusOr<ir::CanonicalWorkload> c = ir::Canonicalize(w);
    if (!c.ok()) {
      // Not expressible as a tunable workload with these epilogues: try the
      // bare op before giving up on it.
      w.clear_epilogue();
      taken = {int(i)};
      c = ir::Canonicalize(w);
      if (!c.ok()) continue;
    }
    for (int t : taken) fused.insert(t);
    auto [it, fresh] = by_key.try_emplace(c->key, ex.tasks.size());
    if (fresh) {
      ModelTask t;
      t.workload = c->workload;
      t.key = c->key;
      t.description = ir::Describe(c->workload);
      t.flops = c->flops;
      for (int k : taken) t.nodes.push_back(model.nodes[size_t(k)].name);
      ex.tasks.push_back(std::move(t));
    }
    ModelTask& t = ex.tasks[it->second];
    ex.occurrences.push_back({int(it->second), taken});
    ++t.weight;
    ex.task_flops += t.flops;
  }
  return ex;
}

}  // namespace tunefarm::frontend
