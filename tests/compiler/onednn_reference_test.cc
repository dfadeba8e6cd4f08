// Every operator kind the CPU compiler supports, checked against oneDNN's
// primitives on the same random inputs: a reference that shares no code with
// ours (kernel_check compares with ir::EvaluateReference, which reads the same
// compute definition the code generator lowers, so a wrong meaning of a
// stride, pad, pool or op there would pass it). Each case is a workload built
// here as a message, with its attributes spelled out; the kernel is the
// default schedule's, run through the kernel ABI. Inputs are made here too:
// the workload's inputs in order, then the bias and the residual in the order
// the epilogue first names them.
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/llvm_target.h"
#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "tests/compiler/kernel_check.h"

namespace tunefarm {
namespace {

namespace v1 = ::tunefarm::v1;
using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;

// ---- workloads, written out field by field ----

v1::TensorSpec* AddInput(v1::Workload* w, std::vector<int64_t> shape) {
  v1::TensorSpec* t = w->add_inputs();
  for (int64_t d : shape) t->add_shape(d);
  t->set_dtype(v1::DTYPE_FLOAT32);
  return t;
}

struct ConvCase {
  std::string name;
  int64_t n, c, h, w, k, r, s;
  std::vector<int64_t> strides, pads, dilations;  // [h,w], [t,l,b,r], [h,w]
  int64_t groups = 1;
  bool nhwc = false;
  bool transpose = false;
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

v1::Workload Conv(const ConvCase& cc) {
  v1::Workload w;
  w.set_op(cc.transpose ? v1::OP_KIND_CONV2D_TRANSPOSE : v1::OP_KIND_CONV2D);
  const int64_t cg = cc.c / cc.groups;
  if (cc.nhwc) {
    AddInput(&w, {cc.n, cc.h, cc.w, cc.c});
    AddInput(&w, {cc.r, cc.s, cg, cc.k});  // HWIO
  } else {
    AddInput(&w, {cc.n, cc.c, cc.h, cc.w});
    if (cc.transpose) AddInput(&w, {cc.c, cc.k / cc.groups, cc.r, cc.s});
    else AddInput(&w, {cc.k, cg, cc.r, cc.s});
  }
  v1::Conv2dAttrs* a = w.mutable_conv2d();
  a->set_layout(cc.nhwc ? v1::DATA_LAYOUT_NHWC : v1::DATA_LAYOUT_NCHW);
  for (int64_t v : cc.strides) a->add_strides(v);
  for (int64_t v : cc.pads) a->add_pads(v);
  for (int64_t v : cc.dilations) a->add_dilations(v);
  a->set_groups(cc.groups);
  return w;
}

struct PoolCase {
  std::string name;
  v1::PoolKind kind;
  int64_t n, c, h, w;
  std::vector<int64_t> kernel, strides, pads;
  bool count_include_pad = false, ceil_mode = false, nhwc = false;
};

void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }

v1::Workload Pool(const PoolCase& pc) {
  v1::Workload w;
  w.set_op(v1::OP_KIND_POOL2D);
  if (pc.nhwc) AddInput(&w, {pc.n, pc.h, pc.w, pc.c});
  else AddInput(&w, {pc.n, pc.c, pc.h, pc.w});
  v1::Pool2dAttrs* a = w.mutable_pool2d();
  a->set_kind(pc.kind);
  a->set_layout(pc.nhwc ? v1::DATA_LAYOUT_NHWC : v1::DATA_LAYOUT_NCHW);
  for (int64_t v : pc.kernel) a->add_kernel(v);
  for (int64_t v : pc.strides) a->add_strides(v);
  for (int64_t v : pc.pads) a->add_pads(v);
  a->set_count_include_pad(pc.count_include_pad);
  a->set_ceil_mode(pc.ceil_mode);
  return w;
}

v1::Workload Matmul(v1::OpKind op, std::vector<int64_t> a, std::vector<int64_t> b, bool ta,
                    bool tb) {
  v1::Workload w;
  w.set_op(op);
  AddInput(&w, a);
  AddInput(&w, b);
  if (op != v1::OP_KIND_DENSE) {
    w.mutable_matmul()->set_transpose_a(ta);
    w.mutable_matmul()->set_transpose_b(tb);
  }
  return w;
}

v1::Workload Elementwise(v1::ElementwiseKind kind, std::vector<int64_t> x,
                         std::vector<int64_t> y = {}) {
  v1::Workload w;
  w.set_op(v1::OP_KIND_ELEMENTWISE);
  AddInput(&w, x);
  if (!y.empty()) AddInput(&w, y);
  w.mutable_elementwise()->set_kind(kind);
  if (kind == v1::ELEMENTWISE_KIND_CLIP) {
    w.mutable_elementwise()->set_min(-0.25f);
    w.mutable_elementwise()->set_max(0.5f);
  }
  return w;
}

v1::Workload With(v1::Workload w, std::vector<v1::EpilogueKind> kinds) {
  for (v1::EpilogueKind k : kinds) {
    v1::Epilogue* e = w.add_epilogue();
    e->set_kind(k);
    if (k == v1::EPILOGUE_KIND_CLIP) {
      e->set_min(-0.3f);
      e->set_max(0.4f);
    }
    if (k == v1::EPILOGUE_KIND_LEAKY_RELU) e->set_alpha(0.1f);
  }
  return w;
}

// ---- oneDNN ----

struct Dnnl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};

  memory Mem(const memory::desc& d, const float* data = nullptr) {
    memory m(d, engine);
    if (data) std::copy(data, data + d.get_size() / sizeof(float), static_cast<float*>(m.get_data_handle()));
    return m;
  }
  static std::vector<float> Read(const memory& m) {
    const float* p = static_cast<const float*>(m.get_data_handle());
    return std::vector<float>(p, p + m.get_desc().get_size() / sizeof(float));
  }
  // A plain copy of `m` in the layout `to` (weights given with strides).
  memory Reorder(memory m, const memory::desc& to) {
    memory out(to, engine);
    dnnl::reorder(m, out).execute(stream, m, out);
    stream.wait();
    return out;
  }
};

memory::desc Desc(const Dims& dims, Tag tag) { return memory::desc(dims, memory::data_type::f32, tag); }
memory::desc Strided(const Dims& dims, const Dims& strides) {
  return memory::desc(dims, memory::data_type::f32, strides);
}

// The main computation; *dst_dims gets the output's logical dims in the
// order our output is laid out (NHWC stays N,H,W,C), so epilogues can
// broadcast along them.
std::vector<float> MainOp(Dnnl& d, const v1::Workload& w, const std::vector<std::vector<float>>& in,
                          Dims* out_dims, int* channel_dim) {
  auto shape = [&](int i) { return Dims(w.inputs(i).shape().begin(), w.inputs(i).shape().end()); };
  switch (w.op()) {
    case v1::OP_KIND_CONV2D:
    case v1::OP_KIND_CONV2D_TRANSPOSE: {
      const v1::Conv2dAttrs& a = w.conv2d();
      const bool nhwc = a.layout() == v1::DATA_LAYOUT_NHWC, tr = w.op() == v1::OP_KIND_CONV2D_TRANSPOSE;
      Dims x = shape(0), wt = shape(1);
      const int64_t n = x[0], c = nhwc ? x[3] : x[1], h = nhwc ? x[1] : x[2], wd = nhwc ? x[2] : x[3];
      const int64_t g = a.groups(), cg = c / g;
      int64_t k, r, s;
      Dims wdims, wstrides;  // logical {G, O/G, I/G, R, S} over our weight layout
      if (tr) {  // [C, K/G, R, S]
        const int64_t kg = wt[1];
        k = kg * g, r = wt[2], s = wt[3];
        wdims = {g, kg, cg, r, s};
        wstrides = {cg * kg * r * s, r * s, kg * r * s, s, 1};
      } else if (nhwc) {  // HWIO [R, S, C/G, K]
        r = wt[0], s = wt[1], k = wt[3];
        wdims = {g, k / g, cg, r, s};
        wstrides = {k / g, 1, k, s * cg * k, cg * k};
      } else {  // OIHW [K, C/G, R, S]
        k = wt[0], r = wt[2], s = wt[3];
        wdims = {g, k / g, cg, r, s};
        wstrides = {(k / g) * cg * r * s, cg * r * s, r * s, s, 1};
      }
      const Dims strides = {a.strides(0), a.strides(1)};
      const Dims dil = {a.dilations(0) - 1, a.dilations(1) - 1};
      const Dims pl = {a.pads(0), a.pads(1)}, pr = {a.pads(2), a.pads(3)};
      auto extent = [&](int64_t i, int64_t kk, int64_t st, int64_t dl, int64_t lo, int64_t hi) {
        const int64_t span = dl * (kk - 1) + 1;
        return tr ? (i - 1) * st - lo - hi + span : (i + lo + hi - span) / st + 1;
      };
      const int64_t oh = extent(h, r, strides[0], a.dilations(0), pl[0], pr[0]);
      const int64_t ow = extent(wd, s, strides[1], a.dilations(1), pl[1], pr[1]);
      const Tag act = nhwc ? Tag::nhwc : Tag::nchw;
      memory src = d.Mem(Desc({n, c, h, wd}, act), in[0].data());
      memory wts = d.Reorder(d.Mem(Strided(wdims, wstrides), in[1].data()), Desc(wdims, Tag::goihw));
      memory dst = d.Mem(Desc({n, k, oh, ow}, act));
      if (tr) {
        dnnl::deconvolution_forward::desc desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
            src.get_desc(), wts.get_desc(), dst.get_desc(), strides, dil, pl, pr);
        dnnl::deconvolution_forward(dnnl::deconvolution_forward::primitive_desc(desc, d.engine))
            .execute(d.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}});
      } else {
        dnnl::convolution_forward::desc desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            src.get_desc(), wts.get_desc(), dst.get_desc(), strides, dil, pl, pr);
        dnnl::convolution_forward(dnnl::convolution_forward::primitive_desc(desc, d.engine))
            .execute(d.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}});
      }
      d.stream.wait();
      *out_dims = nhwc ? Dims{n, oh, ow, k} : Dims{n, k, oh, ow};
      *channel_dim = nhwc ? 3 : 1;
      return Dnnl::Read(dst);
    }
    case v1::OP_KIND_POOL2D: {
      const v1::Pool2dAttrs& a = w.pool2d();
      const bool nhwc = a.layout() == v1::DATA_LAYOUT_NHWC;
      Dims x = shape(0);
      const int64_t n = x[0], c = nhwc ? x[3] : x[1], h = nhwc ? x[1] : x[2], wd = nhwc ? x[2] : x[3];
      Dims kernel, strides, pl, pr;
      dnnl::algorithm alg;
      if (a.kind() == v1::POOL_KIND_GLOBAL_AVG) {
        kernel = {h, wd}, strides = {1, 1}, pl = {0, 0}, pr = {0, 0};
        alg = dnnl::algorithm::pooling_avg_exclude_padding;
      } else {
        kernel = {a.kernel(0), a.kernel(1)}, strides = {a.strides(0), a.strides(1)};
        pl = {a.pads(0), a.pads(1)}, pr = {a.pads(2), a.pads(3)};
        alg = a.kind() == v1::POOL_KIND_MAX ? dnnl::algorithm::pooling_max
              : a.count_include_pad()       ? dnnl::algorithm::pooling_avg_include_padding
                                            : dnnl::algorithm::pooling_avg_exclude_padding;
      }
      Dims out(2);
      const int64_t in_hw[2] = {h, wd};
      for (int i = 0; i < 2; ++i) {
        const int64_t span = in_hw[i] + pl[i] + pr[i] - kernel[i];
        out[i] = (a.ceil_mode() ? (span + strides[i] - 1) / strides[i] : span / strides[i]) + 1;
        // ceil mode (ONNX Runtime's and PyTorch's rule): no window starts in
        // the right padding. The last window may reach past the right pad;
        // oneDNN takes that as more right padding (cases here keep it out of
        // averages that count padding, where the two conventions differ).
        if (a.ceil_mode() && (out[i] - 1) * strides[i] >= in_hw[i] + pl[i]) --out[i];
        if (a.ceil_mode()) pr[i] = (out[i] - 1) * strides[i] + kernel[i] - in_hw[i] - pl[i];
      }
      const Tag act = nhwc ? Tag::nhwc : Tag::nchw;
      memory src = d.Mem(Desc({n, c, h, wd}, act), in[0].data());
      memory dst = d.Mem(Desc({n, c, out[0], out[1]}, act));
      dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_inference, alg, src.get_desc(),
                                       dst.get_desc(), strides, kernel, pl, pr);
      dnnl::pooling_forward(dnnl::pooling_forward::primitive_desc(desc, d.engine))
          .execute(d.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
      d.stream.wait();
      *out_dims = nhwc ? Dims{n, out[0], out[1], c} : Dims{n, c, out[0], out[1]};
      *channel_dim = nhwc ? 3 : 1;
      return Dnnl::Read(dst);
    }
    case v1::OP_KIND_DENSE:
    case v1::OP_KIND_MATMUL:
    case v1::OP_KIND_BATCH_MATMUL: {
      const bool batch = w.op() == v1::OP_KIND_BATCH_MATMUL, dense = w.op() == v1::OP_KIND_DENSE;
      const bool ta = !dense && w.matmul().transpose_a(), tb = dense || w.matmul().transpose_b();
      Dims as = shape(0), bs = shape(1);
      if (!batch) as.insert(as.begin(), 1), bs.insert(bs.begin(), 1);
      // Logical [B, M, K] and [B, K, N] over the stored (possibly transposed) data.
      const int64_t m = ta ? as[2] : as[1], kk = ta ? as[1] : as[2], n = tb ? bs[1] : bs[2];
      memory A = d.Mem(Strided({as[0], m, kk}, ta ? Dims{m * kk, 1, m} : Dims{m * kk, kk, 1}),
                       in[0].data());
      memory B = d.Mem(Strided({bs[0], kk, n}, tb ? Dims{kk * n, 1, kk} : Dims{kk * n, n, 1}),
                       in[1].data());
      const int64_t bsz = std::max(as[0], bs[0]);
      memory C = d.Mem(Desc({bsz, m, n}, Tag::abc));
      dnnl::matmul::desc desc(A.get_desc(), B.get_desc(), C.get_desc());
      dnnl::matmul(dnnl::matmul::primitive_desc(desc, d.engine))
          .execute(d.stream, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
      d.stream.wait();
      *out_dims = batch ? Dims{bsz, m, n} : Dims{m, n};
      *channel_dim = int(out_dims->size()) - 1;
      return Dnnl::Read(C);
    }
    case v1::OP_KIND_ELEMENTWISE: {
      const v1::ElementwiseAttrs& a = w.elementwise();
      Dims x = shape(0);
      *out_dims = x;
      *channel_dim = int(x.size()) - 1;
      auto plain = [&](const Dims& dims) {
        Dims st(dims.size(), 1);
        for (int i = int(dims.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * dims[i + 1];
        return Strided(dims, st);
      };
      if (w.inputs_size() == 2) {
        Dims y = shape(1);
        while (y.size() < x.size()) y.insert(y.begin(), 1);  // numpy: align on the right
        dnnl::algorithm alg = a.kind() == v1::ELEMENTWISE_KIND_ADD   ? dnnl::algorithm::binary_add
                              : a.kind() == v1::ELEMENTWISE_KIND_SUB ? dnnl::algorithm::binary_sub
                              : a.kind() == v1::ELEMENTWISE_KIND_MUL ? dnnl::algorithm::binary_mul
                                                                     : dnnl::algorithm::binary_div;
        memory s0 = d.Mem(plain(x), in[0].data()), s1 = d.Mem(plain(y), in[1].data());
        memory dst = d.Mem(plain(x));
        dnnl::binary::desc desc(alg, s0.get_desc(), s1.get_desc(), dst.get_desc());
        dnnl::binary(dnnl::binary::primitive_desc(desc, d.engine))
            .execute(d.stream, {{DNNL_ARG_SRC_0, s0}, {DNNL_ARG_SRC_1, s1}, {DNNL_ARG_DST, dst}});
        d.stream.wait();
        return Dnnl::Read(dst);
      }
      dnnl::algorithm alg;
      float alpha = 0, beta = 0;
      switch (a.kind()) {
        case v1::ELEMENTWISE_KIND_RELU: alg = dnnl::algorithm::eltwise_relu; break;
        case v1::ELEMENTWISE_KIND_SIGMOID: alg = dnnl::algorithm::eltwise_logistic; break;
        case v1::ELEMENTWISE_KIND_SILU: alg = dnnl::algorithm::eltwise_swish, alpha = 1; break;
        case v1::ELEMENTWISE_KIND_HARDSWISH: alg = dnnl::algorithm::eltwise_hardswish; break;
        default: alg = dnnl::algorithm::eltwise_clip, alpha = a.min(), beta = a.max(); break;
      }
      memory m = d.Mem(plain(x), in[0].data());
      dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, alg, m.get_desc(), alpha,
                                       beta);
      dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(desc, d.engine))
          .execute(d.stream, {{DNNL_ARG_SRC, m}, {DNNL_ARG_DST, m}});
      d.stream.wait();
      return Dnnl::Read(m);
    }
    default:
      ADD_FAILURE() << "no oneDNN reference for op " << w.op();
      return {};
  }
}

// The epilogues in order, each one oneDNN primitive on the output in place.
void Epilogues(Dnnl& d, const v1::Workload& w, const Dims& dims, int channel,
               const std::vector<float>* bias, const std::vector<float>* residual,
               std::vector<float>* out) {
  Dims st(dims.size(), 1);
  for (int i = int(dims.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * dims[i + 1];
  memory::desc md = Strided(dims, st);
  memory m = d.Mem(md, out->data());
  for (const v1::Epilogue& e : w.epilogue()) {
    if (e.kind() == v1::EPILOGUE_KIND_BIAS_ADD || e.kind() == v1::EPILOGUE_KIND_RESIDUAL_ADD) {
      memory other;
      if (e.kind() == v1::EPILOGUE_KIND_BIAS_ADD) {
        Dims bd(dims.size(), 1), bst(dims.size(), 1);
        bd[channel] = dims[channel];
        for (int i = channel - 1; i >= 0; --i) bst[i] = dims[channel];
        other = d.Mem(Strided(bd, bst), bias->data());
      } else {
        other = d.Mem(md, residual->data());
      }
      dnnl::binary::desc desc(dnnl::algorithm::binary_add, md, other.get_desc(), md);
      dnnl::binary(dnnl::binary::primitive_desc(desc, d.engine))
          .execute(d.stream, {{DNNL_ARG_SRC_0, m}, {DNNL_ARG_SRC_1, other}, {DNNL_ARG_DST, m}});
    } else {
      dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
      float alpha = 0, beta = 0;
      switch (e.kind()) {
        case v1::EPILOGUE_KIND_RELU: break;
        case v1::EPILOGUE_KIND_RELU6: alg = dnnl::algorithm::eltwise_clip, beta = 6; break;
        case v1::EPILOGUE_KIND_CLIP: alg = dnnl::algorithm::eltwise_clip, alpha = e.min(), beta = e.max(); break;
        case v1::EPILOGUE_KIND_LEAKY_RELU: alpha = e.alpha(); break;
        case v1::EPILOGUE_KIND_SIGMOID: alg = dnnl::algorithm::eltwise_logistic; break;
        case v1::EPILOGUE_KIND_SILU: alg = dnnl::algorithm::eltwise_swish, alpha = 1; break;
        case v1::EPILOGUE_KIND_HARDSWISH: alg = dnnl::algorithm::eltwise_hardswish; break;
        default: ADD_FAILURE() << "no oneDNN reference for epilogue " << e.kind(); return;
      }
      dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, alg, md, alpha, beta);
      dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(desc, d.engine))
          .execute(d.stream, {{DNNL_ARG_SRC, m}, {DNNL_ARG_DST, m}});
    }
    d.stream.wait();
  }
  *out = Dnnl::Read(m);
}

int64_t Elements(const Dims& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

// Runs `w` through our compiler and through oneDNN on the same inputs and
// compares every output, relative to max(1, |oneDNN|).
void ExpectMatchesOneDnn(const v1::Workload& w, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) {
      do x = u(rng);
      while (x == 0.f);
    }
    return v;
  };
  std::vector<std::vector<float>> in;
  for (const v1::TensorSpec& t : w.inputs()) {
    int64_t n = 1;
    for (int64_t d : t.shape()) n *= d;
    in.push_back(random(n));
  }
  Dnnl d;
  Dims dims;
  int channel = 0;
  std::vector<float> ref = MainOp(d, w, in, &dims, &channel);
  ASSERT_EQ(int64_t(ref.size()), Elements(dims));
  int bias = -1, residual = -1;
  for (const v1::Epilogue& e : w.epilogue()) {
    if (e.kind() == v1::EPILOGUE_KIND_BIAS_ADD && bias < 0) {
      bias = int(in.size());
      in.push_back(random(dims[channel]));
    }
    if (e.kind() == v1::EPILOGUE_KIND_RESIDUAL_ADD && residual < 0) {
      residual = int(in.size());
      in.push_back(random(Elements(dims)));
    }
  }
  Epilogues(d, w, dims, channel, bias >= 0 ? &in[bias] : nullptr,
            residual >= 0 ? &in[residual] : nullptr, &ref);

  absl::StatusOr<std::vector<float>> ours =
      testing::RunKernel(w, nullptr, codegen::HostTarget(), in);
  ASSERT_TRUE(ours.ok()) << ours.status();
  ASSERT_EQ(ours->size(), ref.size()) << "output size";
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double((*ours)[i]) - ref[i]) / std::max(1.0, std::fabs(double(ref[i])));
    ASSERT_LE(err, 1e-4) << "output " << i << ": ours " << (*ours)[i] << ", oneDNN " << ref[i];
  }
}

// ---- the cases ----

std::vector<ConvCase> ConvCases() {
  return {
      {"plain_3x3_pad1", 1, 8, 10, 10, 12, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}},
      {"stride2_pad1", 2, 6, 11, 9, 8, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}},
      {"stride_2x1_asymmetric_pads", 1, 4, 9, 8, 6, 3, 2, {2, 1}, {0, 1, 2, 0}, {1, 1}},
      {"dilation2", 1, 5, 12, 12, 7, 3, 3, {1, 1}, {2, 2, 2, 2}, {2, 2}},
      {"dilation_2x3_stride2", 1, 4, 15, 16, 4, 3, 3, {2, 2}, {1, 3, 1, 3}, {2, 3}},
      {"groups2", 1, 8, 9, 9, 6, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2},
      {"depthwise_stride2", 1, 12, 14, 14, 12, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, 12},
      {"depthwise_multiplier2", 1, 6, 8, 8, 12, 5, 5, {1, 1}, {2, 2, 2, 2}, {1, 1}, 6},
      {"pointwise", 1, 16, 7, 7, 24, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}},
      {"nhwc_stride2_pad1", 1, 6, 10, 11, 10, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, true},
      {"nhwc_groups3_dilation2", 1, 9, 11, 11, 6, 3, 3, {1, 1}, {2, 2, 2, 2}, {2, 2}, 3, true},
      {"transpose_k2_s2", 1, 6, 5, 5, 4, 2, 2, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1, false, true},
      {"transpose_k3_s2_pad1", 1, 4, 6, 7, 5, 3, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, false, true},
      {"transpose_groups2_asymmetric", 1, 6, 5, 4, 4, 3, 3, {2, 1}, {0, 1, 1, 0}, {1, 1}, 2, false,
       true},
  };
}

class ConvVsOneDnn : public ::testing::TestWithParam<ConvCase> {};
TEST_P(ConvVsOneDnn, Matches) { ExpectMatchesOneDnn(Conv(GetParam())); }
INSTANTIATE_TEST_SUITE_P(Cases, ConvVsOneDnn, ::testing::ValuesIn(ConvCases()),
                         [](const auto& i) { return i.param.name; });

std::vector<PoolCase> PoolCases() {
  const auto kMax = v1::POOL_KIND_MAX, kAvg = v1::POOL_KIND_AVG;
  return {
      {"max_3x3_s2_pad1", kMax, 1, 4, 11, 11, {3, 3}, {2, 2}, {1, 1, 1, 1}},
      {"max_2x2_s2", kMax, 2, 3, 8, 9, {2, 2}, {2, 2}, {0, 0, 0, 0}},
      {"max_ceil_mode", kMax, 1, 3, 10, 11, {3, 3}, {2, 2}, {0, 0, 0, 0}, false, true},
      {"max_asymmetric_pads_stride_2x1", kMax, 1, 2, 9, 7, {3, 2}, {2, 1}, {1, 0, 0, 1}},
      {"avg_include_pad", kAvg, 1, 4, 9, 9, {3, 3}, {2, 2}, {1, 1, 1, 1}, true},
      {"avg_exclude_pad", kAvg, 1, 4, 9, 9, {3, 3}, {2, 2}, {1, 1, 1, 1}, false},
      {"avg_exclude_pad_ceil_mode", kAvg, 1, 3, 10, 11, {3, 3}, {2, 2}, {1, 1, 1, 1}, false, true},
      {"max_ceil_mode_no_window_in_right_pad", kMax, 1, 2, 10, 11, {2, 2}, {2, 2}, {0, 0, 1, 1},
       false, true},
      {"avg_asymmetric_pads", kAvg, 1, 2, 8, 8, {2, 3}, {1, 2}, {0, 1, 1, 2}, true},
      {"max_nhwc", kMax, 1, 5, 9, 10, {3, 3}, {2, 2}, {1, 1, 1, 1}, false, false, true},
      {"avg_nhwc_exclude_pad", kAvg, 1, 5, 9, 10, {3, 3}, {1, 1}, {1, 1, 1, 1}, false, false, true},
      {"global_avg", v1::POOL_KIND_GLOBAL_AVG, 2, 6, 7, 5, {}, {}, {}},
      {"global_avg_nhwc", v1::POOL_KIND_GLOBAL_AVG, 1, 6, 7, 5, {}, {}, {}, false, false, true},
  };
}

class PoolVsOneDnn : public ::testing::TestWithParam<PoolCase> {};
TEST_P(PoolVsOneDnn, Matches) { ExpectMatchesOneDnn(Pool(GetParam())); }
INSTANTIATE_TEST_SUITE_P(Cases, PoolVsOneDnn, ::testing::ValuesIn(PoolCases()),
                         [](const auto& i) { return i.param.name; });

TEST(MatmulVsOneDnn, DenseAndEveryTranspose) {
  ExpectMatchesOneDnn(Matmul(v1::OP_KIND_DENSE, {5, 24}, {17, 24}, false, true));
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(absl::StrCat("transpose_a ", ta, " transpose_b ", tb));
      ExpectMatchesOneDnn(Matmul(v1::OP_KIND_MATMUL, ta ? std::vector<int64_t>{20, 9}
                                                        : std::vector<int64_t>{9, 20},
                                 tb ? std::vector<int64_t>{13, 20} : std::vector<int64_t>{20, 13},
                                 ta, tb));
      ExpectMatchesOneDnn(Matmul(v1::OP_KIND_BATCH_MATMUL,
                                 ta ? std::vector<int64_t>{3, 16, 7} : std::vector<int64_t>{3, 7, 16},
                                 tb ? std::vector<int64_t>{3, 11, 16} : std::vector<int64_t>{3, 16, 11},
                                 ta, tb));
    }
  }
  // One side's batch of 1 broadcasts.
  ExpectMatchesOneDnn(Matmul(v1::OP_KIND_BATCH_MATMUL, {4, 6, 8}, {1, 8, 5}, false, false));
}

TEST(ElementwiseVsOneDnn, EveryKindAndBroadcast) {
  for (auto k : {v1::ELEMENTWISE_KIND_ADD, v1::ELEMENTWISE_KIND_SUB, v1::ELEMENTWISE_KIND_MUL,
                 v1::ELEMENTWISE_KIND_DIV}) {
    SCOPED_TRACE(v1::ElementwiseKind_Name(k));
    ExpectMatchesOneDnn(Elementwise(k, {2, 3, 4, 5}, {2, 3, 4, 5}));
    ExpectMatchesOneDnn(Elementwise(k, {2, 3, 4, 5}, {3, 1, 1}));  // per channel
    ExpectMatchesOneDnn(Elementwise(k, {2, 3, 4, 5}, {5}));        // last axis
    ExpectMatchesOneDnn(Elementwise(k, {2, 3, 4, 5}, {2, 1, 4, 1}));
  }
  for (auto k : {v1::ELEMENTWISE_KIND_RELU, v1::ELEMENTWISE_KIND_SIGMOID, v1::ELEMENTWISE_KIND_SILU,
                 v1::ELEMENTWISE_KIND_HARDSWISH, v1::ELEMENTWISE_KIND_CLIP}) {
    SCOPED_TRACE(v1::ElementwiseKind_Name(k));
    ExpectMatchesOneDnn(Elementwise(k, {3, 40}));
  }
}

TEST(EpilogueVsOneDnn, EveryKindAfterConvDenseAndPool) {
  const ConvCase conv = {"c", 1, 6, 8, 8, 10, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}};
  ConvCase nhwc = conv;
  nhwc.nhwc = true;
  for (auto k : {v1::EPILOGUE_KIND_RELU, v1::EPILOGUE_KIND_RELU6, v1::EPILOGUE_KIND_CLIP,
                 v1::EPILOGUE_KIND_LEAKY_RELU, v1::EPILOGUE_KIND_SIGMOID, v1::EPILOGUE_KIND_SILU,
                 v1::EPILOGUE_KIND_HARDSWISH}) {
    SCOPED_TRACE(v1::EpilogueKind_Name(k));
    ExpectMatchesOneDnn(With(Conv(conv), {v1::EPILOGUE_KIND_BIAS_ADD, k}));
  }
  // Bias along the channel of each layout and op, then a residual, in order.
  ExpectMatchesOneDnn(With(Conv(conv), {v1::EPILOGUE_KIND_BIAS_ADD, v1::EPILOGUE_KIND_RESIDUAL_ADD,
                                        v1::EPILOGUE_KIND_RELU}));
  ExpectMatchesOneDnn(With(Conv(nhwc), {v1::EPILOGUE_KIND_BIAS_ADD, v1::EPILOGUE_KIND_RELU6}));
  ExpectMatchesOneDnn(With(Matmul(v1::OP_KIND_DENSE, {4, 16}, {9, 16}, false, true),
                           {v1::EPILOGUE_KIND_BIAS_ADD, v1::EPILOGUE_KIND_SILU}));
  ExpectMatchesOneDnn(
      With(Pool({"p", v1::POOL_KIND_MAX, 1, 4, 8, 8, {2, 2}, {2, 2}, {0, 0, 0, 0}}),
           {v1::EPILOGUE_KIND_RESIDUAL_ADD, v1::EPILOGUE_KIND_HARDSWISH}));
}

}  // namespace
}  // namespace tunefarm
