#include "compiler/ir/workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "compiler/ir/expr.h"
#include "compiler/ir/map_program.h"
#include "google/protobuf/util/json_util.h"
#include "proto/kernel_signature.h"

namespace tunefarm::ir {
namespace {

using absl::InvalidArgumentError;
using absl::StrAppend;
using absl::StrCat;

// Strides, pads, dilations and kernel sizes beyond this are refused.
constexpr int64_t kMaxAttr = int64_t{1} << 20;
// Tensors beyond this many elements are refused, so no shape arithmetic overflows.
constexpr double kMaxElements = double(int64_t{1} << 40);

double Product(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t d : shape) n *= double(d);
  return n;
}

std::vector<int64_t> ShapeOf(const v1::TensorSpec& t) {
  return std::vector<int64_t>(t.shape().begin(), t.shape().end());
}

absl::Status CheckRank(const v1::Workload& w, int input, int rank, const char* what) {
  if (w.inputs_size() <= input) {
    return InvalidArgumentError(StrCat(OpName(w.op()), ": missing inputs[", input, "] (", what, ")"));
  }
  const auto& shape = w.inputs(input).shape();
  if (shape.size() != rank) {
    return InvalidArgumentError(StrCat(OpName(w.op()), ": inputs[", input, "] (", what,
                                       ") must have rank ", rank, ", got ", shape.size()));
  }
  return absl::OkStatus();
}

// Fills an omitted pair/quad attribute with `fill`; rejects other lengths.
absl::Status DefaultList(google::protobuf::RepeatedField<int64_t>* list, int n, int64_t fill,
                         int64_t min_value, const std::string& field) {
  if (list->empty()) {
    for (int i = 0; i < n; ++i) list->Add(fill);
  }
  if (list->size() != n) {
    return InvalidArgumentError(StrCat(field, " must have ", n, " values, got ", list->size()));
  }
  for (int64_t v : *list) {
    if (v < min_value || v > kMaxAttr) {
      return InvalidArgumentError(
          StrCat(field, " value ", v, " is outside [", min_value, ", ", kMaxAttr, "]"));
    }
  }
  return absl::OkStatus();
}


absl::StatusOr<double> CanonConv2d(v1::Workload* w, std::vector<int64_t>* out) {
  if (!w->has_conv2d()) w->mutable_conv2d();
  auto* a = w->mutable_conv2d();
  if (!v1::DataLayout_IsValid(a->layout())) return InvalidArgumentError("conv2d.layout is unknown");
  if (a->layout() == v1::DATA_LAYOUT_UNSPECIFIED) a->set_layout(v1::DATA_LAYOUT_NCHW);
  TF_RETURN_IF_ERROR(DefaultList(a->mutable_strides(), 2, 1, 1, "conv2d.strides"));
  TF_RETURN_IF_ERROR(DefaultList(a->mutable_pads(), 4, 0, 0, "conv2d.pads"));
  TF_RETURN_IF_ERROR(DefaultList(a->mutable_dilations(), 2, 1, 1, "conv2d.dilations"));
  if (a->groups() == 0) a->set_groups(1);
  if (a->groups() < 0 || a->groups() > kMaxAttr) {
    return InvalidArgumentError(StrCat("conv2d.groups ", a->groups(), " is out of range"));
  }
  TF_RETURN_IF_ERROR(CheckRank(*w, 0, 4, "data"));
  TF_RETURN_IF_ERROR(CheckRank(*w, 1, 4, "weight"));
  std::vector<int64_t> d = ShapeOf(w->inputs(0)), k = ShapeOf(w->inputs(1));
  bool nchw = a->layout() == v1::DATA_LAYOUT_NCHW;
  bool transpose = w->op() == v1::OP_KIND_CONV2D_TRANSPOSE;
  if (transpose && !nchw) {
    // NHWC: the upsampling form alone (kernel = stride, no padding, no
    // dilation, one group), whose output pixel takes one input pixel.
    if (a->groups() != 1 || a->strides(0) != k[0] || a->strides(1) != k[1] ||
        a->dilations(0) != 1 || a->dilations(1) != 1 ||
        std::any_of(a->pads().begin(), a->pads().end(), [](int64_t v) { return v != 0; })) {
      return InvalidArgumentError(
          "conv2d_transpose in NHWC needs kernel = stride, no padding, dilation 1 and one group");
    }
  }
  int64_t n = d[0], c = nchw ? d[1] : d[3], h = nchw ? d[2] : d[1], wd = nchw ? d[3] : d[2];
  // Weights: OIHW for NCHW, HWIO for NHWC, IOHW (C, K/groups, R, S) for an
  // NCHW transpose, RSCK (R, S, C, K) for an NHWC one.
  int64_t kk, kc, r, s;
  if (transpose && !nchw) {
    r = k[0], s = k[1], kc = k[2], kk = k[3];
  } else if (transpose) {
    kc = k[0], kk = k[1] * a->groups(), r = k[2], s = k[3];
  } else if (nchw) {
    kk = k[0], kc = k[1], r = k[2], s = k[3];
  } else {
    r = k[0], s = k[1], kc = k[2], kk = k[3];
  }
  if (a->winograd() != 0) {
    if (a->winograd() != 2) {
      return InvalidArgumentError(
          StrCat("conv2d.winograd ", a->winograd(), " is not a tile Winograd is built for (2)"));
    }
    if (transpose || nchw || a->groups() != 1 || a->strides(0) != 1 || a->strides(1) != 1 ||
        a->dilations(0) != 1 || a->dilations(1) != 1) {
      return InvalidArgumentError("conv2d.winograd needs NHWC, stride 1, dilation 1 and one group");
    }
    if (r != 4 || s != 4) {
      return InvalidArgumentError(
          StrCat("conv2d.winograd 2 takes the transformed weight [4, 4, C, K], got ", r, "x", s,
                 " windows"));
    }
    r = s = 3;  // the window the transformed weight stands for
  }
  int64_t g = a->groups();
  if (c % g != 0 || kk % g != 0) {
    return InvalidArgumentError(
        StrCat("conv2d.groups ", g, " must divide input channels ", c, " and output channels ", kk));
  }
  if (!transpose && kc != c / g) {
    return InvalidArgumentError(StrCat("conv2d weight has ", kc, " input channels per group, data ",
                                       "has ", c, " channels in ", g, " groups"));
  }
  if (transpose && kc != c) {
    return InvalidArgumentError(
        StrCat("conv2d_transpose weight has ", kc, " input channels, data has ", c));
  }
  const auto& st = a->strides();
  const auto& p = a->pads();
  const auto& dl = a->dilations();
  int64_t oh, ow;
  if (transpose) {
    oh = (h - 1) * st[0] - p[0] - p[2] + dl[0] * (r - 1) + 1;
    ow = (wd - 1) * st[1] - p[1] - p[3] + dl[1] * (s - 1) + 1;
  } else {
    oh = WindowOutput(h, p[0], p[2], r, st[0], dl[0]);
    ow = WindowOutput(wd, p[1], p[3], s, st[1], dl[1]);
  }
  if (oh <= 0 || ow <= 0) {
    return InvalidArgumentError(StrCat("conv2d output would be empty (", oh, "x", ow,
                                       "): kernel larger than padded input"));
  }
  *out = nchw ? std::vector<int64_t>{n, kk, oh, ow} : std::vector<int64_t>{n, oh, ow, kk};
  double macs = transpose ? double(n) * c * h * wd * (kk / g) * r * s
                          : double(n) * kk * oh * ow * (c / g) * r * s;
  return 2.0 * macs;
}

absl::StatusOr<double> CanonMatmul(v1::Workload* w, std::vector<int64_t>* out) {
  const bool batch = w->op() == v1::OP_KIND_BATCH_MATMUL;
  const bool dense = w->op() == v1::OP_KIND_DENSE;
  if (!w->has_matmul()) w->mutable_matmul();
  if (dense && (w->matmul().transpose_a() || w->matmul().transpose_b())) {
    // dense is matmul(data, weight^T) by definition.
    return InvalidArgumentError("dense takes no transpose attributes (weight is [N,K])");
  }
  int rank = batch ? 3 : 2;
  TF_RETURN_IF_ERROR(CheckRank(*w, 0, rank, "a"));
  TF_RETURN_IF_ERROR(CheckRank(*w, 1, rank, "b"));
  std::vector<int64_t> a = ShapeOf(w->inputs(0)), b = ShapeOf(w->inputs(1));
  int o = batch ? 1 : 0;
  bool ta = w->matmul().transpose_a(), tb = dense || w->matmul().transpose_b();
  int64_t m = ta ? a[o + 1] : a[o], ka = ta ? a[o] : a[o + 1];
  int64_t kb = tb ? b[o + 1] : b[o], n = tb ? b[o] : b[o + 1];
  if (ka != kb) {
    return InvalidArgumentError(
        StrCat(OpName(w->op()), ": reduction extents differ (", ka, " vs ", kb, ")"));
  }
  int64_t bs = 1;
  if (batch) {
    if (a[0] != b[0] && a[0] != 1 && b[0] != 1) {
      return InvalidArgumentError(
          StrCat("batch_matmul: batch sizes ", a[0], " and ", b[0], " do not broadcast"));
    }
    bs = std::max(a[0], b[0]);
    *out = {bs, m, n};
  } else {
    *out = {m, n};
  }
  return 2.0 * bs * m * n * ka;
}

absl::StatusOr<double> CanonPool(v1::Workload* w, std::vector<int64_t>* out) {
  if (!w->has_pool2d()) return InvalidArgumentError("pool2d: missing pool2d attributes");
  auto* a = w->mutable_pool2d();
  if (a->kind() == v1::POOL_KIND_UNSPECIFIED || !v1::PoolKind_IsValid(a->kind())) {
    return InvalidArgumentError("pool2d.kind is unset or unknown");
  }
  if (!v1::DataLayout_IsValid(a->layout())) return InvalidArgumentError("pool2d.layout is unknown");
  if (a->layout() == v1::DATA_LAYOUT_UNSPECIFIED) a->set_layout(v1::DATA_LAYOUT_NCHW);
  TF_RETURN_IF_ERROR(CheckRank(*w, 0, 4, "data"));
  std::vector<int64_t> d = ShapeOf(w->inputs(0));
  bool nchw = a->layout() == v1::DATA_LAYOUT_NCHW;
  int64_t n = d[0], c = nchw ? d[1] : d[3], h = nchw ? d[2] : d[1], wd = nchw ? d[3] : d[2];
  if (a->kind() == v1::POOL_KIND_GLOBAL_AVG) {
    if (!a->kernel().empty() || !a->strides().empty() || !a->pads().empty()) {
      return InvalidArgumentError("pool2d: global pooling takes no kernel, strides or pads");
    }
    *out = nchw ? std::vector<int64_t>{n, c, 1, 1} : std::vector<int64_t>{n, 1, 1, c};
    return double(n) * c * h * wd;
  }
  if (a->kernel().empty()) return InvalidArgumentError("pool2d.kernel is required ([h, w])");
  TF_RETURN_IF_ERROR(DefaultList(a->mutable_kernel(), 2, 0, 1, "pool2d.kernel"));
  TF_RETURN_IF_ERROR(DefaultList(a->mutable_strides(), 2, 1, 1, "pool2d.strides"));
  TF_RETURN_IF_ERROR(DefaultList(a->mutable_pads(), 4, 0, 0, "pool2d.pads"));
  const auto& k = a->kernel();
  const auto& p = a->pads();
  int64_t oh = WindowOutput(h, p[0], p[2], k[0], a->strides(0), 1, a->ceil_mode());
  int64_t ow = WindowOutput(wd, p[1], p[3], k[1], a->strides(1), 1, a->ceil_mode());
  if (oh <= 0 || ow <= 0) return InvalidArgumentError("pool2d output would be empty");
  *out = nchw ? std::vector<int64_t>{n, c, oh, ow} : std::vector<int64_t>{n, oh, ow, c};
  return Product(*out) * k[0] * k[1];
}

absl::StatusOr<double> CanonElementwise(v1::Workload* w, std::vector<int64_t>* out) {
  if (!w->has_elementwise() || w->elementwise().kind() == v1::ELEMENTWISE_KIND_UNSPECIFIED ||
      !v1::ElementwiseKind_IsValid(w->elementwise().kind())) {
    return InvalidArgumentError("elementwise.kind is unset or unknown");
  }
  v1::ElementwiseKind kind = w->elementwise().kind();
  bool binary = kind == v1::ELEMENTWISE_KIND_ADD || kind == v1::ELEMENTWISE_KIND_SUB ||
                kind == v1::ELEMENTWISE_KIND_MUL || kind == v1::ELEMENTWISE_KIND_DIV;
  int want = binary ? 2 : 1;
  if (w->inputs_size() != want) {
    return InvalidArgumentError(StrCat("elementwise: expected ", want, " inputs, got ",
                                       w->inputs_size()));
  }
  if (kind == v1::ELEMENTWISE_KIND_CLIP && !(w->elementwise().min() <= w->elementwise().max())) {
    return InvalidArgumentError("elementwise clip: min > max");
  }
  std::vector<int64_t> shape = ShapeOf(w->inputs(0));
  if (binary) {
    // Numpy broadcasting, aligned at the innermost dimension.
    std::vector<int64_t> b = ShapeOf(w->inputs(1));
    size_t rank = std::max(shape.size(), b.size());
    std::vector<int64_t> r(rank);
    for (size_t i = 0; i < rank; ++i) {
      int64_t x = i < rank - shape.size() ? 1 : shape[i - (rank - shape.size())];
      int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
      if (x != y && x != 1 && y != 1) {
        return InvalidArgumentError(StrCat("elementwise: shapes do not broadcast at dimension ", i,
                                           " (", x, " vs ", y, ")"));
      }
      r[i] = std::max(x, y);
    }
    shape = r;
  }
  *out = shape;
  return Product(shape);
}

// A data mover: the output shape is given; every index map names an output
// dimension and divides by a positive number, and its terms stay below 2^31
// over the output; each map is reduced by the gcd of its terms (and a
// constant map to its value), so maps that differ by a common factor are
// equal messages. One "operation" per output element.
absl::StatusOr<double> CanonRearrange(v1::Workload* w, std::vector<int64_t>* out) {
  v1::RearrangeAttrs* a = w->mutable_rearrange();
  if (a->out_shape().empty() || a->out_shape_size() > 8)
    return InvalidArgumentError("rearrange: out_shape must have 1 to 8 dimensions");
  for (int64_t d : a->out_shape()) {
    if (d <= 0 || d > (int64_t{1} << 31))
      return InvalidArgumentError(StrCat("rearrange: out_shape has dimension ", d));
  }
  if (w->inputs_size() > 64) return InvalidArgumentError("rearrange: more than 64 inputs");
  int want = 0;
  for (const v1::TensorSpec& t : w->inputs()) want += t.shape_size();
  if (a->index_size() != want) {
    return InvalidArgumentError(StrCat("rearrange: ", a->index_size(),
                                       " index maps for inputs with ", want, " dimensions"));
  }
  constexpr int64_t kLimit = int64_t{1} << 31;
  for (int i = 0; i < a->index_size(); ++i) {
    v1::RearrangeIndex* x = a->mutable_index(i);
    if (x->div() <= 0 || x->div() > kLimit || x->mul() < -kLimit || x->mul() > kLimit ||
        x->add() < -kLimit || x->add() > kLimit) {
      return InvalidArgumentError(StrCat("rearrange: index[", i, "] has div ", x->div(), ", mul ",
                                         x->mul(), ", add ", x->add(),
                                         " (div must be positive; each at most 2^31)"));
    }
    if (x->mul() == 0) {
      x->set_source(0);
      if (a->linear()) {  // a real coordinate: add / div in lowest terms
        const int64_t g = std::gcd(x->add(), x->div());
        x->set_add(x->add() / g);
        x->set_div(x->div() / g);
        continue;
      }
      x->set_add(FloorDivInt(x->add(), x->div()));
      x->set_div(1);
      continue;
    }
    if (x->source() < 0 || x->source() >= a->out_shape_size()) {
      return InvalidArgumentError(StrCat("rearrange: index[", i, "] reads output dimension ",
                                         x->source(), " of ", a->out_shape_size()));
    }
    // Every intermediate value fits 32 bits (GPU kernels index with int).
    const int64_t span = std::abs(x->mul()) * (a->out_shape(int(x->source())) - 1);
    if (span + std::abs(x->add()) >= kLimit) {
      return InvalidArgumentError(StrCat("rearrange: index[", i, "] reaches ", span, " + ",
                                         std::abs(x->add()), " (at most 2^31 - 1)"));
    }
    const int64_t g = std::gcd(std::gcd(x->mul(), x->add()), x->div());
    if (g > 1) {
      x->set_mul(x->mul() / g);
      x->set_add(x->add() / g);
      x->set_div(x->div() / g);
    }
  }
  out->assign(a->out_shape().begin(), a->out_shape().end());
  if (!a->linear()) return Product(*out);
  if (w->inputs_size() != 1)
    return InvalidArgumentError(StrCat("rearrange: linear takes 1 input, got ", w->inputs_size()));
  a->set_fill(0);
  int interpolated = 0;
  for (const v1::RearrangeIndex& x : a->index()) interpolated += x.div() > 1;
  if (interpolated > 3) {
    return InvalidArgumentError(
        StrCat("rearrange: linear interpolates along ", interpolated, " dimensions (at most 3)"));
  }
  // 2^k reads, each weighted (k multiplies), and the sum
  return double(3 << interpolated) * Product(*out);
}

// Softmax over N of [A, N] or [A, N, B] (B > 1; a trailing 1 is dropped).
absl::StatusOr<double> CanonSoftmax(v1::Workload* w, std::vector<int64_t>* out) {
  if (w->inputs_size() != 1)
    return InvalidArgumentError(StrCat("softmax: expected 1 input, got ", w->inputs_size()));
  auto* shape = w->mutable_inputs(0)->mutable_shape();
  if (shape->size() == 3 && shape->Get(2) == 1) shape->RemoveLast();
  if (shape->size() != 2 && shape->size() != 3) {
    return InvalidArgumentError(
        StrCat("softmax: inputs[0] must be [A, N] or [A, N, B], got rank ", shape->size()));
  }
  *out = ShapeOf(w->inputs(0));
  // max, subtract, exp (3), sum, divide
  return 7 * Product(*out);
}

// A reduction over N of [A, N] or [A, N, B] (B > 1; a trailing 1 is
// dropped) into [A] or [A, B].
absl::StatusOr<double> CanonReduce(v1::Workload* w, std::vector<int64_t>* out) {
  if (w->inputs_size() != 1)
    return InvalidArgumentError(StrCat("reduce: expected 1 input, got ", w->inputs_size()));
  const v1::ReduceOp op = w->reduce().op();
  if (!v1::ReduceOp_IsValid(op) || op == v1::REDUCE_OP_UNSPECIFIED)
    return InvalidArgumentError(StrCat("reduce: op is unset or unknown (", int(op), ")"));
  auto* shape = w->mutable_inputs(0)->mutable_shape();
  if (shape->size() == 3 && shape->Get(2) == 1) shape->RemoveLast();
  if (shape->size() != 2 && shape->size() != 3) {
    return InvalidArgumentError(
        StrCat("reduce: inputs[0] must be [A, N] or [A, N, B], got rank ", shape->size()));
  }
  const std::vector<int64_t> in = ShapeOf(w->inputs(0));
  *out = {in[0]};
  if (in.size() == 3) out->push_back(in[2]);
  // the element's function (up to 2, with log_sum_exp's max pass) and the sum or max
  const bool two = op == v1::REDUCE_OP_LOG_SUM_EXP;
  const bool fn = op != v1::REDUCE_OP_SUM && op != v1::REDUCE_OP_MAX && op != v1::REDUCE_OP_MEAN &&
                  op != v1::REDUCE_OP_LOG_SUM && op != v1::REDUCE_OP_PROD;
  return (1 + (fn ? 1 : 0) + (two ? 2 : 0)) * Product(in);
}

// A normalization of x [A, N]'s rows, with scale and an optional bias of
// P elements, P a divisor of A (per_row) or N, each written flat.
absl::StatusOr<double> CanonNormalize(v1::Workload* w, std::vector<int64_t>* out) {
  if (w->inputs_size() != 2 && w->inputs_size() != 3) {
    return InvalidArgumentError(StrCat("normalize: expected data, scale and an optional bias, got ",
                                       w->inputs_size(), " inputs"));
  }
  // Set, and -0 written as 0, so one workload has one key.
  v1::NormalizeAttrs* attrs = w->mutable_normalize();
  const float eps = attrs->epsilon();
  if (!(eps >= 0) || !std::isfinite(eps))
    return InvalidArgumentError(StrCat("normalize: epsilon must be finite and >= 0, got ", eps));
  if (eps == 0) attrs->set_epsilon(0);
  if (w->inputs(0).shape_size() != 2) {
    return InvalidArgumentError(
        StrCat("normalize: inputs[0] must be [A, N], got rank ", w->inputs(0).shape_size()));
  }
  const std::vector<int64_t> x = ShapeOf(w->inputs(0));
  const int64_t count = w->normalize().per_row() ? x[0] : x[1];
  const double want = Product(ShapeOf(w->inputs(1)));
  for (int i = 1; i < w->inputs_size(); ++i) {
    auto* t = w->mutable_inputs(i);
    const double p = Product(ShapeOf(*t));
    if (p != want || p < 1 || std::fmod(double(count), p) != 0) {
      return InvalidArgumentError(StrCat(
          "normalize: inputs[", i, "] must have as many elements as the scale, a divisor of ",
          count, " (", w->normalize().per_row() ? "A" : "N", "), got ", p));
    }
    t->clear_shape();
    t->add_shape(int64_t(want));
  }
  *out = x;
  // sum, subtract and square, sum; subtract, scale (2), add
  return 7 * Product(x);
}

double EpilogueFlopsPerElement(const v1::Epilogue& e) {
  switch (e.kind()) {
    case v1::EPILOGUE_KIND_SIGMOID: return 3;
    case v1::EPILOGUE_KIND_SILU:
    case v1::EPILOGUE_KIND_HARDSWISH: return 4;
    case v1::EPILOGUE_KIND_RELU6:
    case v1::EPILOGUE_KIND_CLIP:
    case v1::EPILOGUE_KIND_LEAKY_RELU: return 2;
    default: return 1;
  }
}

}  // namespace

int64_t WindowOutput(int64_t in, int64_t pad_lo, int64_t pad_hi, int64_t kernel, int64_t stride,
                     int64_t dilation, bool ceil_mode) {
  const int64_t span = in + pad_lo + pad_hi - dilation * (kernel - 1) - 1;
  if (span < 0 || stride <= 0) return 0;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil_mode && out > 1 && (out - 1) * stride >= in + pad_lo) --out;
  return out;
}

int64_t RearrangeIndexAt(const v1::RearrangeIndex& m, int64_t o) {
  if (m.mul() == 0) return m.add();
  return FloorDivInt(m.mul() * o + m.add(), m.div());
}

std::string OpName(v1::OpKind op) {
  switch (op) {
    case v1::OP_KIND_CONV2D: return "conv2d";
    case v1::OP_KIND_DENSE: return "dense";
    case v1::OP_KIND_MATMUL: return "matmul";
    case v1::OP_KIND_BATCH_MATMUL: return "batch_matmul";
    case v1::OP_KIND_POOL2D: return "pool2d";
    case v1::OP_KIND_ELEMENTWISE: return "elementwise";
    case v1::OP_KIND_CONV2D_TRANSPOSE: return "conv2d_transpose";
    case v1::OP_KIND_SOFTMAX:
      return "softmax";
    case v1::OP_KIND_REARRANGE:
      return "rearrange";
    case v1::OP_KIND_REDUCE:
      return "reduce";
    case v1::OP_KIND_NORMALIZE:
      return "normalize";
    default: return "unknown";
  }
}

absl::StatusOr<v1::DType> WorkloadDType(const v1::Workload& w) {
  const v1::DType want = w.inputs(0).dtype();
  auto check = [&](v1::DType d, const std::string& what) -> absl::Status {
    if (d != v1::DTYPE_FLOAT32 && d != v1::DTYPE_FLOAT16 && d != v1::DTYPE_BFLOAT16) {
      return absl::UnimplementedError(
          StrCat(what, " has dtype ", v1::DType_Name(d),
                 ", not supported (float32, float16 and bfloat16 are)"));
    }
    if (d != want) {
      return absl::UnimplementedError(StrCat(what, " is ", v1::DType_Name(d), " and inputs[0] ",
                                             v1::DType_Name(want),
                                             ": mixed dtypes are not supported"));
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < w.inputs_size(); ++i) {
    TF_RETURN_IF_ERROR(check(w.inputs(i).dtype(), StrCat("inputs[", i, "]")));
  }
  for (const v1::Epilogue& e : w.epilogue()) {
    for (const v1::TensorSpec& t : e.map_inputs()) {
      if (t.dtype() != v1::DTYPE_UNSPECIFIED) TF_RETURN_IF_ERROR(check(t.dtype(), "a map input"));
    }
  }
  TF_RETURN_IF_ERROR(check(w.out_dtype(), "the output"));
  return want;
}

absl::StatusOr<CanonicalWorkload> WithDType(const v1::Workload& w, v1::DType dtype) {
  v1::Workload t = w;
  for (v1::TensorSpec& in : *t.mutable_inputs()) in.set_dtype(dtype);
  for (v1::Epilogue& e : *t.mutable_epilogue())
    for (v1::TensorSpec& m : *e.mutable_map_inputs()) m.set_dtype(dtype);
  t.set_out_dtype(dtype);
  return Canonicalize(t);
}

absl::StatusOr<CanonicalWorkload> Canonicalize(const v1::Workload& workload) {
  CanonicalWorkload c;
  c.workload = workload;
  v1::Workload* w = &c.workload;
  if (!v1::OpKind_IsValid(w->op()) || w->op() == v1::OP_KIND_UNSPECIFIED) {
    return InvalidArgumentError(StrCat("workload.op is unset or unknown (", w->op(), ")"));
  }
  if (w->inputs_size() == 0) return InvalidArgumentError("workload has no inputs");
  for (int i = 0; i < w->inputs_size(); ++i) {
    auto* t = w->mutable_inputs(i);
    if (t->shape().empty()) return InvalidArgumentError(StrCat("inputs[", i, "] has no shape"));
    for (int64_t d : t->shape()) {
      if (d <= 0 || d > (int64_t{1} << 31)) {
        return InvalidArgumentError(StrCat("inputs[", i, "] has dimension ", d));
      }
    }
    double elems = Product(ShapeOf(*t));
    if (t->shape_size() > 8 || elems > kMaxElements) {
      return InvalidArgumentError(StrCat("inputs[", i, "] is too large (rank ", t->shape_size(),
                                         ", ", elems, " elements; limits 8 and 2^40)"));
    }
    if (t->dtype() == v1::DTYPE_UNSPECIFIED) t->set_dtype(v1::DTYPE_FLOAT32);
    if (!v1::DType_IsValid(t->dtype())) {
      return InvalidArgumentError(StrCat("inputs[", i, "] has unknown dtype ", t->dtype()));
    }
    if (t->dtype() == v1::DTYPE_TF32) {
      return InvalidArgumentError(StrCat("inputs[", i,
                                         "] is DTYPE_TF32, a model precision: a tf32 workload "
                                         "holds float32 tensors and sets tf32"));
    }
  }
  if (w->out_dtype() == v1::DTYPE_UNSPECIFIED) w->set_out_dtype(w->inputs(0).dtype());
  if (!v1::DType_IsValid(w->out_dtype())) return InvalidArgumentError("unknown out_dtype");

  // Attributes that belong to another op would make two equal workloads differ.
  bool wants_conv = w->op() == v1::OP_KIND_CONV2D || w->op() == v1::OP_KIND_CONV2D_TRANSPOSE;
  if ((w->has_conv2d() && !wants_conv) || (w->has_pool2d() && w->op() != v1::OP_KIND_POOL2D) ||
      (w->has_elementwise() && w->op() != v1::OP_KIND_ELEMENTWISE) ||
      (w->has_softmax() && w->op() != v1::OP_KIND_SOFTMAX) ||
      (w->has_rearrange() && w->op() != v1::OP_KIND_REARRANGE) ||
      (w->has_reduce() && w->op() != v1::OP_KIND_REDUCE) ||
      (w->has_normalize() && w->op() != v1::OP_KIND_NORMALIZE) ||
      (w->has_matmul() && w->op() != v1::OP_KIND_DENSE && w->op() != v1::OP_KIND_MATMUL &&
       w->op() != v1::OP_KIND_BATCH_MATMUL)) {
    return InvalidArgumentError(StrCat(OpName(w->op()), ": attributes of another op are set"));
  }

  absl::StatusOr<double> flops;
  switch (w->op()) {
    case v1::OP_KIND_CONV2D:
    case v1::OP_KIND_CONV2D_TRANSPOSE: flops = CanonConv2d(w, &c.output_shape); break;
    case v1::OP_KIND_DENSE:
    case v1::OP_KIND_MATMUL:
    case v1::OP_KIND_BATCH_MATMUL: flops = CanonMatmul(w, &c.output_shape); break;
    case v1::OP_KIND_POOL2D: flops = CanonPool(w, &c.output_shape); break;
    case v1::OP_KIND_ELEMENTWISE: flops = CanonElementwise(w, &c.output_shape); break;
    case v1::OP_KIND_SOFTMAX:
      flops = CanonSoftmax(w, &c.output_shape);
      break;
    case v1::OP_KIND_REARRANGE:
      flops = CanonRearrange(w, &c.output_shape);
      break;
    case v1::OP_KIND_REDUCE:
      flops = CanonReduce(w, &c.output_shape);
      break;
    case v1::OP_KIND_NORMALIZE:
      flops = CanonNormalize(w, &c.output_shape);
      break;
    default: return InvalidArgumentError("unsupported op");
  }
  if (!flops.ok()) return flops.status();
  if (w->tf32()) {
    if (!IsProductOp(w->op())) {
      return InvalidArgumentError(StrCat(OpName(w->op()), ": tf32 applies to products (conv2d, ",
                                         "conv2d_transpose, dense, matmul, batch_matmul)"));
    }
    if (w->inputs(0).dtype() != v1::DTYPE_FLOAT32) {
      return InvalidArgumentError(StrCat("tf32 rounds float32 factors; this workload is ",
                                         DTypeWord(w->inputs(0).dtype())));
    }
  }
  double out_elems = Product(c.output_shape);
  if (out_elems > kMaxElements) return InvalidArgumentError("output is too large (> 2^40 elements)");
  double epi = 0;
  for (int i = 0; i < w->epilogue_size(); ++i) {
    const v1::Epilogue& e = w->epilogue(i);
    if (!v1::EpilogueKind_IsValid(e.kind()) || e.kind() == v1::EPILOGUE_KIND_UNSPECIFIED) {
      return InvalidArgumentError(StrCat("epilogue[", i, "] kind is unset or unknown"));
    }
    if (e.kind() == v1::EPILOGUE_KIND_CLIP && !(e.min() <= e.max())) {
      return InvalidArgumentError(StrCat("epilogue[", i, "] clip: min > max"));
    }
    if (e.kind() == v1::EPILOGUE_KIND_MAP) {
      TF_RETURN_IF_ERROR(CanonicalizeMap(w->mutable_epilogue(i), c.output_shape,
                                         w->inputs(0).dtype(), StrCat("epilogue[", i, "]")));
      epi += MapFlops(e) * out_elems;
      continue;
    }
    if (e.steps_size() != 0 || e.map_inputs_size() != 0)
      return InvalidArgumentError(
          StrCat("epilogue[", i, "]: steps on an epilogue that is not a map"));
    epi += EpilogueFlopsPerElement(e) * out_elems;
  }
  c.flops = *flops + epi;

  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  auto st = google::protobuf::util::MessageToJsonString(c.workload, &c.canonical_json, opts);
  if (!st.ok()) return absl::InternalError(StrCat("workload to JSON: ", st.ToString()));
  c.key = StrCat(OpName(w->op()), "-", Sha256Hex(c.canonical_json).substr(0, 24));
  return c;
}

namespace {
// An enum value's proto name lowercased without its prefix ("relu" for
// ELEMENTWISE_KIND_RELU); empty when the name lacks the prefix.
std::string EnumWord(std::string name, std::string_view prefix) {
  absl::AsciiStrToLower(&name);
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : "";
}
}  // namespace

bool IsProductOp(v1::OpKind op) {
  return op == v1::OP_KIND_CONV2D || op == v1::OP_KIND_CONV2D_TRANSPOSE ||
         op == v1::OP_KIND_DENSE || op == v1::OP_KIND_MATMUL || op == v1::OP_KIND_BATCH_MATMUL;
}

absl::Status CheckFormatTarget(v1::DType dtype, bool tf32, const Target& target,
                               const std::string& what) {
  const bool half = dtype == v1::DTYPE_FLOAT16 || dtype == v1::DTYPE_BFLOAT16;
  if ((half || tf32) && !target.is_gpu()) {
    return InvalidArgumentError(
        StrCat(what, " build for cuda targets only (", target.ToString(), " is a CPU target)"));
  }
  if ((dtype == v1::DTYPE_BFLOAT16 || tf32) && target.sm < 80) {
    return InvalidArgumentError(StrCat(what, " need sm_80 or newer (", target.arch(), " has no ",
                                       tf32 ? "tf32 tensor cores" : "bfloat16 conversions", ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckWorkloadTarget(const v1::Workload& w, const Target& target) {
  const v1::DType d = w.inputs_size() > 0 ? w.inputs(0).dtype() : v1::DTYPE_FLOAT32;
  return CheckFormatTarget(d, w.tf32(), target,
                           w.tf32() ? "tf32 products" : StrCat(DTypeWord(d), " kernels"));
}

std::string Describe(const v1::Workload& w) {
  std::vector<std::string> shapes;
  for (const auto& t : w.inputs()) shapes.push_back(absl::StrJoin(t.shape(), "x"));
  std::string s = OpName(w.op());
  if (w.has_elementwise()) {  // "elementwise sigmoid", "elementwise copy", ...
    const std::string kind =
        EnumWord(v1::ElementwiseKind_Name(w.elementwise().kind()), "elementwise_kind_");
    if (!kind.empty()) StrAppend(&s, " ", kind);
  }
  if (w.has_reduce()) {  // "reduce mean", "reduce log_sum_exp", ...
    const std::string op = EnumWord(v1::ReduceOp_Name(w.reduce().op()), "reduce_op_");
    if (!op.empty()) StrAppend(&s, " ", op);
  }
  if (w.has_normalize() && w.normalize().per_row()) StrAppend(&s, " per_row");
  if (w.inputs_size() > 0 && w.inputs(0).dtype() == v1::DTYPE_FLOAT16) StrAppend(&s, " fp16");
  if (w.inputs_size() > 0 && w.inputs(0).dtype() == v1::DTYPE_BFLOAT16) StrAppend(&s, " bf16");
  if (w.tf32()) StrAppend(&s, " tf32");
  StrAppend(&s, " ", absl::StrJoin(shapes, " * "));
  if (w.has_conv2d()) {
    StrAppend(&s, " s", absl::StrJoin(w.conv2d().strides(), ","), " p",
              absl::StrJoin(w.conv2d().pads(), ","));
    if (w.conv2d().groups() > 1) StrAppend(&s, " g", w.conv2d().groups());
    if (w.conv2d().winograd() != 0) StrAppend(&s, " winograd F(", w.conv2d().winograd(), ",3)");
  }
  if (w.has_softmax() && w.softmax().log()) StrAppend(&s, " log");
  if (w.has_rearrange()) StrAppend(&s, " -> ", absl::StrJoin(w.rearrange().out_shape(), "x"));
  for (const auto& e : w.epilogue()) {
    if (e.kind() == v1::EPILOGUE_KIND_MAP) {
      StrAppend(&s, " +", DescribeMap(e));
      continue;
    }
    const std::string name = EnumWord(v1::EpilogueKind_Name(e.kind()), "epilogue_kind_");
    StrAppend(&s, " +", name.empty() ? "unknown" : name);
  }
  return s;
}

}  // namespace tunefarm::ir
