#include "compiler/frontend/model_rewrites.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "compiler/frontend/op_registry.h"

namespace tunefarm::frontend {
namespace {

Node Binary(const std::string& op, const std::string& name, const std::string& a,
            const std::string& b, const std::string& out) {
  Node n;
  n.op = op;
  n.name = name;
  n.inputs = {a, b};
  n.outputs = {out};
  return n;
}

}  // namespace

void RewriteLoneBatchNorms(Model* mp) {
  Model& m = *mp;
  std::map<std::string, std::string> producer;  // value -> the op that writes it
  std::map<std::string, int> uses;
  for (const Node& n : m.nodes) {
    for (const std::string& o : n.outputs) producer[o] = n.op;
    for (const std::string& in : n.inputs) ++uses[in];
  }
  for (const std::string& o : m.outputs) ++uses[o];
  auto fresh = [&m](std::string name) {
    while (m.shapes.count(name)) name += "'";
    return name;
  };
  std::vector<Node> nodes;
  for (Node& n : m.nodes) {
    const std::string& x = n.inputs.empty() ? n.op : n.inputs[0];
    bool lone = n.op == "BatchNormalization" && n.inputs.size() == 5 && n.outputs.size() == 1 &&
                n.Int("training_mode", 0) == 0 && n.Int("spatial", 1) == 1 && m.shapes.count(x) &&
                m.shapes.at(x).size() >= 2;
    const int64_t c = lone ? m.shapes.at(x)[1] : 0;
    for (size_t k = 1; lone && k < 5; ++k) {
      auto it = m.constants.find(n.inputs[k]);
      lone = it != m.constants.end() && !it->second.is_int && it->second.size() == c;
    }
    if (lone) {
      if (auto p = producer.find(x); p != producer.end()) {
        const OpDef* def = FindOp(p->second);
        lone = def == nullptr || def->fusion != FusionRole::kAnchor ||
               def->scale_weights == nullptr || uses[x] != 1;
      }
    }
    if (!lone) {
      nodes.push_back(std::move(n));
      continue;
    }
    const double eps = n.Float("epsilon", 1e-5f);
    const auto& g = m.constants.at(n.inputs[1]).floats;
    const auto& beta = m.constants.at(n.inputs[2]).floats;
    const auto& mean = m.constants.at(n.inputs[3]).floats;
    const auto& var = m.constants.at(n.inputs[4]).floats;
    Constant a, b;
    a.shape.assign(m.shapes.at(x).size() - 1, 1);
    a.shape[0] = c;
    b.shape = a.shape;
    for (int64_t i = 0; i < c; ++i) {
      const double s = double(g[size_t(i)]) / std::sqrt(double(var[size_t(i)]) + eps);
      a.floats.push_back(float(s));
      b.floats.push_back(float(double(beta[size_t(i)]) - double(mean[size_t(i)]) * s));
    }
    const std::string& y = n.outputs[0];
    const std::string an = fresh(y + "/bn_scale"), bn = fresh(y + "/bn_shift");
    m.shapes[an] = a.shape;
    m.constants[an] = std::move(a);
    m.shapes[bn] = b.shape;
    m.constants[bn] = std::move(b);
    const std::string mid = fresh(y + "/bn_scaled");
    m.shapes[mid] = m.shapes.at(x);
    nodes.push_back(Binary("Mul", n.name + "/scale", x, an, mid));
    nodes.push_back(Binary("Add", n.name + "/shift", mid, bn, y));
  }
  m.nodes = std::move(nodes);
}
}  // namespace tunefarm::frontend
