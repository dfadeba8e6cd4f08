#include "deploy/package_internal.h"

#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "compiler/codegen/build.h"
#include "compiler/ir/winograd.h"
#include "compiler/ir/workload.h"
#include "compiler/schedule/schedule.h"
#include "device_agent/runtime/measure.h"

namespace tunefarm::deploy {


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
    } else if (size_t k = 0; task.workload.op() == v1::OP_KIND_REARRANGE && role.size() > 1 &&
                             role[0] == 'x' &&
                             absl::SimpleAtoi(absl::string_view(role).substr(1), &k) &&
                             k < a.inputs.size()) {
      src = a.inputs[k];  // a data mover's inputs: its node's (a Concat's)
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

}  // namespace tunefarm::deploy
