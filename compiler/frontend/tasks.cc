#include "compiler/frontend/tasks.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/op_registry.h"
#include "compiler/ir/map_program.h"
#include "compiler/ir/workload.h"
#include "proto/kernel_signature.h"

namespace tunefarm::frontend {
namespace {

namespace v1 = ::tunefarm::v1;

class Extractor {
 public:
  Extractor(const Model& m, bool small_kernels) : m_(m), small_kernels_(small_kernels) {}

  // The anchor's workload (without epilogues); false when the node is not
  // tunable in its form (then it runs untuned).
  bool Anchor(const Node& n, v1::Workload* w);
  // Follows single-consumer chains from the anchor's output and adds the
  // epilogues that fuse; returns the nodes taken.
  // Nodes already fused into an earlier kernel are never taken again.
  std::vector<int> Fuse(int anchor, v1::Workload* w, const std::set<int>& fused);
  // A node no anchor took (visited after the anchors before it), as a kernel
  // of its own; false when it stays native.
  bool Alone(const Node& n, v1::Workload* w);
  // A node with a map step but no kernel of its own (Tanh, Exp, Pow by a
  // constant, ...): an elementwise copy of its first input, whose program
  // (FuseMap from that input, starting at the node) does the work. False
  // when the input is a constant, is shaped unlike the output, or is small.
  bool MapAlone(const Node& n, v1::Workload* w);
  // The elementwise nodes after a kernel's value `start` (shaped `out`) that
  // one program computes: grown over the consumers in model order while
  // each node's other operands broadcast to `out`, and cut back to the
  // longest prefix whose values are read outside only through its last.
  // Returns the nodes (model order) with the MAP epilogue and the values
  // its extra inputs read; empty when no node fuses.
  struct MapRegion {
    std::vector<int> nodes;
    v1::Epilogue epilogue;
    std::vector<std::string> inputs;
  };
  // With `first` set, `start` is the kernel's input (read outside freely)
  // and the program's first step is node `first`.
  MapRegion FuseMap(const std::string& start, const Shape& out, const std::set<int>& taken,
                    int first = -1);

 private:
  const Shape& S(const std::string& v) const { return m_.shapes.at(v); }
  bool IsConst(const std::string& v) const { return m_.constants.count(v) > 0; }
  // The one consumer of `v`, or -1 (several, none, or a graph output).
  int OnlyConsumer(const std::string& v) const {
    for (const std::string& o : m_.outputs) {
      if (o == v) return -1;
    }
    auto it = m_.consumers.find(v);
    if (it == m_.consumers.end() || it->second.size() != 1) return -1;
    return it->second[0];
  }
  const Model& m_;
  bool small_kernels_ = false;
};

bool Extractor::Anchor(const Node& n, v1::Workload* w) {
  const OpDef* def = FindOp(n.op);
  return def != nullptr && def->fusion == FusionRole::kAnchor && def->anchor(m_, n, w);
}

bool Extractor::Alone(const Node& n, v1::Workload* w) {
  const OpDef* def = FindOp(n.op);
  if (def == nullptr || def->alone == nullptr || !def->alone(m_, n, w)) return false;
  if (small_kernels_) return true;
  if (w->op() == v1::OP_KIND_POOL2D || w->op() == v1::OP_KIND_SOFTMAX ||
      w->op() == v1::OP_KIND_REDUCE || w->op() == v1::OP_KIND_NORMALIZE)
    return Elements(S(n.inputs[0])) >= kMinReductionElements;
  return Elements(S(n.outputs[0])) >= kMinKernelElements;
}

bool Extractor::MapAlone(const Node& n, v1::Workload* w) {
  const OpDef* def = FindOp(n.op);
  v1::MapStep step;
  if (def == nullptr || def->map == nullptr || n.inputs.empty() || n.outputs.size() != 1 ||
      !def->map(m_, n, &step))
    return false;
  const std::string& x = n.inputs[0];
  if (x.empty() || IsConst(x) || !m_.shapes.count(x) || !m_.shapes.count(n.outputs[0]) ||
      S(x) != S(n.outputs[0]) || (!small_kernels_ && Elements(S(x)) < kMinKernelElements))
    return false;
  // x's shape as the model has it: ExtractTasks writes it in the 4-D form
  // it takes together with the program's inputs.
  w->set_op(v1::OP_KIND_ELEMENTWISE);
  w->mutable_elementwise()->set_kind(v1::ELEMENTWISE_KIND_COPY);
  *w->add_inputs() = FloatSpec(S(x));
  return true;
}

std::vector<int> Extractor::Fuse(int anchor, v1::Workload* w, const std::set<int>& fused) {
  std::vector<int> taken = {anchor};
  const Node& a = m_.nodes[size_t(anchor)];
  const OpDef& anchor_def = *FindOp(a.op);
  const Shape out = S(a.outputs[0]);
  bool bias = false, residual = false, activation = false;
  auto add = [&](v1::EpilogueKind k) {
    v1::Epilogue* e = w->add_epilogue();
    e->set_kind(k);
    return e;
  };
  // Bias: the op's own bias input (Gemm's C only per column: Anchor refused
  // any other C).
  const int bias_input = anchor_def.bias_input;
  if (bias_input >= 0 && a.inputs.size() > size_t(bias_input) && !a.inputs[size_t(bias_input)].empty()) {
    add(v1::EPILOGUE_KIND_BIAS_ADD);
    bias = true;
  }
  const size_t ch_axis =
      anchor_def.channel_axis >= 0 ? size_t(anchor_def.channel_axis) : out.size() - 1;
  std::string cur = a.outputs[0];
  while (true) {
    int next = OnlyConsumer(cur);
    // A gate: y * g(y), where y has exactly the two consumers (SiLU).
    if (next < 0 && !activation) {
      auto it = m_.consumers.find(cur);
      if (it != m_.consumers.end() && it->second.size() == 2) {
        auto is_gate = [&](int si, int mi) {
          const Node& sig = m_.nodes[size_t(si)];
          const Node& mu = m_.nodes[size_t(mi)];
          const OpDef* gate = FindOp(sig.op);
          return gate != nullptr && gate->gated != v1::EPILOGUE_KIND_UNSPECIFIED &&
                 FusionRoleOf(mu.op) == FusionRole::kGateMul &&
                 OnlyConsumer(sig.outputs[0]) == mi && mu.inputs.size() == 2 &&
                 ((mu.inputs[0] == cur && mu.inputs[1] == sig.outputs[0]) ||
                  (mu.inputs[1] == cur && mu.inputs[0] == sig.outputs[0]));
        };
        int si = it->second[0], mi = it->second[1];
        if (!is_gate(si, mi)) std::swap(si, mi);
        if (is_gate(si, mi)) {
          add(FindOp(m_.nodes[size_t(si)].op)->gated);
          taken.push_back(si);
          taken.push_back(mi);
          activation = true;
          cur = m_.nodes[size_t(mi)].outputs[0];
          continue;
        }
      }
      break;
    }
    if (next < 0 || fused.count(next)) break;
    const Node& n = m_.nodes[size_t(next)];
    const OpDef* def = FindOp(n.op);
    const FusionRole role = def == nullptr ? FusionRole::kNone : def->fusion;
    auto consts_from = [&](size_t first) {
      for (size_t i = first; i < n.inputs.size(); ++i)
        if (n.inputs[i].empty() || !IsConst(n.inputs[i])) return false;
      return n.inputs.size() == 5 && n.outputs.size() == 1 && n.Int("training_mode", 0) == 0;
    };
    if (role == FusionRole::kAffine) {
      // Folded into the weights and a bias at build time.
      if (anchor_def.scale_weights == nullptr || activation || residual || !consts_from(1)) break;
      if (!bias) add(v1::EPILOGUE_KIND_BIAS_ADD);
      bias = true;
    } else if (role == FusionRole::kAdd) {
      if (n.inputs.size() != 2) break;
      const std::string& other = n.inputs[0] == cur ? n.inputs[1] : n.inputs[0];
      if (IsConst(other) && PerChannel(S(other), out, ch_axis) && !activation && !residual &&
          S(n.outputs[0]) == out) {
        if (!bias) add(v1::EPILOGUE_KIND_BIAS_ADD);
        bias = true;
      } else if (!IsConst(other) && other != cur && S(other) == out && !residual) {
        add(v1::EPILOGUE_KIND_RESIDUAL_ADD);
        residual = true;
      } else {
        break;
      }
    } else if (role == FusionRole::kActivation) {
      if (activation) break;
      v1::Epilogue e;
      if (!def->activation(m_, n, &e)) break;
      *w->add_epilogue() = e;
      activation = true;
    } else {
      break;
    }
    taken.push_back(next);
    cur = n.outputs[0];
  }
  return taken;
}

Extractor::MapRegion Extractor::FuseMap(const std::string& start, const Shape& out,
                                        const std::set<int>& taken, int first) {
  MapRegion best, cur;
  cur.epilogue.set_kind(v1::EPILOGUE_KIND_MAP);
  std::map<std::string, int> value = {{start, 0}};  // program values
  std::set<int> in_region;
  std::vector<int64_t> tree = {1};
  // Whether only the last value is read outside the region.
  auto closed = [&](const std::string& last) {
    for (const auto& [v, k] : value) {
      if (v == last || (first >= 0 && v == start)) continue;
      if (std::find(m_.outputs.begin(), m_.outputs.end(), v) != m_.outputs.end()) return false;
      auto it = m_.consumers.find(v);
      if (it == m_.consumers.end()) continue;
      for (int c : it->second)
        if (!in_region.count(c)) return false;
    }
    return true;
  };
  while (cur.epilogue.steps_size() < ir::kMaxMapSteps) {
    // The first consumer (model order) of a region value that can join.
    int pick = -1;
    v1::MapStep step;
    std::vector<std::string> new_inputs;
    int64_t size = 0;
    for (const auto& [v, k] : value) {
      auto it = m_.consumers.find(v);
      if (it == m_.consumers.end()) continue;
      for (int c : it->second) {
        if ((pick >= 0 && c >= pick) || in_region.count(c) || taken.count(c)) continue;
        // A map alone's input is no value of the program's: of its
        // consumers, only the first step joins.
        if (first >= 0 && v == start && c != first) continue;
        const Node& n = m_.nodes[size_t(c)];
        const OpDef* def = FindOp(n.op);
        v1::MapStep s;
        if (def == nullptr || def->map == nullptr || !def->map(m_, n, &s)) continue;
        if (n.outputs.size() != 1 || !m_.shapes.count(n.outputs[0]) || S(n.outputs[0]) != out)
          continue;
        // A node whose value the program already reads as an input computes
        // it outside (before) the kernel.
        if (std::find(cur.inputs.begin(), cur.inputs.end(), n.outputs[0]) != cur.inputs.end())
          continue;
        const ir::MapFnInfo* f = ir::FindMapFn(s.fn());
        v1::MapStep full;
        full.set_fn(s.fn());
        std::vector<std::string> fresh;
        int64_t sz = 1;
        bool ok = f != nullptr && n.inputs.size() >= size_t(f->tensors);
        for (int a = 0; ok && a < f->tensors; ++a) {
          const std::string& in = n.inputs[size_t(a)];
          auto vi = value.find(in);
          if (vi != value.end()) {
            full.add_args()->set_value(vi->second);
            sz += tree[size_t(vi->second)];
            continue;
          }
          auto c2 = m_.constants.find(in);
          if (in.empty() || !m_.shapes.count(in) || !ir::BroadcastsTo(S(in), out) ||
              (c2 != m_.constants.end() && c2->second.is_int)) {
            ok = false;
            break;
          }
          // Its index among the program's inputs: those before this step,
          // then this step's new ones.
          int index = int(std::find(cur.inputs.begin(), cur.inputs.end(), in) - cur.inputs.begin());
          if (index == int(cur.inputs.size())) {
            auto nw = std::find(fresh.begin(), fresh.end(), in);
            index += int(nw - fresh.begin());
            if (nw == fresh.end()) fresh.push_back(in);
          }
          full.add_args()->set_input(index);
          ++sz;
        }
        if (!ok || sz > ir::kMaxMapTree ||
            cur.inputs.size() + fresh.size() > size_t(ir::kMaxMapInputs))
          continue;
        for (const v1::MapOperand& lit : s.args()) *full.add_args() = lit;
        pick = c;
        step = std::move(full);
        new_inputs = std::move(fresh);
        size = sz;
      }
    }
    if (pick < 0) break;
    const Node& n = m_.nodes[size_t(pick)];
    in_region.insert(pick);
    cur.nodes.push_back(pick);
    *cur.epilogue.add_steps() = std::move(step);
    for (std::string& in : new_inputs) {
      *cur.epilogue.add_map_inputs() = FloatSpec(S(in));
      cur.inputs.push_back(std::move(in));
    }
    tree.push_back(size);
    value[n.outputs[0]] = cur.epilogue.steps_size();
    if (closed(n.outputs[0])) best = cur;
  }
  return best;
}

double NodeFlops(const Model& m, const Node& n) {
  if (n.outputs.empty() || !m.shapes.count(n.outputs[0])) return 0;
  const OpDef* def = FindOp(n.op);
  if (def != nullptr && def->flops != nullptr) return def->flops(m, n);
  return Elements(m.shapes.at(n.outputs[0]));
}

}  // namespace

// The [A, N, B] form of a reduction of 4-D `in` into 4-D `out` (keepdims),
// both read channels-last: its reduced dimensions (1 in `out`, more in
// `in`) must be neighbours in N, H, W, C order. nullopt when they are not.
std::optional<Shape> ChannelsLastReduceForm(const Shape& in, const Shape& out) {
  if (in.size() != 4 || out.size() != 4) return std::nullopt;
  const Shape x = NhwcShape(in), y = NhwcShape(out);
  std::vector<bool> reduced(4);
  for (size_t d = 0; d < 4; ++d) reduced[d] = y[d] == 1;
  return ReduceRunForm(x, reduced);
}

absl::Status CheckPrecision(v1::DType precision, const ir::Target& target) {
  if (precision == v1::DTYPE_UNSPECIFIED || precision == v1::DTYPE_FLOAT32) return absl::OkStatus();
  const bool tf32 = precision == v1::DTYPE_TF32;
  if (precision != v1::DTYPE_FLOAT16 && precision != v1::DTYPE_BFLOAT16 && !tf32) {
    return absl::InvalidArgumentError(
        absl::StrCat(v1::DType_IsValid(precision) ? v1::DType_Name(precision)
                                                  : absl::StrCat("dtype ", int(precision)),
                     " is not a model precision (float32, float16, bfloat16 or tf32)"));
  }
  return ir::CheckFormatTarget(tf32 ? v1::DTYPE_FLOAT32 : precision, tf32, target,
                               absl::StrCat(tf32 ? "tf32" : DTypeWord(precision), " models"));
}

std::optional<v1::DType> PrecisionNamed(const std::string& word) {
  if (word == "fp32") return v1::DTYPE_FLOAT32;
  if (word == "fp16") return v1::DTYPE_FLOAT16;
  if (word == "bf16") return v1::DTYPE_BFLOAT16;
  if (word == "tf32") return v1::DTYPE_TF32;
  return std::nullopt;
}

ExtractOptions ExtractOptionsFor(const ir::Target& target, std::optional<bool> channels_last,
                                 v1::DType precision) {
  ExtractOptions o;
  o.precision = precision;
  o.channels_last = channels_last.value_or(!target.is_gpu());
  o.lanes = std::max(1, target.float_lanes());
  // Winograd pays on CPUs with 8 or 16 float lanes; a GPU's 3x3 layers
  // stay direct convolutions (implicit GEMMs, on tensor cores where their
  // dtype has them).
  o.winograd = o.channels_last && o.lanes >= 8 && !target.is_gpu();
  o.gpu = target.is_gpu();
  o.small_kernels = target.is_gpu();
  return o;
}

// The elementwise nodes after the kernel's value (`taken`'s last node) as
// one program; for a map alone, from node i's input, node i itself left
// out. `w` (an elementwise kernel) takes the program's 4-D form with it.
// nullopt: node i makes no task.
std::optional<Extractor::MapRegion> EpilogueMap(Extractor& x, const Model& model, int i,
                                                bool anchor, bool map_alone,
                                                const std::vector<int>& taken,
                                                const std::set<int>& fused, v1::Workload* w) {
  const Node& n = model.nodes[size_t(i)];
  // The elementwise nodes after the kernel's value, as one program (for
  // a map alone: from its input, starting at the node).
  std::set<int> busy = fused;
  if (!map_alone) busy.insert(taken.begin(), taken.end());
  const std::string& last = model.nodes[size_t(taken.back())].outputs[0];
  Extractor::MapRegion map;
  if (map_alone) {
    map = x.FuseMap(n.inputs[0], model.shapes.at(n.inputs[0]), busy, i);
    if (map.nodes.empty()) return std::nullopt;
    map.nodes.erase(map.nodes.begin());  // node i, already taken
  } else if (anchor || w->op() == v1::OP_KIND_ELEMENTWISE || w->op() == v1::OP_KIND_POOL2D) {
    map = x.FuseMap(last, model.shapes.at(last), busy);
  } else if (w->op() == v1::OP_KIND_REDUCE) {
    // The kernel writes [A] or [A, B], not the node's shape: only a
    // program whose inputs are single elements reads the same there.
    map = x.FuseMap(last, model.shapes.at(last), busy);
    bool scalars = true;
    for (const std::string& in : map.inputs) scalars &= Elements(model.shapes.at(in)) == 1;
    if (!scalars) map = {};
    for (v1::TensorSpec& t : *map.epilogue.mutable_map_inputs()) {
      t.clear_shape();
      t.add_shape(1);
    }
  }
  if ((!map.nodes.empty() || map_alone) && w->op() == v1::OP_KIND_ELEMENTWISE) {
    // A kernel of its own is written in 4 dimensions: the program's
    // inputs take the same form as the kernel's own.
    std::vector<Shape> shapes;
    const size_t own = size_t(w->inputs_size());
    for (size_t k = 0; k < own; ++k) shapes.push_back(model.shapes.at(n.inputs[k]));
    for (const std::string& in : map.inputs) shapes.push_back(model.shapes.at(in));
    Shape out = model.shapes.at(last);
    if (ElementwiseForm(&out, &shapes)) {
      // The kernel's own inputs take the joint form too: above 4
      // dimensions it can merge differently from theirs alone.
      for (size_t k = 0; k < own; ++k) {
        v1::TensorSpec* t = w->mutable_inputs(int(k));
        t->clear_shape();
        for (int64_t d : shapes[k]) t->add_shape(d);
      }
      for (int k = 0; k < map.epilogue.map_inputs_size(); ++k) {
        v1::TensorSpec* t = map.epilogue.mutable_map_inputs(k);
        t->clear_shape();
        for (int64_t d : shapes[own + size_t(k)]) t->add_shape(d);
      }
    } else {
      if (map_alone) return std::nullopt;
      map = {};
    }
  }
  return map;
}

// The channels-last form of `cw` (node `n`'s kernel, which fuses `taken`
// and the program `map`) where it applies: convolutions with whole channel
// vectors; pooling, reductions and elementwise kernels that read a value
// written channels-last (`nhwc_values`). nullopt: it stays NCHW.
std::optional<ir::CanonicalWorkload> ChannelsLastForm(const Model& model,
                                                      const ExtractOptions& options, const Node& n,
                                                      const std::vector<int>& taken,
                                                      const Extractor::MapRegion& map,
                                                      const v1::Workload& cw,
                                                      const std::set<std::string>& nhwc_values) {
  // Dense convolutions with a spatial kernel and under 28x28 output
  // pixels stay NCHW: there NCHW's default schedule is the faster one
  // (docs/tuning-guide.md).
  // (A 1-D convolution, written as 2-D, keeps its 3-D values NCHW.)
  // The Winograd form, where it applies; it needs the weight at build
  // time, to transform it.
  std::optional<v1::Workload> winograd;
  if (options.winograd && n.inputs.size() > 1 && model.constants.count(n.inputs[1]) > 0) {
    v1::Workload f = cw;
    if (ToChannelsLast(&f) && ToWinograd(&f)) winograd = std::move(f);
  }
  // Whole channel vectors, or any count between channels-last layers
  // (reading a value written so, read only by convolutions): there a
  // narrow NHWC layer costs less than the conversions NCHW needs around
  // it (docs/tuning-guide.md). (A head read by a Reshape,
  // as YOLO's K=255, stays NCHW: its output would be converted back.)
  const std::string& out_value = model.nodes[size_t(taken.back())].outputs[0];
  // (A transposed convolution's channels must be whole vectors of 4, as
  // its NHWC schedule needs, and its weight a constant, permuted at
  // build time.)
  const bool transpose = cw.op() == v1::OP_KIND_CONV2D_TRANSPOSE;
  const int64_t out_channels =
      (cw.op() == v1::OP_KIND_CONV2D || transpose) && cw.inputs_size() > 1 &&
              cw.inputs(1).shape_size() == 4
          ? (transpose ? cw.inputs(1).shape(1) * std::max<int64_t>(1, cw.conv2d().groups())
                       : cw.inputs(1).shape(0))
          : 0;
  bool between_nhwc =
      nhwc_values.count(n.inputs[0]) > 0 &&
      std::find(model.outputs.begin(), model.outputs.end(), out_value) == model.outputs.end();
  if (auto it = model.consumers.find(out_value); between_nhwc && it != model.consumers.end()) {
    for (int reader : it->second) {
      const std::string& op = model.nodes[size_t(reader)].op;
      between_nhwc &= op == "Conv" || op == "ConvTranspose";
    }
  }
  bool conv_ok = out_channels > 0 &&
                 (!transpose || (out_channels % 4 == 0 && n.inputs.size() > 1 &&
                                 model.constants.count(n.inputs[1]) > 0)) &&
                 (out_channels % std::min<int64_t>(options.lanes, 8) == 0 || between_nhwc) &&
                 model.shapes.at(n.inputs[0]).size() == 4 &&
                 model.shapes.at(n.outputs[0]).size() == 4;
  // Except where Winograd takes them, layers of at most 14x14 stay
  // NCHW (docs/tuning-guide.md); 7x7, an odd output, is not Winograd's.
  if (conv_ok && !options.gpu && !transpose && cw.conv2d().groups() == 1 &&
      cw.inputs(1).shape(2) * cw.inputs(1).shape(3) > 1) {
    const Shape& o = model.shapes.at(n.outputs[0]);
    conv_ok = o[2] * o[3] >= 28 * 28 || (winograd.has_value() && o[2] * o[3] >= 14 * 14);
  }
  const bool pool_ok =
      cw.op() == v1::OP_KIND_POOL2D && nhwc_values.count(n.inputs[0]) > 0;
  // A reduction that keeps its dimensions, reading a value written
  // channels-last, over dimensions that are neighbours there: its
  // output is then channels-last too.
  std::optional<Shape> reduce_form;
  if (cw.op() == v1::OP_KIND_REDUCE && nhwc_values.count(n.inputs[0]) > 0)
    reduce_form =
        ChannelsLastReduceForm(model.shapes.at(n.inputs[0]), model.shapes.at(n.outputs[0]));
  // The values the kernel reads at run time: its operands (an
  // elementwise kernel's first inputs) and the program's inputs.
  std::vector<std::string> runtime;
  if (cw.op() == v1::OP_KIND_ELEMENTWISE) {
    for (int k = 0; k < cw.inputs_size() && size_t(k) < n.inputs.size(); ++k)
      runtime.push_back(n.inputs[size_t(k)]);
  }
  runtime.insert(runtime.end(), map.inputs.begin(), map.inputs.end());
  // Each is converted whole, so it is 4-D, or one whose NHWC form is its
  // NCHW memory; an elementwise kernel goes channels-last when one of
  // them was written so.
  bool inputs_ok = true, reads_nhwc = false;
  std::vector<Shape> shapes;  // each one's NHWC form
  for (const std::string& in : runtime) {
    shapes.push_back(NhwcShape(model.shapes.at(in)));
    inputs_ok &= HasChannelsLastForm(model, in);
    reads_nhwc |= nhwc_values.count(in) > 0;
  }
  v1::Workload t = cw;
  bool converted = false;
  if (cw.op() == v1::OP_KIND_ELEMENTWISE) {
    // The NHWC form of every operand, then the 4-D form of the kernel.
    const Shape& out = model.shapes.at(out_value);
    Shape o = NhwcShape(out);
    converted = reads_nhwc && out.size() == 4 && ElementwiseForm(&o, &shapes);
    for (int k = 0; converted && k < t.inputs_size(); ++k) {
      t.mutable_inputs(k)->clear_shape();
      for (int64_t d : shapes[size_t(k)]) t.mutable_inputs(k)->add_shape(d);
    }
    for (v1::Epilogue& e : *t.mutable_epilogue()) {
      for (int k = 0; converted && k < e.map_inputs_size(); ++k) {
        e.mutable_map_inputs(k)->clear_shape();
        for (int64_t d : shapes[size_t(t.inputs_size() + k)])
          e.mutable_map_inputs(k)->add_shape(d);
      }
    }
  } else if (reduce_form.has_value()) {
    *t.mutable_inputs(0) = FloatSpec(*reduce_form);
    converted = true;
  } else {
    converted = (conv_ok || pool_ok) && ToChannelsLast(&t);
    if (converted && winograd.has_value()) t = *std::move(winograd);
  }
  if (!inputs_ok || !converted) return std::nullopt;
  absl::StatusOr<ir::CanonicalWorkload> cl = ir::Canonicalize(t);
  if (!cl.ok()) return std::nullopt;
  return *std::move(cl);
}

// The pixel-row form of an NCHW 1x1 convolution (stride 1, no padding,
// one group): [N, C, H, W] read as [N, C, 1, H*W], the same memory, so the
// row schedule's vectors run along all H*W pixels instead of rows of W
// that leave a partial vector (56 = 3 x 16 + 8). Taken where the default
// takes that schedule (a shallow reduction, or output channels that are not
// whole vectors) with output channels a multiple of 8 and rows of at least
// 16 pixels; elsewhere the flat row measured slower (docs/tuning-guide.md).
// nullopt: `c` keeps its form.
std::optional<ir::CanonicalWorkload> PixelRowForm(const ExtractOptions& options,
                                                  const ir::CanonicalWorkload& c) {
  const v1::Workload& w = c.workload;
  if (options.gpu || w.op() != v1::OP_KIND_CONV2D || !w.has_conv2d() || w.inputs_size() != 2)
    return std::nullopt;
  const v1::Conv2dAttrs& a = w.conv2d();
  auto all = [](const auto& v, int64_t x) {
    return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
  };
  const auto& x = w.inputs(0).shape();
  const auto& k = w.inputs(1).shape();
  if (a.layout() != v1::DATA_LAYOUT_NCHW || a.winograd() != 0 || a.groups() > 1 ||
      !all(a.strides(), 1) || !all(a.pads(), 0) || x.size() != 4 || k.size() != 4 || k[2] != 1 ||
      k[3] != 1 || x[2] == 1 || x[3] < 16)
    return std::nullopt;
  const int64_t channels = x[1], out_channels = k[0], h = x[2], wd = x[3];
  if (out_channels % 8 != 0 || !(channels <= 96 || out_channels % options.lanes != 0))
    return std::nullopt;
  v1::Workload f = w;
  f.mutable_inputs(0)->set_shape(2, 1);
  f.mutable_inputs(0)->set_shape(3, h * wd);
  // Epilogue operands broadcast against [N, K, H, W]: per pixel, or the
  // same for every pixel.
  for (v1::Epilogue& e : *f.mutable_epilogue()) {
    for (v1::TensorSpec& t : *e.mutable_map_inputs()) {
      std::vector<int64_t> s(t.shape().begin(), t.shape().end());
      while (s.size() < 4) s.insert(s.begin(), 1);
      if (s.size() != 4) return std::nullopt;
      if (s[2] == h && s[3] == wd) {
        s[2] = 1, s[3] = h * wd;
      } else if (s[2] != 1 || s[3] != 1) {
        return std::nullopt;
      }
      t.clear_shape();
      for (int64_t d : s) t.add_shape(d);
    }
  }
  absl::StatusOr<ir::CanonicalWorkload> flat = ir::Canonicalize(f);
  if (!flat.ok()) return std::nullopt;
  return *std::move(flat);
}

// `c` in the options' precision: tf32 products, or 16-bit values; an
// error names node `n`.
absl::Status ApplyPrecision(const ExtractOptions& options, const Node& n,
                            absl::StatusOr<ir::CanonicalWorkload>* c_out) {
  absl::StatusOr<ir::CanonicalWorkload>& c = *c_out;
  if (options.precision == v1::DTYPE_TF32) {
    if (ir::IsProductOp(c->workload.op())) {
      v1::Workload w = c->workload;
      w.set_tf32(true);
      c = ir::Canonicalize(w);
    }
  } else if (options.precision != v1::DTYPE_FLOAT32) {
    c = ir::WithDType(c->workload, options.precision);
  }
  if (options.precision != v1::DTYPE_FLOAT32) {
    if (!c.ok()) {
      return absl::Status(c.status().code(), absl::StrCat("node '", n.name, "' as ",
                                                          v1::DType_Name(options.precision), ": ",
                                                          c.status().message()));
    }
  }
  return absl::OkStatus();
}

// One occurrence of kernel `c` over nodes `taken` (the first `chain` of
// them the anchor's chain, then its program's, which reads `map_inputs`):
// a task of its own, or one more use of the task of equal key.
void AddOccurrence(const Model& model, ir::CanonicalWorkload c, const std::vector<int>& taken,
                   size_t chain, const std::vector<std::string>& map_inputs, bool nhwc,
                   std::map<std::string, size_t>* by_key, TaskExtraction* ex) {
  auto [it, fresh] = by_key->try_emplace(c.key, ex->tasks.size());
  if (fresh) {
    ModelTask t;
    t.workload = std::move(c.workload);
    t.key = c.key;
    t.description = ir::Describe(t.workload);
    t.flops = c.flops;
    for (int k : taken) t.nodes.push_back(model.nodes[size_t(k)].name);
    ex->tasks.push_back(std::move(t));
  }
  ModelTask& t = ex->tasks[it->second];
  ex->occurrences.push_back({int(it->second), taken, chain, map_inputs, nhwc});
  ++t.weight;
  ex->task_flops += t.flops;
}

absl::StatusOr<TaskExtraction> ExtractTasks(const Model& model, const ExtractOptions& options) {
  TaskExtraction ex;
  std::set<std::string> nhwc_values;  // written channels-last by an earlier kernel
  Extractor x(model, options.small_kernels);
  std::map<std::string, size_t> by_key;
  std::set<int> fused;
  for (size_t i = 0; i < model.nodes.size(); ++i)
    ex.model_flops += NodeFlops(model, model.nodes[i]);
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const Node& n = model.nodes[i];
    if (fused.count(int(i))) continue;
    if (options.channels_last && ConcatKeepsChannelsLast(model, n, nhwc_values)) {
      // The elementwise nodes after it (a dense layer's BatchNorm + ReLU)
      // as its program: a kernel reads the inputs where they lie and
      // writes the program's value, so the concatenation is never stored.
      nhwc_values.insert(n.outputs[0]);
      const std::string& out = n.outputs[0];
      std::set<int> busy = fused;
      busy.insert(int(i));
      Extractor::MapRegion map;
      if (Elements(model.shapes.at(out)) >= kMinKernelElements)
        map = x.FuseMap(out, model.shapes.at(out), busy);
      absl::StatusOr<ir::CanonicalWorkload> c = absl::InternalError("no program");
      // The program's runtime inputs are read channels-last, each converted
      // whole: 4-D, or one whose NHWC memory is its NCHW memory.
      const bool inputs_ok = std::all_of(map.inputs.begin(), map.inputs.end(),
                                         [&](const std::string& in) { return HasChannelsLastForm(model, in); });
      if (!map.nodes.empty() && inputs_ok) {
        v1::Workload w = ChannelsLastConcat(model, n);
        *w.add_epilogue() = map.epilogue;
        MapInputsChannelsLast(&w);
        c = ir::Canonicalize(w);
      }
      if (!c.ok()) continue;
      std::vector<int> taken = {int(i)};
      taken.insert(taken.end(), map.nodes.begin(), map.nodes.end());
      nhwc_values.insert(model.nodes[size_t(taken.back())].outputs[0]);
      TF_RETURN_IF_ERROR(ApplyPrecision(options, n, &c));
      AddOccurrence(model, *std::move(c), taken, 1, map.inputs, /*nhwc=*/true, &by_key, &ex);
      for (int t : taken) fused.insert(t);
      continue;
    }
    v1::Workload w;
    std::vector<int> taken = {int(i)};
    const bool anchor = x.Anchor(n, &w);
    bool map_alone = false;
    if (anchor) {
      taken = x.Fuse(int(i), &w, fused);
    } else {
      w.Clear();
      if (!x.Alone(n, &w)) {
        w.Clear();
        if (!x.MapAlone(n, &w)) continue;
        map_alone = true;
      }
    }
    size_t chain = taken.size();
    std::optional<Extractor::MapRegion> fused_map =
        EpilogueMap(x, model, int(i), anchor, map_alone, taken, fused, &w);
    if (!fused_map.has_value()) continue;
    Extractor::MapRegion map = *std::move(fused_map);
    absl::StatusOr<ir::CanonicalWorkload> c = absl::InternalError("unset");
    if (!map.nodes.empty() || map_alone) {
      v1::Workload with_map = w;
      *with_map.add_epilogue() = map.epilogue;
      c = ir::Canonicalize(with_map);
      if (c.ok()) taken.insert(taken.end(), map.nodes.begin(), map.nodes.end());
    }
    if (!c.ok() && map_alone) continue;
    if (!c.ok()) {
      map = {};
      c = ir::Canonicalize(w);
    }
    if (!c.ok() && !anchor) continue;
    if (!c.ok()) {
      // Not expressible as a tunable workload with these epilogues: try the
      // bare op before giving up on it.
      w.clear_epilogue();
      taken = {int(i)};
      chain = 1;
      c = ir::Canonicalize(w);
      if (!c.ok()) continue;
    }
    // The channels-last form where the options ask for it.
    bool nhwc = false;
    if (options.channels_last) {
      if (std::optional<ir::CanonicalWorkload> cl =
              ChannelsLastForm(model, options, n, taken, map, c->workload, nhwc_values)) {
        c = *std::move(cl);
        nhwc = true;
        nhwc_values.insert(model.nodes[size_t(taken.back())].outputs[0]);
      }
    }
    if (!nhwc) {
      if (std::optional<ir::CanonicalWorkload> flat = PixelRowForm(options, *c)) c = *std::move(flat);
    }
    TF_RETURN_IF_ERROR(ApplyPrecision(options, n, &c));
    for (int t : taken) fused.insert(t);
    AddOccurrence(model, *std::move(c), taken, chain, map.inputs, nhwc, &by_key, &ex);
  }
  return ex;
}

}  // namespace tunefarm::frontend
