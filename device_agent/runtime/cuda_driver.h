// The CUDA driver API, opened at run time (dlopen("libcuda.so.1")): the
// agent and the runner build and start on machines without CUDA, and a board
// without a driver or a device is "no GPU", not a failure to start.
//
// GpuSession runs a GpuPlan (gpu_plan.h) on device 0 in the calling process:
// the runner creates one per measurement, in a process of its own, so a
// kernel that faults poisons only that process's context.
//
//   TF_ASSIGN_OR_RETURN(const CudaDriver* d, CudaDriver::Get());
//   TF_ASSIGN_OR_RETURN(auto s, GpuSession::Open(*d, plan, buffers, n_out));
//   TF_RETURN_IF_ERROR(s->Run());
//   TF_RETURN_IF_ERROR(s->ReadOutput(out.data()));
//   TF_ASSIGN_OR_RETURN(double sec, s->Time(/*runs=*/10, /*flush_l2=*/true));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device_agent/runtime/confine.h"
#include "device_agent/runtime/gpu_plan.h"

namespace tunefarm::runtime {

class CudaDriver {
 public:
  using CUresult = int;
  using CUdevice = int;
  using CUdeviceptr = unsigned long long;
  using CUcontext = void*;
  using CUmodule = void*;
  using CUfunction = void*;
  using CUevent = void*;
  using CUstream = void*;
  using CUgraph = void*;
  using CUgraphExec = void*;

  // The driver, initialized (cuInit) on first use; Unavailable when
  // libcuda.so.1 is missing, lacks an entry point, or cuInit fails (the
  // message says which).
  static absl::StatusOr<const CudaDriver*> Get();
  // Loads libcuda.so.1, and the PTX compiler it loads on demand, without
  // initializing the driver: a runner does this before its new root leaves
  // the libraries' files out of reach (confine.h). Best effort.
  static void Preload();

  // Device 0's primary context, retained and current on this thread: the
  // driver starts its threads here. Unavailable when there is no device.
  absl::StatusOr<CUdevice> RetainDevice0() const;

  // "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered".
  std::string Describe(CUresult r) const;
  // OkStatus for CUDA_SUCCESS, else Internal("<what>: <Describe(r)>").
  absl::Status Check(CUresult r, const char* what) const;

  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, size_t) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  // Streams and graph capture (CUDA 11.4+): null where the driver lacks any
  // of them (HasGraphs), and whoever would capture launches directly.
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamBeginCapture)(CUstream, int mode) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*) = nullptr;
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph) = nullptr;
  bool HasGraphs() const;

  // The plan's module image loaded (cuModuleLoadData; PTX given its NUL)
  // and its kernels looked up, in plan order, each opted in to its dynamic
  // shared memory. A module or kernel the driver refuses, or shared memory
  // past the device's, is FailedPrecondition (with lazy loading, CUDA
  // 12.2+, a bad image can show up only at the lookup); the module is then
  // unloaded.
  absl::StatusOr<CUmodule> LoadModule(const GpuPlan& plan,
                                      std::vector<CUfunction>* functions) const;
};

// Readies `options` (confine.h) for a CUDA run in this process: the
// driver's JIT cache off, its own messages to /dev/null (a regular stderr
// file meets FSIZE 0), libcuda preloaded, `options->gpu` set, and
// `options->start_threads` extended to start the driver and device 0's
// context between the namespaces and the filter. `*driver` (outliving the
// Confine call) then holds the driver, or why it did not start.
void PrepareGpuConfinement(ConfineOptions* options, absl::StatusOr<const CudaDriver*>* driver);

// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
constexpr int kCuFuncMaxDynamicShared = 8;

// CU_STREAM_CAPTURE_MODE_THREAD_LOCAL.
constexpr int kCuCaptureThreadLocal = 1;

// CU_DEVICE_ATTRIBUTE_* values the agent reads.
constexpr int kCuAttrClockRate = 13;  // kHz
constexpr int kCuAttrL2CacheSize = 38;
constexpr int kCuAttrComputeCapabilityMajor = 75;
constexpr int kCuAttrComputeCapabilityMinor = 76;
constexpr int kCuAttrMaxSharedMemoryPerBlockOptin = 97;

class GpuSession {
 public:
  // Device 0's primary context, the plan's module and functions, and device
  // buffers: `inputs` copied up (ABI order, as the CPU kernels take them),
  // the output (`n_out` floats, filled with NaN so unwritten elements show)
  // and the plan's workspaces. The plan's float16 buffers are converted from
  // the floats given and, for the output, back to floats (ReadOutput).
  static absl::StatusOr<std::unique_ptr<GpuSession>> Open(
      const CudaDriver& driver, const GpuPlan& plan,
      const std::vector<std::pair<const float*, int64_t>>& inputs, int64_t n_out);
  ~GpuSession();

  // Every kernel once, in order, then waits for them. A kernel that faults
  // is an error naming the kernel's launch and CUDA's reason.
  absl::Status Run();
  absl::Status ReadOutput(float* out) const;
  // Whether the output is held in 16 bits (ReadOutput widens it), and in
  // which format.
  bool half_output() const { return half_output_; }
  HalfKind half() const { return half_; }
  // Seconds per run of the whole plan: `runs` back-to-back runs between two
  // events, or with `flush_l2` each run alone between its own events after
  // a write over twice the L2 cache (not timed), averaged.
  absl::StatusOr<double> Time(int64_t runs, bool flush_l2);

 private:
  explicit GpuSession(const CudaDriver& d) : d_(d) {}
  absl::Status Launch();  // all kernels, no synchronization
  absl::Status LaunchOne(size_t k);
  std::string LaunchName(size_t k) const;
  const CudaDriver& d_;
  CudaDriver::CUdevice device_ = 0;
  bool retained_ = false;
  CudaDriver::CUmodule module_ = nullptr;
  std::vector<CudaDriver::CUfunction> functions_;
  std::vector<CudaDriver::CUdeviceptr> buffers_;              // inputs, output, workspaces
  std::vector<std::vector<CudaDriver::CUdeviceptr>> values_;  // per kernel, its parameters
  std::vector<std::vector<void*>> params_;                    // per kernel, pointers into values_
  int64_t n_out_ = 0;
  size_t output_index_ = 0;
  bool half_output_ = false;  // the output is held in 16 bits
  HalfKind half_ = HalfKind::kFloat16;
  std::vector<GpuPlan::Kernel> kernels_;
  CudaDriver::CUdeviceptr flush_ = 0;
  size_t flush_bytes_ = 0;
  CudaDriver::CUevent start_ = nullptr, stop_ = nullptr;
};

}  // namespace tunefarm::runtime
