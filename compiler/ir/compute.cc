// Operator definitions: each op of the Workload message written as stages of
// the tensor IR.
#include "compiler/ir/compute.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/ir/map_program.h"
#include "compiler/ir/workload.h"
#include "proto/kernel_signature.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;
using absl::StrCat;

constexpr ScalarType kF32 = ScalarType::kFloat32;

Expr F(double v) { return FloatImm(v, kF32); }
Expr I(int64_t v) { return IntImm(v); }
Expr Clamp(Expr x, int64_t lo, int64_t hi) { return Max(Min(std::move(x), I(hi)), I(lo)); }

class Builder {
 public:
  int AddTensor(const std::string& name, std::vector<int64_t> shape, TensorDecl::Role role,
                bool constant = false) {
    TensorDecl t;
    t.name = name;
    t.shape = std::move(shape);
    t.role = role;
    t.is_constant = constant;
    dag_.tensors.push_back(std::move(t));
    return static_cast<int>(dag_.tensors.size()) - 1;
  }
  int AddInput(const std::string& name, std::vector<int64_t> shape, bool constant = false) {
    int id = AddTensor(name, std::move(shape), TensorDecl::Role::kInput, constant);
    dag_.args.push_back(id);
    return id;
  }
  const std::vector<int64_t>& Shape(int t) const { return dag_.tensors[t].shape; }

  // Fresh axes named after `names` with the extents of `shape`.
  std::vector<IterVar> Axes(const std::vector<int64_t>& shape,
                            const std::vector<std::string>& names) {
    std::vector<IterVar> axes;
    for (size_t i = 0; i < shape.size(); ++i) {
      axes.push_back({Var(i < names.size() ? names[i] : StrCat("i", i)), shape[i]});
    }
    return axes;
  }

  // Adds a stage producing a new intermediate tensor; returns the tensor id.
  int AddStage(const std::string& name, std::vector<IterVar> axes, std::vector<IterVar> reduce,
               ReduceKind kind, Expr body, bool inlinable) {
    std::vector<int64_t> shape;
    for (const IterVar& a : axes) shape.push_back(a.extent);
    int t = AddTensor(name, shape, TensorDecl::Role::kIntermediate);
    Stage s;
    s.name = name;
    s.output = t;
    s.axes = std::move(axes);
    s.reduce_axes = std::move(reduce);
    s.reduce = kind;
    s.body = std::move(body);
    s.inlinable = inlinable;
    dag_.stages.push_back(std::move(s));
    return t;
  }

  Expr Read(int tensor, std::vector<Expr> idx) { return Load(tensor, kF32, std::move(idx)); }

  ComputeDAG Finish(int out) {
    dag_.tensors[out].role = TensorDecl::Role::kOutput;
    dag_.tensors[out].name = "out";
    dag_.output = out;
    dag_.args.push_back(out);
    return std::move(dag_);
  }

  // A copy of `src` padded by pads[d] = {lo, hi} with `fill`; inlinable.
  int Pad(int src, const std::vector<std::pair<int64_t, int64_t>>& pads, double fill) {
    bool any = false;
    for (auto [lo, hi] : pads) any |= lo != 0 || hi != 0;
    if (!any) return src;
    const std::vector<int64_t> in = Shape(src);
    std::vector<int64_t> shape;
    for (size_t d = 0; d < in.size(); ++d) shape.push_back(in[d] + pads[d].first + pads[d].second);
    std::vector<IterVar> axes = Axes(shape, {"p0", "p1", "p2", "p3"});
    Expr inside = BoolImm(true);
    std::vector<Expr> idx;
    for (size_t d = 0; d < in.size(); ++d) {
      Expr x = axes[d].var - I(pads[d].first);
      if (pads[d].first != 0 || pads[d].second != 0) {
        inside = And(inside, And(x >= I(0), x < I(in[d])));
        x = Clamp(x, 0, in[d] - 1);  // never read out of bounds, even when not selected
      }
      idx.push_back(x);
    }
    return AddStage(StrCat(dag_.tensors[src].name, "_pad"), axes, {}, ReduceKind::kNone,
                    Select(inside, Read(src, idx), F(fill)), /*inlinable=*/true);
  }

  ComputeDAG dag_;
};

// ---- conv2d ----

int Conv2d(Builder& b, const v1::Workload& w) {
  const auto& a = w.conv2d();
  bool nchw = a.layout() == v1::DATA_LAYOUT_NCHW;
  std::vector<int64_t> ds(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  std::vector<int64_t> ks(w.inputs(1).shape().begin(), w.inputs(1).shape().end());
  int data = b.AddInput("data", ds);
  int weight = b.AddInput("weight", ks, /*constant=*/true);
  int64_t g = a.groups(), sh = a.strides(0), sw = a.strides(1), dh = a.dilations(0),
          dw = a.dilations(1);
  int64_t pt = a.pads(0), pl = a.pads(1), pb = a.pads(2), pr = a.pads(3);
  int64_t n = ds[0], c = nchw ? ds[1] : ds[3], h = nchw ? ds[2] : ds[1], wd = nchw ? ds[3] : ds[2];
  int64_t k = nchw ? ks[0] : ks[3], r = nchw ? ks[2] : ks[0], s = nchw ? ks[3] : ks[1];
  int64_t cg = c / g, kg = k / g;
  int64_t oh = (h + pt + pb - dh * (r - 1) - 1) / sh + 1;
  int64_t ow = (wd + pl + pr - dw * (s - 1) - 1) / sw + 1;
  int padded = nchw ? b.Pad(data, {{0, 0}, {0, 0}, {pt, pb}, {pl, pr}}, 0)
                    : b.Pad(data, {{0, 0}, {pt, pb}, {pl, pr}, {0, 0}}, 0);
  std::vector<IterVar> axes = nchw ? b.Axes({n, k, oh, ow}, {"n", "k", "y", "x"})
                                   : b.Axes({n, oh, ow, k}, {"n", "y", "x", "k"});
  std::vector<IterVar> red = b.Axes({cg, r, s}, {"rc", "ry", "rx"});
  Expr vn = axes[0].var, vk = nchw ? axes[1].var : axes[3].var;
  Expr vy = nchw ? axes[2].var : axes[1].var, vx = nchw ? axes[3].var : axes[2].var;
  Expr rc = red[0].var, ry = red[1].var, rx = red[2].var;
  Expr ch = g == 1 ? rc : FloorDiv(vk, I(kg)) * I(cg) + rc;
  Expr iy = vy * I(sh) + ry * I(dh), ix = vx * I(sw) + rx * I(dw);
  Expr in = nchw ? b.Read(padded, {vn, ch, iy, ix}) : b.Read(padded, {vn, iy, ix, ch});
  Expr wt = nchw ? b.Read(weight, {vk, rc, ry, rx}) : b.Read(weight, {ry, rx, rc, vk});
  return b.AddStage("conv", axes, red, ReduceKind::kSum, in * wt, false);
}

// Winograd F(2x2, 3x3) (Lavin and Gray, 2015): each 2x2 output tile is
// A^T [sum over c of U[c] . (B^T d[c] B)] A, d the 4x4 input tile, U the
// transformed weight. Stages: the padded input; v, the input tiles
// transformed, [4, 4, N, tiles high, tiles wide, C]; m, their products
// with U summed over C (16 GEMMs), [4, 4, N, tiles high, tiles wide, K];
// the output transform, inlinable, [N, H, W, K].
int Conv2dWinograd(Builder& b, const v1::Workload& w) {
  const auto& a = w.conv2d();
  std::vector<int64_t> ds(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  std::vector<int64_t> us(w.inputs(1).shape().begin(), w.inputs(1).shape().end());
  int data = b.AddInput("data", ds);
  int u = b.AddInput("weight", us, /*constant=*/true);
  const int64_t n = ds[0], h = ds[1], wd = ds[2], c = ds[3], k = us[3];
  const int64_t pt = a.pads(0), pl = a.pads(1), pb = a.pads(2), pr = a.pads(3);
  const int64_t oh = h + pt + pb - 2, ow = wd + pl + pr - 2;
  const int64_t th = (oh + 1) / 2, tw = (ow + 1) / 2;
  int padded =
      b.Pad(data, {{0, 0}, {pt, 2 * th + 2 - h - pt}, {pl, 2 * tw + 2 - wd - pl}, {0, 0}}, 0);
  // One row of B^T (or of A^T) applied to four values, the row chosen by `e`.
  auto bt = [](const Expr& e, const std::vector<Expr>& x) {
    return Select(Cmp(Op::kEq, e, I(0)), x[0] - x[2],
                  Select(Cmp(Op::kEq, e, I(1)), x[1] + x[2],
                         Select(Cmp(Op::kEq, e, I(2)), x[2] - x[1], x[1] - x[3])));
  };
  auto at = [](const Expr& e, const std::vector<Expr>& x) {
    return Select(Cmp(Op::kEq, e, I(0)), x[0] + x[1] + x[2], x[1] - x[2] - x[3]);
  };
  std::vector<IterVar> va = b.Axes({4, 4, n, th, tw, c}, {"eps", "nu", "n", "ty", "tx", "c"});
  std::vector<Expr> rows;
  for (int64_t i = 0; i < 4; ++i) {
    std::vector<Expr> d;
    for (int64_t j = 0; j < 4; ++j) {
      d.push_back(
          b.Read(padded, {va[2].var, va[3].var * I(2) + I(i), va[4].var * I(2) + I(j), va[5].var}));
    }
    rows.push_back(bt(va[1].var, d));
  }
  int v = b.AddStage("winograd_in", va, {}, ReduceKind::kNone, bt(va[0].var, rows), false);
  std::vector<IterVar> ma = b.Axes({4, 4, n, th, tw, k}, {"eps", "nu", "n", "ty", "tx", "k"});
  std::vector<IterVar> red = b.Axes({c}, {"rc"});
  Expr prod = b.Read(v, {ma[0].var, ma[1].var, ma[2].var, ma[3].var, ma[4].var, red[0].var}) *
              b.Read(u, {ma[0].var, ma[1].var, red[0].var, ma[5].var});
  int m = b.AddStage("winograd_gemm", ma, red, ReduceKind::kSum, prod, false);
  std::vector<IterVar> ya = b.Axes({n, oh, ow, k}, {"n", "y", "x", "k"});
  Expr ty = FloorDiv(ya[1].var, I(2)), tx = FloorDiv(ya[2].var, I(2));
  Expr ry = FloorMod(ya[1].var, I(2)), rx = FloorMod(ya[2].var, I(2));
  std::vector<Expr> cols;
  for (int64_t e = 0; e < 4; ++e) {
    std::vector<Expr> x;
    for (int64_t nu = 0; nu < 4; ++nu)
      x.push_back(b.Read(m, {I(e), I(nu), ya[0].var, ty, tx, ya[3].var}));
    cols.push_back(at(rx, x));
  }
  return b.AddStage("winograd_out", ya, {}, ReduceKind::kNone, at(ry, cols), true);
}

int Conv2dTranspose(Builder& b, const v1::Workload& w) {
  const auto& a = w.conv2d();
  std::vector<int64_t> ds(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  std::vector<int64_t> ks(w.inputs(1).shape().begin(), w.inputs(1).shape().end());
  int data = b.AddInput("data", ds);
  int weight = b.AddInput("weight", ks, true);
  if (a.layout() == v1::DATA_LAYOUT_NHWC) {
    // Kernel = stride (the only NHWC form): output pixel (y, x) takes input
    // pixel (y / R, x / S) and kernel tap (y % R, x % S), a reduction over
    // the input channels with the output channels innermost in both the
    // output and the RSCK weight.
    const int64_t n = ds[0], h = ds[1], wd = ds[2], c = ds[3], r = ks[0], s = ks[1], k = ks[3];
    std::vector<IterVar> axes = b.Axes({n, h * r, wd * s, k}, {"n", "y", "x", "k"});
    std::vector<IterVar> red = b.Axes({c}, {"rc"});
    Expr y = axes[1].var, x = axes[2].var;
    Expr in = b.Read(data, {axes[0].var, FloorDiv(y, I(r)), FloorDiv(x, I(s)), red[0].var});
    Expr wt = b.Read(weight, {FloorMod(y, I(r)), FloorMod(x, I(s)), red[0].var, axes[3].var});
    return b.AddStage("conv_transpose", axes, red, ReduceKind::kSum, in * wt, false);
  }
  int64_t g = a.groups(), sh = a.strides(0), sw = a.strides(1), dh = a.dilations(0),
          dw = a.dilations(1), pt = a.pads(0), pl = a.pads(1), pb = a.pads(2), pr = a.pads(3);
  int64_t n = ds[0], c = ds[1], h = ds[2], wd = ds[3], kg = ks[1], k = kg * g, cg = c / g;
  int64_t r = ks[2], s = ks[3];
  int64_t oh = (h - 1) * sh - pt - pb + dh * (r - 1) + 1;
  int64_t ow = (wd - 1) * sw - pl - pr + dw * (s - 1) + 1;
  if (sh == r && sw == s && dh == 1 && dw == 1 && pt == 0 && pl == 0 && pb == 0 && pr == 0) {
    // Kernel = stride, no padding (upsampling): every output pixel takes one
    // input pixel and one kernel tap, so the taps are a dense reduction over
    // channels per kernel phase (ry, rx), and the output interleaves the
    // phases. The general form below would skip 3 of every 4 products of a
    // 2x2 stride-2 kernel through a select.
    std::vector<IterVar> pa = b.Axes({n, k, r, s, h, wd}, {"n", "k", "py", "px", "iy", "ix"});
    std::vector<IterVar> pr_axes = b.Axes({cg}, {"rc"});
    Expr ch = FloorDiv(pa[1].var, I(kg)) * I(cg) + pr_axes[0].var;
    Expr in = b.Read(data, {pa[0].var, ch, pa[4].var, pa[5].var});
    Expr wt = b.Read(weight, {ch, FloorMod(pa[1].var, I(kg)), pa[2].var, pa[3].var});
    int phases = b.AddStage("conv_transpose_phases", pa, pr_axes, ReduceKind::kSum, in * wt, false);
    std::vector<IterVar> axes = b.Axes({n, k, oh, ow}, {"n", "k", "y", "x"});
    Expr y = axes[2].var, x = axes[3].var;
    return b.AddStage("conv_transpose", axes, {}, ReduceKind::kNone,
                      b.Read(phases, {axes[0].var, axes[1].var, FloorMod(y, I(r)),
                                      FloorMod(x, I(s)), FloorDiv(y, I(r)), FloorDiv(x, I(s))}),
                      /*inlinable=*/true);
  }
  std::vector<IterVar> axes = b.Axes({n, k, oh, ow}, {"n", "k", "y", "x"});
  std::vector<IterVar> red = b.Axes({cg, r, s}, {"rc", "ry", "rx"});
  Expr vk = axes[1].var, rc = red[0].var;
  Expr ch = FloorDiv(vk, I(kg)) * I(cg) + rc;
  // Output y gathers input rows t/sh where t = y + pt - ry*dh is a multiple of sh.
  Expr ty = axes[2].var + I(pt) - red[1].var * I(dh);
  Expr tx = axes[3].var + I(pl) - red[2].var * I(dw);
  Expr ok = And(And(ty >= I(0), Cmp(Op::kEq, FloorMod(ty, I(sh)), I(0))),
                And(tx >= I(0), Cmp(Op::kEq, FloorMod(tx, I(sw)), I(0))));
  Expr iy = FloorDiv(ty, I(sh)), ix = FloorDiv(tx, I(sw));
  ok = And(ok, And(iy < I(h), ix < I(wd)));
  Expr in = b.Read(data, {axes[0].var, ch, Clamp(iy, 0, h - 1), Clamp(ix, 0, wd - 1)});
  Expr wt = b.Read(weight, {ch, FloorMod(vk, I(kg)), red[1].var, red[2].var});
  return b.AddStage("conv_transpose", axes, red, ReduceKind::kSum, Select(ok, in * wt, F(0)),
                    false);
}

// ---- matmul family ----

int Matmul(Builder& b, const v1::Workload& w) {
  bool batch = w.op() == v1::OP_KIND_BATCH_MATMUL, dense = w.op() == v1::OP_KIND_DENSE;
  std::vector<int64_t> as(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  std::vector<int64_t> bs(w.inputs(1).shape().begin(), w.inputs(1).shape().end());
  int A = b.AddInput(dense ? "data" : "a", as);
  int B = b.AddInput(dense ? "weight" : "b", bs, dense);
  bool ta = w.matmul().transpose_a(), tb = dense || w.matmul().transpose_b();
  int o = batch ? 1 : 0;
  int64_t m = ta ? as[o + 1] : as[o], kk = ta ? as[o] : as[o + 1], n = tb ? bs[o] : bs[o + 1];
  std::vector<int64_t> shape = {m, n};
  std::vector<std::string> names = {"i", "j"};
  int64_t bsz = 1;
  if (batch) {
    bsz = std::max(as[0], bs[0]);
    shape.insert(shape.begin(), bsz);
    names.insert(names.begin(), "b");
  }
  std::vector<IterVar> axes = b.Axes(shape, names);
  std::vector<IterVar> red = b.Axes({kk}, {"rk"});
  Expr i = axes[o].var, j = axes[o + 1].var, rk = red[0].var;
  std::vector<Expr> ai = ta ? std::vector<Expr>{rk, i} : std::vector<Expr>{i, rk};
  std::vector<Expr> bi = tb ? std::vector<Expr>{j, rk} : std::vector<Expr>{rk, j};
  if (batch) {
    ai.insert(ai.begin(), as[0] == 1 ? I(0) : axes[0].var);
    bi.insert(bi.begin(), bs[0] == 1 ? I(0) : axes[0].var);
  }
  return b.AddStage(dense ? "dense" : "matmul", axes, red, ReduceKind::kSum,
                    b.Read(A, ai) * b.Read(B, bi), false);
}

// ---- pooling ----

int Pool(Builder& b, const v1::Workload& w) {
  const auto& a = w.pool2d();
  bool nchw = a.layout() == v1::DATA_LAYOUT_NCHW;
  std::vector<int64_t> ds(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  int data = b.AddInput("data", ds);
  int64_t n = ds[0], c = nchw ? ds[1] : ds[3], h = nchw ? ds[2] : ds[1], wd = nchw ? ds[3] : ds[2];
  auto at = [&](Expr vn, Expr vc, Expr y, Expr x) {
    return nchw ? std::vector<Expr>{vn, vc, y, x} : std::vector<Expr>{vn, y, x, vc};
  };
  if (a.kind() == v1::POOL_KIND_GLOBAL_AVG) {
    std::vector<IterVar> axes = nchw ? b.Axes({n, c, 1, 1}, {"n", "c", "y", "x"})
                                     : b.Axes({n, 1, 1, c}, {"n", "y", "x", "c"});
    std::vector<IterVar> red = b.Axes({h, wd}, {"ry", "rx"});
    Expr vc = nchw ? axes[1].var : axes[3].var;
    int sum = b.AddStage("pool_sum", axes, red, ReduceKind::kSum,
                         b.Read(data, at(axes[0].var, vc, red[0].var, red[1].var)), false);
    std::vector<IterVar> out_axes = b.Axes(b.Shape(sum), {"n", "a1", "a2", "a3"});
    std::vector<Expr> idx;
    for (const IterVar& v : out_axes) idx.push_back(v.var);
    return b.AddStage("pool_avg", out_axes, {}, ReduceKind::kNone,
                      b.Read(sum, idx) * F(1.0 / double(h * wd)), true);
  }
  int64_t kh = a.kernel(0), kw = a.kernel(1), sh = a.strides(0), sw = a.strides(1);
  int64_t pt = a.pads(0), pl = a.pads(1), pb = a.pads(2), pr = a.pads(3);
  int64_t oh = WindowOutput(h, pt, pb, kh, sh, 1, a.ceil_mode()),
          ow = WindowOutput(wd, pl, pr, kw, sw, 1, a.ceil_mode());
  // ceil_mode may read past the bottom/right padding: pad enough for it.
  int64_t extra_b = std::max<int64_t>(0, (oh - 1) * sh + kh - (h + pt + pb));
  int64_t extra_r = std::max<int64_t>(0, (ow - 1) * sw + kw - (wd + pl + pr));
  bool is_max = a.kind() == v1::POOL_KIND_MAX;
  double fill = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
  int padded = nchw ? b.Pad(data, {{0, 0}, {0, 0}, {pt, pb + extra_b}, {pl, pr + extra_r}}, fill)
                    : b.Pad(data, {{0, 0}, {pt, pb + extra_b}, {pl, pr + extra_r}, {0, 0}}, fill);
  std::vector<IterVar> axes = nchw ? b.Axes({n, c, oh, ow}, {"n", "c", "y", "x"})
                                   : b.Axes({n, oh, ow, c}, {"n", "y", "x", "c"});
  std::vector<IterVar> red = b.Axes({kh, kw}, {"ry", "rx"});
  Expr vc = nchw ? axes[1].var : axes[3].var, vy = nchw ? axes[2].var : axes[1].var,
       vx = nchw ? axes[3].var : axes[2].var;
  Expr val = b.Read(padded, at(axes[0].var, vc, vy * I(sh) + red[0].var, vx * I(sw) + red[1].var));
  int red_t = b.AddStage(is_max ? "pool_max" : "pool_sum", axes, red,
                         is_max ? ReduceKind::kMax : ReduceKind::kSum, val, false);
  if (is_max) return red_t;
  std::vector<IterVar> out_axes = nchw ? b.Axes({n, c, oh, ow}, {"n", "c", "y", "x"})
                                       : b.Axes({n, oh, ow, c}, {"n", "y", "x", "c"});
  std::vector<Expr> idx;
  for (const IterVar& v : out_axes) idx.push_back(v.var);
  Expr oy = nchw ? out_axes[2].var : out_axes[1].var, ox = nchw ? out_axes[3].var : out_axes[2].var;
  Expr count;
  if (a.count_include_pad()) {
    // Window cells inside the input plus its declared padding.
    Expr y0 = oy * I(sh), x0 = ox * I(sw);
    Expr cy = Min(y0 + I(kh), I(h + pt + pb)) - y0, cx = Min(x0 + I(kw), I(wd + pl + pr)) - x0;
    count = Cast(ScalarType::kFloat32, cy * cx);
  } else {
    Expr y0 = oy * I(sh) - I(pt), x0 = ox * I(sw) - I(pl);
    Expr cy = Min(y0 + I(kh), I(h)) - Max(y0, I(0)), cx = Min(x0 + I(kw), I(wd)) - Max(x0, I(0));
    count = Cast(ScalarType::kFloat32, Max(cy * cx, I(1)));
  }
  return b.AddStage("pool_avg", out_axes, {}, ReduceKind::kNone, b.Read(red_t, idx) / count, true);
}

// ---- elementwise and epilogues ----

Expr Activation(v1::EpilogueKind kind, Expr x, const v1::Epilogue& e) {
  switch (kind) {
    case v1::EPILOGUE_KIND_RELU:
      return Max(x, F(0));
    case v1::EPILOGUE_KIND_RELU6:
      return Min(Max(x, F(0)), F(6));
    case v1::EPILOGUE_KIND_CLIP:
      return Min(Max(x, F(e.min())), F(e.max()));
    case v1::EPILOGUE_KIND_LEAKY_RELU:
      return Select(x < F(0), x * F(e.alpha()), x);
    case v1::EPILOGUE_KIND_SIGMOID:
      return F(1) / (F(1) + Call(Op::kExp, F(0) - x));
    case v1::EPILOGUE_KIND_SILU:
      return x / (F(1) + Call(Op::kExp, F(0) - x));
    case v1::EPILOGUE_KIND_HARDSWISH:
      return x * Min(Max(x + F(3), F(0)), F(6)) * F(1.0 / 6.0);
    default:
      return x;
  }
}

// erf(x) as Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7):
// 1 - (a1 t + ... + a5 t^5) exp(-x^2), t = 1 / (1 + p |x|), odd in x.
Expr Erf(Expr x) {
  Expr ax = Call(Op::kAbs, x);
  Expr t = F(1) / (F(1) + F(0.3275911) * ax);
  Expr poly = F(1.061405429);
  for (double c : {-1.453152027, 1.421413741, -0.284496736, 0.254829592}) poly = poly * t + F(c);
  Expr y = F(1) - poly * t * Call(Op::kExp, F(0) - ax * ax);
  return Select(x < F(0), F(0) - y, y);
}

// x to a literal power: products for small integers, sqrt for halves,
// exp(e log x) otherwise (NaN for x < 0, as numpy gives).
Expr Pow(Expr x, double e) {
  if (e == 0) return F(1);
  if (e == 0.5) return Call(Op::kSqrt, x);
  if (e == -0.5) return F(1) / Call(Op::kSqrt, x);
  if (e == std::trunc(e) && std::fabs(e) <= 4) {
    Expr p = x;
    for (int i = 1; i < int(std::fabs(e)); ++i) p = p * x;
    return e > 0 ? p : F(1) / p;
  }
  return Call(Op::kExp, F(e) * Call(Op::kLog, x));
}

// One step of a map program over its tensor operands `t` and literals `lit`.
Expr MapStepExpr(const v1::MapStep& s, const std::vector<Expr>& t, const std::vector<double>& lit,
                 const v1::Epilogue& e) {
  switch (s.fn()) {
    case v1::MAP_FN_ADD:
      return t[0] + t[1];
    case v1::MAP_FN_SUB:
      return t[0] - t[1];
    case v1::MAP_FN_MUL:
      return t[0] * t[1];
    case v1::MAP_FN_DIV:
      return t[0] / t[1];
    case v1::MAP_FN_MIN:
      return Min(t[0], t[1]);
    case v1::MAP_FN_MAX:
      return Max(t[0], t[1]);
    case v1::MAP_FN_NEG:
      return F(0) - t[0];
    case v1::MAP_FN_ABS:
      return Call(Op::kAbs, t[0]);
    case v1::MAP_FN_SQRT:
      return Call(Op::kSqrt, t[0]);
    case v1::MAP_FN_EXP:
      return Call(Op::kExp, t[0]);
    case v1::MAP_FN_LOG:
      return Call(Op::kLog, t[0]);
    case v1::MAP_FN_TANH:
      return Call(Op::kTanh, t[0]);
    case v1::MAP_FN_SIGMOID:
      return Activation(v1::EPILOGUE_KIND_SIGMOID, t[0], e);
    case v1::MAP_FN_RELU:
      return Max(t[0], F(0));
    case v1::MAP_FN_RECIPROCAL:
      return F(1) / t[0];
    case v1::MAP_FN_ERF:
      return Erf(t[0]);
    case v1::MAP_FN_SOFTPLUS:  // log(1 + e^x) without overflow
      return Max(t[0], F(0)) + Call(Op::kLog, F(1) + Call(Op::kExp, F(0) - Call(Op::kAbs, t[0])));
    case v1::MAP_FN_HARD_SWISH:
      return Activation(v1::EPILOGUE_KIND_HARDSWISH, t[0], e);
    case v1::MAP_FN_POW:
      return Pow(t[0], lit[0]);
    case v1::MAP_FN_CLIP:
      return Min(Max(t[0], F(lit[0])), F(lit[1]));
    case v1::MAP_FN_LEAKY_RELU:
      return Select(t[0] < F(0), t[0] * F(lit[0]), t[0]);
    case v1::MAP_FN_HARD_SIGMOID:
      return Min(Max(F(lit[0]) * t[0] + F(lit[1]), F(0)), F(1));
    default:
      return t.empty() ? F(0) : t[0];  // CanonicalizeMap refuses any other function
  }
}

// The value of a MAP epilogue's program applied to `in`; `input(k)` reads
// map input k at the current output element.
Expr MapExpr(const v1::Epilogue& e, Expr in, const std::function<Expr(int)>& input) {
  std::vector<Expr> values = {std::move(in)};
  for (const v1::MapStep& s : e.steps()) {
    std::vector<Expr> t;
    std::vector<double> lit;
    for (const v1::MapOperand& a : s.args()) {
      if (a.source_case() == v1::MapOperand::kValue)
        t.push_back(values[size_t(a.value())]);
      else if (a.source_case() == v1::MapOperand::kInput)
        t.push_back(input(a.input()));
      else
        lit.push_back(a.literal());
    }
    values.push_back(MapStepExpr(s, t, lit, e));
  }
  return values.back();
}

int Elementwise(Builder& b, const v1::Workload& w) {
  const auto& a = w.elementwise();
  std::vector<int64_t> s0(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  int x = b.AddInput("x", s0);
  std::vector<int64_t> out = s0;
  int y = -1;
  std::vector<int64_t> s1;
  if (w.inputs_size() == 2) {
    s1.assign(w.inputs(1).shape().begin(), w.inputs(1).shape().end());
    y = b.AddInput("y", s1);
    size_t rank = std::max(s0.size(), s1.size());
    out.assign(rank, 1);
    for (size_t i = 0; i < rank; ++i) {
      int64_t u = i < rank - s0.size() ? 1 : s0[i - (rank - s0.size())];
      int64_t v = i < rank - s1.size() ? 1 : s1[i - (rank - s1.size())];
      out[i] = std::max(u, v);
    }
  }
  std::vector<IterVar> axes = b.Axes(out, {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"});
  // Broadcast: align at the innermost dimension; size-1 dimensions read index 0.
  auto bcast = [&](const std::vector<int64_t>& shape) {
    std::vector<Expr> idx;
    size_t off = out.size() - shape.size();
    for (size_t d = 0; d < shape.size(); ++d)
      idx.push_back(shape[d] == 1 ? I(0) : axes[off + d].var);
    return idx;
  };
  Expr vx = b.Read(x, bcast(s0));
  Expr value;
  switch (a.kind()) {
    case v1::ELEMENTWISE_KIND_ADD:
      value = vx + b.Read(y, bcast(s1));
      break;
    case v1::ELEMENTWISE_KIND_SUB:
      value = vx - b.Read(y, bcast(s1));
      break;
    case v1::ELEMENTWISE_KIND_MUL:
      value = vx * b.Read(y, bcast(s1));
      break;
    case v1::ELEMENTWISE_KIND_DIV:
      value = vx / b.Read(y, bcast(s1));
      break;
    case v1::ELEMENTWISE_KIND_RELU:
      value = Max(vx, F(0));
      break;
    case v1::ELEMENTWISE_KIND_SIGMOID:
      value = Activation(v1::EPILOGUE_KIND_SIGMOID, vx, v1::Epilogue());
      break;
    case v1::ELEMENTWISE_KIND_SILU:
      value = Activation(v1::EPILOGUE_KIND_SILU, vx, v1::Epilogue());
      break;
    case v1::ELEMENTWISE_KIND_HARDSWISH:
      value = Activation(v1::EPILOGUE_KIND_HARDSWISH, vx, v1::Epilogue());
      break;
    case v1::ELEMENTWISE_KIND_CLIP:
      value = Min(Max(vx, F(a.min())), F(a.max()));
      break;
    case v1::ELEMENTWISE_KIND_COPY:
    default:
      value = vx;
      break;
  }
  return b.AddStage("elementwise", axes, {}, ReduceKind::kNone, value, true);
}

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

// Softmax over N of x [A, N] or [A, N, B]: the max and then the sum of
// exp(x - max) over each row (every row read as slices when there is no B,
// padded with the lowest float, whose exp adds nothing).
int Softmax(Builder& b, const v1::Workload& w) {
  const std::vector<int64_t> s(w.inputs(0).shape().begin(), w.inputs(0).shape().end());
  const int x = b.AddInput("x", s);
  const bool log = w.softmax().log();
  const double lowest = -std::numeric_limits<float>::max();
  int padded = -1;
  const RowSlices slices{1, &padded};
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

// The linear form of a rearrange: along each dimension with div > 1 the coordinate
// t / div (t = mul * o + add) lies between floor(t / div) and the next
// index, weighted by (t mod div) / div; both are clamped into the input
// where the range can leave it. The output sums the 2^k corners.
int RearrangeLinear(Builder& b, const v1::Workload& w, int x, const std::vector<IterVar>& axes) {
  const v1::RearrangeAttrs& a = w.rearrange();
  const std::vector<int64_t>& shape = b.Shape(x);
  std::vector<Expr> lo, hi, frac;  // frac unset: no interpolation along d
  for (size_t d = 0; d < shape.size(); ++d) {
    const v1::RearrangeIndex& m = a.index(int(d));
    const int64_t last = a.out_shape(int(m.source())) - 1;
    // floor(t / div) at the first and last output (a constant's too).
    const int64_t at0 = FloorDivInt(m.add(), m.div()),
                  at_last = FloorDivInt(m.mul() * last + m.add(), m.div());
    const int64_t lo_min = std::min(at0, at_last), lo_max = std::max(at0, at_last);
    auto inside = [&](Expr e, int64_t min, int64_t max) {
      return min < 0 || max >= shape[d] ? Clamp(std::move(e), 0, shape[d] - 1) : e;
    };
    Expr t = m.mul() == 0 ? I(m.add()) : I(m.mul()) * axes[size_t(m.source())].var + I(m.add());
    if (m.div() == 1) {
      lo.push_back(inside(t, lo_min, lo_max));
      hi.push_back(lo.back());
      frac.push_back(Expr());
      continue;
    }
    Expr i0 = FloorDiv(t, I(m.div()));
    lo.push_back(inside(i0, lo_min, lo_max));
    hi.push_back(inside(i0 + I(1), lo_min + 1, lo_max + 1));
    frac.push_back(Cast(kF32, FloorMod(t, I(m.div()))) / F(double(m.div())));
  }
  std::vector<size_t> interp;
  for (size_t d = 0; d < frac.size(); ++d)
    if (frac[d].defined()) interp.push_back(d);
  Expr v;
  for (size_t corner = 0; corner < (size_t{1} << interp.size()); ++corner) {
    std::vector<Expr> idx = lo;
    Expr weight;
    for (size_t k = 0; k < interp.size(); ++k) {
      const size_t d = interp[k];
      const bool upper = (corner >> k) & 1;
      if (upper) idx[d] = hi[d];
      Expr f = upper ? frac[d] : F(1) - frac[d];
      weight = weight.defined() ? weight * f : f;
    }
    Expr term = weight.defined() ? weight * b.Read(x, idx) : b.Read(x, idx);
    v = v.defined() ? v + term : term;
  }
  return b.AddStage("rearrange", axes, {}, ReduceKind::kNone, v, /*inlinable=*/true);
}

// A data mover: out[o] = the first input whose mapped index is inside it,
// else the fill value. An index whose range over the output lies inside its
// input is read as it is; any other is bounds-checked and clamped, so no
// load leaves its tensor even where the select does not take it.
int Rearrange(Builder& b, const v1::Workload& w) {
  const v1::RearrangeAttrs& a = w.rearrange();
  const std::vector<int64_t> out(a.out_shape().begin(), a.out_shape().end());
  std::vector<int> inputs;
  for (int k = 0; k < w.inputs_size(); ++k) {
    inputs.push_back(b.AddInput(StrCat("x", k), std::vector<int64_t>(w.inputs(k).shape().begin(),
                                                                     w.inputs(k).shape().end())));
  }
  std::vector<IterVar> axes = b.Axes(out, {"o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7"});
  if (a.linear()) return RearrangeLinear(b, w, inputs[0], axes);
  std::vector<int> first(size_t(w.inputs_size()) + 1, 0);  // each input's first index map
  for (int k = 0; k < w.inputs_size(); ++k)
    first[size_t(k) + 1] = first[size_t(k)] + w.inputs(k).shape_size();
  Expr v = F(a.fill());
  for (int k = w.inputs_size() - 1; k >= 0; --k) {
    const std::vector<int64_t>& shape = b.Shape(inputs[size_t(k)]);
    Expr inside = BoolImm(true);
    bool checked = false;
    std::vector<Expr> idx;
    for (size_t d = 0; d < shape.size(); ++d) {
      const v1::RearrangeIndex& m = a.index(first[size_t(k)] + int(d));
      const int64_t last = out[size_t(m.source())] - 1, at0 = RearrangeIndexAt(m, 0),
                    at_last = RearrangeIndexAt(m, last);
      const int64_t lo = std::min(at0, at_last), hi = std::max(at0, at_last);
      Expr x = I(m.add());
      if (m.mul() != 0) {
        x = axes[size_t(m.source())].var;
        if (m.mul() != 1) x = I(m.mul()) * x;
        if (m.add() != 0) x = x + I(m.add());
        if (m.div() != 1) x = FloorDiv(x, I(m.div()));
      }
      if (lo < 0 || hi >= shape[d]) {
        inside = And(inside, And(x >= I(0), x < I(shape[d])));
        x = Clamp(x, 0, shape[d] - 1);
        checked = true;
      }
      idx.push_back(x);
    }
    Expr read = b.Read(inputs[size_t(k)], idx);
    v = checked ? Select(inside, read, v) : read;
  }
  return b.AddStage("rearrange", axes, {}, ReduceKind::kNone, v, /*inlinable=*/true);
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

// Index of the channel dimension the bias follows.
int ChannelDim(const v1::Workload& w, size_t rank) {
  if (w.has_conv2d()) return w.conv2d().layout() == v1::DATA_LAYOUT_NHWC ? 3 : 1;
  if (w.has_pool2d()) return w.pool2d().layout() == v1::DATA_LAYOUT_NHWC ? 3 : 1;
  return static_cast<int>(rank) - 1;
}

}  // namespace

std::vector<std::string> ComputeDAG::TensorNames() const {
  std::vector<std::string> names;
  for (const TensorDecl& t : tensors) names.push_back(t.name);
  return names;
}

int64_t ComputeDAG::NumElements(int tensor) const {
  int64_t n = 1;
  for (int64_t d : tensors[tensor].shape) n *= d;
  return n;
}

int ComputeDAG::ProducerOf(int tensor) const {
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].output == tensor) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int> StageInputs(const Stage& stage) {
  std::vector<int> inputs;
  VisitLoads(stage.body, [&](const ExprNode& n) {
    if (std::find(inputs.begin(), inputs.end(), n.tensor) == inputs.end())
      inputs.push_back(n.tensor);
  });
  return inputs;
}

std::vector<Expr> PackedIndex(const TensorDecl& packed, const std::vector<Expr>& index) {
  std::vector<Expr> outer, inner(packed.pack_inner.size());
  for (size_t d = 0; d < index.size(); ++d) {
    int64_t b = packed.pack_block[d];
    if (b == 0) {
      outer.push_back(index[d]);
      continue;
    }
    outer.push_back(FloorDiv(index[d], IntImm(b)));
    size_t pos = std::find(packed.pack_inner.begin(), packed.pack_inner.end(), int(d)) -
                 packed.pack_inner.begin();
    inner[pos] = FloorMod(index[d], IntImm(b));
  }
  outer.insert(outer.end(), inner.begin(), inner.end());
  return outer;
}

namespace {

v1::KernelArgument ArgumentOf(const ComputeDAG& dag, int tensor) {
  const TensorDecl& t = dag.tensors[size_t(tensor)];
  v1::KernelArgument a;
  a.set_dtype(!t.float16                        ? v1::DTYPE_FLOAT32
              : dag.half == HalfKind::kBFloat16 ? v1::DTYPE_BFLOAT16
                                                : v1::DTYPE_FLOAT16);
  a.set_tensor(tensor);
  if (t.packed_from < 0) {
    for (int64_t e : t.shape) a.add_shape(e);
    return a;
  }
  for (int64_t e : dag.tensors[size_t(t.packed_from)].shape) a.add_shape(e);
  for (int64_t b : t.pack_block) a.add_pack_block(b);
  for (int d : t.pack_inner) a.add_pack_inner(d);
  return a;
}

}  // namespace

std::vector<float> PackConstant(const ComputeDAG& dag, int packed,
                                const std::vector<float>& original) {
  return PackArgument(ArgumentOf(dag, packed), original);
}

v1::KernelSignature SignatureOf(const ComputeDAG& scheduled) {
  v1::KernelSignature s;
  for (int t : scheduled.args) *s.add_args() = ArgumentOf(scheduled, t);
  s.set_tf32(scheduled.tf32);
  return s;
}

std::vector<std::pair<size_t, std::vector<float>>> PackedArguments(
    const ComputeDAG& scheduled, const std::vector<std::vector<float>>& inputs) {
  std::vector<std::pair<size_t, std::vector<float>>> packed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    int arg = scheduled.args[i];
    if (scheduled.tensors[size_t(arg)].packed_from >= 0) {
      packed.emplace_back(i, PackConstant(scheduled, arg, inputs[i]));
    }
  }
  return packed;
}

int64_t ElementBytes(const TensorDecl& t) { return t.float16 ? 2 : 4; }

bool HasFloat16(const ComputeDAG& dag) {
  for (const TensorDecl& t : dag.tensors) {
    if (t.float16) return true;
  }
  return false;
}

namespace {

absl::StatusOr<ComputeDAG> BuildFloatDAG(const v1::Workload& w);

}  // namespace

absl::StatusOr<ComputeDAG> BuildComputeDAG(const v1::Workload& workload) {
  absl::StatusOr<CanonicalWorkload> cw = Canonicalize(workload);
  if (!cw.ok()) return cw.status();
  TF_ASSIGN_OR_RETURN(const v1::DType dtype, WorkloadDType(cw->workload));
  TF_ASSIGN_OR_RETURN(ComputeDAG dag, BuildFloatDAG(cw->workload));
  if (dtype == v1::DTYPE_FLOAT16 || dtype == v1::DTYPE_BFLOAT16) {
    for (int t : dag.args) dag.tensors[size_t(t)].float16 = true;
    dag.half = dtype == v1::DTYPE_BFLOAT16 ? HalfKind::kBFloat16 : HalfKind::kFloat16;
  }
  dag.tf32 = cw->workload.tf32();
  return dag;
}

namespace {

absl::StatusOr<ComputeDAG> BuildFloatDAG(const v1::Workload& w) {
  Builder b;
  int main = -1;
  switch (w.op()) {
    case v1::OP_KIND_CONV2D:
      main = w.conv2d().winograd() != 0 ? Conv2dWinograd(b, w) : Conv2d(b, w);
      break;
    case v1::OP_KIND_CONV2D_TRANSPOSE:
      main = Conv2dTranspose(b, w);
      break;
    case v1::OP_KIND_DENSE:
    case v1::OP_KIND_MATMUL:
    case v1::OP_KIND_BATCH_MATMUL:
      main = Matmul(b, w);
      break;
    case v1::OP_KIND_POOL2D:
      main = Pool(b, w);
      break;
    case v1::OP_KIND_ELEMENTWISE:
      main = Elementwise(b, w);
      break;
    case v1::OP_KIND_SOFTMAX:
      main = Softmax(b, w);
      break;
    case v1::OP_KIND_REARRANGE:
      main = Rearrange(b, w);
      break;
    case v1::OP_KIND_REDUCE:
      main = Reduce(b, w);
      break;
    case v1::OP_KIND_NORMALIZE:
      main = Normalize(b, w);
      break;
    default:
      return absl::UnimplementedError(StrCat("op ", OpName(w.op()), " has no definition"));
  }
  if (w.epilogue_size() == 0) return b.Finish(main);

  // All epilogues in one elementwise stage reading the main result.
  std::vector<int64_t> shape = b.Shape(main);
  int ch = ChannelDim(w, shape.size());
  int bias = -1, residual = -1;
  std::vector<std::vector<int>> map_inputs;  // per epilogue: its inputs' tensors
  for (const v1::Epilogue& e : w.epilogue()) {
    if (e.kind() == v1::EPILOGUE_KIND_BIAS_ADD && bias < 0) {
      bias = b.AddInput("bias", {shape[ch]}, true);
    }
    if (e.kind() == v1::EPILOGUE_KIND_RESIDUAL_ADD && residual < 0) {
      residual = b.AddInput("residual", shape);
    }
  }
  int map_count = 0;
  for (const v1::Epilogue& e : w.epilogue()) {
    map_inputs.emplace_back();
    for (const v1::TensorSpec& t : e.map_inputs()) {
      map_inputs.back().push_back(b.AddInput(
          StrCat("map", map_count++), std::vector<int64_t>(t.shape().begin(), t.shape().end())));
    }
  }
  std::vector<IterVar> axes = b.Axes(shape, {"e0", "e1", "e2", "e3", "e4"});
  std::vector<Expr> idx;
  for (const IterVar& a : axes) idx.push_back(a.var);
  Expr v = b.Read(main, idx);
  for (int k = 0; k < w.epilogue_size(); ++k) {
    const v1::Epilogue& e = w.epilogue(k);
    if (e.kind() == v1::EPILOGUE_KIND_MAP) {
      v = MapExpr(e, v, [&](int i) {
        const v1::TensorSpec& t = e.map_inputs(i);
        std::vector<Expr> ix(size_t(t.shape_size()), I(0));
        std::vector<int> axes =
            MapInputAxes(std::vector<int64_t>(t.shape().begin(), t.shape().end()), shape);
        for (size_t d = 0; d < axes.size(); ++d)
          if (axes[d] >= 0) ix[size_t(axes[d])] = idx[d];
        return b.Read(map_inputs[size_t(k)][size_t(i)], ix);
      });
    } else if (e.kind() == v1::EPILOGUE_KIND_BIAS_ADD) {
      v = v + b.Read(bias, {axes[ch].var});
    } else if (e.kind() == v1::EPILOGUE_KIND_RESIDUAL_ADD) {
      v = v + b.Read(residual, idx);
    } else {
      v = Activation(e.kind(), v, e);
    }
  }
  return b.Finish(b.AddStage("epilogue", axes, {}, ReduceKind::kNone, v, true));
}

}  // namespace

double ReduceIdentity(ReduceKind kind) {
  return kind == ReduceKind::kProd  ? 1.0
         : kind == ReduceKind::kMax ? -std::numeric_limits<double>::infinity()
                                    : 0.0;
}

std::string ToString(const ComputeDAG& dag) {
  std::vector<std::string> names = dag.TensorNames();
  std::string out;
  for (const Stage& s : dag.stages) {
    std::vector<std::string> axes, red;
    for (const IterVar& a : s.axes) axes.push_back(StrCat(ToString(a.var), ":", a.extent));
    for (const IterVar& a : s.reduce_axes) red.push_back(StrCat(ToString(a.var), ":", a.extent));
    absl::StrAppend(&out, names[s.output], "[", absl::StrJoin(axes, ", "), "] = ",
                    s.reduce == ReduceKind::kSum    ? "sum"
                    : s.reduce == ReduceKind::kMax  ? "max"
                    : s.reduce == ReduceKind::kProd ? "prod"
                                                    : "",
                    red.empty() ? "" : StrCat("{", absl::StrJoin(red, ", "), "} "),
                    ToString(s.body, &names), "\n");
  }
  return out;
}

}  // namespace tunefarm::ir
