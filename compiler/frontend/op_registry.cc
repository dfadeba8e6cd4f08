#include "compiler/frontend/op_registry.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"

namespace tunefarm::frontend {

using absl::InvalidArgumentError;
using absl::StrCat;

namespace {

constexpr double kMaxElements = 1e12;

bool LessNoCase(std::string_view a, std::string_view b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) <
           std::tolower(static_cast<unsigned char>(y));
  });
}

}  // namespace

//===--- Shapes and constants ---------------------------------------------===//

std::string ShapeText(const Shape& s) { return s.empty() ? "scalar" : absl::StrJoin(s, "x"); }

v1::TensorSpec FloatSpec(const Shape& s) {
  v1::TensorSpec t;
  for (int64_t d : s) t.add_shape(d);
  t.set_dtype(v1::DTYPE_FLOAT32);
  return t;
}

std::vector<std::vector<int64_t>> ReducedRuns(const Shape& x, const std::vector<bool>& reduced) {
  std::vector<std::vector<int64_t>> runs;
  bool open = false;
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 1) continue;
    if (!reduced[d]) {
      open = false;
      continue;
    }
    if (!open) runs.emplace_back();
    runs.back().push_back(int64_t(d));
    open = true;
  }
  return runs;
}

std::optional<Shape> ReduceRunForm(const Shape& x, const std::vector<bool>& reduced) {
  const std::vector<std::vector<int64_t>> runs = ReducedRuns(x, reduced);
  if (runs.size() != 1) return std::nullopt;
  const int64_t first = runs[0].front(), last = runs[0].back();
  int64_t a = 1, len = 1, b = 1;
  for (size_t d = 0; d < x.size(); ++d)
    (int64_t(d) < first ? a : int64_t(d) > last ? b : len) *= x[d];
  return b > 1 ? Shape{a, len, b} : Shape{a, len};
}

std::string AddConstant(Model* m, const std::string& name, Constant c) {
  m->shapes[name] = c.shape;
  m->constants[name] = std::move(c);
  return name;
}

std::string AddIntConstant(Model* m, const std::string& name, const std::vector<int64_t>& values) {
  Constant c;
  c.is_int = true;
  c.shape = {int64_t(values.size())};
  c.ints = values;
  return AddConstant(m, name, std::move(c));
}

Node ExpandedNode(const Node& parent, const std::string& op, std::vector<std::string> inputs,
                  std::string output) {
  Node node;
  node.op = op;
  node.name = StrCat(parent.name, "/", op, "_", output);
  node.inputs = std::move(inputs);
  node.outputs = {std::move(output)};
  return node;
}

std::string BinaryChain(const Node& parent, const std::string& op, const std::string& output,
                        std::vector<Node>* nodes) {
  std::string acc = parent.inputs[0];
  for (size_t i = 1; i < parent.inputs.size(); ++i) {
    const bool last = i + 1 == parent.inputs.size();
    nodes->push_back(ExpandedNode(parent, op, {acc, parent.inputs[i]},
                                  last ? output : StrCat(output, "/", op, i)));
    acc = nodes->back().outputs[0];
  }
  return acc;
}

double Elements(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= double(d);
  return n;
}

absl::Status CheckShape(const Shape& s, const std::string& what) {
  for (int64_t d : s) {
    if (d < 0 || d > kMaxDim) return InvalidArgumentError(StrCat(what, " has dimension ", d));
  }
  if (s.size() > 8 || Elements(s) > kMaxElements) {
    return InvalidArgumentError(StrCat(what, " is too large (", ShapeText(s), ")"));
  }
  return absl::OkStatus();
}

bool IsFloatElementType(int64_t type) {
  // TensorProto.DataType: FLOAT 1, FLOAT16 10, DOUBLE 11, BFLOAT16 16.
  return type == 1 || type == 10 || type == 11 || type == 16;
}

double ConstValue(const Constant& c, int64_t i) {
  return c.is_int ? double(c.ints[size_t(i)]) : double(c.floats[size_t(i)]);
}

void PushValue(Constant* c, double v) {
  if (c->is_int) {
    c->ints.push_back(int64_t(v));
  } else {
    c->floats.push_back(float(v));
  }
}

int64_t ValueCount(const Constant& c) {
  return int64_t(c.is_int ? c.ints.size() : c.floats.size());
}

bool PerChannel(Shape s, const Shape& out, size_t axis) {
  if (s.size() > out.size()) return false;
  s.insert(s.begin(), out.size() - s.size(), 1);
  for (size_t d = 0; d < out.size(); ++d) {
    if (s[d] != (d == axis ? out[d] : 1)) return false;
  }
  return true;
}

//===--- ShapeContext -----------------------------------------------------===//

absl::Status ShapeContext::Error(const Node& n, const std::string& msg) const {
  return InvalidArgumentError(StrCat(n.op, " node '", n.name, "': ", msg));
}

absl::StatusOr<Shape> ShapeContext::In(const Node& n, size_t i) const {
  if (!Has(n, i)) return Error(n, StrCat("input ", i, " is missing"));
  auto it = m_.shapes.find(n.inputs[i]);
  if (it == m_.shapes.end()) return Error(n, StrCat("no shape for '", n.inputs[i], "'"));
  return it->second;
}

const Constant* ShapeContext::Const(const Node& n, size_t i) const {
  if (!Has(n, i)) return nullptr;
  auto it = m_.constants.find(n.inputs[i]);
  return it == m_.constants.end() ? nullptr : &it->second;
}

bool ShapeContext::InputsConstant(const Node& n) const {
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (Has(n, i) && Const(n, i) == nullptr) return false;
  }
  return true;
}

absl::StatusOr<std::vector<int64_t>> ShapeContext::ConstInts(const Node& n, size_t i) const {
  const Constant* c = Const(n, i);
  if (c == nullptr) {
    return Error(n, StrCat("input ", i, " ('", Has(n, i) ? n.inputs[i] : "",
                           "') decides a shape "
                           "and must be constant once input shapes are fixed"));
  }
  if (c->is_int) return c->ints;
  std::vector<int64_t> v;
  for (float f : c->floats) v.push_back(int64_t(f));
  return v;
}

absl::StatusOr<std::vector<float>> ShapeContext::ConstFloats(const Node& n, size_t i) const {
  const Constant* c = Const(n, i);
  if (c == nullptr) return Error(n, StrCat("input ", i, " must be constant"));
  if (!c->is_int) return c->floats;
  return std::vector<float>(c->ints.begin(), c->ints.end());
}

absl::StatusOr<int64_t> ShapeContext::Axis(const Node& n, int64_t axis, size_t rank) const {
  int64_t r = int64_t(rank);
  if (axis < -r || axis >= r) return Error(n, StrCat("axis ", axis, " out of range for rank ", r));
  return axis < 0 ? axis + r : axis;
}

absl::StatusOr<Shape> ShapeContext::Broadcast(const Node& n, const Shape& a,
                                              const Shape& b) const {
  size_t rank = std::max(a.size(), b.size());
  Shape r(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1) {
      return Error(n, StrCat("shapes ", ShapeText(a), " and ", ShapeText(b), " do not broadcast"));
    }
    r[i] = x == 1 ? y : x;
  }
  return r;
}

absl::Status ShapeContext::FoldBroadcast(const Node& n, const std::vector<size_t>& inputs,
                                         const Shape& out, bool to_int,
                                         double (*f)(const double*), bool* folded) {
  if (Elements(out) > kMaxFoldElements || inputs.size() > 4) return absl::OkStatus();
  const size_t r = out.size();
  std::vector<const Constant*> in;
  std::vector<Shape> strides;  // per input, over `out`'s dimensions (0: broadcast)
  for (size_t i : inputs) {
    const Constant* k = Const(n, i);
    if (k == nullptr || k->shape.size() > r) return absl::OkStatus();
    Shape full(r - k->shape.size(), 1);
    full.insert(full.end(), k->shape.begin(), k->shape.end());
    Shape st(r, 0);
    for (int64_t d = int64_t(r) - 1, step = 1; d >= 0; --d) {
      if (full[size_t(d)] != out[size_t(d)] && full[size_t(d)] != 1)
        return Error(n, StrCat("shapes ", ShapeText(k->shape), " and ", ShapeText(out),
                               " do not broadcast"));
      st[size_t(d)] = full[size_t(d)] == 1 ? 0 : step;
      step *= full[size_t(d)];
    }
    in.push_back(k);
    strides.push_back(std::move(st));
  }
  Constant result;
  result.is_int = to_int;
  result.shape = out;
  const int64_t total = int64_t(Elements(out));
  Shape idx(r, 0);
  double v[4];
  for (int64_t e = 0; e < total; ++e) {
    for (size_t k = 0; k < in.size(); ++k) {
      int64_t off = 0;
      for (size_t d = 0; d < r; ++d) off += idx[d] * strides[k][d];
      v[k] = ConstValue(*in[k], off);
    }
    PushValue(&result, f(v));
    for (int64_t d = int64_t(r) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < out[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  *folded = true;
  return SetConst(n, 0, std::move(result));
}

absl::Status ShapeContext::Set(const Node& n, size_t out, Shape s) {
  if (out >= n.outputs.size() || n.outputs[out].empty()) return absl::OkStatus();
  TF_RETURN_IF_ERROR(CheckShape(s, StrCat(n.op, " node '", n.name, "' output")));
  m_.shapes[n.outputs[out]] = std::move(s);
  return absl::OkStatus();
}

absl::Status ShapeContext::SetConst(const Node& n, size_t out, Constant c) {
  TF_RETURN_IF_ERROR(Set(n, out, c.shape));
  m_.constants[n.outputs[out]] = std::move(c);
  return absl::OkStatus();
}

void ShapeContext::SetValues(const Node& n, Constant c) {
  m_.constants[n.outputs[0]] = std::move(c);
}

//===--- The registry -----------------------------------------------------===//

const std::vector<const OpDef*>& AllOps() {
  static const auto* ops = [] {
    auto* all = new std::vector<const OpDef*>;
    for (const std::vector<OpDef>* family :
         {&NnOps(), &ElementwiseOps(), &ShapeOps(), &IndexOps(), &ReduceOps(), &EinsumOps()}) {
      for (const OpDef& d : *family) all->push_back(&d);
    }
    std::sort(all->begin(), all->end(),
              [](const OpDef* a, const OpDef* b) { return LessNoCase(a->name, b->name); });
    return all;
  }();
  return *ops;
}

const OpDef* FindOp(std::string_view op) {
  static const auto* by_name = [] {
    auto* m = new std::map<std::string_view, const OpDef*>;
    for (const OpDef* d : AllOps()) m->emplace(d->name, d);
    return m;
  }();
  auto it = by_name->find(op);
  return it == by_name->end() ? nullptr : it->second;
}

FusionRole FusionRoleOf(std::string_view op) {
  const OpDef* d = FindOp(op);
  return d == nullptr ? FusionRole::kNone : d->fusion;
}

const std::vector<std::string>& SupportedOps() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (const OpDef* d : AllOps()) v->emplace_back(d->name);
    return v;
  }();
  return *names;
}

}  // namespace tunefarm::frontend
