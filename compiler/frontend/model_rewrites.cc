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
namespace {

// The pads of Pad node `n` when it pads with zeros in constant mode and
// every pad is a known non-negative constant; empty otherwise.
std::vector<int64_t> ZeroPads(const Model& m, const Node& n) {
  auto mode = n.strings.find("mode");
  if (mode != n.strings.end() && mode->second != "constant") return {};
  std::vector<int64_t> pads = n.Ints("pads");
  if (n.inputs.size() > 3 && !n.inputs[3].empty()) return {};  // axes (opset 18)
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    auto it = m.constants.find(n.inputs[1]);
    if (it == m.constants.end() || !it->second.is_int) return {};
    pads = it->second.ints;
  }
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    auto it = m.constants.find(n.inputs[2]);
    if (it == m.constants.end()) return {};
    for (float v : it->second.floats)
      if (v != 0) return {};
    for (int64_t v : it->second.ints)
      if (v != 0) return {};
  }
  if (n.Float("value", 0) != 0) return {};
  for (int64_t p : pads)
    if (p < 0) return {};
  return pads;
}

}  // namespace

void FoldPadsIntoConvs(Model* mp) {
  Model& m = *mp;
  std::map<std::string, int> producer, uses;
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    for (const std::string& o : m.nodes[i].outputs) producer[o] = int(i);
    for (const std::string& in : m.nodes[i].inputs) ++uses[in];
  }
  for (const std::string& o : m.outputs) ++uses[o];
  std::vector<bool> dropped(m.nodes.size(), false);
  for (Node& conv : m.nodes) {
    if (conv.op != "Conv" || conv.inputs.empty()) continue;
    auto auto_pad = conv.strings.find("auto_pad");
    if (auto_pad != conv.strings.end() && auto_pad->second != "NOTSET") continue;
    auto p = producer.find(conv.inputs[0]);
    if (p == producer.end() || uses[conv.inputs[0]] != 1) continue;
    const Node& pad = m.nodes[size_t(p->second)];
    if (pad.op != "Pad" || pad.inputs.empty() || !m.shapes.count(pad.inputs[0])) continue;
    const std::vector<int64_t> pads = ZeroPads(m, pad);
    const size_t rank = m.shapes.at(pad.inputs[0]).size();
    if (rank < 3 || pads.size() != 2 * rank || pads[0] || pads[1] || pads[rank] ||
        pads[rank + 1])
      continue;
    const size_t spatial = rank - 2;
    std::vector<int64_t> conv_pads = conv.Ints("pads");
    if (conv_pads.empty()) conv_pads.assign(2 * spatial, 0);
    if (conv_pads.size() != 2 * spatial) continue;
    for (size_t d = 0; d < spatial; ++d) {
      conv_pads[d] += pads[2 + d];
      conv_pads[spatial + d] += pads[rank + 2 + d];
    }
    conv.ints["pads"] = conv_pads;
    conv.inputs[0] = pad.inputs[0];
    dropped[size_t(p->second)] = true;
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < m.nodes.size(); ++i)
    if (!dropped[i]) kept.push_back(std::move(m.nodes[i]));
  m.nodes = std::move(kept);
}

}  // namespace tunefarm::frontend
