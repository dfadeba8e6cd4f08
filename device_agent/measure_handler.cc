#include "device_agent/measure_handler.h"

#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/reference.h"
#include "compiler/ir/schedule.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"
#include "device_agent/runtime/sandbox.h"

namespace tunefarm::agent {

namespace v1 = ::tunefarm::v1;

namespace {

v1::MeasureStatus ToProto(runner::SandboxOutcome::Status s) {
  switch (s) {
    case runner::SandboxOutcome::Status::kOk:
      return v1::MEASURE_STATUS_OK;
    case runner::SandboxOutcome::Status::kWrongResult:
      return v1::MEASURE_STATUS_WRONG_RESULT;
    case runner::SandboxOutcome::Status::kRuntimeError:
      return v1::MEASURE_STATUS_RUNTIME_ERROR;
    case runner::SandboxOutcome::Status::kTimeout:
      return v1::MEASURE_STATUS_TIMEOUT;
    case runner::SandboxOutcome::Status::kLoadError:
      return v1::MEASURE_STATUS_UPLOAD_ERROR;
  }
  return v1::MEASURE_STATUS_RUNTIME_ERROR;
}

// What the sandbox is handed for one build of `schedule`: the kernel's input
// buffers (constants packed where it packs them) and the kernel bytes (the
// shared object, or the GPU plan of a CUDA build).
struct Prepared {
  std::vector<std::vector<float>> args;
  std::string kernel;
};

absl::StatusOr<Prepared> Prepare(const ir::ComputeDAG& dag, const v1::Schedule& schedule,
                                 const ir::Target& target,
                                 const std::vector<std::vector<float>>& in,
                                 const std::string& artifact, bool cuda) {
  TF_ASSIGN_OR_RETURN(ir::ScheduleState st, ir::ScheduleState::Replay(dag, schedule, target));
  Prepared p;
  p.args = in;
  for (auto& [i, packed] : ir::PackedArguments(st.dag(), in)) p.args[i] = std::move(packed);
  if (!cuda) {
    p.kernel = artifact;
    return p;
  }
  v1::GpuModule module;
  if (!module.ParseFromString(artifact))
    return absl::InvalidArgumentError("the artifact is not a GpuModule");
  TF_ASSIGN_OR_RETURN(runner::GpuPlan plan, PlanFromModule(module, st.dag()));
  TF_ASSIGN_OR_RETURN(p.kernel, runner::EncodeGpuPlan(plan));
  return p;
}

std::vector<const std::vector<float>*> Pointers(const std::vector<std::vector<float>>& v) {
  std::vector<const std::vector<float>*> out;
  for (const auto& x : v) out.push_back(&x);
  return out;
}

}  // namespace

absl::StatusOr<runner::GpuPlan> PlanFromModule(const v1::GpuModule& module,
                                               const ir::ComputeDAG& dag) {
  runner::GpuPlan plan;
  plan.image = module.image();
  const int n_inputs = int(dag.args.size()) - 1;
  std::map<int, int> buffer_of;  // tensor id -> buffer index
  for (size_t i = 0; i < dag.args.size(); ++i) buffer_of[dag.args[i]] = int(i);
  for (const v1::GpuModule::Workspace& w : module.workspace()) {
    buffer_of.emplace(w.tensor(), n_inputs + 1 + int(plan.workspace_bytes.size()));
    plan.workspace_bytes.push_back(w.bytes());
  }
  for (const v1::GpuModule::Kernel& k : module.kernels()) {
    runner::GpuPlan::Kernel pk;
    pk.name = k.name();
    if (k.grid_size() != 3 || k.block_size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel ", k.name(), ": a launch has 3 grid and 3 block dimensions"));
    }
    for (int i = 0; i < 3; ++i) pk.grid[i] = k.grid(i), pk.block[i] = k.block(i);
    for (int t : k.params()) {
      auto it = buffer_of.find(t);
      if (it == buffer_of.end()) {
        return absl::InvalidArgumentError(absl::StrCat("kernel ", k.name(), ": parameter tensor ",
                                                       t,
                                                       " is neither an argument nor a workspace"));
      }
      pk.buffers.push_back(it->second);
    }
    plan.kernels.push_back(std::move(pk));
  }
  return plan;
}

v1::MeasureResult MeasureHandler::Measure(const v1::MeasureRequest& req) {
  v1::MeasureResult out;
  *out.mutable_fingerprint() = options_.fingerprint;
  auto fail = [&](v1::MeasureStatus status, const std::string& msg) {
    out.set_status(status);
    out.set_error(msg);
    return out;
  };
  if (req.artifact().empty()) {
    return fail(v1::MEASURE_STATUS_UPLOAD_ERROR, "the measurement carries no artifact");
  }
  const bool cuda = req.kind() == v1::ARTIFACT_KIND_CUBIN || req.kind() == v1::ARTIFACT_KIND_PTX;
  if (!cuda && req.kind() != v1::ARTIFACT_KIND_SHARED_OBJECT) {
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, "unknown artifact kind");
  }
  if (cuda && !options_.gpu) {
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                "this agent has no GPU: it cannot run a CUDA build (cubin/PTX)");
  }
  absl::StatusOr<ir::Target> target = ir::Target::Parse(req.target().spec());
  if (!target.ok())
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(target.status().message()));
  absl::StatusOr<ir::CanonicalWorkload> cw = ir::Canonicalize(req.workload());
  if (!cw.ok()) return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(cw.status().message()));
  absl::StatusOr<ir::ComputeDAG> dag = ir::BuildComputeDAG(cw->workload);
  if (!dag.ok()) return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(dag.status().message()));
  const std::vector<std::vector<float>> inputs = ir::RandomInputs(*dag, req.input_seed());
  const int64_t n_out = dag->NumElements(dag->output);

  runner::SandboxOptions so;
  so.threads =
      req.threads() > 0 ? req.threads() : std::max(1, int(std::thread::hardware_concurrency()));
  if (req.options().repeat() > 0) so.repeats = req.options().repeat();
  if (req.options().min_repeat_ms() > 0) so.min_repeat_ms = req.options().min_repeat_ms();
  if (req.options().number() > 0) so.number = req.options().number();
  so.flush_cache = req.options().flush_cache();
  so.time_limit_s = req.options().timeout_ms() > 0 ? req.options().timeout_ms() * 1e-3
                                                   : options_.default_timeout_s;
  so.memory_limit_bytes = options_.memory_limit_bytes;
  so.cuda = cuda;

  std::lock_guard<std::mutex> lock(mu_);
  const std::string ref_key = absl::StrCat(cw->key, "|", req.input_seed());
  auto ref = references_.find(ref_key);
  if (ref == references_.end()) {
    std::vector<float> reference;
    if (cw->flops <= options_.max_interpreted_flops) {
      absl::StatusOr<std::vector<double>> r = ir::EvaluateReference(*dag, inputs);
      if (!r.ok()) return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, std::string(r.status().message()));
      reference.assign(r->begin(), r->end());
    } else if (!req.reference_artifact().empty()) {
      auto p =
          Prepare(*dag, req.reference_schedule(), *target, inputs, req.reference_artifact(), cuda);
      if (!p.ok()) {
        return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                    absl::StrCat("reference schedule: ", p.status().message()));
      }
      runner::SandboxOptions ro = so;
      ro.repeats = 1;
      ro.min_repeat_ms = 0;
      ro.warmup_ms = 0;  // only its output counts
      runner::SandboxOutcome o =
          runner::MeasureInSandbox(p->kernel, Pointers(p->args), n_out, {}, ro, &reference);
      if (o.status != runner::SandboxOutcome::Status::kOk) {
        return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                    absl::StrCat("the reference (default schedule) failed: ", o.error));
      }
    } else {
      return fail(v1::MEASURE_STATUS_RUNTIME_ERROR,
                  "no reference: the workload is too big for the interpreter and the request "
                  "carries no reference artifact");
    }
    ref = references_.emplace(ref_key, std::move(reference)).first;
  }
  auto p = Prepare(*dag, req.schedule(), *target, inputs, req.artifact(), cuda);
  if (!p.ok()) {
    return fail(v1::MEASURE_STATUS_RUNTIME_ERROR, absl::StrCat("schedule: ", p.status().message()));
  }
  runner::SandboxOutcome o =
      runner::MeasureInSandbox(p->kernel, Pointers(p->args), n_out, ref->second, so);
  out.set_status(ToProto(o.status));
  out.set_error(o.error);
  for (double c : o.costs) out.add_costs_sec(c);
  out.set_run_sec(o.run_s);
  return out;
}

}  // namespace tunefarm::agent
