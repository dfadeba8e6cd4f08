#include "compiler/ir/workload_spec.h"

#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/workload.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;

struct OpInfo {
  std::vector<std::string> required;
  std::vector<std::string> optional;  // with defaults applied by the builder
  const char* help;
};

const std::map<std::string, OpInfo>& Ops() {
  static const auto* ops = new std::map<std::string, OpInfo>{
      {"conv2d_nchw", {{"N", "C", "H", "W", "K", "R", "S"},
                       {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom",
                        "pad_right", "dilation", "groups"},
                       "2-D convolution, NCHW data, OIHW weights"}},
      {"conv2d_nhwc", {{"N", "C", "H", "W", "K", "R", "S"},
                       {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom",
                        "pad_right", "dilation", "groups"},
                       "2-D convolution, NHWC data, HWIO weights"}},
      {"depthwise_conv2d_nchw", {{"N", "C", "H", "W", "R", "S"},
                                 {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left",
                                  "pad_bottom", "pad_right", "dilation", "multiplier"},
                                 "depthwise convolution (groups = C)"}},
      {"conv2d_transpose_nchw", {{"N", "C", "H", "W", "K", "R", "S"},
                                 {"stride", "pad", "dilation", "groups"},
                                 "transposed convolution, weights [C, K/groups, R, S]"}},
      {"dense", {{"M", "N", "K"}, {}, "data [M,K] x weight [N,K]^T"}},
      {"matmul", {{"M", "N", "K"}, {"transpose_a", "transpose_b"}, "a [M,K] x b [K,N]"}},
      {"batch_matmul", {{"B", "M", "N", "K"}, {"transpose_a", "transpose_b"},
                        "a [B,M,K] x b [B,K,N]"}},
      {"max_pool2d_nchw", {{"N", "C", "H", "W", "R", "S"}, {"stride", "pad", "ceil_mode"},
                           "max pooling"}},
      {"avg_pool2d_nchw", {{"N", "C", "H", "W", "R", "S"},
                           {"stride", "pad", "ceil_mode", "count_include_pad"}, "average pooling"}},
      {"global_avg_pool2d_nchw", {{"N", "C", "H", "W"}, {}, "global average pooling"}},
      {"add", {{"N", "C", "H", "W"}, {}, "elementwise sum of two NCHW tensors"}},
      {"mul", {{"N", "C", "H", "W"}, {}, "elementwise product of two NCHW tensors"}},
      {"relu", {{"N", "C", "H", "W"}, {}, "elementwise relu"}},
      {"sigmoid", {{"N", "C", "H", "W"}, {}, "elementwise sigmoid"}},
      {"silu", {{"N", "C", "H", "W"}, {}, "elementwise x*sigmoid(x)"}},
      {"hardswish", {{"N", "C", "H", "W"}, {}, "elementwise hardswish"}},
  };
  return *ops;
}

const std::map<std::string, v1::EpilogueKind>& Epilogues() {
  static const auto* e = new std::map<std::string, v1::EpilogueKind>{
      {"bias", v1::EPILOGUE_KIND_BIAS_ADD},      {"relu", v1::EPILOGUE_KIND_RELU},
      {"relu6", v1::EPILOGUE_KIND_RELU6},        {"clip", v1::EPILOGUE_KIND_CLIP},
      {"leaky_relu", v1::EPILOGUE_KIND_LEAKY_RELU}, {"sigmoid", v1::EPILOGUE_KIND_SIGMOID},
      {"silu", v1::EPILOGUE_KIND_SILU},          {"hardswish", v1::EPILOGUE_KIND_HARDSWISH},
      {"residual", v1::EPILOGUE_KIND_RESIDUAL_ADD}};
  return *e;
}

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  absl::Status Error(size_t at, const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat("workload spec '", s_, "' at column ", at + 1,
                                                   ": ", msg));
  }
  bool AtEnd() { return pos_ >= s_.size(); }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  std::string Ident() {
    size_t b = pos_;
    while (pos_ < s_.size() && (isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    return s_.substr(b, pos_ - b);
  }
  std::string Number() {
    size_t b = pos_;
    while (pos_ < s_.size() && (isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                s_[pos_] == '-' || s_[pos_] == 'e' || s_[pos_] == '+')) {
      ++pos_;
    }
    return s_.substr(b, pos_ - b);
  }
  size_t pos() const { return pos_; }

  // "(k=v,k=v)" into `out` (values as text), remembering each key's column.
  absl::Status Args(std::map<std::string, std::pair<std::string, size_t>>* out) {
    if (!Eat('(')) return Error(pos_, "expected '('");
    if (Eat(')')) return absl::OkStatus();
    while (true) {
      size_t at = pos_;
      std::string key = Ident();
      if (key.empty()) return Error(pos_, "expected an attribute name");
      if (!Eat('=')) return Error(pos_, absl::StrCat("expected '=' after ", key));
      size_t vat = pos_;
      std::string value = Number();
      if (value.empty()) return Error(vat, absl::StrCat("expected a number for ", key));
      if (out->count(key)) return Error(at, absl::StrCat(key, " is given twice"));
      (*out)[key] = {value, vat};
      if (Eat(')')) return absl::OkStatus();
      if (!Eat(',')) return Error(pos_, "expected ',' or ')'");
    }
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

std::string WorkloadSpecHelp() {
  std::string out = "workload specs: OP(ATTR=VALUE,...)[+EPILOGUE...]\n";
  for (const auto& [name, info] : Ops()) {
    absl::StrAppend(&out, "  ", name, "(", absl::StrJoin(info.required, ","));
    if (!info.optional.empty()) absl::StrAppend(&out, " [,", absl::StrJoin(info.optional, ","), "]");
    absl::StrAppend(&out, ")  ", info.help, "\n");
  }
  absl::StrAppend(&out, "epilogues: +bias +relu +relu6 +clip(min=A,max=B) +leaky_relu(alpha=A) "
                        "+sigmoid +silu +hardswish +residual\n");
  return out;
}

absl::StatusOr<v1::Workload> ParseWorkloadSpec(const std::string& spec) {
  Parser p(spec);
  size_t op_at = p.pos();
  std::string op = p.Ident();
  auto it = Ops().find(op);
  if (it == Ops().end()) {
    std::vector<std::string> names;
    for (const auto& [n, i] : Ops()) names.push_back(n);
    return p.Error(op_at, absl::StrCat("unknown op '", op, "' (", absl::StrJoin(names, ", "), ")"));
  }
  std::map<std::string, std::pair<std::string, size_t>> args;
  if (absl::Status s = p.Args(&args); !s.ok()) return s;
  std::set<std::string> known(it->second.required.begin(), it->second.required.end());
  known.insert(it->second.optional.begin(), it->second.optional.end());
  std::map<std::string, int64_t> v;
  for (const auto& [key, val] : args) {
    if (!known.count(key)) {
      return p.Error(val.second - key.size() - 1,
                     absl::StrCat("unknown attribute '", key, "' for ", op));
    }
    int64_t x;
    if (!absl::SimpleAtoi(val.first, &x)) {
      return p.Error(val.second, absl::StrCat(key, " must be an integer, got '", val.first, "'"));
    }
    v[key] = x;
  }
  for (const std::string& r : it->second.required) {
    if (!v.count(r)) return p.Error(p.pos(), absl::StrCat(op, " needs ", r));
  }
  auto get = [&](const std::string& k, int64_t def) { return v.count(k) ? v[k] : def; };

  v1::Workload w;
  auto add_input = [&](std::vector<int64_t> shape) {
    auto* t = w.add_inputs();
    for (int64_t d : shape) t->add_shape(d);
    t->set_dtype(v1::DTYPE_FLOAT32);
  };
  bool conv = op.find("conv2d") != std::string::npos;
  if (conv) {
    bool nhwc = op == "conv2d_nhwc", depthwise = op == "depthwise_conv2d_nchw";
    bool transpose = op == "conv2d_transpose_nchw";
    w.set_op(transpose ? v1::OP_KIND_CONV2D_TRANSPOSE : v1::OP_KIND_CONV2D);
    int64_t n = v["N"], c = v["C"], h = v["H"], wd = v["W"], r = v["R"], s = v["S"];
    int64_t groups = depthwise ? c : get("groups", 1);
    int64_t k = depthwise ? c * get("multiplier", 1) : v["K"];
    int64_t cg = groups > 0 && c % groups == 0 ? c / groups : c;
    add_input(nhwc ? std::vector<int64_t>{n, h, wd, c} : std::vector<int64_t>{n, c, h, wd});
    if (transpose) add_input({c, groups > 0 ? k / groups : k, r, s});
    else if (nhwc) add_input({r, s, cg, k});
    else add_input({k, cg, r, s});
    auto* a = w.mutable_conv2d();
    a->set_layout(nhwc ? v1::DATA_LAYOUT_NHWC : v1::DATA_LAYOUT_NCHW);
    int64_t st = get("stride", 1), pad = get("pad", 0);
    a->add_strides(get("stride_h", st));
    a->add_strides(get("stride_w", st));
    a->add_pads(get("pad_top", pad));
    a->add_pads(get("pad_left", pad));
    a->add_pads(get("pad_bottom", pad));
    a->add_pads(get("pad_right", pad));
    a->add_dilations(get("dilation", 1));
    a->add_dilations(get("dilation", 1));
    a->set_groups(groups);
  } else if (op == "dense" || op == "matmul" || op == "batch_matmul") {
    bool ta = get("transpose_a", 0) != 0, tb = get("transpose_b", 0) != 0;
    int64_t m = v["M"], n = v["N"], k = v["K"];
    std::vector<int64_t> a = ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
    std::vector<int64_t> b = op == "dense" || tb ? std::vector<int64_t>{n, k}
                                                 : std::vector<int64_t>{k, n};
    if (op == "batch_matmul") a.insert(a.begin(), v["B"]), b.insert(b.begin(), v["B"]);
    w.set_op(op == "dense" ? v1::OP_KIND_DENSE
                           : op == "matmul" ? v1::OP_KIND_MATMUL : v1::OP_KIND_BATCH_MATMUL);
    add_input(a);
    add_input(b);
    if (op != "dense") {
      w.mutable_matmul()->set_transpose_a(ta);
      w.mutable_matmul()->set_transpose_b(tb);
    }
  } else if (op.find("pool") != std::string::npos) {
    w.set_op(v1::OP_KIND_POOL2D);
    add_input({v["N"], v["C"], v["H"], v["W"]});
    auto* a = w.mutable_pool2d();
    a->set_layout(v1::DATA_LAYOUT_NCHW);
    if (op == "global_avg_pool2d_nchw") {
      a->set_kind(v1::POOL_KIND_GLOBAL_AVG);
    } else {
      a->set_kind(op == "max_pool2d_nchw" ? v1::POOL_KIND_MAX : v1::POOL_KIND_AVG);
      a->add_kernel(v["R"]);
      a->add_kernel(v["S"]);
      int64_t st = get("stride", 1), pad = get("pad", 0);
      a->add_strides(st);
      a->add_strides(st);
      for (int i = 0; i < 4; ++i) a->add_pads(pad);
      a->set_ceil_mode(get("ceil_mode", 0) != 0);
      a->set_count_include_pad(get("count_include_pad", 0) != 0);
    }
  } else {
    w.set_op(v1::OP_KIND_ELEMENTWISE);
    std::vector<int64_t> shape = {v["N"], v["C"], v["H"], v["W"]};
    add_input(shape);
    static const std::map<std::string, v1::ElementwiseKind> kinds = {
        {"add", v1::ELEMENTWISE_KIND_ADD}, {"mul", v1::ELEMENTWISE_KIND_MUL},
        {"relu", v1::ELEMENTWISE_KIND_RELU}, {"sigmoid", v1::ELEMENTWISE_KIND_SIGMOID},
        {"silu", v1::ELEMENTWISE_KIND_SILU}, {"hardswish", v1::ELEMENTWISE_KIND_HARDSWISH}};
    w.mutable_elementwise()->set_kind(kinds.at(op));
    if (op == "add" || op == "mul") add_input(shape);
  }

  while (!p.AtEnd()) {
    size_t at = p.pos();
    if (!p.Eat('+')) return p.Error(at, "expected '+EPILOGUE' or the end");
    size_t name_at = p.pos();
    std::string name = p.Ident();
    auto e = Epilogues().find(name);
    if (e == Epilogues().end()) {
      return p.Error(name_at, absl::StrCat("unknown epilogue '", name,
                                           "' (bias, relu, relu6, clip, leaky_relu, sigmoid, "
                                           "silu, hardswish, residual)"));
    }
    v1::Epilogue* ep = w.add_epilogue();
    ep->set_kind(e->second);
    if (name == "clip" || name == "leaky_relu") {
      std::map<std::string, std::pair<std::string, size_t>> eargs;
      if (absl::Status s = p.Args(&eargs); !s.ok()) return s;
      for (const auto& [key, val] : eargs) {
        float x;
        if (!absl::SimpleAtof(val.first, &x)) return p.Error(val.second, "expected a number");
        if (key == "min" && name == "clip") ep->set_min(x);
        else if (key == "max" && name == "clip") ep->set_max(x);
        else if (key == "alpha" && name == "leaky_relu") ep->set_alpha(x);
        else return p.Error(val.second - key.size() - 1, absl::StrCat("unknown argument '", key, "'"));
      }
      if (name == "clip" && (!eargs.count("min") || !eargs.count("max"))) {
        return p.Error(p.pos(), "clip needs min and max");
      }
    }
  }
  absl::StatusOr<CanonicalWorkload> c = Canonicalize(w);
  if (!c.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("workload spec '", spec, "': ", c.status().message()));
  }
  return c->workload;
}

}  // namespace tunefarm::ir
