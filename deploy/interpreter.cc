#include "deploy/interpreter.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device_agent/runtime/ops.h"

namespace tunefarm::deploy {

using frontend::Model;
using graph::Node;
using graph::Numel;

using runtime::OpArgs;
using runtime::RunOp;

template <typename T>
absl::StatusOr<Values<T>> Interpret(const Model& model, const Values<T>& inputs) {
  Values<T> v;
  for (const std::string& name : model.inputs) {
    auto it = inputs.find(name);
    if (it == inputs.end())
      return absl::InvalidArgumentError(absl::StrCat("no input '", name, "'"));
    if (int64_t(it->second.size()) != Numel(model.shapes.at(name)))
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has ", it->second.size(),
                                                     " elements, the model needs ",
                                                     Numel(model.shapes.at(name))));
    v[name] = it->second;
  }
  for (const auto& [name, c] : model.constants) {
    std::vector<T>& d = v[name];
    if (c.is_int) {
      d.assign(c.ints.begin(), c.ints.end());
    } else {
      d.assign(c.floats.begin(), c.floats.end());
    }
  }
  // Where a zero-size value's data would be: not null (null marks an
  // absent input or output), never read or written.
  T no_elements[1] = {T(0)};
  auto data = [&](std::vector<T>& d) { return d.empty() ? no_elements : d.data(); };
  for (const Node& n : model.nodes) {
    OpArgs<T> a;
    a.node = &n;
    a.opset = model.opset;
    for (const std::string& in : n.inputs) {
      if (in.empty()) {
        a.in.push_back(nullptr);
        a.in_shapes.push_back({});
        a.in_const.push_back(nullptr);
        continue;
      }
      auto it = v.find(in);
      if (it == v.end())
        return absl::InternalError(absl::StrCat("node '", n.name, "': '", in, "' not computed"));
      a.in.push_back(data(it->second));
      a.in_shapes.push_back(model.shapes.at(in));
      auto c = model.constants.find(in);
      a.in_const.push_back(c == model.constants.end() ? nullptr : &c->second);
    }
    for (const std::string& out : n.outputs) {
      if (out.empty() || !model.shapes.count(out)) {
        a.out.push_back(nullptr);
        a.out_shapes.push_back({});
        continue;
      }
      std::vector<T>& d = v[out];
      d.assign(size_t(Numel(model.shapes.at(out))), T(0));
      a.out.push_back(data(d));
      a.out_shapes.push_back(model.shapes.at(out));
    }
    TF_RETURN_IF_ERROR(RunOp(a));
  }
  return v;
}

template absl::StatusOr<Values<float>> Interpret(const Model&, const Values<float>&);
template absl::StatusOr<Values<double>> Interpret(const Model&, const Values<double>&);

Values<float> RandomModelInputs(const Model& model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Values<float> in;
  for (const std::string& name : model.inputs) {
    std::vector<float>& d = in[name];
    d.resize(size_t(Numel(model.shapes.at(name))));
    for (float& x : d) x = u(rng);
  }
  return in;
}

}  // namespace tunefarm::deploy
