// Operator compute definitions for convolutions, the matmul family and
// pooling: the ops that reduce over a window or a product axis, written as
// stages of the tensor IR (see compute_internal.h).
#include "compiler/ir/compute_internal.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "compiler/ir/workload.h"

namespace tunefarm::ir::compute_internal {

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

}  // namespace tunefarm::ir::compute_internal
