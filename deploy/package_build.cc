#include "deploy/package_build.h"
#include "deploy/package_internal.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/frontend/op_context.h"
#include "compiler/frontend/op_registry.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/workload.h"
#include "deploy/rearrange.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/ops.h"
#include "proto/kernel_signature.h"

namespace tunefarm::deploy {

using frontend::ExtractTasks;

using runtime::kPackageFormatVersion;

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

namespace {

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
