#include "server/search/gpu_local_measurer.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/nvrtc_info.h"
#include "compiler/ir/schedule.h"
#include "device_agent/runtime/capabilities.h"
#include "device_agent/measure_handler.h"
#include "worker/builder.h"

namespace tunefarm::search {

namespace v1 = ::tunefarm::v1;

namespace {

// "13.0" -> {13, 0}.
std::pair<int, int> Version(const std::string& v) {
  size_t dot = v.find('.');
  return {std::atoi(v.c_str()), dot == std::string::npos ? 0 : std::atoi(v.c_str() + dot + 1)};
}

v1::BuildResult BuildFor(const Task& task, const v1::Schedule& schedule) {
  v1::BuildRequest req;
  *req.mutable_workload() = task.workload;
  req.mutable_target()->set_spec(task.target.ToString());
  *req.mutable_schedule() = schedule;
  req.set_kind(v1::ARTIFACT_KIND_CUBIN);
  return worker::Build(req);
}

}  // namespace

absl::Status GpuLocalMeasurer::Check(const ir::Target& target) {
  if (!target.is_gpu()) return absl::InvalidArgumentError("not a cuda target");
  v1::Capabilities caps = agent::DetectCapabilities();
  if (!caps.has_gpu()) return absl::FailedPreconditionError("no GPU on this machine");
  if (caps.cuda_archs_size() == 0 || caps.cuda_archs(0) != target.arch()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this machine's GPU (", caps.gpu_name(), ") is ",
                     caps.cuda_archs_size() ? caps.cuda_archs(0) : "of an unknown arch",
                     ", the target is ", target.arch()));
  }
  std::vector<std::string> archs = codegen::NvrtcSupportedArchs();
  if (std::find(archs.begin(), archs.end(), target.arch()) == archs.end()) {
    return absl::FailedPreconditionError(absl::StrCat("this build's CUDA toolkit does not build ",
                                                      target.arch(),
                                                      archs.empty() ? " (no toolkit)" : ""));
  }
  const std::string driver = caps.fingerprint().cuda_driver(), nvrtc = codegen::NvrtcVersion();
  // Cubins load on any driver of NVRTC's major version (minor-version
  // compatibility); an older major cannot load them.
  if (Version(driver).first < Version(nvrtc).first) {
    return absl::FailedPreconditionError(absl::StrCat("the GPU's driver (CUDA ", driver,
                                                      ") is older than this build's NVRTC (", nvrtc,
                                                      ") and cannot load its cubins"));
  }
  return absl::OkStatus();
}

v1::Fingerprint GpuLocalMeasurer::MachineFingerprint() {
  v1::Capabilities caps = agent::DetectCapabilities();
  v1::Fingerprint f = caps.fingerprint();
  if (f.cpu_model().empty()) f.set_cpu_model(caps.cpu_model());
  f.set_cuda_toolkit(codegen::NvrtcVersion());
  return f;
}

GpuLocalMeasurer::GpuLocalMeasurer(GpuLocalMeasureOptions options) : options_(options) {
  agent::MeasureHandlerOptions o;
  o.gpu = true;
  o.default_timeout_s = options.timeout_s;
  o.max_interpreted_flops = options.max_interpreted_flops;
  handler_ = std::make_unique<agent::MeasureHandler>(o);
}

GpuLocalMeasurer::~GpuLocalMeasurer() = default;

std::vector<MeasureResult> GpuLocalMeasurer::Measure(const Task& task,
                                                     const std::vector<v1::Schedule>& schedules) {
  std::vector<MeasureResult> out(schedules.size());
  // Above the handler's interpreter limit the reference is the default
  // schedule's build, run by the handler once per workload and seed.
  const Reference* reference = nullptr;
  if (task.flops > options_.max_interpreted_flops) {
    auto it = references_.find(task.key);
    if (it == references_.end()) {
      Reference ref{ir::DefaultSchedule(task.dag, task.target), ""};
      v1::BuildResult built = BuildFor(task, ref.schedule);
      if (!built.error().empty()) {
        for (MeasureResult& r : out) {
          r.status = MeasureResult::Status::kBuildError;
          r.error = absl::StrCat("reference (default schedule): ", built.error());
        }
        return out;
      }
      ref.artifact = built.artifact();
      it = references_.emplace(task.key, std::move(ref)).first;
    }
    reference = &it->second;
  }
  for (size_t i = 0; i < schedules.size(); ++i) {
    MeasureResult& r = out[i];
    v1::BuildResult built = BuildFor(task, schedules[i]);
    r.compile_ms = built.compile_sec() * 1e3;
    if (!built.error().empty()) {
      r.status = MeasureResult::Status::kBuildError;
      r.error = built.error();
      continue;
    }
    v1::MeasureRequest m;
    *m.mutable_workload() = task.workload;
    m.mutable_target()->set_spec(task.target.ToString());
    *m.mutable_schedule() = schedules[i];
    m.set_kind(built.kind());
    m.set_artifact(built.artifact());
    m.set_input_seed(options_.input_seed);
    m.mutable_options()->set_timeout_ms(int32_t(options_.timeout_s * 1e3));
    m.mutable_options()->set_flush_cache(options_.flush_l2);
    if (reference != nullptr) {
      m.set_reference_artifact(reference->artifact);
      *m.mutable_reference_schedule() = reference->schedule;
    }
    v1::MeasureResult got = handler_->Measure(m);
    r.status = StatusFromProto(got.status());
    r.error = got.error();
    if (r.status == MeasureResult::Status::kOk) {
      std::vector<double> c(got.costs_sec().begin(), got.costs_sec().end());
      if (c.empty()) {
        r.status = MeasureResult::Status::kRuntimeError;
        r.error = "the measurement returned no timings";
        continue;
      }
      std::sort(c.begin(), c.end());
      r.seconds = c[c.size() / 2];
    }
  }
  return out;
}

}  // namespace tunefarm::search
