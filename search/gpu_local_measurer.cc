#include "search/gpu_local_measurer.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/nvrtc_info.h"
#include "device_agent/runtime/capabilities.h"

namespace tunefarm::search {

namespace v1 = ::tunefarm::v1;

namespace {

// "13.0" -> {13, 0}.
std::pair<int, int> Version(const std::string& v) {
  size_t dot = v.find('.');
  return {std::atoi(v.c_str()), dot == std::string::npos ? 0 : std::atoi(v.c_str() + dot + 1)};
}

}  // namespace

absl::Status GpuLocalMeasurer::Check(const ir::Target& target) {
  if (!target.is_gpu()) return absl::InvalidArgumentError("not a cuda target");
  v1::Capabilities caps = runtime::DetectCapabilities();
  if (!caps.has_gpu()) return absl::FailedPreconditionError("no GPU on this machine");
  if (caps.cuda_archs_size() == 0 || caps.cuda_archs(0) != target.arch()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this machine's GPU (", caps.gpu_name(), ") is ",
                     caps.cuda_archs_size() ? caps.cuda_archs(0) : "of an unknown arch",
                     ", the target is ", target.arch()));
  }
  if (caps.gpu_shared_memory_per_block() > 0 &&
      target.max_shared_memory_per_block > caps.gpu_shared_memory_per_block()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the target lets a block take ", target.max_shared_memory_per_block,
                     " bytes of shared memory; this machine's GPU (", caps.gpu_name(), ") allows ",
                     caps.gpu_shared_memory_per_block(), " (-max-shared-memory-per-block)"));
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
  v1::Capabilities caps = runtime::DetectCapabilities();
  v1::Fingerprint f = caps.fingerprint();
  if (f.cpu_model().empty()) f.set_cpu_model(caps.cpu_model());
  f.set_cuda_toolkit(codegen::NvrtcVersion());
  return f;
}

namespace {

LocalMeasureOptions Settings(const GpuLocalMeasureOptions& g) {
  LocalMeasureOptions o;
  o.timeout_s = g.timeout_s;
  o.input_seed = g.input_seed;
  o.flush_cache = g.flush_l2;
  o.interpret_up_to_flops = g.max_interpreted_flops;
  o.slow_factor = 0;  // GPU candidates are timed in full
  return o;
}

}  // namespace

GpuLocalMeasurer::GpuLocalMeasurer(GpuLocalMeasureOptions options)
    : LocalMeasurer(Settings(options)) {}

}  // namespace tunefarm::search
