#include "deploy/package_internal.h"

#include <array>
#include <string>

#include "compiler/frontend/op_registry.h"

namespace tunefarm::deploy {


// Data of a 4-D tensor shaped `s` with its dimensions taken in `order`
// (dimension k of the result is dimension order[k] of `s`).
std::vector<float> Permute4(const std::vector<float>& x, const Shape& s,
                            const std::array<int, 4>& order) {
  const std::array<int64_t, 4> stride = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
  std::array<int64_t, 4> e, st;
  for (size_t k = 0; k < 4; ++k) e[k] = s[size_t(order[k])], st[k] = stride[size_t(order[k])];
  std::vector<float> y(x.size());
  size_t o = 0;
  for (int64_t a = 0; a < e[0]; ++a)
    for (int64_t b = 0; b < e[1]; ++b)
      for (int64_t c = 0; c < e[2]; ++c)
        for (int64_t d = 0; d < e[3]; ++d)
          y[o++] = x[size_t(a * st[0] + b * st[1] + c * st[2] + d * st[3])];
  return y;
}

// Data of a tensor shaped `s` (frontend::Rank4) reordered NCHW -> NHWC.
std::vector<float> ToNhwc(const std::vector<float>& x, const Shape& s) {
  return Permute4(x, frontend::Rank4(s), {0, 2, 3, 1});
}

// A native node that reads a value only written channels-last, run
// channels-last where its meaning survives permuting its axis attribute and
// per-axis constants: Concat of 4-D values, Resize (opset >= 11, no axes
// attribute), and elementwise operators (those with a map form) whose
// runtime operands all have the output's shape, with constants permuted.
// Its output is then NHWC too, so no Transpose is made on either side.
// false: the node is not one of those (it then runs NCHW).
bool AddNhwcNode(const Model& model, const Node& n, PackageConstants* consts, Layouts* layouts,
                 v1::ModelPackage* pkg) {
  if (n.outputs.size() != 1 || n.outputs[0].empty()) return false;
  const Shape& out = model.shapes.at(n.outputs[0]);
  if (out.size() != 4) return false;
  bool reads_nhwc = false;
  for (const std::string& in : n.inputs) reads_nhwc = reads_nhwc || layouts->OnlyNhwc(in);
  if (!reads_nhwc) return false;
  auto is_const = [&](const std::string& v) { return model.constants.count(v) > 0; };
  Node m = n;
  std::vector<std::pair<std::string, Constant>> derived;  // permuted constants
  const frontend::OpDef* def = frontend::FindOp(n.op);
  if (n.op == "Concat") {
    for (const std::string& in : n.inputs)
      if (in.empty() || is_const(in) || model.shapes.at(in).size() != 4) return false;
    int64_t axis = n.Int("axis", 1);
    if (axis < 0) axis += 4;
    if (axis < 0 || axis > 3) return false;
    m.ints["axis"] = {frontend::NhwcAxis(axis)};
    for (std::string& in : m.inputs) in = layouts->Nhwc(in);
  } else if (n.op == "Resize" && model.opset >= 11) {
    if (n.inputs.empty() || is_const(n.inputs[0]) || !n.Ints("axes").empty()) return false;
    for (size_t k = 2; k < n.inputs.size(); ++k) {  // scales, sizes: one value per axis
      if (n.inputs[k].empty()) continue;
      if (!is_const(n.inputs[k])) return false;
      const Constant& c = model.constants.at(n.inputs[k]);
      if (c.size() != 4) return false;
      Constant p = c;
      for (size_t d = 0; d < 4; ++d) {
        if (c.is_int) {
          p.ints[size_t(frontend::NhwcAxis(int64_t(d)))] = c.ints[d];
        } else {
          p.floats[size_t(frontend::NhwcAxis(int64_t(d)))] = c.floats[d];
        }
      }
      m.inputs[k] = StrCat(n.inputs[k], "@nhwc");
      derived.emplace_back(m.inputs[k], std::move(p));
    }
    m.inputs[0] = layouts->Nhwc(n.inputs[0]);
  } else if (def != nullptr && def->map != nullptr) {
    for (const std::string& in : n.inputs) {  // checked before any conversion
      if (in.empty()) continue;
      const Shape& s = model.shapes.at(in);
      if (!is_const(in) && s != out) return false;
      if (is_const(in) && (s.size() > 4 || model.constants.at(in).is_int) && Numel(s) > 1)
        return false;
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string& in = n.inputs[k];
      if (in.empty()) continue;
      const Shape& s = model.shapes.at(in);
      if (!is_const(in)) {
        m.inputs[k] = layouts->Nhwc(in);
      } else if (Numel(s) > 1) {
        Constant p;
        p.shape = frontend::NhwcShape(s);
        p.floats = ToNhwc(model.constants.at(in).floats, s);
        m.inputs[k] = StrCat(in, "@nhwc");
        derived.emplace_back(m.inputs[k], std::move(p));
      }
    }
  } else {
    return false;
  }
  for (const std::string& in : m.inputs)
    if (!in.empty() && is_const(in)) consts->Use(in);
  for (auto& [name, c] : derived) {
    if (c.is_int) {
      consts->PutInts(name, c.shape, c.ints);
    } else {
      consts->Put(name, c.shape, c.floats);
    }
  }
  m.outputs[0] = layouts->WroteNhwc(n.outputs[0]);
  PutNode(m, pkg->add_steps()->mutable_node());
  return true;
}

}  // namespace tunefarm::deploy
