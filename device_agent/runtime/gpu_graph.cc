#include "device_agent/runtime/gpu_graph.h"

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "common/status_macros.h"

namespace tunefarm::runtime {

absl::StatusOr<std::unique_ptr<GpuGraph>> GpuGraph::Open(const CudaDriver& d, int64_t arena_bytes,
                                                         std::optional<HalfKind> half) {
  std::unique_ptr<GpuGraph> g(new GpuGraph(d, half));
  TF_ASSIGN_OR_RETURN(g->device_, d.RetainDevice0());
  g->retained_ = true;
  TF_RETURN_IF_ERROR(d.Check(d.cuMemAlloc(&g->arena_, size_t(std::max<int64_t>(arena_bytes, 256))),
                             "device memory for the arena"));
  // A blocking stream: ordered after the synchronous copies of the legacy
  // stream. Graphs cannot capture the legacy stream.
  if (d.HasGraphs()) TF_RETURN_IF_ERROR(d.Check(d.cuStreamCreate(&g->stream_, 0), "stream"));
  return g;
}

GpuGraph::~GpuGraph() {
  // Best effort: after a fault the context is gone and these fail.
  if (exec_ != nullptr) d_.cuGraphExecDestroy(exec_);
  if (stream_ != nullptr) d_.cuStreamDestroy(stream_);
  for (auto& k : kernels_) {
    for (DevicePtr w : k->workspaces) d_.cuMemFree(w);
    if (k->module != nullptr) d_.cuModuleUnload(k->module);
  }
  for (DevicePtr c : constants_) d_.cuMemFree(c);
  if (arena_ != 0) d_.cuMemFree(arena_);
  if (retained_) d_.cuDevicePrimaryCtxRelease(device_);
}

absl::StatusOr<GpuGraph::DevicePtr> GpuGraph::AddConstantBits(const uint16_t* bits, int64_t n) {
  if (!half_) return absl::InternalError("16-bit constant bits for a float32 graph");
  DevicePtr p = 0;
  TF_RETURN_IF_ERROR(d_.Check(d_.cuMemAlloc(&p, size_t(std::max<int64_t>(n, 1)) * 2),
                              "device memory for a constant"));
  constants_.push_back(p);
  if (n > 0) TF_RETURN_IF_ERROR(d_.Check(d_.cuMemcpyHtoD(p, bits, size_t(n) * 2), "constant copy"));
  return p;
}

absl::StatusOr<GpuGraph::DevicePtr> GpuGraph::AddConstant(const float* data, int64_t n) {
  DevicePtr p = 0;
  const size_t bytes = size_t(std::max<int64_t>(n, 1)) * size_t(element_bytes());
  TF_RETURN_IF_ERROR(d_.Check(d_.cuMemAlloc(&p, bytes), "device memory for a constant"));
  constants_.push_back(p);
  if (n <= 0) return p;
  if (half_) {
    const std::vector<uint16_t> h = ToHalfBits(data, n, *half_);
    TF_RETURN_IF_ERROR(d_.Check(d_.cuMemcpyHtoD(p, h.data(), h.size() * 2), "constant copy"));
  } else {
    TF_RETURN_IF_ERROR(d_.Check(d_.cuMemcpyHtoD(p, data, size_t(n) * 4), "constant copy"));
  }
  return p;
}

absl::StatusOr<int> GpuGraph::AddKernel(const GpuPlan& plan) {
  auto k = std::make_unique<Kernel>();
  TF_ASSIGN_OR_RETURN(k->module, d_.LoadModule(plan, &k->functions));
  k->launches = plan.kernels;
  kernels_.push_back(std::move(k));  // owns the module from here on
  for (int64_t bytes : plan.workspace_bytes) {
    DevicePtr w = 0;
    TF_RETURN_IF_ERROR(d_.Check(d_.cuMemAlloc(&w, size_t(std::max<int64_t>(bytes, 4))),
                                "device memory for a workspace"));
    kernels_.back()->workspaces.push_back(w);
  }
  return int(kernels_.size()) - 1;
}

absl::Status GpuGraph::AddStep(int kernel, std::vector<DevicePtr> args) {
  if (kernel < 0 || kernel >= int(kernels_.size()))
    return absl::InvalidArgumentError(absl::StrCat("no kernel ", kernel));
  const Kernel& k = *kernels_[size_t(kernel)];
  std::vector<std::unique_ptr<Launch>> launches;
  for (size_t i = 0; i < k.launches.size(); ++i) {
    auto l = std::make_unique<Launch>();
    l->function = k.functions[i];
    l->launch = &k.launches[i];
    for (int b : k.launches[i].buffers) {
      const size_t w = size_t(b) - args.size();
      if (b < 0 || (size_t(b) >= args.size() && w >= k.workspaces.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("kernel ", kernel, " launch ", k.launches[i].name, " reads buffer ", b,
                         ", the step passes ", args.size(), " arguments and the kernel has ",
                         k.workspaces.size(), " workspaces"));
      }
      l->values.push_back(size_t(b) < args.size() ? args[size_t(b)] : k.workspaces[w]);
    }
    for (DevicePtr& v : l->values) l->params.push_back(&v);
    launches.push_back(std::move(l));
  }
  steps_.push_back(std::move(launches));
  return absl::OkStatus();
}

absl::Status GpuGraph::Upload(int64_t offset_bytes, const float* data, int64_t n) {
  if (half_) {
    const std::vector<uint16_t> h = ToHalfBits(data, n, *half_);
    return d_.Check(d_.cuMemcpyHtoD(ArenaAt(offset_bytes), h.data(), h.size() * 2),
                    "copy to the device");
  }
  return d_.Check(d_.cuMemcpyHtoD(ArenaAt(offset_bytes), data, size_t(n) * 4),
                  "copy to the device");
}

absl::Status GpuGraph::Download(int64_t offset_bytes, float* data, int64_t n) const {
  if (half_) {
    std::vector<uint16_t> h(size_t(std::max<int64_t>(n, 0)));
    TF_RETURN_IF_ERROR(d_.Check(d_.cuMemcpyDtoH(h.data(), ArenaAt(offset_bytes), h.size() * 2),
                                "copy from the device"));
    FromHalfBits(h.data(), n, *half_, data);
    return absl::OkStatus();
  }
  return d_.Check(d_.cuMemcpyDtoH(data, ArenaAt(offset_bytes), size_t(n) * 4),
                  "copy from the device");
}

absl::Status GpuGraph::LaunchStep(size_t step, CudaDriver::CUstream stream) {
  for (const auto& l : steps_[step]) {
    const GpuPlan::Kernel& k = *l->launch;
    CudaDriver::CUresult r = d_.cuLaunchKernel(
        l->function, unsigned(k.grid[0]), unsigned(k.grid[1]), unsigned(k.grid[2]),
        unsigned(k.block[0]), unsigned(k.block[1]), unsigned(k.block[2]),
        unsigned(k.dynamic_shared_bytes), stream, l->params.data(), nullptr);
    if (r != 0)
      return absl::InternalError(
          absl::StrCat("step ", step, ": launch of ", k.name, ": ", d_.Describe(r)));
  }
  return absl::OkStatus();
}

absl::Status GpuGraph::Capture() {
  TF_RETURN_IF_ERROR(
      d_.Check(d_.cuStreamBeginCapture(stream_, kCuCaptureThreadLocal), "graph capture"));
  absl::Status launched = absl::OkStatus();
  for (size_t s = 0; s < steps_.size() && launched.ok(); ++s) launched = LaunchStep(s, stream_);
  // Ended whatever happened, so the stream leaves capture mode; the graph
  // is needed only until it is instantiated.
  CudaDriver::CUgraph graph = nullptr;
  const CudaDriver::CUresult ended = d_.cuStreamEndCapture(stream_, &graph);
  absl::Status s = launched.ok() ? d_.Check(ended, "graph capture") : launched;
  if (s.ok()) s = d_.Check(d_.cuGraphInstantiateWithFlags(&exec_, graph, 0), "graph instantiation");
  if (graph != nullptr) d_.cuGraphDestroy(graph);
  if (!s.ok()) exec_ = nullptr;
  return s;
}

absl::Status GpuGraph::Run(std::vector<double>* step_seconds) {
  if (step_seconds == nullptr && d_.HasGraphs()) {
    if (exec_ == nullptr) TF_RETURN_IF_ERROR(Capture());
    TF_RETURN_IF_ERROR(d_.Check(d_.cuGraphLaunch(exec_, stream_), "graph launch"));
    if (CudaDriver::CUresult r = d_.cuStreamSynchronize(stream_); r != 0)
      return absl::InternalError(absl::StrCat("the model's kernels failed: ", d_.Describe(r)));
    return absl::OkStatus();
  }
  if (step_seconds != nullptr) step_seconds->assign(steps_.size(), 0.0);
  for (size_t s = 0; s < steps_.size(); ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    TF_RETURN_IF_ERROR(LaunchStep(s, stream_));
    if (step_seconds != nullptr) {
      if (CudaDriver::CUresult r = d_.cuCtxSynchronize(); r != 0)
        return absl::InternalError(absl::StrCat("step ", s, " failed: ", d_.Describe(r)));
      (*step_seconds)[s] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  if (CudaDriver::CUresult r = d_.cuCtxSynchronize(); r != 0)
    return absl::InternalError(absl::StrCat("the model's kernels failed: ", d_.Describe(r)));
  return absl::OkStatus();
}

}  // namespace tunefarm::runtime
