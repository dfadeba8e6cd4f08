#include "device_agent/runtime/cuda_driver.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "common/status_macros.h"

namespace tunefarm::runtime {
namespace {

// Resolves `name` (or, when given, `preferred` first) into `*fn`; false if
// neither is exported.
template <typename Fn>
bool Resolve(void* lib, Fn* fn, const char* name, const char* preferred = nullptr) {
  void* p = preferred != nullptr ? dlsym(lib, preferred) : nullptr;
  if (p == nullptr) p = dlsym(lib, name);
  *fn = reinterpret_cast<Fn>(p);
  return p != nullptr;
}

absl::StatusOr<const CudaDriver*> Load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::UnavailableError("no GPU: the CUDA driver (libcuda.so.1) is not installed");
  }
  static CudaDriver d;
  const char* missing = nullptr;
  auto need = [&](auto* fn, const char* name, const char* preferred = nullptr) {
    if (!Resolve(lib, fn, name, preferred) && missing == nullptr) missing = name;
  };
  // The versioned names are the ones CUDA's headers have used since 4.0 / 12.8.
  need(&d.cuInit, "cuInit");
  need(&d.cuDriverGetVersion, "cuDriverGetVersion");
  need(&d.cuDeviceGetCount, "cuDeviceGetCount");
  need(&d.cuDeviceGet, "cuDeviceGet");
  need(&d.cuDeviceGetName, "cuDeviceGetName");
  need(&d.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  need(&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  need(&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2");
  need(&d.cuCtxSetCurrent, "cuCtxSetCurrent");
  need(&d.cuCtxSynchronize, "cuCtxSynchronize");
  need(&d.cuModuleLoadData, "cuModuleLoadData");
  need(&d.cuModuleUnload, "cuModuleUnload");
  need(&d.cuModuleGetFunction, "cuModuleGetFunction");
  need(&d.cuFuncSetAttribute, "cuFuncSetAttribute");
  need(&d.cuMemAlloc, "cuMemAlloc_v2");
  need(&d.cuMemFree, "cuMemFree_v2");
  need(&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  need(&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  need(&d.cuMemsetD8, "cuMemsetD8_v2");
  need(&d.cuMemsetD32, "cuMemsetD32_v2");
  need(&d.cuLaunchKernel, "cuLaunchKernel");
  need(&d.cuEventCreate, "cuEventCreate");
  need(&d.cuEventRecord, "cuEventRecord");
  need(&d.cuEventSynchronize, "cuEventSynchronize");
  need(&d.cuEventElapsedTime, "cuEventElapsedTime", "cuEventElapsedTime_v2");
  need(&d.cuEventDestroy, "cuEventDestroy_v2");
  need(&d.cuGetErrorName, "cuGetErrorName");
  need(&d.cuGetErrorString, "cuGetErrorString");
  Resolve(lib, &d.cuStreamCreate, "cuStreamCreate");
  Resolve(lib, &d.cuStreamDestroy, "cuStreamDestroy", "cuStreamDestroy_v2");
  Resolve(lib, &d.cuStreamSynchronize, "cuStreamSynchronize");
  Resolve(lib, &d.cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  Resolve(lib, &d.cuStreamEndCapture, "cuStreamEndCapture");
  Resolve(lib, &d.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  Resolve(lib, &d.cuGraphLaunch, "cuGraphLaunch");
  Resolve(lib, &d.cuGraphExecDestroy, "cuGraphExecDestroy");
  Resolve(lib, &d.cuGraphDestroy, "cuGraphDestroy");
  if (missing != nullptr) {
    return absl::UnavailableError(
        absl::StrCat("no GPU: libcuda.so.1 lacks ", missing, " (a driver older than CUDA 12?)"));
  }
  if (CudaDriver::CUresult r = d.cuInit(0); r != 0) {
    return absl::UnavailableError(absl::StrCat("no GPU: cuInit failed: ", d.Describe(r)));
  }
  return &d;
}

}  // namespace

bool CudaDriver::HasGraphs() const {
  return cuStreamCreate && cuStreamDestroy && cuStreamSynchronize && cuStreamBeginCapture &&
         cuStreamEndCapture && cuGraphInstantiateWithFlags && cuGraphLaunch && cuGraphExecDestroy &&
         cuGraphDestroy;
}

absl::StatusOr<const CudaDriver*> CudaDriver::Get() {
  static const absl::StatusOr<const CudaDriver*> driver = Load();
  return driver;
}

void CudaDriver::Preload() {
  dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  dlopen("libnvidia-ptxjitcompiler.so.1", RTLD_NOW | RTLD_GLOBAL);
}

absl::StatusOr<CudaDriver::CUdevice> CudaDriver::RetainDevice0() const {
  int count = 0;
  if (cuDeviceGetCount(&count) != 0 || count < 1)
    return absl::UnavailableError("no GPU: the CUDA driver sees no device");
  CUdevice device = 0;
  TF_RETURN_IF_ERROR(Check(cuDeviceGet(&device, 0), "cuDeviceGet"));
  CUcontext ctx = nullptr;
  TF_RETURN_IF_ERROR(Check(cuDevicePrimaryCtxRetain(&ctx, device), "context"));
  if (absl::Status s = Check(cuCtxSetCurrent(ctx), "context"); !s.ok()) {
    cuDevicePrimaryCtxRelease(device);
    return s;
  }
  return device;
}

std::string CudaDriver::Describe(CUresult r) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(r, &name) != 0 || name == nullptr)
    return absl::StrCat("CUDA error ", r);
  if (cuGetErrorString != nullptr && cuGetErrorString(r, &text) == 0 && text != nullptr)
    return absl::StrCat(name, ": ", text);
  return name;
}

absl::Status CudaDriver::Check(CUresult r, const char* what) const {
  if (r == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", Describe(r)));
}

absl::StatusOr<CudaDriver::CUmodule> CudaDriver::LoadModule(
    const GpuPlan& plan, std::vector<CUfunction>* functions) const {
  // PTX must end in NUL for the JIT; a cubin is unaffected by one more byte.
  std::string image = plan.image;
  image.push_back('\0');
  CUmodule module = nullptr;
  if (absl::Status c = Check(cuModuleLoadData(&module, image.data()), "the module did not load");
      !c.ok()) {
    return absl::FailedPreconditionError(c.message());
  }
  functions->clear();
  for (const GpuPlan::Kernel& k : plan.kernels) {
    CUfunction f = nullptr;
    if (CUresult r = cuModuleGetFunction(&f, module, k.name.c_str()); r != 0) {
      cuModuleUnload(module);
      return absl::FailedPreconditionError(
          absl::StrCat("kernel '", k.name, "' not loaded from the module: ", Describe(r)));
    }
    if (k.dynamic_shared_bytes > 0) {
      if (CUresult r = cuFuncSetAttribute(f, kCuFuncMaxDynamicShared, int(k.dynamic_shared_bytes));
          r != 0) {
        cuModuleUnload(module);
        return absl::FailedPreconditionError(
            absl::StrCat("kernel '", k.name, "' needs ", k.dynamic_shared_bytes,
                         " bytes of shared memory, which the device refuses: ", Describe(r)));
      }
    }
    functions->push_back(f);
  }
  return module;
}

void PrepareGpuConfinement(ConfineOptions* options, absl::StatusOr<const CudaDriver*>* driver) {
  setenv("CUDA_CACHE_DISABLE", "1", 1);  // the JIT's cache would write files
  if (int null = open("/dev/null", O_WRONLY | O_CLOEXEC); null >= 0) {
    dup2(null, 1);
    dup2(null, 2);
    close(null);
  }
  CudaDriver::Preload();
  options->gpu = true;
  *driver = absl::UnavailableError("not started");
  options->start_threads = [then = std::move(options->start_threads), driver] {
    if (then) then();
    *driver = CudaDriver::Get();
    if (driver->ok()) {
      if (absl::StatusOr<CudaDriver::CUdevice> d = (**driver)->RetainDevice0(); !d.ok())
        *driver = d.status();
    }
  };
}

absl::StatusOr<std::unique_ptr<GpuSession>> GpuSession::Open(
    const CudaDriver& d, const GpuPlan& plan,
    const std::vector<std::pair<const float*, int64_t>>& inputs, int64_t n_out) {
  std::unique_ptr<GpuSession> s(new GpuSession(d));
  s->kernels_ = plan.kernels;
  s->n_out_ = n_out;
  TF_ASSIGN_OR_RETURN(s->device_, d.RetainDevice0());
  s->retained_ = true;
  TF_ASSIGN_OR_RETURN(s->module_, d.LoadModule(plan, &s->functions_));
  auto is_half = [&](size_t buffer) {
    return std::find(plan.float16_buffers.begin(), plan.float16_buffers.end(), int(buffer)) !=
           plan.float16_buffers.end();
  };
  s->output_index_ = inputs.size();
  s->half_output_ = is_half(s->output_index_);
  s->half_ = plan.half;
  std::vector<int64_t> bytes;
  for (size_t i = 0; i < inputs.size(); ++i)
    bytes.push_back(inputs[i].second * (is_half(i) ? 2 : 4));
  bytes.push_back(n_out * (s->half_output_ ? 2 : 4));
  for (int64_t w : plan.workspace_bytes) bytes.push_back(w);
  for (int64_t b : bytes) {
    CudaDriver::CUdeviceptr p = 0;
    TF_RETURN_IF_ERROR(d.Check(d.cuMemAlloc(&p, size_t(std::max<int64_t>(b, 4))), "device memory"));
    s->buffers_.push_back(p);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& [data, count] = inputs[i];
    std::vector<uint16_t> half;
    if (is_half(i)) half = ToHalfBits(data, count, plan.half);
    const void* up = is_half(i) ? static_cast<const void*>(half.data()) : data;
    TF_RETURN_IF_ERROR(
        d.Check(d.cuMemcpyHtoD(s->buffers_[i], up, size_t(bytes[i])), "copy to the device"));
  }
  if (s->half_output_) {
    const std::vector<uint16_t> nans(size_t(n_out), HalfQuietNaN(plan.half));
    TF_RETURN_IF_ERROR(
        d.Check(d.cuMemcpyHtoD(s->buffers_[s->output_index_], nans.data(), size_t(n_out) * 2),
                "output fill"));
  } else {
    uint32_t nan;
    const float qnan = std::nanf("");
    std::memcpy(&nan, &qnan, 4);
    TF_RETURN_IF_ERROR(
        d.Check(d.cuMemsetD32(s->buffers_[s->output_index_], nan, size_t(n_out)), "output fill"));
  }
  // Each launch's parameter values (device pointers) and the pointers to
  // them that cuLaunchKernel reads, built once.
  for (const GpuPlan::Kernel& k : plan.kernels) {
    std::vector<CudaDriver::CUdeviceptr> values;
    for (int b : k.buffers) values.push_back(s->buffers_[size_t(b)]);
    s->values_.push_back(std::move(values));
  }
  for (std::vector<CudaDriver::CUdeviceptr>& values : s->values_) {
    std::vector<void*> params;
    for (CudaDriver::CUdeviceptr& v : values) params.push_back(&v);
    s->params_.push_back(std::move(params));
  }
  TF_RETURN_IF_ERROR(d.Check(d.cuEventCreate(&s->start_, 0), "event"));
  TF_RETURN_IF_ERROR(d.Check(d.cuEventCreate(&s->stop_, 0), "event"));
  return s;
}

GpuSession::~GpuSession() {
  // Best effort: after a fault the context is gone and these fail; the
  // process exits right after anyway.
  if (start_ != nullptr) d_.cuEventDestroy(start_);
  if (stop_ != nullptr) d_.cuEventDestroy(stop_);
  if (flush_ != 0) d_.cuMemFree(flush_);
  for (CudaDriver::CUdeviceptr p : buffers_) d_.cuMemFree(p);
  if (module_ != nullptr) d_.cuModuleUnload(module_);
  if (retained_) d_.cuDevicePrimaryCtxRelease(device_);
}

absl::Status GpuSession::LaunchOne(size_t k) {
  const GpuPlan::Kernel& kernel = kernels_[k];
  CudaDriver::CUresult r = d_.cuLaunchKernel(
      functions_[k], unsigned(kernel.grid[0]), unsigned(kernel.grid[1]), unsigned(kernel.grid[2]),
      unsigned(kernel.block[0]), unsigned(kernel.block[1]), unsigned(kernel.block[2]),
      unsigned(kernel.dynamic_shared_bytes), nullptr, params_[k].data(), nullptr);
  if (r == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("launch of ", LaunchName(k), ": ", d_.Describe(r)));
}

std::string GpuSession::LaunchName(size_t k) const {
  const GpuPlan::Kernel& kernel = kernels_[k];
  return absl::StrCat(kernel.name, " (grid ", kernel.grid[0], "x", kernel.grid[1], "x",
                      kernel.grid[2], ", block ", kernel.block[0], "x", kernel.block[1], "x",
                      kernel.block[2], ")");
}

absl::Status GpuSession::Launch() {
  for (size_t k = 0; k < kernels_.size(); ++k) {
    TF_RETURN_IF_ERROR(LaunchOne(k));
  }
  return absl::OkStatus();
}

absl::Status GpuSession::Run() {
  // Synchronized after each kernel, so a fault names the kernel that made it
  // (faults surface asynchronously, at the next synchronization).
  for (size_t k = 0; k < kernels_.size(); ++k) {
    TF_RETURN_IF_ERROR(LaunchOne(k));
    if (CudaDriver::CUresult r = d_.cuCtxSynchronize(); r != 0)
      return absl::InternalError(absl::StrCat(LaunchName(k), " failed: ", d_.Describe(r)));
  }
  return absl::OkStatus();
}

absl::Status GpuSession::ReadOutput(float* out) const {
  if (!half_output_) {
    return d_.Check(d_.cuMemcpyDtoH(out, buffers_[output_index_], size_t(n_out_) * 4),
                    "copy from the device");
  }
  std::vector<uint16_t> half(static_cast<size_t>(n_out_));
  TF_RETURN_IF_ERROR(
      d_.Check(d_.cuMemcpyDtoH(half.data(), buffers_[output_index_], size_t(n_out_) * 2),
               "copy from the device"));
  FromHalfBits(half.data(), n_out_, half_, out);
  return absl::OkStatus();
}

absl::StatusOr<double> GpuSession::Time(int64_t runs, bool flush_l2) {
  runs = std::max<int64_t>(1, runs);
  if (flush_l2 && flush_ == 0) {
    int l2 = 0;
    d_.cuDeviceGetAttribute(&l2, kCuAttrL2CacheSize, device_);
    flush_bytes_ = size_t(std::max(l2, 1 << 20)) * 2;
    TF_RETURN_IF_ERROR(d_.Check(d_.cuMemAlloc(&flush_, flush_bytes_), "L2 flush buffer"));
  }
  auto timed = [&](int64_t n, float* ms) -> absl::Status {
    TF_RETURN_IF_ERROR(d_.Check(d_.cuEventRecord(start_, nullptr), "event"));
    for (int64_t i = 0; i < n; ++i) {
      TF_RETURN_IF_ERROR(Launch());
    }
    TF_RETURN_IF_ERROR(d_.Check(d_.cuEventRecord(stop_, nullptr), "event"));
    TF_RETURN_IF_ERROR(d_.Check(d_.cuEventSynchronize(stop_), "kernel execution"));
    return d_.Check(d_.cuEventElapsedTime(ms, start_, stop_), "event time");
  };
  double total_ms = 0;
  if (!flush_l2) {
    float ms = 0;
    TF_RETURN_IF_ERROR(timed(runs, &ms));
    total_ms = ms;
  } else {
    for (int64_t i = 0; i < runs; ++i) {
      // A write over twice L2 evicts the inputs and weights; the memset runs
      // on the same stream, before the start event.
      TF_RETURN_IF_ERROR(d_.Check(d_.cuMemsetD8(flush_, uint8_t(i), flush_bytes_), "L2 flush"));
      float ms = 0;
      TF_RETURN_IF_ERROR(timed(1, &ms));
      total_ms += ms;
    }
  }
  return total_ms * 1e-3 / double(runs);
}

}  // namespace tunefarm::runtime
