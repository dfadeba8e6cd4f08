// A model package's kernel steps on device 0 (a package built for a cuda
// target): one device arena laid out as the package's memory plan, the
// constants uploaded once, each kernel's module loaded once, and the steps
// launched in order on one stream; where the driver has graphs (CUDA 11.4+)
// the launches are captured once into a CUDA graph that each run launches
// whole. GraphRuntime drives it for packages whose target is cuda; the host
// keeps the inputs and outputs. A 16-bit graph (float16 or bfloat16) holds
// every arena value and constant in that format: uploads, downloads and
// constants convert from and to float32 on the host (round to nearest even).
//
//   TF_ASSIGN_OR_RETURN(const CudaDriver* d, CudaDriver::Get());
//   TF_ASSIGN_OR_RETURN(auto g, GpuGraph::Open(*d, pkg.arena_bytes()));
//   TF_ASSIGN_OR_RETURN(auto w, g->AddConstant(data, n));
//   TF_ASSIGN_OR_RETURN(int k, g->AddKernel(plan));
//   TF_RETURN_IF_ERROR(g->AddStep(k, {g->ArenaAt(0), w, g->ArenaAt(256)}));
//   TF_RETURN_IF_ERROR(g->Upload(0, input, n)); ...; g->Run(); g->Download(...)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "device_agent/runtime/cuda_driver.h"
#include "device_agent/runtime/gpu_plan.h"

namespace tunefarm::runtime {

class GpuGraph {
 public:
  using DevicePtr = CudaDriver::CUdeviceptr;

  // Device 0's primary context and an arena of `arena_bytes`; Unavailable
  // when there is no device.
  static absl::StatusOr<std::unique_ptr<GpuGraph>> Open(const CudaDriver& driver,
                                                        int64_t arena_bytes,
                                                        std::optional<HalfKind> half = {});
  ~GpuGraph();

  DevicePtr ArenaAt(int64_t offset_bytes) const { return arena_ + DevicePtr(offset_bytes); }
  // A device copy of `n` floats (in 16 bits in a 16-bit graph), for the
  // life of the graph.
  absl::StatusOr<DevicePtr> AddConstant(const float* data, int64_t n);
  // The same from values already in the graph's 16-bit format (their
  // bits, as a 16-bit package stores them): copied as they are.
  absl::StatusOr<DevicePtr> AddConstantBits(const uint16_t* bits, int64_t n);
  // Loads the plan's module and functions and allocates its workspaces
  // (shared by the kernel's steps: the steps run one after another).
  absl::StatusOr<int> AddKernel(const GpuPlan& plan);
  // A step of kernel `kernel`: `args` are its arguments' device addresses in
  // signature order (the output last), as plan buffers 0..n.
  absl::Status AddStep(int kernel, std::vector<DevicePtr> args);

  // `n` elements at a byte offset of the arena, converted where 16-bit.
  absl::Status Upload(int64_t offset_bytes, const float* data, int64_t n);
  absl::Status Download(int64_t offset_bytes, float* data, int64_t n) const;
  // Every step once, in order, then waits: the captured graph (captured on
  // the first run), or with `step_seconds`, or without graphs, the launches
  // themselves; with `step_seconds` each step is synchronized and timed
  // (seconds per step), so a kernel that faults is named.
  absl::Status Run(std::vector<double>* step_seconds = nullptr);
  // Whether runs launch a captured CUDA graph.
  bool graphs() const { return d_.HasGraphs(); }

 private:
  GpuGraph(const CudaDriver& d, std::optional<HalfKind> half) : d_(d), half_(half) {}
  struct Kernel {
    CudaDriver::CUmodule module = nullptr;
    std::vector<CudaDriver::CUfunction> functions;
    std::vector<GpuPlan::Kernel> launches;
    std::vector<DevicePtr> workspaces;
  };
  struct Launch {
    CudaDriver::CUfunction function = nullptr;
    const GpuPlan::Kernel* launch = nullptr;
    std::vector<DevicePtr> values;  // parameter values
    std::vector<void*> params;      // pointers into values
  };
  absl::Status LaunchStep(size_t step, CudaDriver::CUstream stream);
  absl::Status Capture();
  const CudaDriver& d_;
  const std::optional<HalfKind> half_;  // unset: float32
  int64_t element_bytes() const { return half_ ? 2 : 4; }
  CudaDriver::CUdevice device_ = 0;
  CudaDriver::CUstream stream_ = nullptr;  // null: the legacy default stream
  CudaDriver::CUgraphExec exec_ = nullptr;  // the captured steps, instantiated
  bool retained_ = false;
  DevicePtr arena_ = 0;
  std::vector<DevicePtr> constants_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
  // Per step, its launches (a kernel's plan may launch several).
  std::vector<std::vector<std::unique_ptr<Launch>>> steps_;
};

}  // namespace tunefarm::runtime
