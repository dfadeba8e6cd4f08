#include "compiler/ir/map_program.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tunefarm::ir {

using absl::InvalidArgumentError;
using absl::StrCat;

const std::vector<MapFnInfo>& MapFns() {
  static const auto* fns = new std::vector<MapFnInfo>{
      {v1::MAP_FN_ADD, "add", 2, 0, 1},
      {v1::MAP_FN_SUB, "sub", 2, 0, 1},
      {v1::MAP_FN_MUL, "mul", 2, 0, 1},
      {v1::MAP_FN_DIV, "div", 2, 0, 1},
      {v1::MAP_FN_MIN, "min", 2, 0, 1},
      {v1::MAP_FN_MAX, "max", 2, 0, 1},
      {v1::MAP_FN_PRELU, "prelu", 2, 0, 2},
      {v1::MAP_FN_NEG, "neg", 1, 0, 1},
      {v1::MAP_FN_ABS, "abs", 1, 0, 1},
      {v1::MAP_FN_SQRT, "sqrt", 1, 0, 1},
      {v1::MAP_FN_EXP, "exp", 1, 0, 3},
      {v1::MAP_FN_LOG, "log", 1, 0, 3},
      {v1::MAP_FN_TANH, "tanh", 1, 0, 3},
      {v1::MAP_FN_SIGMOID, "sigmoid", 1, 0, 3},
      {v1::MAP_FN_RELU, "relu", 1, 0, 1},
      {v1::MAP_FN_RECIPROCAL, "reciprocal", 1, 0, 1},
      {v1::MAP_FN_ERF, "erf", 1, 0, 12},
      {v1::MAP_FN_SOFTPLUS, "softplus", 1, 0, 6},
      {v1::MAP_FN_HARD_SWISH, "hard_swish", 1, 0, 4},
      {v1::MAP_FN_POW, "pow", 1, 1, 3},
      {v1::MAP_FN_CLIP, "clip", 1, 2, 2},
      {v1::MAP_FN_LEAKY_RELU, "leaky_relu", 1, 1, 2},
      {v1::MAP_FN_HARD_SIGMOID, "hard_sigmoid", 1, 2, 3},
  };
  return *fns;
}

const MapFnInfo* FindMapFn(v1::MapFn fn) {
  for (const MapFnInfo& f : MapFns())
    if (f.fn == fn) return &f;
  return nullptr;
}

const MapFnInfo* FindMapFn(std::string_view name) {
  for (const MapFnInfo& f : MapFns())
    if (f.name == name) return &f;
  return nullptr;
}

bool BroadcastsTo(const std::vector<int64_t>& input, const std::vector<int64_t>& output) {
  if (input.size() > output.size()) return false;
  const size_t off = output.size() - input.size();
  for (size_t d = 0; d < input.size(); ++d) {
    if (input[d] != 1 && input[d] != output[off + d]) return false;
  }
  return true;
}

std::vector<int> MapInputAxes(const std::vector<int64_t>& input,
                              const std::vector<int64_t>& output) {
  std::vector<int> axes(output.size(), -1);
  const size_t off = output.size() - std::min(output.size(), input.size());
  for (size_t d = off; d < output.size(); ++d) {
    if (input[d - off] != 1) axes[d] = int(d - off);
  }
  return axes;
}

absl::Status CanonicalizeMap(v1::Epilogue* e, const std::vector<int64_t>& output, v1::DType dtype,
                             const std::string& where) {
  if (e->steps().empty()) return InvalidArgumentError(StrCat(where, " map: no steps"));
  if (e->steps_size() > kMaxMapSteps || e->map_inputs_size() > kMaxMapInputs) {
    return InvalidArgumentError(StrCat(where, " map: ", e->steps_size(), " steps and ",
                                       e->map_inputs_size(), " inputs (limits ", kMaxMapSteps,
                                       " and ", kMaxMapInputs, ")"));
  }
  if (e->alpha() != 0 || e->min() != 0 || e->max() != 0)
    return InvalidArgumentError(StrCat(where, " map: alpha, min and max are not read"));
  for (int i = 0; i < e->map_inputs_size(); ++i) {
    v1::TensorSpec* t = e->mutable_map_inputs(i);
    const std::string name = StrCat(where, " map input ", i);
    if (t->dtype() == v1::DTYPE_UNSPECIFIED) t->set_dtype(dtype);
    if (t->dtype() != v1::DTYPE_FLOAT32 && t->dtype() != v1::DTYPE_FLOAT16 &&
        t->dtype() != v1::DTYPE_BFLOAT16)
      return InvalidArgumentError(StrCat(name, ": not float32, float16 or bfloat16"));
    std::vector<int64_t> s(t->shape().begin(), t->shape().end());
    for (int64_t d : s) {
      if (d <= 0) return InvalidArgumentError(StrCat(name, " has dimension ", d));
    }
    while (s.size() > 1 && s[0] == 1) s.erase(s.begin());
    if (s.empty()) s = {1};
    if (s.size() > output.size())
      return InvalidArgumentError(StrCat(name, " has more dimensions than the output"));
    if (!BroadcastsTo(s, output)) {
      return InvalidArgumentError(StrCat(name, " (", absl::StrJoin(s, "x"),
                                         ") does not broadcast to the output (",
                                         absl::StrJoin(output, "x"), ")"));
    }
    t->clear_shape();
    for (int64_t d : s) t->add_shape(d);
  }
  std::vector<int64_t> tree = {1};  // expression size of each value written out
  for (int k = 0; k < e->steps_size(); ++k) {
    const v1::MapStep& st = e->steps(k);
    const std::string name = StrCat(where, " map step ", k + 1);
    const MapFnInfo* f = FindMapFn(st.fn());
    if (f == nullptr) return InvalidArgumentError(StrCat(name, ": function unset or unknown"));
    if (st.args_size() != f->tensors + f->literals) {
      return InvalidArgumentError(StrCat(name, " (", std::string(f->name), "): takes ", f->tensors,
                                         " tensor and ", f->literals, " literal operands, got ",
                                         st.args_size()));
    }
    int64_t size = 1;
    for (int a = 0; a < st.args_size(); ++a) {
      const v1::MapOperand& op = st.args(a);
      const bool literal = a >= f->tensors;
      if (literal != (op.source_case() == v1::MapOperand::kLiteral)) {
        return InvalidArgumentError(StrCat(name, " (", std::string(f->name), ") operand ", a + 1,
                                           ": expected ",
                                           literal ? "a literal" : "a value or an input"));
      }
      if (literal && !std::isfinite(op.literal()))
        return InvalidArgumentError(StrCat(name, " operand ", a + 1, ": not a finite number"));
      if (op.source_case() == v1::MapOperand::kValue) {
        if (op.value() < 0 || op.value() > k)
          return InvalidArgumentError(StrCat(name, " operand ", a + 1, ": no value ", op.value()));
        size += tree[size_t(op.value())];
      } else if (op.source_case() == v1::MapOperand::kInput) {
        if (op.input() < 0 || op.input() >= e->map_inputs_size())
          return InvalidArgumentError(StrCat(name, " operand ", a + 1, ": no input ", op.input()));
        ++size;
      } else if (op.source_case() != v1::MapOperand::kLiteral) {
        return InvalidArgumentError(StrCat(name, " operand ", a + 1, " is unset"));
      }
    }
    if (st.fn() == v1::MAP_FN_CLIP && !(st.args(1).literal() <= st.args(2).literal()))
      return InvalidArgumentError(StrCat(name, " (clip): min > max"));
    size = std::min(size, kMaxMapTree + 1);
    if (size > kMaxMapTree) {
      return InvalidArgumentError(StrCat(where,
                                         " map: the program written out as one expression passes ",
                                         kMaxMapTree, " terms at step ", k + 1));
    }
    tree.push_back(size);
  }
  return absl::OkStatus();
}

double MapFlops(const v1::Epilogue& e) {
  double f = 0;
  for (const v1::MapStep& s : e.steps()) {
    const MapFnInfo* info = FindMapFn(s.fn());
    f += info == nullptr ? 1 : info->flops;
  }
  return f;
}

std::string DescribeMap(const v1::Epilogue& e) {
  std::vector<std::string> names;
  for (const v1::MapStep& s : e.steps()) {
    const MapFnInfo* info = FindMapFn(s.fn());
    names.emplace_back(info == nullptr ? "?" : info->name);
  }
  return StrCat("map(", absl::StrJoin(names, ","), ")");
}

}  // namespace tunefarm::ir
