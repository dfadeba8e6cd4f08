// ParseWorkloadSpec: a spec's op and attributes, its epilogues, then the
// canonical check (see workload_spec.h). The op table is in
// workload_spec_ops.cc, the inverse (FormatWorkloadSpec) in
// workload_spec_format.cc.
#include "compiler/ir/workload_spec.h"

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/ir/map_program.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec_internal.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;
using workload_spec_internal::Epilogues;
using workload_spec_internal::OpInfo;
using workload_spec_internal::Ops;

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
  std::string Digits() {
    size_t b = pos_;
    while (pos_ < s_.size() && isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    return s_.substr(b, pos_ - b);
  }
  // A number, or "inf" / "-inf" (a clip without an upper or lower bound).
  std::string Number() {
    size_t b = pos_;
    for (const char* word : {"inf", "-inf"}) {
      if (s_.compare(pos_, std::strlen(word), word) == 0 &&
          !isalnum(static_cast<unsigned char>(Peek(std::strlen(word))))) {
        pos_ += std::strlen(word);
        return s_.substr(b, pos_ - b);
      }
    }
    while (pos_ < s_.size() && (isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                s_[pos_] == '-' || s_[pos_] == 'e' || s_[pos_] == '+')) {
      ++pos_;
    }
    return s_.substr(b, pos_ - b);
  }
  size_t pos() const { return pos_; }
  // The character k past the position, or '\0' past the end.
  char Peek(size_t k) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }

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
      std::string value = key == "dtype" ? Ident() : Number();
      if (value.empty()) {
        return Error(vat, key == "dtype" ? "expected a dtype (float32, float16 or bfloat16)"
                                         : absl::StrCat("expected a number for ", key));
      }
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

// "D1xD2x..." into `dims`.
absl::Status ParseDims(Parser& p, google::protobuf::RepeatedField<int64_t>* dims) {
  do {
    const size_t at = p.pos();
    int64_t d = 0;
    if (!absl::SimpleAtoi(p.Digits(), &d) || d <= 0)
      return p.Error(at, "expected a dimension (a positive integer)");
    dims->Add(d);
  } while (p.Eat('x'));
  return absl::OkStatus();
}

// "[SHAPE,...](FN(ARG,...),...)" after "+map": the map inputs' shapes
// ("1", "64x1x1"), then the steps; an argument is %K (value K: 0 the
// epilogue's input, K step K's result), $K (map input K) or a number.
absl::Status ParseMap(Parser& p, v1::Epilogue* e) {
  e->set_kind(v1::EPILOGUE_KIND_MAP);
  if (!p.Eat('[')) return p.Error(p.pos(), "expected '[' and the map inputs' shapes");
  while (!p.Eat(']')) {
    if (e->map_inputs_size() > 0 && !p.Eat(',')) return p.Error(p.pos(), "expected ',' or ']'");
    if (absl::Status s = ParseDims(p, e->add_map_inputs()->mutable_shape()); !s.ok()) return s;
  }
  if (!p.Eat('(')) return p.Error(p.pos(), "expected '(' and the map's steps");
  while (!p.Eat(')')) {
    if (e->steps_size() > 0 && !p.Eat(',')) return p.Error(p.pos(), "expected ',' or ')'");
    size_t at = p.pos();
    std::string fn = p.Ident();
    const MapFnInfo* f = FindMapFn(fn);
    if (f == nullptr) {
      std::vector<std::string> names;
      for (const MapFnInfo& i : MapFns()) names.emplace_back(i.name);
      return p.Error(
          at, absl::StrCat("unknown map function '", fn, "' (", absl::StrJoin(names, ", "), ")"));
    }
    v1::MapStep* st = e->add_steps();
    st->set_fn(f->fn);
    if (!p.Eat('(')) return p.Error(p.pos(), absl::StrCat("expected '(' after ", fn));
    while (!p.Eat(')')) {
      if (st->args_size() > 0 && !p.Eat(',')) return p.Error(p.pos(), "expected ',' or ')'");
      size_t aat = p.pos();
      const bool value = p.Eat('%'), input = !value && p.Eat('$');
      std::string text = value || input ? p.Digits() : p.Number();
      v1::MapOperand* a = st->add_args();
      int32_t k = 0;
      float x = 0;
      if ((value || input) && !absl::SimpleAtoi(text, &k))
        return p.Error(aat, "expected %K (a value) or $K (an input)");
      if (!value && !input && !absl::SimpleAtof(text, &x))
        return p.Error(aat, "expected %K (a value), $K (an input) or a number");
      if (value)
        a->set_value(k);
      else if (input)
        a->set_input(k);
      else
        a->set_literal(x);
    }
  }
  return absl::OkStatus();
}

// One index map of "rearrange": [(][MUL*]oSRC[+ADD|-ADD][)][/DIV], or a
// constant; the division applies to the whole index.
absl::Status ParseIndex(Parser& p, v1::RearrangeIndex* x) {
  const size_t at = p.pos();
  auto integer = [&](int64_t* v) {  // [-]DIGITS
    const bool neg = p.Eat('-');
    return absl::SimpleAtoi(p.Digits(), v) && (!neg || (*v = -*v, true));
  };
  const bool paren = p.Eat('(');
  x->set_mul(1);
  x->set_div(1);
  int64_t n = 0;
  bool dim = true;  // the index reads an output dimension
  if (p.Eat('o')) {
  } else if (p.Peek(0) == '-' && p.Peek(1) == 'o') {
    p.Eat('-'), p.Eat('o');
    x->set_mul(-1);
  } else if (integer(&n)) {
    if (p.Eat('*')) {
      if (!p.Eat('o')) return p.Error(p.pos(), "expected 'o' and an output dimension after '*'");
      x->set_mul(n);
    } else {
      x->set_mul(0);
      x->set_add(n);
      dim = false;
    }
  } else {
    return p.Error(at, "expected an index: [MUL*]oDIM[+ADD][/DIV] or a number");
  }
  if (dim) {
    int64_t src = 0;
    if (!absl::SimpleAtoi(p.Digits(), &src))
      return p.Error(p.pos(), "expected an output dimension after 'o'");
    x->set_source(src);
    const bool plus = p.Eat('+');
    if ((plus && absl::ascii_isdigit(p.Peek(0))) || (!plus && p.Peek(0) == '-')) {
      if (!integer(&n)) return p.Error(p.pos(), "expected a number to add");
      x->set_add(n);
    } else if (plus) {
      return p.Error(p.pos(), "expected a number after '+'");
    }
  }
  if (paren && !p.Eat(')')) return p.Error(p.pos(), "expected ')'");
  if (p.Eat('/')) {
    if (!integer(&n) || n <= 0) return p.Error(p.pos(), "expected a positive divisor after '/'");
    x->set_div(n);
  }
  return absl::OkStatus();
}

// "(out=SHAPE[,fill=F],x0=SHAPE[INDEX,...],x1=...)" after "rearrange".
absl::Status ParseRearrange(Parser& p, v1::Workload* w) {
  w->set_op(v1::OP_KIND_REARRANGE);
  v1::RearrangeAttrs* a = w->mutable_rearrange();
  if (!p.Eat('(')) return p.Error(p.pos(), "expected '('");
  bool has_out = false, has_fill = false, has_linear = false;
  while (!p.Eat(')')) {
    if (has_out && !p.Eat(',')) return p.Error(p.pos(), "expected ',' or ')'");
    const size_t at = p.pos();
    const std::string key = p.Ident();
    if (!p.Eat('=')) return p.Error(p.pos(), "expected '=' after an attribute name");
    if (key == "out" && !has_out) {
      TF_RETURN_IF_ERROR(ParseDims(p, a->mutable_out_shape()));
      has_out = true;
    } else if (key == "fill" && has_out && !has_fill && w->inputs_size() == 0) {
      has_fill = true;
      const size_t vat = p.pos();
      float f = 0;
      if (!absl::SimpleAtof(p.Number(), &f)) return p.Error(vat, "fill must be a number");
      a->set_fill(f);
    } else if (key == "linear" && has_out && !has_linear && w->inputs_size() == 0) {
      has_linear = true;
      const size_t vat = p.pos();
      const std::string v = p.Number();
      if (v != "0" && v != "1") return p.Error(vat, "linear must be 0 or 1");
      a->set_linear(v == "1");
    } else if (has_out && key == absl::StrCat("x", w->inputs_size())) {
      v1::TensorSpec* t = w->add_inputs();
      t->set_dtype(v1::DTYPE_FLOAT32);
      TF_RETURN_IF_ERROR(ParseDims(p, t->mutable_shape()));
      if (!p.Eat('[')) return p.Error(p.pos(), "expected '[' and one index per input dimension");
      for (int d = 0; d < t->shape_size(); ++d) {
        if (d > 0 && !p.Eat(',')) return p.Error(p.pos(), "expected ',' and the next index");
        TF_RETURN_IF_ERROR(ParseIndex(p, a->add_index()));
      }
      if (!p.Eat(']')) return p.Error(p.pos(), "expected ']' after one index per input dimension");
    } else {
      return p.Error(at, absl::StrCat("unexpected '", key, "': rearrange takes out=SHAPE, then ",
                                      "fill=F or linear=1, then x0=SHAPE[INDEX,...], x1=..."));
    }
  }
  if (w->inputs_size() == 0) return p.Error(p.pos(), "rearrange needs x0");
  return absl::OkStatus();
}

// The "+EPILOGUE..." rest of a spec, then the canonical check.
absl::StatusOr<v1::Workload> ParseEpilogues(Parser& p, const std::string& spec, v1::Workload w) {
  while (!p.AtEnd()) {
    size_t at = p.pos();
    if (!p.Eat('+')) return p.Error(at, "expected '+EPILOGUE' or the end");
    size_t name_at = p.pos();
    std::string name = p.Ident();
    if (name == "map") {
      if (absl::Status s = ParseMap(p, w.add_epilogue()); !s.ok()) return s;
      continue;
    }
    auto e = Epilogues().find(name);
    if (e == Epilogues().end()) {
      return p.Error(name_at, absl::StrCat("unknown epilogue '", name,
                                           "' (bias, relu, relu6, clip, leaky_relu, sigmoid, "
                                           "silu, hardswish, residual, map)"));
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

// An op's attributes, parsed and checked against its OpInfo.
struct SpecAttrs {
  std::map<std::string, int64_t> v;
  std::map<std::string, float> fv;  // clip's bounds
  v1::DType dtype = v1::DTYPE_FLOAT32;
  bool tf32 = false;  // float32 tensors, the product's factors rounded to TF32

  // The integer attribute `k`, or `def` when the spec does not give it.
  int64_t Get(const std::string& k, int64_t def) const {
    auto it = v.find(k);
    return it != v.end() ? it->second : def;
  }
};

// The value of "dtype=..." (every op takes it) into `a`.
absl::Status ParseDType(const Parser& p, const std::pair<std::string, size_t>& val,
                        SpecAttrs* a) {
  if (val.first == "tf32") {
    a->tf32 = true;
  } else if (val.first == "float16" || val.first == "fp16") {
    a->dtype = v1::DTYPE_FLOAT16;
  } else if (val.first == "bfloat16" || val.first == "bf16") {
    a->dtype = v1::DTYPE_BFLOAT16;
  } else if (val.first != "float32" && val.first != "fp32") {
    return p.Error(val.second,
                   absl::StrCat("dtype must be float32, float16, bfloat16 or tf32, got '",
                                val.first, "'"));
  }
  return absl::OkStatus();
}

// "(k=v,...)" of `op` into `a`: every key one `info` names (or dtype), every
// required one present, each value a number of the attribute's kind.
absl::Status ParseAttrs(Parser& p, const std::string& op, const OpInfo& info, SpecAttrs* a) {
  std::map<std::string, std::pair<std::string, size_t>> args;
  if (absl::Status s = p.Args(&args); !s.ok()) return s;
  std::set<std::string> known(info.required.begin(), info.required.end());
  known.insert(info.optional.begin(), info.optional.end());
  for (const auto& [key, val] : args) {
    if (key == "dtype") {
      TF_RETURN_IF_ERROR(ParseDType(p, val, a));
      continue;
    }
    if (!known.count(key)) {
      std::vector<std::string> valid(info.required.begin(), info.required.end());
      valid.insert(valid.end(), info.optional.begin(), info.optional.end());
      valid.push_back("dtype");
      return p.Error(val.second - key.size() - 1,
                     absl::StrCat("unknown attribute '", key, "' for ", op, " (it takes ",
                                  absl::StrJoin(valid, ", "), ")"));
    }
    if ((op == "clip" && (key == "min" || key == "max")) || key == "eps") {
      float f;
      if (!absl::SimpleAtof(val.first, &f))
        return p.Error(val.second, absl::StrCat(key, " must be a number, got '", val.first, "'"));
      a->fv[key] = f;
      a->v[key] = 0;
      continue;
    }
    int64_t x;
    if (!absl::SimpleAtoi(val.first, &x)) {
      return p.Error(val.second, absl::StrCat(key, " must be an integer, got '", val.first, "'"));
    }
    a->v[key] = x;
  }
  for (const std::string& r : info.required) {
    if (!a->v.count(r)) return p.Error(p.pos(), absl::StrCat(op, " needs ", r));
  }
  return absl::OkStatus();
}

// Appends an input of `shape` in the spec's dtype.
void AddInput(v1::Workload& w, const SpecAttrs& a, const std::vector<int64_t>& shape) {
  auto* t = w.add_inputs();
  for (int64_t d : shape) t->add_shape(d);
  t->set_dtype(a.dtype);
}

// The conv2d_* and depthwise_conv2d_* ops.
void BuildConv(const std::string& op, SpecAttrs& sa, v1::Workload& w) {
  std::map<std::string, int64_t>& v = sa.v;
  bool nhwc = op == "conv2d_nhwc" || op == "conv2d_transpose_nhwc",
       depthwise = op == "depthwise_conv2d_nchw";
  bool transpose = op == "conv2d_transpose_nchw" || op == "conv2d_transpose_nhwc";
  w.set_op(transpose ? v1::OP_KIND_CONV2D_TRANSPOSE : v1::OP_KIND_CONV2D);
  int64_t n = v["N"], c = v["C"], h = v["H"], wd = v["W"], r = v["R"], s = v["S"];
  int64_t groups = depthwise ? c : sa.Get("groups", 1);
  int64_t k = depthwise ? c * sa.Get("multiplier", 1) : v["K"];
  int64_t cg = groups > 0 && c % groups == 0 ? c / groups : c;
  AddInput(w, sa, nhwc ? std::vector<int64_t>{n, h, wd, c} : std::vector<int64_t>{n, c, h, wd});
  if (transpose && nhwc)
    AddInput(w, sa, {r, s, c, k});
  else if (transpose)
    AddInput(w, sa, {c, groups > 0 ? k / groups : k, r, s});
  else if (nhwc && sa.Get("winograd", 0) == 2)
    AddInput(w, sa, {4, 4, cg, k});
  else if (nhwc) AddInput(w, sa, {r, s, cg, k});
  else AddInput(w, sa, {k, cg, r, s});
  auto* a = w.mutable_conv2d();
  a->set_layout(nhwc ? v1::DATA_LAYOUT_NHWC : v1::DATA_LAYOUT_NCHW);
  int64_t st = sa.Get("stride", 1), pad = sa.Get("pad", 0);
  a->add_strides(sa.Get("stride_h", st));
  a->add_strides(sa.Get("stride_w", st));
  a->add_pads(sa.Get("pad_top", pad));
  a->add_pads(sa.Get("pad_left", pad));
  a->add_pads(sa.Get("pad_bottom", pad));
  a->add_pads(sa.Get("pad_right", pad));
  const int64_t dil = sa.Get("dilation", 1);
  a->add_dilations(sa.Get("dilation_h", dil));
  a->add_dilations(sa.Get("dilation_w", dil));
  a->set_groups(groups);
  a->set_winograd(sa.Get("winograd", 0));
}

// dense, matmul and batch_matmul.
void BuildMatmul(const std::string& op, SpecAttrs& sa, v1::Workload& w) {
  std::map<std::string, int64_t>& v = sa.v;
  bool ta = sa.Get("transpose_a", 0) != 0, tb = sa.Get("transpose_b", 0) != 0;
  int64_t m = v["M"], n = v["N"], k = v["K"];
  std::vector<int64_t> a = ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
  std::vector<int64_t> b = op == "dense" || tb ? std::vector<int64_t>{n, k}
                                               : std::vector<int64_t>{k, n};
  if (op == "batch_matmul") a.insert(a.begin(), v["B"]), b.insert(b.begin(), v["B"]);
  w.set_op(op == "dense" ? v1::OP_KIND_DENSE
                         : op == "matmul" ? v1::OP_KIND_MATMUL : v1::OP_KIND_BATCH_MATMUL);
  AddInput(w, sa, a);
  AddInput(w, sa, b);
  if (op != "dense") {
    w.mutable_matmul()->set_transpose_a(ta);
    w.mutable_matmul()->set_transpose_b(tb);
  }
}

// The ops over rows of [A, N(, B)]: softmax, layer_norm, instance_norm and
// reduce_*.
void BuildRowOp(const std::string& op, SpecAttrs& a, v1::Workload& w) {
  std::map<std::string, int64_t>& v = a.v;
  std::map<std::string, float>& fv = a.fv;
  if (op == "softmax" || op == "log_softmax") {
    w.set_op(v1::OP_KIND_SOFTMAX);
    AddInput(w, a, {v["A"], v["N"], a.Get("B", 1)});
    w.mutable_softmax()->set_log(op == "log_softmax");
  } else if (op == "layer_norm" || op == "instance_norm") {
    w.set_op(v1::OP_KIND_NORMALIZE);
    const bool per_row = op == "instance_norm";
    AddInput(w, a, {v["A"], v["N"]});
    const int64_t p = a.Get("P", per_row ? v["A"] : v["N"]);
    AddInput(w, a, {p});
    if (a.Get("bias", 1) != 0) AddInput(w, a, {p});
    w.mutable_normalize()->set_epsilon(fv.count("eps") ? fv["eps"] : 1e-5f);
    w.mutable_normalize()->set_per_row(per_row);
  } else {
    w.set_op(v1::OP_KIND_REDUCE);
    AddInput(w, a, {v["A"], v["N"], a.Get("B", 1)});
    v1::ReduceOp r = v1::REDUCE_OP_UNSPECIFIED;
    v1::ReduceOp_Parse(absl::AsciiStrToUpper(absl::StrCat("reduce_op_", op.substr(7))), &r);
    w.mutable_reduce()->set_op(r);
  }
}

// The *_pool2d_* ops.
void BuildPool(const std::string& op, SpecAttrs& sa, v1::Workload& w) {
  std::map<std::string, int64_t>& v = sa.v;
  w.set_op(v1::OP_KIND_POOL2D);
  const bool nhwc = absl::EndsWith(op, "_nhwc");
  AddInput(w, sa, nhwc ? std::vector<int64_t>{v["N"], v["H"], v["W"], v["C"]}
                        : std::vector<int64_t>{v["N"], v["C"], v["H"], v["W"]});
  auto* a = w.mutable_pool2d();
  a->set_layout(nhwc ? v1::DATA_LAYOUT_NHWC : v1::DATA_LAYOUT_NCHW);
  if (absl::StartsWith(op, "global_avg_pool2d")) {
    a->set_kind(v1::POOL_KIND_GLOBAL_AVG);
  } else {
    a->set_kind(absl::StartsWith(op, "max_pool2d") ? v1::POOL_KIND_MAX : v1::POOL_KIND_AVG);
    a->add_kernel(v["R"]);
    a->add_kernel(v["S"]);
    int64_t st = sa.Get("stride", 1), pad = sa.Get("pad", 0);
    a->add_strides(st);
    a->add_strides(st);
    for (int i = 0; i < 4; ++i) a->add_pads(pad);
    a->set_ceil_mode(sa.Get("ceil_mode", 0) != 0);
    a->set_count_include_pad(sa.Get("count_include_pad", 0) != 0);
  }
}

// The elementwise ops (add, relu, clip, copy, ...).
void BuildElementwise(const std::string& op, SpecAttrs& a, v1::Workload& w) {
  std::map<std::string, int64_t>& v = a.v;
  std::map<std::string, float>& fv = a.fv;
  w.set_op(v1::OP_KIND_ELEMENTWISE);
  std::vector<int64_t> shape = {v["N"], v["C"], v["H"], v["W"]};
  AddInput(w, a, shape);
  static const std::map<std::string, v1::ElementwiseKind> kinds = {
      {"add", v1::ELEMENTWISE_KIND_ADD},   {"sub", v1::ELEMENTWISE_KIND_SUB},
      {"mul", v1::ELEMENTWISE_KIND_MUL},   {"div", v1::ELEMENTWISE_KIND_DIV},
      {"relu", v1::ELEMENTWISE_KIND_RELU}, {"sigmoid", v1::ELEMENTWISE_KIND_SIGMOID},
      {"silu", v1::ELEMENTWISE_KIND_SILU}, {"hardswish", v1::ELEMENTWISE_KIND_HARDSWISH},
      {"clip", v1::ELEMENTWISE_KIND_CLIP}, {"copy", v1::ELEMENTWISE_KIND_COPY}};
  v1::ElementwiseAttrs* ea = w.mutable_elementwise();
  ea->set_kind(kinds.at(op));
  if (op == "clip") {
    ea->set_min(fv["min"]);
    ea->set_max(fv["max"]);
  }
  if (op == "add" || op == "sub" || op == "mul" || op == "div")
    AddInput(w, a,
             {a.Get("yN", v["N"]), a.Get("yC", v["C"]), a.Get("yH", v["H"]), a.Get("yW", v["W"])});
}

// The workload of `op` (a key of Ops()) with attributes `a`, epilogues aside.
v1::Workload BuildOp(const std::string& op, SpecAttrs& a) {
  v1::Workload w;
  w.set_tf32(a.tf32);
  w.set_out_dtype(a.dtype);
  bool conv = op.find("conv2d") != std::string::npos;
  if (conv) {
    BuildConv(op, a, w);
  } else if (op == "dense" || op == "matmul" || op == "batch_matmul") {
    BuildMatmul(op, a, w);
  } else if (op == "softmax" || op == "log_softmax" || op == "layer_norm" ||
             op == "instance_norm" || absl::StartsWith(op, "reduce_")) {
    BuildRowOp(op, a, w);
  } else if (op.find("pool") != std::string::npos) {
    BuildPool(op, a, w);
  } else {
    BuildElementwise(op, a, w);
  }
  return w;
}

}  // namespace

absl::StatusOr<v1::Workload> ParseWorkloadSpec(const std::string& spec) {
  Parser p(spec);
  size_t op_at = p.pos();
  std::string op = p.Ident();
  if (op == "rearrange") {
    v1::Workload w;
    if (absl::Status s = ParseRearrange(p, &w); !s.ok()) return s;
    return ParseEpilogues(p, spec, std::move(w));
  }
  auto it = Ops().find(op);
  if (it == Ops().end()) {
    std::vector<std::string> names;
    for (const auto& [n, i] : Ops()) names.push_back(n);
    names.push_back("rearrange");
    return p.Error(op_at, absl::StrCat("unknown op '", op, "' (", absl::StrJoin(names, ", "), ")"));
  }
  SpecAttrs attrs;
  TF_RETURN_IF_ERROR(ParseAttrs(p, op, it->second, &attrs));
  return ParseEpilogues(p, spec, BuildOp(op, attrs));
}

}  // namespace tunefarm::ir
