// FormatWorkloadSpec: the spec of a canonical workload, checked by parsing
// it back (see workload_spec.h).
#include "compiler/ir/workload_spec.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/map_program.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec_internal.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;
using workload_spec_internal::Epilogues;

absl::Status NoSpec(const std::string& why) {
  return absl::UnimplementedError(absl::StrCat("no workload spec says ", why));
}

// "k=v" pairs of a (h, w) attribute: one value when both are equal.
void PairArg(std::vector<std::string>* args, const char* name, int64_t h, int64_t w,
             int64_t default_value) {
  if (h == w) {
    if (h != default_value) args->push_back(absl::StrCat(name, "=", h));
    return;
  }
  args->push_back(absl::StrCat(name, "_h=", h));
  args->push_back(absl::StrCat(name, "_w=", w));
}

void PadArgs(std::vector<std::string>* args, const google::protobuf::RepeatedField<int64_t>& p) {
  if (p.size() != 4) return;
  if (p[0] == p[1] && p[1] == p[2] && p[2] == p[3]) {
    if (p[0] != 0) args->push_back(absl::StrCat("pad=", p[0]));
    return;
  }
  args->push_back(absl::StrCat("pad_top=", p[0]));
  args->push_back(absl::StrCat("pad_left=", p[1]));
  args->push_back(absl::StrCat("pad_bottom=", p[2]));
  args->push_back(absl::StrCat("pad_right=", p[3]));
}

std::string Float(float x) { return absl::StrFormat("%.9g", x); }

absl::StatusOr<std::string> ConvSpec(const v1::Workload& w) {
  const v1::Conv2dAttrs& a = w.conv2d();
  const auto& d = w.inputs(0).shape();
  const auto& k = w.inputs(1).shape();
  if (d.size() != 4 || k.size() != 4 || a.strides_size() != 2 || a.dilations_size() != 2)
    return NoSpec("a convolution that is not 2-D");
  const bool transpose = w.op() == v1::OP_KIND_CONV2D_TRANSPOSE;
  const bool nhwc = a.layout() == v1::DATA_LAYOUT_NHWC;
  const int64_t groups = std::max<int64_t>(1, a.groups());
  int64_t n = d[0], c, h, wd, kk, r, s;
  if (nhwc) {
    h = d[1], wd = d[2], c = d[3];
    r = k[0], s = k[1], kk = k[3];
    if (a.winograd() != 0) r = s = 3;
  } else {
    c = d[1], h = d[2], wd = d[3];
    r = k[2], s = k[3];
    kk = transpose ? k[1] * groups : k[0];
  }
  std::vector<std::string> args = {
      absl::StrCat("N=", n), absl::StrCat("C=", c),  absl::StrCat("H=", h), absl::StrCat("W=", wd),
      absl::StrCat("K=", kk), absl::StrCat("R=", r), absl::StrCat("S=", s)};
  PairArg(&args, "stride", a.strides(0), a.strides(1), 1);
  PadArgs(&args, a.pads());
  PairArg(&args, "dilation", a.dilations(0), a.dilations(1), 1);
  if (groups != 1) args.push_back(absl::StrCat("groups=", groups));
  if (a.winograd() != 0) args.push_back(absl::StrCat("winograd=", a.winograd()));
  const char* op = transpose ? (nhwc ? "conv2d_transpose_nhwc" : "conv2d_transpose_nchw")
                   : nhwc    ? "conv2d_nhwc"
                             : "conv2d_nchw";
  return absl::StrCat(op, "(", absl::StrJoin(args, ","), ")");
}

absl::StatusOr<std::string> MatmulSpec(const v1::Workload& w) {
  const auto& a = w.inputs(0).shape();
  const auto& b = w.inputs(1).shape();
  if (w.op() == v1::OP_KIND_DENSE) {
    if (a.size() != 2 || b.size() != 2) return NoSpec("a dense layer that is not 2-D");
    return absl::StrCat("dense(M=", a[0], ",N=", b[0], ",K=", a[1], ")");
  }
  const bool ta = w.matmul().transpose_a(), tb = w.matmul().transpose_b();
  const bool batch = w.op() == v1::OP_KIND_BATCH_MATMUL;
  const size_t rank = batch ? 3 : 2;
  if (a.size() != rank || b.size() != rank)
    return NoSpec(batch ? "a batch matmul with a broadcast operand" : "a matmul that is not 2-D");
  if (batch && a[0] != b[0]) return NoSpec("a batch matmul with a broadcast operand");
  const size_t o = batch ? 1 : 0;
  const int64_t m = ta ? a[o + 1] : a[o], kk = ta ? a[o] : a[o + 1], n = tb ? b[o] : b[o + 1];
  std::vector<std::string> args;
  if (batch) args.push_back(absl::StrCat("B=", a[0]));
  args.insert(args.end(),
              {absl::StrCat("M=", m), absl::StrCat("N=", n), absl::StrCat("K=", kk)});
  if (ta) args.push_back("transpose_a=1");
  if (tb) args.push_back("transpose_b=1");
  return absl::StrCat(batch ? "batch_matmul" : "matmul", "(", absl::StrJoin(args, ","), ")");
}

absl::StatusOr<std::string> PoolSpec(const v1::Workload& w) {
  const v1::Pool2dAttrs& a = w.pool2d();
  const auto& d = w.inputs(0).shape();
  if (d.size() != 4) return NoSpec("a pooling that is not 2-D");
  const bool nhwc = a.layout() == v1::DATA_LAYOUT_NHWC;
  const char* layout = nhwc ? "_nhwc(" : "_nchw(";
  const std::string nchw = nhwc ? absl::StrCat("N=", d[0], ",C=", d[3], ",H=", d[1], ",W=", d[2])
                                : absl::StrCat("N=", d[0], ",C=", d[1], ",H=", d[2], ",W=", d[3]);
  if (a.kind() == v1::POOL_KIND_GLOBAL_AVG)
    return absl::StrCat("global_avg_pool2d", layout, nchw, ")");
  if (a.kind() != v1::POOL_KIND_MAX && a.kind() != v1::POOL_KIND_AVG)
    return NoSpec(absl::StrCat("pooling ", v1::PoolKind_Name(a.kind())));
  if (a.kernel_size() != 2 || a.strides_size() != 2 || a.pads_size() != 4)
    return NoSpec("a pooling that is not 2-D");
  if (a.strides(0) != a.strides(1)) return NoSpec("a pooling with unequal strides");
  if (!(a.pads(0) == a.pads(1) && a.pads(1) == a.pads(2) && a.pads(2) == a.pads(3)))
    return NoSpec("a pooling with unequal pads");
  const bool max = a.kind() == v1::POOL_KIND_MAX;
  std::vector<std::string> args = {nchw, absl::StrCat("R=", a.kernel(0)),
                                   absl::StrCat("S=", a.kernel(1))};
  if (a.strides(0) != 1) args.push_back(absl::StrCat("stride=", a.strides(0)));
  if (a.pads(0) != 0) args.push_back(absl::StrCat("pad=", a.pads(0)));
  if (a.ceil_mode()) args.push_back("ceil_mode=1");
  if (a.count_include_pad()) {
    if (max) return NoSpec("a max pooling that counts padding");
    args.push_back("count_include_pad=1");
  }
  return absl::StrCat(max ? "max_pool2d" : "avg_pool2d", layout, absl::StrJoin(args, ","), ")");
}

absl::StatusOr<std::string> SoftmaxSpec(const v1::Workload& w) {
  const auto& d = w.inputs(0).shape();
  std::string spec =
      absl::StrCat(w.softmax().log() ? "log_softmax" : "softmax", "(A=", d[0], ",N=", d[1]);
  if (d.size() == 3) absl::StrAppend(&spec, ",B=", d[2]);
  return absl::StrCat(spec, ")");
}

absl::StatusOr<std::string> NormalizeSpec(const v1::Workload& w) {
  const auto& d = w.inputs(0).shape();
  std::string spec = absl::StrCat(w.normalize().per_row() ? "instance_norm" : "layer_norm",
                                  "(A=", d[0], ",N=", d[1]);
  if (w.normalize().epsilon() != 1e-5f)
    absl::StrAppend(&spec, ",eps=", Float(w.normalize().epsilon()));
  if (w.inputs_size() < 3) absl::StrAppend(&spec, ",bias=0");
  const int64_t p = w.inputs(1).shape(0);
  if (p != (w.normalize().per_row() ? d[0] : d[1])) absl::StrAppend(&spec, ",P=", p);
  return absl::StrCat(spec, ")");
}

absl::StatusOr<std::string> ReduceSpec(const v1::Workload& w) {
  const auto& d = w.inputs(0).shape();
  std::string op = v1::ReduceOp_Name(w.reduce().op());
  absl::AsciiStrToLower(&op);
  std::string spec =
      absl::StrCat(op.substr(std::string("reduce_op_").size()), "(A=", d[0], ",N=", d[1]);
  if (d.size() == 3) absl::StrAppend(&spec, ",B=", d[2]);
  return absl::StrCat("reduce_", spec, ")");
}

std::string IndexSpec(const v1::RearrangeIndex& x) {
  if (x.mul() == 0)  // a linear rearrange's constant coordinate may be a fraction
    return x.div() == 1 ? absl::StrCat(x.add()) : absl::StrCat(x.add(), "/", x.div());
  std::string s = x.mul() == 1 ? "" : x.mul() == -1 ? "-" : absl::StrCat(x.mul(), "*");
  absl::StrAppend(&s, "o", x.source());
  if (x.add() != 0) absl::StrAppend(&s, x.add() > 0 ? "+" : "", x.add());
  if (x.div() == 1) return s;
  return x.mul() == 1 && x.add() == 0 ? absl::StrCat(s, "/", x.div())
                                      : absl::StrCat("(", s, ")/", x.div());
}

absl::StatusOr<std::string> RearrangeSpec(const v1::Workload& w) {
  const v1::RearrangeAttrs& a = w.rearrange();
  std::string s = absl::StrCat("rearrange(out=", absl::StrJoin(a.out_shape(), "x"));
  if (a.fill() != 0) absl::StrAppend(&s, ",fill=", Float(a.fill()));
  if (a.linear()) absl::StrAppend(&s, ",linear=1");
  int at = 0;
  for (int k = 0; k < w.inputs_size(); ++k) {
    std::vector<std::string> idx;
    for (int d = 0; d < w.inputs(k).shape_size(); ++d) idx.push_back(IndexSpec(a.index(at++)));
    absl::StrAppend(&s, ",x", k, "=", absl::StrJoin(w.inputs(k).shape(), "x"), "[",
                    absl::StrJoin(idx, ","), "]");
  }
  return absl::StrCat(s, ")");
}

absl::StatusOr<std::string> ElementwiseSpec(const v1::Workload& w) {
  const auto& d = w.inputs(0).shape();
  if (d.size() != 4) return NoSpec("an elementwise op on other than 4 dimensions");
  static const std::map<v1::ElementwiseKind, std::string> names = {
      {v1::ELEMENTWISE_KIND_ADD, "add"},   {v1::ELEMENTWISE_KIND_SUB, "sub"},
      {v1::ELEMENTWISE_KIND_MUL, "mul"},   {v1::ELEMENTWISE_KIND_DIV, "div"},
      {v1::ELEMENTWISE_KIND_RELU, "relu"}, {v1::ELEMENTWISE_KIND_SIGMOID, "sigmoid"},
      {v1::ELEMENTWISE_KIND_SILU, "silu"}, {v1::ELEMENTWISE_KIND_HARDSWISH, "hardswish"},
      {v1::ELEMENTWISE_KIND_CLIP, "clip"}, {v1::ELEMENTWISE_KIND_COPY, "copy"}};
  auto it = names.find(w.elementwise().kind());
  if (it == names.end())
    return NoSpec(absl::StrCat("elementwise ", v1::ElementwiseKind_Name(w.elementwise().kind())));
  std::string spec = absl::StrCat(it->second, "(N=", d[0], ",C=", d[1], ",H=", d[2], ",W=", d[3]);
  if (w.inputs_size() == 2) {
    const auto& y = w.inputs(1).shape();
    if (y.size() != 4) return NoSpec("an elementwise op on other than 4 dimensions");
    const char* names_y[] = {"yN", "yC", "yH", "yW"};
    for (int i = 0; i < 4; ++i) {
      if (y[i] != d[i]) absl::StrAppend(&spec, ",", names_y[i], "=", y[i]);
    }
  }
  if (w.elementwise().kind() == v1::ELEMENTWISE_KIND_CLIP) {
    absl::StrAppend(&spec, ",min=", Float(w.elementwise().min()),
                    ",max=", Float(w.elementwise().max()));
  }
  return absl::StrCat(spec, ")");
}

absl::StatusOr<std::string> EpilogueSpec(const v1::Epilogue& e) {
  if (e.kind() == v1::EPILOGUE_KIND_MAP) {
    std::vector<std::string> shapes, steps;
    for (const v1::TensorSpec& t : e.map_inputs()) shapes.push_back(absl::StrJoin(t.shape(), "x"));
    for (const v1::MapStep& s : e.steps()) {
      std::vector<std::string> args;
      for (const v1::MapOperand& a : s.args()) {
        if (a.source_case() == v1::MapOperand::kValue)
          args.push_back(absl::StrCat("%", a.value()));
        else if (a.source_case() == v1::MapOperand::kInput)
          args.push_back(absl::StrCat("$", a.input()));
        else
          args.push_back(Float(a.literal()));
      }
      const MapFnInfo* f = FindMapFn(s.fn());
      steps.push_back(absl::StrCat(f == nullptr ? "?" : std::string(f->name), "(",
                                   absl::StrJoin(args, ","), ")"));
    }
    return absl::StrCat("+map[", absl::StrJoin(shapes, ","), "](", absl::StrJoin(steps, ","), ")");
  }
  for (const auto& [name, kind] : Epilogues()) {
    if (kind != e.kind()) continue;
    if (kind == v1::EPILOGUE_KIND_CLIP)
      return absl::StrCat("+clip(min=", Float(e.min()), ",max=", Float(e.max()), ")");
    if (kind == v1::EPILOGUE_KIND_LEAKY_RELU)
      return absl::StrCat("+leaky_relu(alpha=", Float(e.alpha()), ")");
    return absl::StrCat("+", name);
  }
  return NoSpec(absl::StrCat("epilogue ", v1::EpilogueKind_Name(e.kind())));
}

}  // namespace

absl::StatusOr<std::string> FormatWorkloadSpec(const v1::Workload& workload) {
  absl::StatusOr<CanonicalWorkload> want = Canonicalize(workload);
  if (!want.ok()) return want.status();
  const v1::Workload& w = want->workload;
  // One dtype for every tensor: float32, or float16 or bfloat16 (dtype=...).
  absl::StatusOr<v1::DType> dtype_or = WorkloadDType(w);
  if (!dtype_or.ok()) return NoSpec(std::string(dtype_or.status().message()));
  const v1::DType dtype = *dtype_or;
  absl::StatusOr<std::string> spec;
  switch (w.op()) {
    case v1::OP_KIND_CONV2D:
    case v1::OP_KIND_CONV2D_TRANSPOSE:
      spec = ConvSpec(w);
      break;
    case v1::OP_KIND_DENSE:
    case v1::OP_KIND_MATMUL:
    case v1::OP_KIND_BATCH_MATMUL:
      spec = MatmulSpec(w);
      break;
    case v1::OP_KIND_POOL2D:
      spec = PoolSpec(w);
      break;
    case v1::OP_KIND_ELEMENTWISE:
      spec = ElementwiseSpec(w);
      break;
    case v1::OP_KIND_SOFTMAX:
      spec = SoftmaxSpec(w);
      break;
    case v1::OP_KIND_REARRANGE:
      spec = RearrangeSpec(w);
      break;
    case v1::OP_KIND_REDUCE:
      spec = ReduceSpec(w);
      break;
    case v1::OP_KIND_NORMALIZE:
      spec = NormalizeSpec(w);
      break;
    default:
      return NoSpec(absl::StrCat("op ", v1::OpKind_Name(w.op())));
  }
  if (!spec.ok()) return spec;
  if (dtype == v1::DTYPE_FLOAT16 || dtype == v1::DTYPE_BFLOAT16) {
    const bool bf = dtype == v1::DTYPE_BFLOAT16;
    if (w.op() == v1::OP_KIND_REARRANGE || spec->empty() || spec->back() != ')')
      return NoSpec(bf ? "a bfloat16 rearrange" : "a float16 rearrange");
    spec->insert(spec->size() - 1, bf ? ",dtype=bfloat16" : ",dtype=float16");
  }
  if (w.tf32()) spec->insert(spec->size() - 1, ",dtype=tf32");
  for (const v1::Epilogue& e : w.epilogue()) {
    absl::StatusOr<std::string> ep = EpilogueSpec(e);
    if (!ep.ok()) return ep;
    absl::StrAppend(&*spec, *ep);
  }
  // The contract, checked: the spec reads back as this workload.
  absl::StatusOr<v1::Workload> back = ParseWorkloadSpec(*spec);
  absl::StatusOr<CanonicalWorkload> got =
      back.ok() ? Canonicalize(*back) : absl::StatusOr<CanonicalWorkload>(back.status());
  if (!got.ok() || got->key != want->key) {
    return NoSpec(absl::StrCat("this workload exactly (", *spec, " reads back as ",
                               got.ok() ? got->key : std::string(got.status().message()),
                               ", not ", want->key, ")"));
  }
  return spec;
}

}  // namespace tunefarm::ir
