#include "deploy/package_build.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/codegen/build.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/op_registry.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/winograd.h"
#include "compiler/ir/workload.h"
#include "compiler/schedule/schedule.h"
#include "deploy/rearrange.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/measure.h"
#include "device_agent/runtime/model_timing.h"
#include "device_agent/runtime/ops.h"
#include "device_agent/runtime/runner.h"
#include "proto/kernel_signature.h"

namespace tunefarm::deploy {

using frontend::ExtractTasks;
using frontend::Model;
using frontend::ModelTask;
using frontend::TaskExtraction;
using frontend::TaskOccurrence;
using graph::Constant;
using graph::Node;
using graph::Numel;

using runtime::GraphRuntime;
using runtime::kPackageFormatVersion;
namespace {

namespace v1 = ::tunefarm::v1;
using absl::StrCat;
using Shape = std::vector<int64_t>;

struct Built {
  ir::ComputeDAG original;  // before scheduling (argument names)
  std::string shared_object;
  v1::Schedule schedule;  // what was replayed, as the package stores it
  v1::KernelSignature signature;
};

absl::StatusOr<Built> Compile(const v1::Workload& workload, const v1::Schedule* schedule,
                              const ir::Target& target) {
  TF_ASSIGN_OR_RETURN(ir::CanonicalWorkload cw, ir::Canonicalize(workload));
  TF_ASSIGN_OR_RETURN(ir::ComputeDAG dag, ir::BuildComputeDAG(cw.workload));
  schedule::Trace trace;
  if (schedule != nullptr) {
    TF_ASSIGN_OR_RETURN(trace, schedule::TraceFromProto(*schedule));
  } else {
    trace = schedule::DefaultSchedule(dag, target);
  }
  TF_ASSIGN_OR_RETURN(schedule::ScheduleState st, schedule::ScheduleState::Replay(dag, trace, target));
  TF_ASSIGN_OR_RETURN(codegen::Artifact a, codegen::Build(st, target));
  return Built{dag, std::move(a.bytes), schedule::ToProto(trace), std::move(a.signature)};
}

// Median seconds of a kernel on random inputs, on this machine: the one
// kernel Measure, in the sandbox, as the search times candidates.
absl::StatusOr<double> TimeHere(const Built& b, int threads) {
  runtime::Kernel k;
  k.bytes = b.shared_object;
  k.signature = b.signature;
  runtime::SandboxOptions o;
  o.threads = threads;
  o.repeats = 7;
  o.min_repeat_ms = 14;  // 2 ms a repeat
  runtime::SandboxOutcome r = runtime::MeasureFromSeed(k, 7, {}, o);
  if (r.status != runtime::SandboxOutcome::Status::kOk) {
    return absl::InternalError(absl::StrCat("the kernel did not run: ", r.error));
  }
  return r.seconds;
}

void PutFloats(v1::PackageTensor* t, const Shape& shape, const std::vector<float>& data) {
  t->clear_shape();
  for (int64_t d : shape) t->add_shape(d);
  t->set_f32(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
}

void PutNode(const Node& n, v1::PackageNode* p) {
  p->set_op(n.op);
  p->set_name(n.name);
  for (const auto& i : n.inputs) p->add_inputs(i);
  for (const auto& o : n.outputs) p->add_outputs(o);
  for (const auto& [k, v] : n.ints) {
    auto& dst = (*p->mutable_ints())[k];
    for (int64_t x : v) dst.add_v(x);
  }
  for (const auto& [k, v] : n.floats) {
    auto& dst = (*p->mutable_floats())[k];
    for (float x : v) dst.add_v(x);
  }
  for (const auto& [k, v] : n.strings) (*p->mutable_strings())[k] = v;
}

bool RunsHere(const ir::Target& target) {
  return target.ToString() == codegen::HostTarget().ToString();
}


}  // namespace

namespace {

// The kernel of one task: the tuned schedule's where it builds and is
// faster than the default (by its records' times on the device, or timed
// here with `compare_locally`), else the default schedule's; `choice` says
// which and why.
absl::StatusOr<Built> ChooseKernel(const ModelTask& task, const ir::Target& target,
                                   const BuildOptions& options, KernelChoice* choice) {
  choice->why = "no tuning records";
  if (options.choose) {
    absl::StatusOr<KernelChoice> c = options.choose(task);
    if (!c.ok())
      return absl::Status(c.status().code(),
                          StrCat("task ", task.description, ": ", c.status().message()));
    *choice = *c;
  }
  if (!choice->tuned) return Compile(task.workload, nullptr, target);
  // The default kernel is compiled only where it is used or timed.
  absl::StatusOr<Built> tuned = Compile(task.workload, &choice->schedule, target);
  if (!tuned.ok()) {
    choice->tuned = false;
    choice->why = StrCat("the tuned schedule (record ", choice->record_id,
                         ") does not build: ", tuned.status().message());
    return Compile(task.workload, nullptr, target);
  }
  if (choice->default_sec > 0 && choice->tuned_sec > 0) {
    if (choice->tuned_sec < choice->default_sec * 0.98) return tuned;
    choice->tuned = false;
    choice->why = absl::StrFormat("the default schedule measured faster (%.3g ms vs %.3g ms)",
                                  choice->default_sec * 1e3, choice->tuned_sec * 1e3);
    return Compile(task.workload, nullptr, target);
  }
  if (!options.compare_locally || !RunsHere(target)) {
    choice->tuned = false;
    choice->why = "the default schedule has no time on the tuned record's device to compare";
    return Compile(task.workload, nullptr, target);
  }
  TF_ASSIGN_OR_RETURN(Built def, Compile(task.workload, nullptr, target));
  absl::StatusOr<double> td = TimeHere(def, options.threads);
  absl::StatusOr<double> tt = TimeHere(*tuned, options.threads);
  if (!td.ok() || !tt.ok()) {
    choice->tuned = false;
    choice->why = StrCat("timing here failed: ", (!td.ok() ? td : tt).status().message());
    return def;
  }
  choice->default_sec = *td;
  choice->tuned_sec = *tt;
  if (*tt < *td) {
    choice->why = absl::StrFormat("tuned record %d; timed here: %.3g ms vs default %.3g ms",
                                  choice->record_id, *tt * 1e3, *td * 1e3);
    return tuned;
  }
  choice->tuned = false;
  choice->why = absl::StrFormat("timed here, the default was faster (%.3g vs %.3g ms)", *td * 1e3,
                                *tt * 1e3);
  return def;
}

// The constants the package's steps reference, by name.
class PackageConstants {
 public:
  explicit PackageConstants(const Model& model) : model_(model) {}

  bool Has(const std::string& name) const { return out_.count(name) > 0; }
  // Model constant `name`, stored as the model has it.
  void Use(const std::string& name) {
    if (out_.count(name)) return;
    const Constant& c = model_.constants.at(name);
    v1::PackageTensor t;
    t.set_name(name);
    if (c.is_int) {
      for (int64_t d : c.shape) t.add_shape(d);
      t.set_is_int(true);
      for (int64_t v : c.ints) t.add_i64(v);
    } else {
      PutFloats(&t, c.shape, c.floats);
    }
    out_[name] = std::move(t);
  }
  // A constant the build derived (folded weights, packed operands).
  void Put(const std::string& name, const Shape& shape, const std::vector<float>& data) {
    v1::PackageTensor t;
    t.set_name(name);
    PutFloats(&t, shape, data);
    out_[name] = std::move(t);
  }
  void PutInts(const std::string& name, const Shape& shape, const std::vector<int64_t>& data) {
    v1::PackageTensor t;
    t.set_name(name);
    for (int64_t d : shape) t.add_shape(d);
    t.set_is_int(true);
    for (int64_t v : data) t.add_i64(v);
    out_[name] = std::move(t);
  }
  // Model constant `name` as floats.
  std::vector<float> Floats(const std::string& name) const {
    const Constant& c = model_.constants.at(name);
    if (!c.is_int) return c.floats;
    return std::vector<float>(c.ints.begin(), c.ints.end());
  }
  void MoveInto(v1::ModelPackage* pkg) {
    for (auto& [name, t] : out_) *pkg->add_constants() = std::move(t);
  }

 private:
  const Model& model_;
  std::map<std::string, v1::PackageTensor> out_;
};

// The anchor's weight and bias with everything linear before the
// activation folded in (batch normalization into both, constant adds into
// the bias), and the residual a fused Add reads.
struct FoldedParameters {
  bool const_weight = false;
  std::vector<float> weight, bias;
  Shape wshape;
  std::string residual;
};

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

// Where each runtime value of the package is: its NCHW form under its own
// name, its NHWC form (written by a channels-last kernel) under
// name + "@nhwc". Asking for a form the value lacks appends a Transpose
// step that makes it, once.
class Layouts {
 public:
  Layouts(const Model& model, v1::ModelPackage* pkg) : model_(model), pkg_(pkg) {}

  void WroteNchw(const std::string& v) { nchw_.insert(v); }
  std::string WroteNhwc(const std::string& v) {
    nhwc_.insert(v);
    shapes_[NhwcName(v)] = frontend::NhwcShape(model_.shapes.at(v));
    return NhwcName(v);
  }
  // The name of `v`'s NCHW form (a constant's own name).
  std::string Nchw(const std::string& v) {
    if (v.empty() || model_.constants.count(v) || nchw_.count(v) || !nhwc_.count(v)) return v;
    Convert(NhwcName(v), v, {0, 3, 1, 2});
    nchw_.insert(v);
    return v;
  }
  // The name of runtime value `v`'s NHWC form: 4-D, or one whose NHWC
  // memory is its NCHW memory (frontend::SameInNhwc; then its own name).
  std::string Nhwc(const std::string& v) {
    if (nhwc_.count(v)) return NhwcName(v);
    if (frontend::SameInNhwc(model_.shapes.at(v))) return Nchw(v);
    Convert(Nchw(v), NhwcName(v), {0, 2, 3, 1});
    WroteNhwc(v);
    return NhwcName(v);
  }
  // Whether runtime value `v` exists only in its NHWC form so far.
  bool OnlyNhwc(const std::string& v) const { return nhwc_.count(v) && !nchw_.count(v); }
  // Shapes of the values the model does not have.
  const std::map<std::string, Shape>& shapes() const { return shapes_; }
  bool any_nhwc() const { return !nhwc_.empty(); }

 private:
  static std::string NhwcName(const std::string& v) { return StrCat(v, "@nhwc"); }
  void Convert(const std::string& from, const std::string& to, std::vector<int64_t> perm) {
    Node t;
    t.op = "Transpose";
    t.name = StrCat(to, "/transpose");
    t.inputs = {from};
    t.outputs = {to};
    t.ints["perm"] = std::move(perm);
    PutNode(t, pkg_->add_steps()->mutable_node());
  }
  const Model& model_;
  v1::ModelPackage* pkg_;
  std::set<std::string> nchw_, nhwc_;
  std::map<std::string, Shape> shapes_;
};

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
  // NCHW axis -> NHWC axis.
  static constexpr int64_t kAxis[4] = {0, 3, 1, 2};
  Node m = n;
  std::vector<std::pair<std::string, Constant>> derived;  // permuted constants
  const frontend::OpDef* def = frontend::FindOp(n.op);
  if (n.op == "Concat") {
    for (const std::string& in : n.inputs)
      if (in.empty() || is_const(in) || model.shapes.at(in).size() != 4) return false;
    int64_t axis = n.Int("axis", 1);
    if (axis < 0) axis += 4;
    if (axis < 0 || axis > 3) return false;
    m.ints["axis"] = {kAxis[axis]};
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
          p.ints[size_t(kAxis[d])] = c.ints[d];
        } else {
          p.floats[size_t(kAxis[d])] = c.floats[d];
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

// The kernel step of one occurrence of a task: its arguments bound to the
// model's values (in the layout the kernel reads), and the derived
// constants (folded, packed, permuted) stored.
absl::Status AddKernelStep(const Model& model, const TaskExtraction& ex, const TaskOccurrence& oc,
                           const Built& b, PackageConstants* consts, Layouts* layouts,
                           v1::ModelPackage* pkg) {
  const ModelTask& task = ex.tasks[size_t(oc.task)];
  const Node& a = model.nodes[size_t(oc.nodes[0])];
  const std::string out_value = model.nodes[size_t(oc.nodes.back())].outputs[0];
  TF_ASSIGN_OR_RETURN(FoldedParameters p, Fold(model, task, oc, *consts));
  // Runtime values first (their conversions are steps before the kernel's).
  std::vector<std::string> args;
  const size_t n_inputs = b.original.args.size() - 1;
  for (size_t ai = 0; ai < b.original.args.size(); ++ai) {
    if (ai == n_inputs) {
      // (An output whose NHWC memory is its NCHW memory keeps its own name:
      // no reader converts it.)
      if (oc.nhwc && !frontend::SameInNhwc(model.shapes.at(out_value))) {
        args.push_back(layouts->WroteNhwc(out_value));
      } else {
        layouts->WroteNchw(out_value);
        args.push_back(out_value);
      }
      break;
    }
    const std::string& role = b.original.tensors[size_t(b.original.args[ai])].name;
    std::string src;
    std::vector<float> data;
    bool derived = false;
    if (role == "data" || role == "a" || role == "x") {
      src = a.inputs[0];
    } else if (role == "y") {
      src = a.inputs[1];
    } else if (role == "weight" || role == "b") {
      if (p.const_weight) {
        derived = true;
        data = p.weight;
        src = StrCat(a.name, "/weight");
      } else {
        src = a.inputs[1];
      }
    } else if (role == "bias") {
      derived = true;
      data = p.bias;
      src = StrCat(a.name, "/bias");
    } else if (role == "scale" || role == "shift") {  // a normalization's
      src = a.inputs[role == "scale" ? 1 : 2];
    } else if (role == "residual") {
      if (p.residual.empty()) return absl::InternalError(StrCat("node '", a.name, "': residual"));
      src = p.residual;
    } else if (size_t k = 0; role.rfind("map", 0) == 0 &&
                             absl::SimpleAtoi(absl::string_view(role).substr(3), &k) &&
                             k < oc.map_inputs.size()) {
      src = oc.map_inputs[k];
    } else {
      return absl::InternalError(StrCat("task ", task.description, ": argument '", role, "'"));
    }
    const v1::KernelArgument& arg = b.signature.args(int(ai));
    const bool constant = derived || model.constants.count(src) > 0;
    if (oc.nhwc && role == "weight" && derived) {
      // As the NHWC workload reads it: OIHW -> HWIO, a transposed
      // convolution's IOHW -> RSCK (one group); Winograd's transformed.
      const Shape& w = p.wshape;
      std::vector<float> permuted =
          Permute4(data, w, frontend::ChannelsLastWeightOrder(task.workload.op()));
      data = task.workload.conv2d().winograd() != 0 ? ir::WinogradWeight(permuted, w[1], w[0])
                                                    : std::move(permuted);
    } else if (oc.nhwc && constant && !derived && !frontend::SameInNhwc(model.shapes.at(src))) {
      data = ToNhwc(consts->Floats(src), model.shapes.at(src));
      derived = true;
      src = StrCat(src, "@nhwc");
    } else if (!constant) {
      src = oc.nhwc ? layouts->Nhwc(src) : layouts->Nchw(src);
    }
    if (arg.pack_block_size() != 0) {
      if (!derived)
        return absl::InternalError(StrCat("node '", a.name, "': a packed runtime value"));
      data = PackArgument(arg, data);
      src = StrCat(src, "@packed");
    }
    if (derived) {  // stored in the kernel's layout (packed or as is)
      consts->Put(src, KernelShape(arg), data);
    } else if (model.constants.count(src)) {
      consts->Use(src);
    }
    args.push_back(src);
  }
  v1::KernelStep* ks = pkg->add_steps()->mutable_kernel();
  ks->set_kernel(oc.task);
  for (int nidx : oc.nodes) ks->add_nodes(model.nodes[size_t(nidx)].name);
  for (const std::string& v : args) ks->add_args(v);
  return absl::OkStatus();
}

// The ops ViewOffsets can place as views (where their shapes allow).
bool MayBeView(const std::string& op) {
  return runtime::IsViewOp(op) || op == "Split" || op == "Gather" || op == "Slice";
}

// Byte offsets of a native step's outputs inside its input 0 (shaped
// `in`) when the step only selects contiguous parts of it; empty when it
// computes anything else.
// `f` is the bytes of one element.
std::vector<int64_t> ViewOffsets(const Model& model, const v1::PackageNode& n, const Shape& in,
                                 const std::vector<const Shape*>& outs, int64_t opset, int64_t f) {
  auto attr = [&](const char* name, int64_t fallback) {
    auto it = n.ints().find(name);
    return it == n.ints().end() || it->second.v_size() == 0 ? fallback : it->second.v(0);
  };
  auto axis_of = [&](int64_t a) { return a < 0 ? a + int64_t(in.size()) : a; };
  auto span = [](const Shape& s, size_t b, size_t e) {
    int64_t p = 1;
    for (size_t d = b; d < e && d < s.size(); ++d) p *= s[d];
    return p;
  };
  // A constant input's values (empty when it is not a constant).
  auto values = [&](int i) {
    std::vector<int64_t> v;
    if (i >= n.inputs_size() || n.inputs(i).empty()) return v;
    auto c = model.constants.find(n.inputs(i));
    if (c == model.constants.end()) return v;
    for (int64_t k = 0; k < frontend::ValueCount(c->second); ++k)
      v.push_back(int64_t(frontend::ConstValue(c->second, k)));
    return v;
  };
  if (runtime::IsViewOp(n.op())) {
    if (outs.size() != 1 || Numel(*outs[0]) != Numel(in)) return {};
    return {0};
  }
  if (n.op() == "Split") {
    const int64_t axis = axis_of(attr("axis", 0));
    if (axis < 0 || axis >= int64_t(in.size()) || span(in, 0, size_t(axis)) != 1) return {};
    const int64_t inner = span(in, size_t(axis) + 1, in.size());
    std::vector<int64_t> at;
    int64_t cum = 0;
    for (const Shape* o : outs) {
      if (o->size() != in.size()) return {};
      at.push_back(cum * inner * f);
      cum += (*o)[size_t(axis)];
    }
    if (cum != in[size_t(axis)]) return {};
    return at;
  }
  if (n.op() == "Gather") {
    const int64_t axis = axis_of(attr("axis", 0));
    const std::vector<int64_t> idx = values(1);
    if (axis < 0 || axis >= int64_t(in.size()) || idx.size() != 1 || outs.size() != 1) return {};
    const int64_t dim = in[size_t(axis)], k = idx[0] < 0 ? idx[0] + dim : idx[0];
    if (dim == 1 && k == 0 && Numel(*outs[0]) == Numel(in)) return {0};  // the whole input
    if (span(in, 0, size_t(axis)) != 1) return {};
    const int64_t inner = span(in, size_t(axis) + 1, in.size());
    if (k < 0 || k >= dim || Numel(*outs[0]) != inner) return {};
    return {k * inner * f};
  }
  if (n.op() == "Slice" && outs.size() == 1 && outs[0]->size() == in.size()) {
    std::vector<int64_t> starts, axes, steps;
    if (opset < 10) {
      auto ints = [&](const char* name) {
        auto it = n.ints().find(name);
        return it == n.ints().end()
                   ? std::vector<int64_t>()
                   : std::vector<int64_t>(it->second.v().begin(), it->second.v().end());
      };
      starts = ints("starts"), axes = ints("axes");
    } else {
      starts = values(1), axes = values(3), steps = values(4);
      if (starts.empty() || (n.inputs_size() > 3 && !n.inputs(3).empty() && axes.empty()) ||
          (n.inputs_size() > 4 && !n.inputs(4).empty() && steps.empty()))
        return {};
    }
    for (int64_t s : steps)
      if (s != 1) return {};
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
    Shape begin(in.size(), 0);
    for (size_t i = 0; i < starts.size() && i < axes.size(); ++i) {
      const int64_t a = axis_of(axes[i]);
      if (a < 0 || a >= int64_t(in.size())) return {};
      const int64_t dim = in[size_t(a)];
      begin[size_t(a)] = std::clamp<int64_t>(starts[i] < 0 ? starts[i] + dim : starts[i], 0, dim);
    }
    // Contiguous: one extent above 1 at most before the dimensions taken
    // whole.
    const Shape& o = *outs[0];
    size_t p = 0;
    while (p < o.size() && o[p] == 1) ++p;
    for (size_t d = p + 1; d < o.size(); ++d)
      if (begin[d] != 0 || o[d] != in[d]) return {};
    int64_t at = 0;
    for (size_t d = 0; d < in.size(); ++d) at += begin[d] * span(in, d + 1, in.size());
    return {at * f};
  }
  return {};
}

// The package's runtime values and their places in one arena. Inputs are
// defined before step 0, outputs live past the last step.
absl::Status PlanValues(const Model& model, const PackageConstants& consts,
                        const std::map<std::string, Shape>& extra_shapes, v1::ModelPackage* pkg) {
  auto shape_of = [&](const std::string& v) -> const Shape* {
    auto sh = model.shapes.find(v);
    if (sh != model.shapes.end()) return &sh->second;
    auto ex = extra_shapes.find(v);
    return ex == extra_shapes.end() ? nullptr : &ex->second;
  };
  // A step that only selects a contiguous part of its input 0 (a copy
  // node, a Split or Gather along the outermost non-unit dimension or of a
  // unit one, a contiguous Slice) writes nothing: its outputs are views into the
  // input's allocation (one allocation over all their lifetimes; values
  // are written once; kernels load and store at element alignment), and
  // the runtime skips the step.
  struct Place {
    std::string of;
    int64_t bytes = 0;
  };
  std::map<std::string, Place> views;  // value -> where it lies in another
  const bool gpu = absl::StartsWith(pkg->target(), "cuda");
  const bool wide_moves =
      runtime::ValueBytes(*pkg) == 2 ||
      std::any_of(pkg->kernels().begin(), pkg->kernels().end(),
                  [](const v1::PackageKernel& k) { return k.workload().tf32(); });
  auto owner = [&](std::string v) {
    Place at{v, 0};
    for (auto it = views.find(at.of); it != views.end(); it = views.find(at.of))
      at = {it->second.of, at.bytes + it->second.bytes};
    return at;
  };
  for (v1::PackageStep& st : *pkg->mutable_steps()) {
    if (!st.has_node() || st.node().inputs_size() < 1) continue;
    const v1::PackageNode& n = st.node();
    const std::string& in = n.inputs(0);
    const Shape* si = shape_of(in);
    if (in.empty() || consts.Has(in) || si == nullptr) continue;
    std::vector<const Shape*> outs;
    bool ok = n.outputs_size() > 0;
    for (const std::string& o : n.outputs()) {
      outs.push_back(o.empty() ? nullptr : shape_of(o));
      ok &= outs.back() != nullptr && !views.count(o) && o != in;
    }
    if (!ok) continue;
    std::vector<int64_t> at =
        ViewOffsets(model, n, *si, outs, pkg->opset(), runtime::ValueBytes(*pkg));
    if (at.size() != outs.size()) continue;
    // 16-bit and tf32 GPU kernels may move 16 bytes at a time (tensor-core
    // tiles): a view there starts on a 16-byte boundary of its input, or
    // the node is a copy.
    if (gpu && wide_moves &&
        std::any_of(at.begin(), at.end(), [](int64_t b) { return b % 16 != 0; }))
      continue;
    for (int k = 0; k < n.outputs_size(); ++k) views[n.outputs(k)] = {in, at[size_t(k)]};
    st.mutable_node()->set_view(true);
  }
  std::map<std::string, std::pair<int, int>> life;
  auto touch = [&](const std::string& name, int step) {
    if (name.empty() || consts.Has(name)) return;
    const std::string v = owner(name).of;
    auto [it, fresh] = life.try_emplace(v, step, step);
    it->second.first = std::min(it->second.first, step);
    it->second.second = std::max(it->second.second, step);
  };
  for (const std::string& in : model.inputs) touch(in, -1);
  const int nsteps = pkg->steps_size();
  for (int s = 0; s < nsteps; ++s) {
    const v1::PackageStep& st = pkg->steps(s);
    if (st.has_kernel()) {
      for (const std::string& v : st.kernel().args()) touch(v, s);
    } else {
      for (const std::string& v : st.node().inputs()) touch(v, s);
      for (const std::string& v : st.node().outputs()) touch(v, s);
    }
  }
  for (const std::string& o : model.outputs) touch(o, nsteps);
  std::vector<std::string> names;
  std::vector<std::pair<int, int>> lifetimes;
  std::vector<int64_t> bytes;
  for (const auto& [v, l] : life) {
    const Shape* sh = shape_of(v);
    if (sh == nullptr) return absl::InternalError(StrCat("value '", v, "' has no shape"));
    names.push_back(v);
    lifetimes.push_back(l);
    bytes.push_back(Numel(*sh) * runtime::ValueBytes(*pkg));
  }
  std::vector<int64_t> offsets;
  pkg->set_arena_bytes(PlanMemory(lifetimes, bytes, &offsets));
  std::map<std::string, int64_t> offset_of;
  for (size_t i = 0; i < names.size(); ++i) {
    v1::PackageValue* pv = pkg->add_values();
    pv->set_name(names[i]);
    for (int64_t d : *shape_of(names[i])) pv->add_shape(d);
    pv->set_offset(offsets[i]);
    offset_of[names[i]] = offsets[i];
  }
  for (const auto& [v, place] : views) {
    const Place root = owner(v);
    auto at = offset_of.find(root.of);
    if (at == offset_of.end()) continue;  // read by no step
    v1::PackageValue* pv = pkg->add_values();
    pv->set_name(v);
    for (int64_t d : *shape_of(v)) pv->add_shape(d);
    pv->set_offset(at->second + root.bytes);
  }
  return absl::OkStatus();
}

// A package kernel: the built code of `workload` and why its schedule.
void PutKernel(const std::string& key, const std::string& description, const v1::Workload& workload,
               const Built& b, const KernelChoice& choice, v1::PackageKernel* k) {
  k->set_workload_key(key);
  k->set_description(description);
  *k->mutable_workload() = workload;
  *k->mutable_schedule() = b.schedule;
  if (choice.tuned) k->set_record_id(choice.record_id);
  k->set_tuned(choice.tuned);
  k->set_tuned_sec(choice.tuned_sec);
  k->set_default_sec(choice.default_sec);
  k->set_choice(choice.why);
  k->set_shared_object(b.shared_object);
  *k->mutable_signature() = b.signature;
}

// Native data movers that are not views become generated kernels
// (RearrangeOf): one kernel per distinct workload, on its default
// schedule, after the tasks' kernels; the node's step becomes one kernel
// step per output, in its place. The memory plan holds: each new step
// touches a subset of the values the node's step did.
absl::Status RearrangeSteps(const ir::Target& target, v1::ModelPackage* pkg) {
  std::map<std::string, Shape> shapes;
  for (const v1::PackageValue& v : pkg->values())
    shapes[v.name()] = Shape(v.shape().begin(), v.shape().end());
  auto candidate = [](const v1::PackageStep& st) {
    return st.has_node() && !st.node().view() && MayRearrange(st.node().op());
  };
  // The constants a candidate node reads (its shapes, pads, indices).
  std::set<std::string> read;
  for (const v1::PackageStep& st : pkg->steps())
    if (candidate(st)) read.insert(st.node().inputs().begin(), st.node().inputs().end());
  std::map<std::string, Constant> constants;
  for (const v1::PackageTensor& t : pkg->constants()) {
    if (!read.count(t.name())) continue;
    TF_ASSIGN_OR_RETURN(Constant c, runtime::FromPackage(t));
    shapes[t.name()] = c.shape;
    constants[t.name()] = std::move(c);
  }
  std::map<std::string, int> kernel_of;  // workload key -> index into pkg->kernels
  google::protobuf::RepeatedPtrField<v1::PackageStep> steps;
  for (v1::PackageStep& st : *pkg->mutable_steps()) {
    std::vector<RearrangeStep> movers;
    if (candidate(st)) {
      const Node n = runtime::FromPackage(st.node());
      std::vector<Shape> in_shapes, out_shapes;
      std::vector<const Constant*> in_const;
      bool known = true;
      for (const std::string& v : n.inputs) {
        auto c = constants.find(v);
        in_const.push_back(c == constants.end() ? nullptr : &c->second);
        auto sh = shapes.find(v);
        known &= v.empty() || sh != shapes.end();
        in_shapes.push_back(sh == shapes.end() ? Shape() : sh->second);
      }
      for (const std::string& v : n.outputs) {  // every output written
        auto sh = shapes.find(v);
        known &= sh != shapes.end();
        out_shapes.push_back(sh == shapes.end() ? Shape() : sh->second);
      }
      if (known) movers = RearrangeOf(n, pkg->opset(), in_shapes, in_const, out_shapes);
      for (RearrangeStep& m : movers) {  // found in float32, run in the package's precision
        if (pkg->precision() == v1::DTYPE_FLOAT32 || pkg->precision() == v1::DTYPE_UNSPECIFIED)
          break;
        TF_ASSIGN_OR_RETURN(ir::CanonicalWorkload c, ir::WithDType(m.workload, pkg->precision()));
        m.workload = std::move(c.workload);
        m.key = std::move(c.key);
      }
    }
    if (movers.empty()) {
      *steps.Add() = std::move(st);
      continue;
    }
    // Every output's kernel, or the node stays native (a kernel that does
    // not build: a CUDA build then names the node's op).
    std::vector<int> kernels;
    for (const RearrangeStep& m : movers) {
      auto it = kernel_of.find(m.key);
      if (it == kernel_of.end()) {
        absl::StatusOr<Built> b = Compile(m.workload, nullptr, target);
        if (!b.ok()) break;
        it = kernel_of.emplace(m.key, pkg->kernels_size()).first;
        KernelChoice choice;
        choice.why = "a data mover: the default schedule";
        PutKernel(m.key, ir::Describe(m.workload), m.workload, *b, choice, pkg->add_kernels());
      }
      kernels.push_back(it->second);
    }
    if (kernels.size() != movers.size()) {
      *steps.Add() = std::move(st);
      continue;
    }
    for (size_t i = 0; i < movers.size(); ++i) {
      v1::KernelStep* ks = steps.Add()->mutable_kernel();
      ks->set_kernel(kernels[i]);
      ks->add_nodes(st.node().name());
      for (int in : movers[i].inputs) ks->add_args(st.node().inputs(in));
      ks->add_args(st.node().outputs(movers[i].output));
    }
  }
  pkg->mutable_steps()->Swap(&steps);
  return absl::OkStatus();
}

absl::Status NoGpuKernel(const std::set<std::string>& ops) {
  return absl::UnimplementedError(
      StrCat("a CUDA package runs every operator as a kernel, and these have none yet: ",
             absl::StrJoin(ops, ", ")));
}

}  // namespace

absl::StatusOr<v1::ModelPackage> BuildPackage(const Model& model, const ir::Target& target,
                                              const BuildOptions& options) {
  if (!target.is_gpu()) TF_RETURN_IF_ERROR(codegen::CheckLLVMTarget(target));
  TF_RETURN_IF_ERROR(frontend::CheckPrecision(options.precision, target));
  // 16 bits: float16 or bfloat16 values; a tf32 package holds float32.
  const bool half =
      options.precision == v1::DTYPE_FLOAT16 || options.precision == v1::DTYPE_BFLOAT16;
  TF_ASSIGN_OR_RETURN(TaskExtraction ex,
                      ExtractTasks(model, frontend::ExtractOptionsFor(target, options.channels_last,
                                                                      options.precision)));
  v1::ModelPackage pkg;
  // Float32 packages keep format 3, which older runtimes read.
  pkg.set_format_version(half ? kPackageFormatVersion : runtime::kFloat32PackageFormatVersion);
  pkg.set_target(target.ToString());
  pkg.set_model_name(options.model_name);
  pkg.set_model_sha256(options.model_sha256);
  pkg.set_opset(model.opset);
  pkg.set_layout("NCHW");
  pkg.set_built_by(StrCat("tunefarm ", TUNEFARM_VERSION, " LLVM ", codegen::LLVMVersion()));
  pkg.set_threads(options.threads);
  if (half) pkg.set_precision(options.precision);
  for (const auto& i : model.inputs) pkg.add_inputs(i);
  for (const auto& o : model.outputs) pkg.add_outputs(o);

  if (target.is_gpu()) {
    // Refused before any kernel is compiled: nodes left to run natively
    // that can never be views (the check after the memory plan is exact).
    std::set<int> in_kernels;
    for (const TaskOccurrence& oc : ex.occurrences)
      in_kernels.insert(oc.nodes.begin(), oc.nodes.end());
    std::set<std::string> native;
    for (size_t i = 0; i < model.nodes.size(); ++i) {
      const std::string& op = model.nodes[i].op;
      if (!in_kernels.count(int(i)) && !MayBeView(op) && !MayRearrange(op)) native.insert(op);
    }
    if (!native.empty()) return NoGpuKernel(native);
  }
  // Kernels, one per task.
  std::vector<Built> built;
  for (const ModelTask& task : ex.tasks) {
    KernelChoice choice;
    TF_ASSIGN_OR_RETURN(Built b, ChooseKernel(task, target, options, &choice));
    PutKernel(task.key, task.description, task.workload, b, choice, pkg.add_kernels());
    built.push_back(std::move(b));
  }

  // Steps in model order; a fused kernel sits where its last node was.
  std::map<int, size_t> last_of;  // node index -> occurrence
  std::set<int> fused;
  for (size_t o = 0; o < ex.occurrences.size(); ++o) {
    const TaskOccurrence& oc = ex.occurrences[o];
    last_of[*std::max_element(oc.nodes.begin(), oc.nodes.end())] = o;
    fused.insert(oc.nodes.begin(), oc.nodes.end());
  }
  PackageConstants consts(model);
  Layouts layouts(model, &pkg);
  for (const std::string& in : model.inputs) layouts.WroteNchw(in);
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const Node& n = model.nodes[i];
    auto lo = last_of.find(int(i));
    if (lo != last_of.end()) {
      const TaskOccurrence& oc = ex.occurrences[lo->second];
      TF_RETURN_IF_ERROR(
          AddKernelStep(model, ex, oc, built[size_t(oc.task)], &consts, &layouts, &pkg));
      continue;
    }
    if (fused.count(int(i))) continue;
    if (AddNhwcNode(model, n, &consts, &layouts, &pkg)) continue;
    for (const std::string& in : n.inputs) layouts.Nchw(in);
    PutNode(n, pkg.add_steps()->mutable_node());
    for (const std::string& in : n.inputs)
      if (!in.empty() && model.constants.count(in)) consts.Use(in);
    for (const std::string& out : n.outputs) layouts.WroteNchw(out);
  }
  for (const std::string& o : model.outputs) {
    layouts.Nchw(o);
    if (model.constants.count(o)) consts.Use(o);
  }
  if (layouts.any_nhwc()) pkg.set_layout("NHWC");
  TF_RETURN_IF_ERROR(PlanValues(model, consts, layouts.shapes(), &pkg));
  consts.MoveInto(&pkg);
  if (options.rearrange_kernels.value_or(true)) TF_RETURN_IF_ERROR(RearrangeSteps(target, &pkg));
  if (target.is_gpu()) {
    // Kernels only on the GPU: a node that is not a view of its input has
    // no device code yet.
    std::set<std::string> native;
    for (const v1::PackageStep& st : pkg.steps())
      if (st.has_node() && !st.node().view()) native.insert(st.node().op());
    if (!native.empty()) return NoGpuKernel(native);
  }
  if (half) {
    // Float constants in the package's 16-bit format: what the device
    // holds, in half the bytes.
    const HalfKind kind = *HalfKindOf(pkg.precision());
    for (v1::PackageTensor& t : *pkg.mutable_constants()) {
      if (t.is_int() || t.f32().empty()) continue;
      TF_ASSIGN_OR_RETURN(Constant c, runtime::FromPackage(t));
      const std::vector<uint16_t> bits = ToHalfBits(c.floats.data(), c.size(), kind);
      t.clear_f32();
      t.set_f16(bits.data(), bits.size() * 2);  // little-endian, as f32 is
    }
  }
  return pkg;
}

}  // namespace tunefarm::deploy
