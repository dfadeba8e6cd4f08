#include "deploy/rearrange.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "compiler/ir/compute.h"
#include "compiler/ir/expr.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/workload.h"
#include "device_agent/runtime/ops.h"

namespace tunefarm::deploy {
namespace {

namespace v1 = ::tunefarm::v1;
using graph::Constant;
using graph::Node;
using graph::Numel;
using Shape = std::vector<int64_t>;

// Probe values are exact in float32 below 2^24; the second probe adds kShift.
constexpr int64_t kMaxProbe = int64_t{1} << 23;
constexpr float kShift = 7;
// The largest linear resize (output elements) checked against the native
// operator, and so converted: the check interprets the kernel in float64.
constexpr int64_t kMaxLinearCheck = int64_t{1} << 22;

// The node's outputs, computed natively from `data` (one entry per node
// input; used for its runtime inputs).
std::optional<std::vector<std::vector<float>>> RunNative(
    const Node& n, int64_t opset, const std::vector<Shape>& in_shapes,
    const std::vector<const Constant*>& in_const, const std::vector<std::vector<float>>& data,
    const std::vector<Shape>& out_shapes) {
  runtime::OpArgs<float> a;
  a.node = &n;
  a.opset = opset;
  std::vector<std::vector<float>> const_floats(n.inputs.size());
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    a.in_shapes.push_back(in_shapes[i]);
    a.in_const.push_back(in_const[i]);
    if (n.inputs[i].empty()) {
      a.in.push_back(nullptr);
    } else if (in_const[i] != nullptr) {
      const Constant& c = *in_const[i];
      const_floats[i] = c.is_int ? std::vector<float>(c.ints.begin(), c.ints.end()) : c.floats;
      a.in.push_back(const_floats[i].data());
    } else {
      a.in.push_back(data[i].data());
    }
  }
  std::vector<std::vector<float>> out;
  for (const Shape& s : out_shapes) out.emplace_back(size_t(Numel(s)), 0.f);
  for (size_t k = 0; k < out.size(); ++k) {
    a.out.push_back(k < n.outputs.size() && !n.outputs[k].empty() ? out[k].data() : nullptr);
    a.out_shapes.push_back(out_shapes[k]);
  }
  if (!runtime::RunOp<float>(a).ok()) return std::nullopt;
  return out;
}

// Steps `o` (a multi-index of `shape`) to the next element in row-major order.
void Next(Shape* o, const Shape& shape) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (++(*o)[d] < shape[d]) return;
    (*o)[d] = 0;
  }
}

// Equal bit for bit (a NaN fill is one value; 0 and -0 are two).
bool Same(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// mul, add and div with floor((mul * o + add) / div) == t[o] for every o
// where `t` is set (>= 0); nullopt when the candidates tried do not fit.
std::optional<v1::RearrangeIndex> FitTable(const std::vector<int64_t>& t, int64_t in_extent) {
  std::vector<int64_t> q;  // the o where t is set
  for (size_t o = 0; o < t.size(); ++o)
    if (t[o] >= 0) q.push_back(int64_t(o));
  if (q.size() < 2) return std::nullopt;
  const int64_t o0 = q.front(), o1 = q.back(), t0 = t[size_t(o0)], t1 = t[size_t(o1)];
  std::vector<std::pair<int64_t, int64_t>> slopes;  // mul, div
  auto rational = [&](int64_t num, int64_t den) {
    if (den <= 0) return;
    const int64_t g = std::gcd(num, den);
    for (int64_t k : {1, 2, 4}) slopes.emplace_back(k * num / g, k * den / g);
  };
  if ((t[size_t(q[1])] - t0) % (q[1] - o0) == 0)
    slopes.emplace_back((t[size_t(q[1])] - t0) / (q[1] - o0), 1);
  rational(in_extent, int64_t(t.size()));
  rational(t1 - t0 + 1, o1 - o0 + 1);
  rational(t1 - t0, o1 - o0);
  for (auto [mul, div] : slopes) {
    if (mul == 0 || div <= 0 || div > (int64_t{1} << 20)) continue;
    const int64_t lo = t0 * div - mul * o0;
    for (int64_t add = lo; add < lo + div; ++add) {
      bool ok = true;
      for (int64_t o : q) {
        if (ir::FloorDivInt(mul * o + add, div) != t[size_t(o)]) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      v1::RearrangeIndex m;
      m.set_mul(mul);
      m.set_add(add);
      m.set_div(div);
      return m;
    }
  }
  return std::nullopt;
}

// Where each element of one output came from: runtime input j and element
// e, or j = -1 for the fill.
struct Source {
  int j = -1;
  int64_t e = 0;
};

// The index map of dimension `d` of input `j` (shape `s`) over the output
// elements it fills.
std::optional<v1::RearrangeIndex> FitDimension(const std::vector<Source>& src, int j,
                                               const Shape& s, size_t d, const Shape& out) {
  int64_t stride = 1;
  for (size_t k = d + 1; k < s.size(); ++k) stride *= s[k];
  auto index = [&](int64_t e) { return (e / stride) % s[d]; };
  // Constant over the output?
  std::optional<int64_t> only;
  bool constant = true;
  for (const Source& x : src) {
    if (x.j != j) continue;
    const int64_t v = index(x.e);
    if (!only) only = v;
    constant &= *only == v;
  }
  if (!only) return std::nullopt;
  if (constant) {
    v1::RearrangeIndex m;
    m.set_add(*only);
    m.set_div(1);
    return m;
  }
  for (size_t sd = 0; sd < out.size(); ++sd) {
    if (out[sd] < 2) continue;
    std::vector<int64_t> t(size_t(out[sd]), -1);
    bool consistent = true;
    Shape o(out.size(), 0);
    for (const Source& x : src) {
      if (x.j == j) {
        int64_t& slot = t[size_t(o[sd])];
        const int64_t v = index(x.e);
        if (slot >= 0 && slot != v) {
          consistent = false;
          break;
        }
        slot = v;
      }
      Next(&o, out);
    }
    if (!consistent) continue;
    std::optional<v1::RearrangeIndex> m = FitTable(t, s[d]);
    if (!m) continue;
    m->set_source(int64_t(sd));
    return m;
  }
  return std::nullopt;
}

// The element the workload's map takes for output `o`: (workload input,
// element), or input -1 for the fill.
Source MapAt(const v1::Workload& w, const Shape& o) {
  int at = 0;
  for (int k = 0; k < w.inputs_size(); ++k) {
    const auto& s = w.inputs(k).shape();
    int64_t e = 0;
    bool inside = true;
    for (int d = 0; d < s.size(); ++d) {
      const v1::RearrangeIndex& m = w.rearrange().index(at + d);
      const int64_t i = ir::RearrangeIndexAt(m, o[size_t(m.source())]);
      inside &= i >= 0 && i < s[d];
      e = e * s[d] + i;
    }
    at += s.size();
    if (inside) return {k, e};
  }
  return {};
}

// p / q for a float scale, q at most 256; nullopt when none is within 1e-6.
std::optional<std::pair<int64_t, int64_t>> Rational(double s) {
  for (int64_t q = 1; q <= 256; ++q) {
    const double p = std::round(s * double(q));
    if (p >= 1 && std::fabs(p / double(q) - s) <= 1e-6 * s) return std::pair{int64_t(p), q};
  }
  return std::nullopt;
}

// A linear Resize or Upsample as a rearrange kernel with `linear` set, each
// dimension's coordinate map derived from the coordinate transformation
// mode and its scale as a fraction (the native operator's formulas; a
// float scale is taken as the nearest fraction with denominator <= 256);
// empty where a mode or scale has no such form, or where the kernel's
// definition (its DAG's float64 reference) differs from the native
// operator on random data.
std::vector<RearrangeStep> LinearResizeOf(const Node& n, int64_t opset,
                                          const std::vector<Shape>& in_shapes,
                                          const std::vector<const Constant*>& in_const,
                                          const std::vector<Shape>& out_shapes) {
  if (n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0].empty() || in_const[0] != nullptr)
    return {};
  // Scales and sizes decide the maps: they must be constants.
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (!n.inputs[i].empty() && in_const[i] == nullptr) return {};
  const Shape &in = in_shapes[0], &out = out_shapes[0];
  // The check below interprets the kernel's DAG on every output element.
  if (in.size() != out.size() || in.empty() || Numel(out) > kMaxLinearCheck) return {};
  auto constant = [&](size_t i) {
    std::vector<double> v;
    if (i >= in_const.size() || in_const[i] == nullptr) return v;
    const Constant& c = *in_const[i];
    if (c.is_int) return std::vector<double>(c.ints.begin(), c.ints.end());
    return std::vector<double>(c.floats.begin(), c.floats.end());
  };
  std::string coord = "asymmetric";
  std::vector<double> scales;
  if (n.op == "Upsample") {
    scales = n.floats.count("scales")
                 ? std::vector<double>(n.floats.at("scales").begin(), n.floats.at("scales").end())
                 : constant(1);
  } else if (opset < 11) {
    scales = constant(1);
  } else {
    if (n.Int("antialias", 0) != 0 || !n.Ints("axes").empty()) return {};
    if (n.strings.count("keep_aspect_ratio_policy") &&
        n.strings.at("keep_aspect_ratio_policy") != "stretch")
      return {};
    if (n.strings.count("coordinate_transformation_mode"))
      coord = n.strings.at("coordinate_transformation_mode");
    else
      coord = "half_pixel";
    scales = constant(2);  // empty with sizes: the ratio of the lengths
  }
  const bool given = scales.size() == in.size();
  RearrangeStep step;
  v1::Workload& w = step.workload;
  w.set_op(v1::OP_KIND_REARRANGE);
  v1::RearrangeAttrs* a = w.mutable_rearrange();
  a->set_linear(true);
  v1::TensorSpec* t = w.add_inputs();
  t->set_dtype(v1::DTYPE_FLOAT32);
  for (size_t d = 0; d < in.size(); ++d) {
    a->add_out_shape(out[d]);
    t->add_shape(in[d]);
    const int64_t g = std::gcd(out[d], in[d]);
    int64_t p = out[d] / g, q = in[d] / g;  // the scale p / q
    if (given) {
      std::optional<std::pair<int64_t, int64_t>> r = Rational(scales[d]);
      if (!r) return {};
      std::tie(p, q) = *r;
    }
    // The resized length the formulas use: in * scale, unrounded, when given.
    const double len = given ? double(in[d]) * double(p) / double(q) : double(out[d]);
    v1::RearrangeIndex* x = a->add_index();
    x->set_source(int64_t(d));
    x->set_div(1);
    if (coord == "half_pixel" || (coord == "pytorch_half_pixel" && len > 1)) {
      // (o + 1/2) q / p - 1/2
      x->set_mul(2 * q), x->set_add(q - p), x->set_div(2 * p);
    } else if (coord == "pytorch_half_pixel" || (coord == "align_corners" && len <= 1)) {
      x->set_mul(0), x->set_add(0);
    } else if (coord == "align_corners") {  // o (in - 1) / (len - 1)
      x->set_mul(given ? q * (in[d] - 1) : in[d] - 1), x->set_add(0);
      x->set_div(given ? in[d] * p - q : out[d] - 1);
    } else if (coord == "asymmetric") {  // o q / p
      x->set_mul(q), x->set_add(0), x->set_div(p);
    } else {
      return {};
    }
  }
  absl::StatusOr<ir::CanonicalWorkload> c = ir::Canonicalize(w);
  if (!c.ok()) return {};
  w = c->workload;
  step.key = c->key;
  step.inputs = {0};
  step.output = 0;
  std::vector<std::vector<float>> data(n.inputs.size());
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> dist(-4.f, 4.f);
  data[0].resize(size_t(Numel(in)));
  for (float& v : data[0]) v = dist(rng);
  auto native = RunNative(n, opset, in_shapes, in_const, data, out_shapes);
  absl::StatusOr<ir::ComputeDAG> dag = ir::BuildComputeDAG(w);
  if (!native || !dag.ok()) return {};
  absl::StatusOr<std::vector<double>> ref = ir::EvaluateReference(*dag, {data[0]});
  if (!ref.ok() || ref->size() != (*native)[0].size()) return {};
  for (size_t i = 0; i < ref->size(); ++i) {
    if (!(std::fabs((*ref)[i] - double((*native)[0][i])) <=
          1e-5 * std::max(1.0, std::fabs((*ref)[i]))))
      return {};
  }
  return {step};
}

}  // namespace

bool MayRearrange(const std::string& op) {
  static const std::set<std::string> ops = {
      "Concat",   "DepthToSpace", "Expand",  "Flatten",   "Gather",    "GatherElements", "GatherND",
      "Identity", "Pad",          "Reshape", "Resize",    "Slice",     "SpaceToDepth",
      "Split",    "Squeeze",      "Tile",    "Transpose", "Unsqueeze", "Upsample"};
  return ops.count(op) > 0;
}

std::vector<RearrangeStep> RearrangeOf(const Node& n, int64_t opset,
                                       const std::vector<Shape>& in_shapes,
                                       const std::vector<const Constant*>& in_const,
                                       const std::vector<Shape>& out_shapes) {
  if (!MayRearrange(n.op) || in_shapes.size() != n.inputs.size() ||
      in_const.size() != n.inputs.size() || out_shapes.size() != n.outputs.size())
    return {};
  if (n.op == "Resize" || n.op == "Upsample") {
    const std::string mode = n.strings.count("mode") ? n.strings.at("mode") : "nearest";
    if (mode == "linear" || mode == "bilinear")
      return LinearResizeOf(n, opset, in_shapes, in_const, out_shapes);
  }
  // Runtime inputs: every input of a Concat, else input 0 alone (indices,
  // pads, sizes must be constants).
  std::vector<int> runtime;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty() || in_const[i] != nullptr) continue;
    if (i > 0 && n.op != "Concat") return {};
    runtime.push_back(int(i));
  }
  if (runtime.empty()) return {};
  std::vector<int64_t> base = {0};
  for (int i : runtime) base.push_back(base.back() + Numel(in_shapes[size_t(i)]));
  if (base.back() >= kMaxProbe) return {};
  auto probe = [&](float shift) {
    std::vector<std::vector<float>> data(n.inputs.size());
    for (size_t j = 0; j < runtime.size(); ++j) {
      auto& x = data[size_t(runtime[j])];
      x.resize(size_t(base[j + 1] - base[j]));
      for (size_t e = 0; e < x.size(); ++e) x[e] = float(base[j] + int64_t(e) + 1) + shift;
    }
    return data;
  };
  std::vector<std::vector<float>> random(n.inputs.size());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-4.f, 4.f);
  for (int i : runtime) {
    random[size_t(i)].resize(size_t(Numel(in_shapes[size_t(i)])));
    for (float& v : random[size_t(i)]) v = dist(rng);
  }
  auto ya = RunNative(n, opset, in_shapes, in_const, probe(0), out_shapes);
  auto yb = RunNative(n, opset, in_shapes, in_const, probe(kShift), out_shapes);
  auto yr = RunNative(n, opset, in_shapes, in_const, random, out_shapes);
  if (!ya || !yb || !yr) return {};

  std::vector<RearrangeStep> steps;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (n.outputs[k].empty()) continue;
    const Shape& out = out_shapes[k];
    const std::vector<float>&a = (*ya)[k], &b = (*yb)[k], &r = (*yr)[k];
    std::vector<Source> src(a.size());
    std::optional<float> fill;
    for (size_t o = 0; o < a.size(); ++o) {
      if (b[o] - a[o] == kShift && a[o] >= 1 && a[o] <= float(base.back()) &&
          a[o] == std::floor(a[o])) {
        const int64_t g = int64_t(a[o]) - 1;
        const size_t j = size_t(std::upper_bound(base.begin(), base.end(), g) - base.begin()) - 1;
        src[o] = {int(j), g - base[j]};
      } else if (Same(a[o], b[o]) && Same(a[o], r[o]) && (!fill || Same(*fill, a[o]))) {
        fill = a[o];
      } else {
        return {};
      }
    }
    RearrangeStep step;
    step.output = int(k);
    v1::Workload& w = step.workload;
    w.set_op(v1::OP_KIND_REARRANGE);
    v1::RearrangeAttrs* attrs = w.mutable_rearrange();
    for (int64_t d : out) attrs->add_out_shape(d);
    attrs->set_fill(fill.value_or(0.f));
    std::vector<int> used;  // runtime-list index per workload input
    for (size_t j = 0; j < runtime.size(); ++j) {
      const Shape& s = in_shapes[size_t(runtime[j])];
      if (std::none_of(src.begin(), src.end(), [&](const Source& x) { return x.j == int(j); }))
        continue;
      std::vector<v1::RearrangeIndex> maps;
      for (size_t d = 0; d < s.size(); ++d) {
        std::optional<v1::RearrangeIndex> m = FitDimension(src, int(j), s, d, out);
        if (!m) return {};
        maps.push_back(*m);
      }
      v1::TensorSpec* t = w.add_inputs();
      t->set_dtype(v1::DTYPE_FLOAT32);
      for (int64_t d : s) t->add_shape(d);
      for (const v1::RearrangeIndex& m : maps) *attrs->add_index() = m;
      used.push_back(int(j));
      step.inputs.push_back(runtime[j]);
    }
    if (used.empty()) return {};
    absl::StatusOr<ir::CanonicalWorkload> c = ir::Canonicalize(w);
    if (!c.ok()) return {};
    w = c->workload;
    step.key = c->key;
    // The map must reproduce the operator: every element's source on the
    // probe, and every value on random data.
    Shape o(out.size(), 0);
    for (size_t i = 0; i < src.size(); ++i, Next(&o, out)) {
      const Source m = MapAt(w, o);
      const int j = m.j < 0 ? -1 : used[size_t(m.j)];
      if (j != src[i].j || (j >= 0 && m.e != src[i].e)) return {};
      const float want =
          j < 0 ? w.rearrange().fill() : random[size_t(runtime[size_t(j)])][size_t(m.e)];
      if (!Same(want, r[i])) return {};
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace tunefarm::deploy
