// Channels-last (NHWC) forms of workloads and shapes: what task extraction
// and the package build use to run a model's activations channels-last.
#include <algorithm>
#include <vector>

#include "compiler/frontend/op_context.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/workload.h"

namespace tunefarm::frontend {

std::vector<int64_t> Rank4(const std::vector<int64_t>& s) {
  const size_t kept = std::min<size_t>(s.size(), 4);
  std::vector<int64_t> s4(4 - kept, 1);
  s4.insert(s4.end(), s.end() - int64_t(kept), s.end());
  return s4;
}

std::vector<int64_t> NhwcShape(const std::vector<int64_t>& s) {
  const std::vector<int64_t> s4 = Rank4(s);
  return {s4[0], s4[2], s4[3], s4[1]};
}

bool SameInNhwc(const std::vector<int64_t>& s) {
  const std::vector<int64_t> s4 = Rank4(s);
  return s4[1] == 1 || s4[2] * s4[3] == 1;
}

int64_t NhwcAxis(int64_t axis) {
  static constexpr int64_t kAxis[4] = {0, 3, 1, 2};
  return kAxis[axis < 0 ? axis + 4 : axis];
}

void MapInputsChannelsLast(v1::Workload* w) {
  for (v1::Epilogue& e : *w->mutable_epilogue()) {
    for (v1::TensorSpec& t : *e.mutable_map_inputs()) {
      std::vector<int64_t> s = NhwcShape({t.shape().begin(), t.shape().end()});
      t.clear_shape();
      for (int64_t d : s) t.add_shape(d);
    }
  }
}

bool HasChannelsLastForm(const Model& model, const std::string& v) {
  const Shape& s = model.shapes.at(v);
  return model.constants.count(v) > 0 || s.size() == 4 || SameInNhwc(s);
}

bool ToWinograd(v1::Workload* w) {
  if (w->op() != v1::OP_KIND_CONV2D || !w->has_conv2d() || w->inputs_size() < 2) return false;
  const v1::Conv2dAttrs& a = w->conv2d();
  const auto& k = w->inputs(1).shape();
  if (a.layout() != v1::DATA_LAYOUT_NHWC || a.winograd() != 0 || a.groups() != 1 || k.size() != 4 ||
      k[0] != 3 || k[1] != 3 || k[2] % 4 != 0 || k[3] % 4 != 0)
    return false;
  for (int d = 0; d < 2; ++d) {
    if (a.strides(d) != 1 || a.dilations(d) != 1) return false;
  }
  const auto& x = w->inputs(0).shape();
  const int64_t oh = x[1] + a.pads(0) + a.pads(2) - 2, ow = x[2] + a.pads(1) + a.pads(3) - 2;
  if (oh <= 0 || ow <= 0 || oh % 2 != 0 || ow % 2 != 0) return false;
  w->mutable_conv2d()->set_winograd(2);
  w->mutable_inputs(1)->set_shape(0, 4);
  w->mutable_inputs(1)->set_shape(1, 4);
  return true;
}

std::array<int, 4> ChannelsLastWeightOrder(v1::OpKind op) {
  if (op == v1::OP_KIND_CONV2D_TRANSPOSE) return {2, 3, 0, 1};
  return {2, 3, 1, 0};
}

bool ToChannelsLast(v1::Workload* w) {
  const bool transpose = w->op() == v1::OP_KIND_CONV2D_TRANSPOSE;
  const bool conv = (w->op() == v1::OP_KIND_CONV2D || transpose) && w->has_conv2d() &&
                    w->conv2d().layout() == v1::DATA_LAYOUT_NCHW;
  const bool pool = w->op() == v1::OP_KIND_POOL2D && w->has_pool2d() &&
                    w->pool2d().layout() == v1::DATA_LAYOUT_NCHW;
  if ((!conv && !pool) || w->inputs_size() < 1 || w->inputs(0).shape_size() != 4) return false;
  if (conv && (w->inputs_size() < 2 || w->inputs(1).shape_size() != 4)) return false;
  auto permute = [](v1::TensorSpec* t, const std::array<int, 4>& order) {
    std::vector<int64_t> s(t->shape().begin(), t->shape().end());
    t->clear_shape();
    for (int d : order) t->add_shape(s[size_t(d)]);
  };
  permute(w->mutable_inputs(0), {0, 2, 3, 1});
  if (conv) {
    permute(w->mutable_inputs(1), ChannelsLastWeightOrder(w->op()));
    w->mutable_conv2d()->set_layout(v1::DATA_LAYOUT_NHWC);
  } else {
    w->mutable_pool2d()->set_layout(v1::DATA_LAYOUT_NHWC);
  }
  MapInputsChannelsLast(w);
  // A transposed convolution has its NHWC form only where the workload
  // validation takes it (the upsampling form).
  return !transpose || ir::Canonicalize(*w).ok();
}

bool ConcatKeepsChannelsLast(const Model& model, const Node& n,
                             const std::set<std::string>& nhwc_values) {
  if (n.op != "Concat" || n.outputs.size() != 1 || n.outputs[0].empty()) return false;
  if (model.shapes.at(n.outputs[0]).size() != 4) return false;
  // (The axis attribute is required from opset 4; older defaults differ.)
  const int64_t axis = n.Int("axis", -5);
  if (axis < -4 || axis > 3) return false;
  bool reads_nhwc = false;
  for (const std::string& in : n.inputs) {
    if (in.empty() || model.constants.count(in) || model.shapes.at(in).size() != 4) return false;
    reads_nhwc |= nhwc_values.count(in) > 0;
  }
  return reads_nhwc;
}

v1::Workload ChannelsLastConcat(const Model& model, const Node& n) {
  const int64_t along = NhwcAxis(n.Int("axis", 1));  // in [-4, 3] (ConcatKeepsChannelsLast)
  v1::Workload w;
  w.set_op(v1::OP_KIND_REARRANGE);
  v1::RearrangeAttrs* r = w.mutable_rearrange();
  for (int64_t d : NhwcShape(model.shapes.at(n.outputs[0]))) r->add_out_shape(d);
  int64_t offset = 0;
  for (const std::string& in : n.inputs) {
    const Shape s = NhwcShape(model.shapes.at(in));
    *w.add_inputs() = FloatSpec(s);
    for (int d = 0; d < 4; ++d) {
      v1::RearrangeIndex* ix = r->add_index();
      ix->set_source(d);
      ix->set_mul(1);
      ix->set_add(d == along ? -offset : 0);
      ix->set_div(1);
    }
    offset += s[size_t(along)];
  }
  return w;
}

}  // namespace tunefarm::frontend
