#include "compiler/ir/workload_spec.h"

#include <map>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/ir/map_program.h"
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
      {"conv2d_nchw",
       {{"N", "C", "H", "W", "K", "R", "S"},
        {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom", "pad_right",
         "dilation", "dilation_h", "dilation_w", "groups"},
        "2-D convolution, NCHW data, OIHW weights"}},
      {"conv2d_nhwc",
       {{"N", "C", "H", "W", "K", "R", "S"},
        {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom", "pad_right",
         "dilation", "dilation_h", "dilation_w", "groups", "winograd"},
        "2-D convolution, NHWC data, HWIO weights (winograd=2: F(2x2,3x3), weights [4,4,C,K])"}},
      {"depthwise_conv2d_nchw",
       {{"N", "C", "H", "W", "R", "S"},
        {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom", "pad_right",
         "dilation", "dilation_h", "dilation_w", "multiplier"},
        "depthwise convolution (groups = C)"}},
      {"conv2d_transpose_nchw",
       {{"N", "C", "H", "W", "K", "R", "S"},
        {"stride", "stride_h", "stride_w", "pad", "pad_top", "pad_left", "pad_bottom", "pad_right",
         "dilation", "dilation_h", "dilation_w", "groups"},
        "transposed convolution, weights [C, K/groups, R, S]"}},
      {"conv2d_transpose_nhwc",
       {{"N", "C", "H", "W", "K", "R", "S"},
        {"stride", "stride_h", "stride_w"},
        "transposed convolution, NHWC data, weights [R, S, C, K], kernel = stride"}},
      {"dense", {{"M", "N", "K"}, {}, "data [M,K] x weight [N,K]^T"}},
      {"matmul", {{"M", "N", "K"}, {"transpose_a", "transpose_b"}, "a [M,K] x b [K,N]"}},
      {"batch_matmul",
       {{"B", "M", "N", "K"}, {"transpose_a", "transpose_b"}, "a [B,M,K] x b [B,K,N]"}},
      {"max_pool2d_nchw",
       {{"N", "C", "H", "W", "R", "S"}, {"stride", "pad", "ceil_mode"}, "max pooling"}},
      {"avg_pool2d_nchw",
       {{"N", "C", "H", "W", "R", "S"},
        {"stride", "pad", "ceil_mode", "count_include_pad"},
        "average pooling"}},
      {"global_avg_pool2d_nchw", {{"N", "C", "H", "W"}, {}, "global average pooling"}},
      {"max_pool2d_nhwc",
       {{"N", "C", "H", "W", "R", "S"}, {"stride", "pad", "ceil_mode"}, "max pooling, NHWC data"}},
      {"avg_pool2d_nhwc",
       {{"N", "C", "H", "W", "R", "S"},
        {"stride", "pad", "ceil_mode", "count_include_pad"},
        "average pooling, NHWC data"}},
      {"global_avg_pool2d_nhwc", {{"N", "C", "H", "W"}, {}, "global average pooling, NHWC data"}},
      {"softmax", {{"A", "N"}, {"B"}, "softmax over N of [A, N, B] (B default 1)"}},
      {"log_softmax", {{"A", "N"}, {"B"}, "log of softmax over N of [A, N, B]"}},
      {"layer_norm",
       {{"A", "N"},
        {"eps", "bias", "P"},
        "each row of [A, N] normalized, scale and bias [P] repeating along the row (eps default "
        "1e-5; bias=0: none; P default N)"}},
      {"instance_norm",
       {{"A", "N"},
        {"eps", "bias", "P"},
        "each row of [A, N] normalized, scale and bias [P] repeating over the rows (channels of "
        "images; P default A)"}},
      {"reduce_sum", {{"A", "N"}, {"B"}, "sum over N of [A, N, B] into [A, B]"}},
      {"reduce_mean", {{"A", "N"}, {"B"}, "mean over N of [A, N, B]"}},
      {"reduce_max", {{"A", "N"}, {"B"}, "max over N of [A, N, B]"}},
      {"reduce_min", {{"A", "N"}, {"B"}, "min over N of [A, N, B]"}},
      {"reduce_l1", {{"A", "N"}, {"B"}, "sum of |x| over N of [A, N, B]"}},
      {"reduce_l2", {{"A", "N"}, {"B"}, "sqrt of the sum of x^2 over N of [A, N, B]"}},
      {"reduce_sum_square", {{"A", "N"}, {"B"}, "sum of x^2 over N of [A, N, B]"}},
      {"reduce_log_sum", {{"A", "N"}, {"B"}, "log of the sum over N of [A, N, B]"}},
      {"reduce_log_sum_exp", {{"A", "N"}, {"B"}, "log of the sum of exp(x) over N of [A, N, B]"}},
      {"reduce_prod", {{"A", "N"}, {"B"}, "product over N of [A, N, B]"}},
      {"add",
       {{"N", "C", "H", "W"},
        {"yN", "yC", "yH", "yW"},
        "elementwise x + y; y's dimensions default to x's, either broadcasts"}},
      {"sub", {{"N", "C", "H", "W"}, {"yN", "yC", "yH", "yW"}, "elementwise x - y"}},
      {"mul", {{"N", "C", "H", "W"}, {"yN", "yC", "yH", "yW"}, "elementwise x * y"}},
      {"div", {{"N", "C", "H", "W"}, {"yN", "yC", "yH", "yW"}, "elementwise x / y"}},
      {"clip", {{"N", "C", "H", "W", "min", "max"}, {}, "elementwise clamp to [min, max]"}},
      {"relu", {{"N", "C", "H", "W"}, {}, "elementwise relu"}},
      {"sigmoid", {{"N", "C", "H", "W"}, {}, "elementwise sigmoid"}},
      {"silu", {{"N", "C", "H", "W"}, {}, "elementwise x*sigmoid(x)"}},
      {"hardswish", {{"N", "C", "H", "W"}, {}, "elementwise hardswish"}},
      {"copy", {{"N", "C", "H", "W"}, {}, "elementwise y = x (with +map, a program over x)"}},
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
  std::string Digits() {
    size_t b = pos_;
    while (pos_ < s_.size() && isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
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

absl::StatusOr<v1::Workload> ParseEpilogues(Parser& p, const std::string& spec, v1::Workload w);

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

}  // namespace

std::string WorkloadSpecHelp() {
  std::string out = "workload specs: OP(ATTR=VALUE,...)[+EPILOGUE...]\n";
  for (const auto& [name, info] : Ops()) {
    absl::StrAppend(&out, "  ", name, "(", absl::StrJoin(info.required, ","));
    if (!info.optional.empty()) absl::StrAppend(&out, " [,", absl::StrJoin(info.optional, ","), "]");
    absl::StrAppend(&out, ")  ", info.help, "\n");
  }
  absl::StrAppend(
      &out,
      "  rearrange(out=SHAPE[,fill=F],x0=SHAPE[INDEX,...][,x1=...])  a data mover:\n"
      "  each output element is the first input's element at its INDEX (one per\n"
      "  input dimension: [MUL*]oD[+ADD][/DIV] of output dimension D, floored,\n"
      "  or a number) inside that input, else F (0); with linear=1 (one input) a\n"
      "  linear resize: (MUL*oD+ADD)/DIV is a real coordinate, interpolated\n"
      "  between its floor and the next index, both clamped into the input\n"
      "every op but rearrange also takes dtype=float16 or dtype=bfloat16 (every\n"
      "  tensor of that dtype, float32 arithmetic; cuda targets only, bfloat16 on\n"
      "  sm_80 and newer); products (conv2d[_transpose], dense, matmul, batch_matmul) take\n"
      "  dtype=tf32: float32 tensors, factors rounded to TF32 for the tensor cores\n"
      "  (cuda sm_80 and newer)\n");
  absl::StrAppend(&out,
                  "epilogues: +bias +relu +relu6 +clip(min=A,max=B) +leaky_relu(alpha=A) "
                  "+sigmoid +silu +hardswish +residual\n"
                  "  +map[SHAPE,...](FN(ARG,...),...): an elementwise program; SHAPEs are\n"
                  "  extra inputs broadcast to the output (64x1x1), ARG is %K (0: the value\n"
                  "  so far, K: step K's result), $K (extra input K) or a number; FN one of\n   ");
  for (const MapFnInfo& f : MapFns()) absl::StrAppend(&out, " ", std::string(f.name));
  absl::StrAppend(&out, "\n");
  return out;
}

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
  std::map<std::string, std::pair<std::string, size_t>> args;
  if (absl::Status s = p.Args(&args); !s.ok()) return s;
  std::set<std::string> known(it->second.required.begin(), it->second.required.end());
  known.insert(it->second.optional.begin(), it->second.optional.end());
  std::map<std::string, int64_t> v;
  std::map<std::string, float> fv;  // clip's bounds
  v1::DType dtype = v1::DTYPE_FLOAT32;
  bool tf32 = false;  // float32 tensors, the product's factors rounded to TF32
  for (const auto& [key, val] : args) {
    if (key == "dtype") {  // every op takes it
      if (val.first == "tf32") {
        tf32 = true;
      } else if (val.first == "float16" || val.first == "fp16") {
        dtype = v1::DTYPE_FLOAT16;
      } else if (val.first == "bfloat16" || val.first == "bf16") {
        dtype = v1::DTYPE_BFLOAT16;
      } else if (val.first != "float32" && val.first != "fp32") {
        return p.Error(val.second,
                       absl::StrCat("dtype must be float32, float16, bfloat16 or tf32, got '",
                                    val.first, "'"));
      }
      continue;
    }
    if (!known.count(key)) {
      std::vector<std::string> valid(it->second.required.begin(), it->second.required.end());
      valid.insert(valid.end(), it->second.optional.begin(), it->second.optional.end());
      valid.push_back("dtype");
      return p.Error(val.second - key.size() - 1,
                     absl::StrCat("unknown attribute '", key, "' for ", op, " (it takes ",
                                  absl::StrJoin(valid, ", "), ")"));
    }
    if ((op == "clip" && (key == "min" || key == "max")) || key == "eps") {
      float f;
      if (!absl::SimpleAtof(val.first, &f))
        return p.Error(val.second, absl::StrCat(key, " must be a number, got '", val.first, "'"));
      fv[key] = f;
      v[key] = 0;
      continue;
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
  w.set_tf32(tf32);
  auto add_input = [&](std::vector<int64_t> shape) {
    auto* t = w.add_inputs();
    for (int64_t d : shape) t->add_shape(d);
    t->set_dtype(dtype);
  };
  w.set_out_dtype(dtype);
  bool conv = op.find("conv2d") != std::string::npos;
  if (conv) {
    bool nhwc = op == "conv2d_nhwc" || op == "conv2d_transpose_nhwc",
         depthwise = op == "depthwise_conv2d_nchw";
    bool transpose = op == "conv2d_transpose_nchw" || op == "conv2d_transpose_nhwc";
    w.set_op(transpose ? v1::OP_KIND_CONV2D_TRANSPOSE : v1::OP_KIND_CONV2D);
    int64_t n = v["N"], c = v["C"], h = v["H"], wd = v["W"], r = v["R"], s = v["S"];
    int64_t groups = depthwise ? c : get("groups", 1);
    int64_t k = depthwise ? c * get("multiplier", 1) : v["K"];
    int64_t cg = groups > 0 && c % groups == 0 ? c / groups : c;
    add_input(nhwc ? std::vector<int64_t>{n, h, wd, c} : std::vector<int64_t>{n, c, h, wd});
    if (transpose && nhwc)
      add_input({r, s, c, k});
    else if (transpose)
      add_input({c, groups > 0 ? k / groups : k, r, s});
    else if (nhwc && get("winograd", 0) == 2)
      add_input({4, 4, cg, k});
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
    const int64_t dil = get("dilation", 1);
    a->add_dilations(get("dilation_h", dil));
    a->add_dilations(get("dilation_w", dil));
    a->set_groups(groups);
    a->set_winograd(get("winograd", 0));
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
  } else if (op == "softmax" || op == "log_softmax") {
    w.set_op(v1::OP_KIND_SOFTMAX);
    add_input({v["A"], v["N"], get("B", 1)});
    w.mutable_softmax()->set_log(op == "log_softmax");
  } else if (op == "layer_norm" || op == "instance_norm") {
    w.set_op(v1::OP_KIND_NORMALIZE);
    const bool per_row = op == "instance_norm";
    add_input({v["A"], v["N"]});
    const int64_t p = get("P", per_row ? v["A"] : v["N"]);
    add_input({p});
    if (get("bias", 1) != 0) add_input({p});
    w.mutable_normalize()->set_epsilon(fv.count("eps") ? fv["eps"] : 1e-5f);
    w.mutable_normalize()->set_per_row(per_row);
  } else if (absl::StartsWith(op, "reduce_")) {
    w.set_op(v1::OP_KIND_REDUCE);
    add_input({v["A"], v["N"], get("B", 1)});
    v1::ReduceOp r = v1::REDUCE_OP_UNSPECIFIED;
    v1::ReduceOp_Parse(absl::AsciiStrToUpper(absl::StrCat("reduce_op_", op.substr(7))), &r);
    w.mutable_reduce()->set_op(r);
  } else if (op.find("pool") != std::string::npos) {
    w.set_op(v1::OP_KIND_POOL2D);
    const bool nhwc = absl::EndsWith(op, "_nhwc");
    add_input(nhwc ? std::vector<int64_t>{v["N"], v["H"], v["W"], v["C"]}
                   : std::vector<int64_t>{v["N"], v["C"], v["H"], v["W"]});
    auto* a = w.mutable_pool2d();
    a->set_layout(nhwc ? v1::DATA_LAYOUT_NHWC : v1::DATA_LAYOUT_NCHW);
    if (absl::StartsWith(op, "global_avg_pool2d")) {
      a->set_kind(v1::POOL_KIND_GLOBAL_AVG);
    } else {
      a->set_kind(absl::StartsWith(op, "max_pool2d") ? v1::POOL_KIND_MAX : v1::POOL_KIND_AVG);
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
      add_input({get("yN", v["N"]), get("yC", v["C"]), get("yH", v["H"]), get("yW", v["W"])});
  }

  return ParseEpilogues(p, spec, std::move(w));
}

namespace {

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
