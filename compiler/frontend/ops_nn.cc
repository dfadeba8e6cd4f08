// Registry entries: convolution, pooling, dense layers and normalization.
#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/op_registry.h"
#include "compiler/ir/workload.h"
#include "proto/onnx_forms.h"

namespace tunefarm::frontend {
namespace {

using absl::StrCat;

std::string AutoPad(const Node& n) {
  return n.strings.count("auto_pad") ? n.strings.at("auto_pad") : "NOTSET";
}

//===--- Conv, ConvTranspose ----------------------------------------------===//

absl::Status InferConvLike(ShapeContext& c, const Node& n, bool transpose) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape w, c.In(n, 1));
  if (x.size() != 3 && x.size() != 4) {
    return c.Error(
        n, StrCat("only 1-D and 2-D convolutions are supported (input ", ShapeText(x), ")"));
  }
  if (w.size() != x.size()) return c.Error(n, "weight rank differs from the input's");
  const size_t sp = x.size() - 2;
  const int64_t group = n.Int("group", 1);
  if (group <= 0 || x[1] % group != 0)
    return c.Error(n, StrCat("group ", group, " does not divide ", x[1]));
  std::vector<int64_t> strides = n.Ints("strides"), dil = n.Ints("dilations"),
                       pads = n.Ints("pads");
  if (strides.empty()) strides.assign(sp, 1);
  if (dil.empty()) dil.assign(sp, 1);
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp) {
    return c.Error(n, "strides, dilations or pads have the wrong length");
  }
  for (size_t i = 0; i < sp; ++i) {
    if (strides[i] <= 0 || dil[i] <= 0) return c.Error(n, "strides and dilations must be positive");
  }
  const std::string auto_pad = AutoPad(n);
  Shape out = {x[0], 0};
  if (!transpose) {
    if (w[1] * group != x[1]) {
      return c.Error(n, StrCat("weight ", ShapeText(w), " does not match ", x[1],
                               " input channels in ", group, " groups"));
    }
    out[1] = w[0];
    for (size_t i = 0; i < sp; ++i) {
      int64_t k = (w[2 + i] - 1) * dil[i] + 1, in = x[2 + i];
      int64_t o;
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        o = (in + strides[i] - 1) / strides[i];
      } else if (auto_pad == "VALID") {
        o = (in - k) / strides[i] + 1;
      } else if (auto_pad == "NOTSET") {
        o = (in + pads[i] + pads[i + sp] - k) / strides[i] + 1;
      } else {
        return c.Error(n, StrCat("auto_pad '", auto_pad,
                                 "' is not one of NOTSET, SAME_UPPER, "
                                 "SAME_LOWER, VALID"));
      }
      if (o <= 0) return c.Error(n, "the output would be empty");
      out.push_back(o);
    }
  } else {
    if (w[0] != x[1]) return c.Error(n, "ConvTranspose weight does not match the input channels");
    out[1] = w[1] * group;
    std::vector<int64_t> outpad = n.Ints("output_padding");
    if (outpad.empty()) outpad.assign(sp, 0);
    std::vector<int64_t> oshape = n.Ints("output_shape");
    for (size_t i = 0; i < sp; ++i) {
      int64_t o = oshape.size() == sp ? oshape[i]
                  : (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
                      ? x[2 + i] * strides[i]
                      : strides[i] * (x[2 + i] - 1) + outpad[i] + (w[2 + i] - 1) * dil[i] + 1 -
                            (auto_pad == "VALID" ? 0 : pads[i] + pads[i + sp]);
      if (o <= 0) return c.Error(n, "the output would be empty");
      out.push_back(o);
    }
  }
  return c.Set(n, 0, out);
}

absl::Status InferConv(ShapeContext& c, const Node& n) { return InferConvLike(c, n, false); }
absl::Status InferConvTranspose(ShapeContext& c, const Node& n) {
  return InferConvLike(c, n, true);
}

// A 1-D or 2-D convolution with constant weights (and bias) as a conv2d
// workload (1-D as H = 1); SAME padding made explicit.
bool ConvAnchorLike(const Model& m, const Node& n, v1::Workload* w, bool transpose) {
  auto is_const = [&](const std::string& v) { return m.constants.count(v) > 0; };
  if (n.inputs.size() < 2 || !is_const(n.inputs[1])) return false;  // kernels pack their weights
  if (n.inputs.size() > 2 && !n.inputs[2].empty() && !is_const(n.inputs[2])) return false;
  Shape x = m.shapes.at(n.inputs[0]), k = m.shapes.at(n.inputs[1]);
  const bool conv1d = x.size() == 3;
  if (conv1d) {  // as 2-D with H = 1
    x.insert(x.begin() + 2, 1);
    k.insert(k.begin() + 2, 1);
  }
  if (x.size() != 4) return false;
  const std::string pad = AutoPad(n);
  std::vector<int64_t> strides = n.Ints("strides"), dil = n.Ints("dilations"), p = n.Ints("pads");
  const size_t sp = conv1d ? 1 : 2;
  if (strides.empty()) strides.assign(sp, 1);
  if (dil.empty()) dil.assign(sp, 1);
  if (p.empty()) p.assign(2 * sp, 0);
  if (pad == "SAME_UPPER" || pad == "SAME_LOWER") {
    if (transpose) return false;
    const Shape& out = m.shapes.at(n.outputs[0]);
    for (size_t i = 0; i < sp; ++i) {
      int64_t in = m.shapes.at(n.inputs[0])[2 + i], o = out[2 + i];
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
  if (transpose && (!n.Ints("output_padding").empty() || !n.Ints("output_shape").empty()))
    return false;
  w->set_op(transpose ? v1::OP_KIND_CONV2D_TRANSPOSE : v1::OP_KIND_CONV2D);
  *w->add_inputs() = FloatSpec(x);
  *w->add_inputs() = FloatSpec(k);
  auto* c = w->mutable_conv2d();
  c->set_layout(v1::DATA_LAYOUT_NCHW);
  for (int64_t v : strides) c->add_strides(v);
  for (int64_t v : p) c->add_pads(v);
  for (int64_t v : dil) c->add_dilations(v);
  c->set_groups(n.Int("group", 1));
  return true;
}

bool ConvAnchor(const Model& m, const Node& n, v1::Workload* w) {
  return ConvAnchorLike(m, n, w, false);
}
bool ConvTransposeAnchor(const Model& m, const Node& n, v1::Workload* w) {
  return ConvAnchorLike(m, n, w, true);
}

// Conv weight [K, C/groups, ...]: output channel c is row c.
void ScaleConvWeights(const Node& /*anchor*/, const Shape& /*wshape*/,
                      const std::vector<double>& scale, std::vector<float>* weight) {
  const int64_t channels = int64_t(scale.size());
  const int64_t per = int64_t(weight->size()) / channels;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t j = 0; j < per; ++j) {
      float& v = (*weight)[size_t(c * per + j)];
      v = float(v * scale[size_t(c)]);
    }
  }
}

// ConvTranspose weight [C_in, K/groups, ...]: output channel g*Kg+k.
void ScaleConvTransposeWeights(const Node& anchor, const Shape& wshape,
                               const std::vector<double>& scale, std::vector<float>* weight) {
  const int64_t groups = anchor.Int("group", 1);
  const int64_t kg = wshape[1], cin = wshape[0], cg = cin / groups;
  const int64_t spatial = int64_t(Elements(Shape(wshape.begin() + 2, wshape.end())));
  for (int64_t c = 0; c < int64_t(scale.size()); ++c) {
    const int64_t g = c / kg, kk = c % kg;
    for (int64_t ci = g * cg; ci < (g + 1) * cg; ++ci)
      for (int64_t j = 0; j < spatial; ++j) {
        float& v = (*weight)[size_t((ci * kg + kk) * spatial + j)];
        v = float(v * scale[size_t(c)]);
      }
  }
}

double ConvFlops(const Model& m, const Node& n) {
  const Shape& w = m.shapes.at(n.inputs[1]);
  const double per = 2 * Elements(Shape(w.begin() + 1, w.end()));
  return Elements(m.shapes.at(n.outputs[0])) * per;
}

double ConvTransposeFlops(const Model& m, const Node& n) {
  const Shape& w = m.shapes.at(n.inputs[1]);
  return 2 * Elements(m.shapes.at(n.inputs[0])) * Elements(Shape(w.begin() + 1, w.end()));
}

//===--- Pooling ----------------------------------------------------------===//

absl::Status InferPool(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  if (x.size() < 3)
    return c.Error(n, StrCat("input ", ShapeText(x), " has no spatial dimensions"));
  const size_t sp = x.size() - 2;
  std::vector<int64_t> k = n.Ints("kernel_shape"), strides = n.Ints("strides"),
                       pads = n.Ints("pads"), dil = n.Ints("dilations");
  if (k.size() != sp) return c.Error(n, "kernel_shape is missing or of the wrong length");
  if (strides.empty()) strides.assign(sp, 1);
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (dil.empty()) dil.assign(sp, 1);
  if (strides.size() != sp || pads.size() != 2 * sp || dil.size() != sp) {
    return c.Error(n, "strides, pads or dilations have the wrong length");
  }
  const bool ceil = n.Int("ceil_mode", 0) != 0;
  const std::string auto_pad = AutoPad(n);
  Shape out = {x[0], x[1]};
  for (size_t i = 0; i < sp; ++i) {
    if (strides[i] <= 0 || k[i] <= 0 || dil[i] <= 0)
      return c.Error(n, "non-positive kernel or stride");
    int64_t ek = (k[i] - 1) * dil[i] + 1;
    int64_t o;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      o = (x[2 + i] + strides[i] - 1) / strides[i];
    } else if (auto_pad == "VALID") {
      o = (x[2 + i] - ek) / strides[i] + 1;
    } else {
      o = ir::WindowOutput(x[2 + i], pads[i], pads[i + sp], k[i], strides[i], dil[i], ceil);
    }
    if (o <= 0) return c.Error(n, "the output would be empty");
    out.push_back(o);
  }
  // MaxPool's Indices: one per output value.
  if (n.op == "MaxPool") TF_RETURN_IF_ERROR(c.Set(n, 1, out));
  return c.Set(n, 0, out);
}

absl::Status InferGlobalPool(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  if (x.size() < 3)
    return c.Error(n, StrCat("input ", ShapeText(x), " has no spatial dimensions"));
  Shape out = {x[0], x[1]};
  out.resize(x.size(), 1);
  return c.Set(n, 0, out);
}

// 2-D pooling over NCHW as a kernel of its own: explicit pads (auto_pad
// NOTSET), no dilation, no MaxPool indices; global average pooling.
template <v1::PoolKind K>
bool PoolAlone(const Model& m, const Node& n, v1::Workload* w) {
  auto s = m.shapes.find(n.inputs[0]);
  if (s == m.shapes.end() || s->second.size() != 4) return false;
  if (n.outputs.size() != 1 || AutoPad(n) != "NOTSET") return false;
  v1::Pool2dAttrs* a = w->mutable_pool2d();
  a->set_kind(K);
  a->set_layout(v1::DATA_LAYOUT_NCHW);
  if (K != v1::POOL_KIND_GLOBAL_AVG) {
    std::vector<int64_t> k = n.Ints("kernel_shape"), strides = n.Ints("strides"),
                         pads = n.Ints("pads"), dil = n.Ints("dilations");
    if (k.size() != 2) return false;
    for (int64_t d : dil)
      if (d != 1) return false;
    if (strides.empty()) strides = {1, 1};
    if (pads.empty()) pads = {0, 0, 0, 0};
    if (strides.size() != 2 || pads.size() != 4) return false;
    for (int64_t v : k) a->add_kernel(v);
    for (int64_t v : strides) a->add_strides(v);
    // ONNX [h_begin, w_begin, h_end, w_end] is [top, left, bottom, right].
    for (int64_t v : pads) a->add_pads(v);
    a->set_ceil_mode(n.Int("ceil_mode", 0) != 0);
    a->set_count_include_pad(K == v1::POOL_KIND_AVG && n.Int("count_include_pad", 0) != 0);
  }
  w->set_op(v1::OP_KIND_POOL2D);
  *w->add_inputs() = FloatSpec(s->second);
  return true;
}

// GlobalMaxPool as a reduction: the max of each channel of each image,
// [N*C, H*W...] into [N*C] (the output's memory).
bool GlobalMaxPoolAlone(const Model& m, const Node& n, v1::Workload* w) {
  auto s = m.shapes.find(n.inputs[0]);
  if (s == m.shapes.end() || s->second.size() < 3 || n.outputs.size() != 1) return false;
  const int64_t rows = s->second[0] * s->second[1];
  w->set_op(v1::OP_KIND_REDUCE);
  *w->add_inputs() = FloatSpec({rows, int64_t(Elements(s->second)) / rows});
  w->mutable_reduce()->set_op(v1::REDUCE_OP_MAX);
  return true;
}

double PoolFlops(const Model& m, const Node& n) {
  double k = 1;
  for (int64_t d : n.Ints("kernel_shape")) k *= double(d);
  return Elements(m.shapes.at(n.outputs[0])) * k;
}

double GlobalPoolFlops(const Model& m, const Node& n) {
  return Elements(m.shapes.at(n.inputs[0]));
}

//===--- Gemm, MatMul -----------------------------------------------------===//

absl::Status InferGemm(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape a, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape b, c.In(n, 1));
  if (a.size() != 2 || b.size() != 2) return c.Error(n, "Gemm takes 2-D inputs");
  bool ta = n.Int("transA", 0), tb = n.Int("transB", 0);
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
  if (k != kb) return c.Error(n, StrCat("inner dimensions differ (", k, " vs ", kb, ")"));
  if (c.Has(n, 2)) {
    TF_ASSIGN_OR_RETURN(Shape bias, c.In(n, 2));
    TF_RETURN_IF_ERROR(c.Broadcast(n, {m, nn}, bias).status());
  }
  return c.Set(n, 0, {m, nn});
}

// Dense when B is a constant [N, K] (transB); otherwise a matmul. C must be
// a bias per output column added once (the bias epilogue).
bool GemmAnchor(const Model& m, const Node& n, v1::Workload* w) {
  if (n.Float("alpha", 1) != 1.0f) return false;
  const bool ta = n.Int("transA", 0), tb = n.Int("transB", 0);
  const Shape a = m.shapes.at(n.inputs[0]), b = m.shapes.at(n.inputs[1]);
  const bool b_const = m.constants.count(n.inputs[1]) > 0;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Shape& out = m.shapes.at(n.outputs[0]);
    if (!m.constants.count(n.inputs[2]) || n.Float("beta", 1) != 1.0f ||
        !PerChannel(m.shapes.at(n.inputs[2]), out, out.size() - 1))
      return false;
  }
  if (!ta && tb && b_const) {
    w->set_op(v1::OP_KIND_DENSE);
  } else {
    w->set_op(v1::OP_KIND_MATMUL);
    w->mutable_matmul()->set_transpose_a(ta);
    w->mutable_matmul()->set_transpose_b(tb);
  }
  *w->add_inputs() = FloatSpec(a);
  *w->add_inputs() = FloatSpec(b);
  return true;
}

absl::Status InferMatMul(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape a, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape b, c.In(n, 1));
  if (a.empty() || b.empty()) return c.Error(n, "MatMul of a scalar");
  Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a, b2 = b.size() == 1 ? Shape{b[0], 1} : b;
  if (a2.back() != b2[b2.size() - 2]) {
    return c.Error(n,
                   StrCat("inner dimensions differ (", ShapeText(a), " x ", ShapeText(b), ")"));
  }
  Shape ba(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2);
  TF_ASSIGN_OR_RETURN(Shape batch, c.Broadcast(n, ba, bb));
  Shape out = batch;
  if (a.size() > 1) out.push_back(a2[a2.size() - 2]);
  if (b.size() > 1) out.push_back(b2.back());
  return c.Set(n, 0, out);
}

// [..., M, K] x [K, N] as a matmul with the leading dimensions folded into
// M; equal batches as a batch matmul; broadcast batches are not tuned.
bool MatMulAnchor(const Model& m, const Node& n, v1::Workload* w) {
  Shape a = m.shapes.at(n.inputs[0]), b = m.shapes.at(n.inputs[1]);
  if (a.size() < 2 || b.size() < 2 || Elements(a) == 0 || Elements(b) == 0) return false;
  if (b.size() == 2) {
    Shape a2 = {int64_t(Elements(a) / double(a.back())), a.back()};
    w->set_op(v1::OP_KIND_MATMUL);
    *w->add_inputs() = FloatSpec(a2);
    *w->add_inputs() = FloatSpec(b);
    return true;
  }
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i + 2 < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  double batch = Elements(Shape(a.begin(), a.end() - 2));
  w->set_op(v1::OP_KIND_BATCH_MATMUL);
  *w->add_inputs() = FloatSpec({int64_t(batch), a[a.size() - 2], a.back()});
  *w->add_inputs() = FloatSpec({int64_t(batch), b[b.size() - 2], b.back()});
  return true;
}

double GemmFlops(const Model& m, const Node& n) {
  const Shape& a = m.shapes.at(n.inputs[0]);
  double k = n.Int("transA", 0) ? double(a[0]) : double(a.back());
  return 2 * Elements(m.shapes.at(n.outputs[0])) * k;
}

double MatMulFlops(const Model& m, const Node& n) {
  return 2 * Elements(m.shapes.at(n.outputs[0])) * double(m.shapes.at(n.inputs[0]).back());
}

//===--- Normalization, softmax -------------------------------------------===//

// Scale, bias, mean and variance (inputs 1-4): one value per channel.
absl::Status CheckPerChannel(ShapeContext& c, const Node& n, const Shape& x) {
  if (x.size() < 2) return c.Error(n, "input needs a channel dimension");
  for (size_t i = 1; i < n.inputs.size() && i < 5; ++i) {
    TF_ASSIGN_OR_RETURN(Shape p, c.In(n, i));
    if (Elements(p) != double(x[1])) {
      return c.Error(n, StrCat("parameter ", i, " has ", ShapeText(p), ", not ", x[1], " values"));
    }
  }
  return absl::OkStatus();
}

absl::Status InferBatchNorm(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_RETURN_IF_ERROR(CheckPerChannel(c, n, x));
  for (size_t o = 1; o < n.outputs.size(); ++o)
    if (!n.outputs[o].empty()) return c.Error(n, "training-mode outputs are not supported");
  return c.Set(n, 0, x);
}

absl::Status InferInstanceNorm(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_RETURN_IF_ERROR(CheckPerChannel(c, n, x));
  return c.Set(n, 0, x);
}

// Y has X's shape; Mean and InvStdDev X's, 1 from `axis` on.
absl::Status InferLayerNorm(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(int64_t axis, c.Axis(n, n.Int("axis", -1), x.size()));
  Shape stat = x;
  for (size_t d = size_t(axis); d < stat.size(); ++d) stat[d] = 1;
  for (size_t o = 1; o < n.outputs.size() && o < 3; ++o)
    if (!n.outputs[o].empty()) TF_RETURN_IF_ERROR(c.Set(n, o, stat));
  return c.Set(n, 0, x);
}

// LayerNormalization as a kernel of its own: [A, N] around `axis`, scale
// and bias of P elements that are the row's last dimensions (leading 1s
// aside), repeating along the row (the Mean and InvStdDev outputs, or a
// scale over other dimensions of the row, stay native).
bool LayerNormAlone(const Model& m, const Node& n, v1::Workload* w) {
  auto s = m.shapes.find(n.inputs[0]);
  if (s == m.shapes.end() || s->second.empty() || n.outputs.size() != 1) return false;
  const Shape& x = s->second;
  int64_t axis = n.Int("axis", -1);
  if (axis < 0) axis += int64_t(x.size());
  if (axis < 0 || axis >= int64_t(x.size())) return false;
  int64_t a = 1, len = 1;
  for (size_t d = 0; d < x.size(); ++d) (int64_t(d) < axis ? a : len) *= x[d];
  w->set_op(v1::OP_KIND_NORMALIZE);
  *w->add_inputs() = FloatSpec({a, len});
  for (size_t i = 1; i < n.inputs.size() && i < 3; ++i) {
    if (n.inputs[i].empty()) break;
    auto p = m.shapes.find(n.inputs[i]);
    if (p == m.shapes.end() || p->second.size() > x.size() - size_t(axis)) return false;
    Shape own = p->second;
    while (!own.empty() && own.front() == 1) own.erase(own.begin());
    if (!std::equal(own.begin(), own.end(), x.end() - std::ptrdiff_t(own.size()))) return false;
    *w->add_inputs() = FloatSpec({int64_t(Elements(own))});
  }
  if (w->inputs_size() < 2) return false;
  w->mutable_normalize()->set_epsilon(n.Float("epsilon", 1e-5f));
  return true;
}

// InstanceNormalization as a kernel of its own: each channel of each image
// a row of [N*C, H*W...], scale and bias per channel (repeating per image).
bool InstanceNormAlone(const Model& m, const Node& n, v1::Workload* w) {
  auto s = m.shapes.find(n.inputs[0]);
  if (s == m.shapes.end() || s->second.size() < 3 || n.inputs.size() != 3 || n.outputs.size() != 1)
    return false;
  const Shape& x = s->second;
  const int64_t c = x[1], rows = x[0] * c;
  w->set_op(v1::OP_KIND_NORMALIZE);
  *w->add_inputs() = FloatSpec({rows, int64_t(Elements(x)) / rows});
  *w->add_inputs() = FloatSpec({c});
  *w->add_inputs() = FloatSpec({c});
  w->mutable_normalize()->set_epsilon(n.Float("epsilon", 1e-5f));
  w->mutable_normalize()->set_per_row(true);
  return true;
}

// Softmax as a kernel of its own: [A, N, B] around the normalized axis
// (before opset 13 the input is coerced to 2-D at `axis`: B = 1).
template <bool kLog>
bool SoftmaxAlone(const Model& m, const Node& n, v1::Workload* w) {
  auto s = m.shapes.find(n.inputs[0]);
  if (s == m.shapes.end() || s->second.empty() || n.outputs.size() != 1) return false;
  const Shape& x = s->second;
  int64_t axis = n.Int("axis", graph::SoftmaxDefaultAxis(m.opset));
  if (axis < 0) axis += int64_t(x.size());
  if (axis < 0 || axis >= int64_t(x.size())) return false;
  int64_t a = 1, len = 1, b = 1;
  for (size_t d = 0; d < x.size(); ++d) {
    int64_t& f = int64_t(d) < axis ? a : int64_t(d) == axis || graph::SoftmaxCoercesTo2D(m.opset) ? len : b;
    f *= x[d];
  }
  w->set_op(v1::OP_KIND_SOFTMAX);
  *w->add_inputs() = FloatSpec(b > 1 ? Shape{a, len, b} : Shape{a, len});
  w->mutable_softmax()->set_log(kLog);
  return true;
}

absl::Status InferSoftmax(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_RETURN_IF_ERROR(c.Axis(n, n.Int("axis", -1), x.size()).status());
  return c.Set(n, 0, x);
}

// LRN: the input's shape, of rank >= 3 (channels second).
absl::Status InferLrn(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  if (x.size() < 3) return c.Error(n, StrCat("input ", ShapeText(x), " has no spatial dimensions"));
  if (n.Int("size", 0) < 1) return c.Error(n, "size must be at least 1");
  return c.Set(n, 0, x);
}

// QLinearConv and QLinearMatMul as their float operator between
// DequantizeLinear and QuantizeLinear: the 8-bit weights dequantize at
// import, the convolution or product is a float kernel, and the result
// saturates to the output zero point's type. QLinearConv's int32 bias
// (scale x_scale * w_scale, zero point 0) becomes a float constant.
absl::StatusOr<std::vector<Node>> ExpandQLinear(Model* m, const Node& n) {
  const bool conv = n.op == "QLinearConv";
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(StrCat(n.op, " node '", n.name, "': ", what));
  };
  auto has = [&](size_t i) { return i < n.inputs.size() && !n.inputs[i].empty(); };
  for (size_t i = 0; i < 8; ++i) {
    if (!has(i) && i != 2 && i != 5 && i != 7) return error(StrCat("input ", i, " is missing"));
  }
  if (n.outputs.empty()) return error("has no output");
  const std::string base = StrCat(n.outputs[0], "/", n.op);
  auto make = [&](const std::string& op, std::vector<std::string> in, std::string out) {
    return ExpandedNode(n, op, std::move(in), std::move(out));
  };
  auto shape = m->shapes.find(n.inputs[3]);
  auto wscale = m->constants.find(n.inputs[4]);
  const bool per_channel = wscale == m->constants.end() || ValueCount(wscale->second) != 1;
  std::vector<Node> nodes;
  nodes.push_back(make("DequantizeLinear", {n.inputs[0], n.inputs[1], has(2) ? n.inputs[2] : ""},
                       base + "_x"));
  nodes.push_back(make("DequantizeLinear", {n.inputs[3], n.inputs[4], has(5) ? n.inputs[5] : ""},
                       base + "_w"));
  // Per output channel: axis 0 of a convolution's weight, the last axis
  // (columns) of a product's right operand.
  if (per_channel) {
    const int64_t rank = shape != m->shapes.end() ? int64_t(shape->second.size()) : 2;
    nodes.back().ints["axis"] = {conv ? 0 : rank - 1};
  }
  Node op = make(conv ? "Conv" : "MatMul", {base + "_x", base + "_w"}, base + "_y");
  if (conv) {
    op.ints = n.ints;
    op.ints.erase("output_dtype");
    op.strings = n.strings;
    op.floats = n.floats;
    if (has(8)) {
      auto bias = m->constants.find(n.inputs[8]);
      auto xscale = m->constants.find(n.inputs[1]);
      if (bias == m->constants.end() || xscale == m->constants.end() ||
          wscale == m->constants.end() || ValueCount(xscale->second) != 1)
        return error("the bias and the input and weight scales must be constants");
      const int64_t count = ValueCount(bias->second), scales = ValueCount(wscale->second);
      if (scales != 1 && scales != count) return error("the bias and the weight scales differ in length");
      Constant b;
      b.shape = {count};
      for (int64_t c = 0; c < count; ++c) {
        b.floats.push_back(float(ConstValue(bias->second, c) * ConstValue(xscale->second, 0) *
                                 ConstValue(wscale->second, scales == 1 ? 0 : c)));
      }
      op.inputs.push_back(AddConstant(m, base + "_bias", std::move(b)));
    }
  }
  nodes.push_back(std::move(op));
  nodes.push_back(make("QuantizeLinear", {base + "_y", n.inputs[6], has(7) ? n.inputs[7] : ""},
                       n.outputs[0]));
  if (auto dtype = n.ints.find("output_dtype"); dtype != n.ints.end())
    nodes.back().ints["output_dtype"] = dtype->second;
  return nodes;
}

// RNN, GRU, LSTM: X [steps, batch, input] ([batch, steps, input] with
// layout 1) and W [directions, gates * hidden, input] give Y [steps,
// directions, batch, hidden] ([batch, steps, directions, hidden]) and the
// last hidden (and, LSTM, cell) state [directions, batch, hidden]
// ([batch, directions, hidden]).
absl::Status InferRecurrent(ShapeContext& c, const Node& n) {
  TF_ASSIGN_OR_RETURN(Shape x, c.In(n, 0));
  TF_ASSIGN_OR_RETURN(Shape w, c.In(n, 1));
  const int64_t gates = n.op == "LSTM" ? 4 : n.op == "GRU" ? 3 : 1;
  const int64_t hidden = n.Int("hidden_size", 0);
  auto dir = n.strings.find("direction");
  const std::string direction = dir == n.strings.end() ? "forward" : dir->second;
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return c.Error(n, StrCat("direction '", direction, "' is unknown"));
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (x.size() != 3 || hidden < 1 || w != Shape{dirs, gates * hidden, x[2]})
    return c.Error(n, StrCat("input ", ShapeText(x), ", weights ", ShapeText(w),
                             " and hidden_size ", hidden, " do not fit"));
  if (n.Int("input_forget", 0) != 0) return c.Error(n, "input_forget is not supported");
  const bool batch_first = n.Int("layout", 0) != 0;
  const int64_t steps = batch_first ? x[1] : x[0], batch = batch_first ? x[0] : x[1];
  const Shape state = batch_first ? Shape{batch, dirs, hidden} : Shape{dirs, batch, hidden};
  if (c.Has(n, 4) && c.Const(n, 4) == nullptr)
    return c.Error(n, "sequence_lens must be a constant once input shapes are fixed");
  TF_RETURN_IF_ERROR(c.Set(n, 0, batch_first ? Shape{batch, steps, dirs, hidden}
                                             : Shape{steps, dirs, batch, hidden}));
  for (size_t k = 1; k < n.outputs.size() && k < (n.op == "LSTM" ? 3u : 2u); ++k)
    TF_RETURN_IF_ERROR(c.Set(n, k, state));
  return absl::OkStatus();
}

}  // namespace

const std::vector<OpDef>& NnOps() {
  static const auto* ops = new std::vector<OpDef>{
      {.name = "LRN", .infer = InferLrn},
      {.name = "RNN", .min_opset = 7, .infer = InferRecurrent},
      {.name = "GRU", .min_opset = 7, .infer = InferRecurrent},
      {.name = "LSTM", .min_opset = 7, .infer = InferRecurrent},
      {.name = "QLinearConv", .min_opset = 10, .expand = ExpandQLinear, .native = false},
      {.name = "QLinearMatMul", .min_opset = 10, .expand = ExpandQLinear, .native = false},
      {.name = "Conv",
       .infer = InferConv,
       .fusion = FusionRole::kAnchor,
       .anchor = ConvAnchor,
       .bias_input = 2,
       .channel_axis = 1,
       .scale_weights = ScaleConvWeights,
       .flops = ConvFlops},
      // Products of 8-bit operands less their zero points, summed in 32-bit
      // integers (dynamically quantized models); the float operator's shapes.
      {.name = "ConvInteger", .min_opset = 10, .infer = InferConv},
      {.name = "MatMulInteger", .min_opset = 10, .infer = InferMatMul},
      {.name = "ConvTranspose",
       .infer = InferConvTranspose,
       .fusion = FusionRole::kAnchor,
       .anchor = ConvTransposeAnchor,
       .bias_input = 2,
       .channel_axis = 1,
       .scale_weights = ScaleConvTransposeWeights,
       .flops = ConvTransposeFlops},
      {.name = "Gemm",
       .infer = InferGemm,
       .fusion = FusionRole::kAnchor,
       .anchor = GemmAnchor,
       .bias_input = 2,
       .flops = GemmFlops},
      {.name = "MatMul",
       .infer = InferMatMul,
       .fusion = FusionRole::kAnchor,
       .anchor = MatMulAnchor,
       .flops = MatMulFlops},
      {.name = "MaxPool",
       .infer = InferPool,
       .alone = PoolAlone<v1::POOL_KIND_MAX>,
       .flops = PoolFlops},
      {.name = "AveragePool",
       .infer = InferPool,
       .alone = PoolAlone<v1::POOL_KIND_AVG>,
       .flops = PoolFlops},
      {.name = "GlobalAveragePool",
       .min_opset = 1,
       .infer = InferGlobalPool,
       .alone = PoolAlone<v1::POOL_KIND_GLOBAL_AVG>,
       .flops = GlobalPoolFlops},
      {.name = "GlobalMaxPool",
       .min_opset = 1,
       .infer = InferGlobalPool,
       .alone = GlobalMaxPoolAlone,
       .flops = GlobalPoolFlops},
      {.name = "BatchNormalization", .infer = InferBatchNorm, .fusion = FusionRole::kAffine},
      {.name = "InstanceNormalization", .infer = InferInstanceNorm, .alone = InstanceNormAlone},
      {.name = "LayerNormalization",
       .min_opset = 17,
       .infer = InferLayerNorm,
       .alone = LayerNormAlone},
      {.name = "Softmax", .infer = InferSoftmax, .alone = SoftmaxAlone<false>},
      {.name = "LogSoftmax", .infer = InferSoftmax, .alone = SoftmaxAlone<true>},
  };
  return *ops;
}

}  // namespace tunefarm::frontend
