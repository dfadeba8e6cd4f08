#include "deploy/package_internal.h"

#include <cmath>
#include <string>

#include "common/status_macros.h"
#include "compiler/frontend/op_registry.h"

namespace tunefarm::deploy {


absl::StatusOr<FoldedParameters> Fold(const Model& model, const ModelTask& task,
                                      const TaskOccurrence& oc, const PackageConstants& consts) {
  const Node& a = model.nodes[size_t(oc.nodes[0])];
  const frontend::OpDef& anchor = *frontend::FindOp(a.op);  // tasks are of registry entries
  FoldedParameters p;
  // A node alone (elementwise) has no parameters: its inputs bind as they are.
  if (anchor.fusion != frontend::FusionRole::kAnchor) return p;
  p.const_weight = model.constants.count(a.inputs[1]) > 0;
  if (p.const_weight) {
    p.weight = consts.Floats(a.inputs[1]);
    p.wshape = model.shapes.at(a.inputs[1]);
  }
  const Shape& aout = model.shapes.at(a.outputs[0]);
  const int64_t channels =
      anchor.channel_axis >= 0 ? aout[size_t(anchor.channel_axis)] : aout.back();
  bool has_bias = false;
  for (const auto& e : task.workload.epilogue())
    has_bias |= e.kind() == v1::EPILOGUE_KIND_BIAS_ADD;
  if (has_bias) p.bias.assign(size_t(channels), 0.0f);
  if (a.inputs.size() > 2 && !a.inputs[2].empty()) {
    std::vector<float> b0 = consts.Floats(a.inputs[2]);
    if (int64_t(b0.size()) != channels)
      return absl::InternalError(StrCat("node '", a.name, "': bias size"));
    for (size_t c = 0; c < b0.size(); ++c) p.bias[c] += b0[c];
  }
  std::string cur = a.outputs[0];
  for (size_t k = 1; k < oc.chain; ++k) {
    const Node& f = model.nodes[size_t(oc.nodes[k])];
    const frontend::FusionRole role = frontend::FusionRoleOf(f.op);
    if (role == frontend::FusionRole::kAffine) {
      std::vector<float> sc = consts.Floats(f.inputs[1]), be = consts.Floats(f.inputs[2]),
                         mean = consts.Floats(f.inputs[3]), var = consts.Floats(f.inputs[4]);
      const double eps = f.Float("epsilon", 1e-5f);
      std::vector<double> scale(static_cast<size_t>(channels));
      for (int64_t c = 0; c < channels; ++c) {
        const double s = double(sc[size_t(c)]) / std::sqrt(double(var[size_t(c)]) + eps);
        p.bias[size_t(c)] =
            float((double(p.bias[size_t(c)]) - mean[size_t(c)]) * s + be[size_t(c)]);
        scale[size_t(c)] = s;
      }
      anchor.scale_weights(a, p.wshape, scale, &p.weight);
    } else if (role == frontend::FusionRole::kAdd && f.inputs.size() == 2) {
      const std::string& other = f.inputs[0] == cur ? f.inputs[1] : f.inputs[0];
      if (model.constants.count(other)) {
        std::vector<float> add = consts.Floats(other);
        for (int64_t c = 0; c < channels; ++c) p.bias[size_t(c)] += add[size_t(c)];
      } else {
        p.residual = other;
      }
    }
    // The gate of a SiLU (a Sigmoid whose next fused node is the gating Mul)
    // leaves the chain's value where it was; any other node moves it on.
    const bool gate =
        k + 1 < oc.chain && frontend::FusionRoleOf(model.nodes[size_t(oc.nodes[k + 1])].op) ==
                                frontend::FusionRole::kGateMul;
    if (!gate) cur = f.outputs[0];
  }
  return p;
}

}  // namespace tunefarm::deploy
