#include "device_agent/runtime/capabilities.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "device_agent/runtime/cuda_driver.h"

namespace tunefarm::agent {
namespace {

namespace v1 = ::tunefarm::v1;

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  // Device-tree strings end in NUL.
  line.erase(std::find(line.begin(), line.end(), '\0'), line.end());
  return std::string(absl::StripAsciiWhitespace(line));
}

// The value of the first "key : value" line in /proc/cpuinfo with this key.
std::string CpuinfoField(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (absl::StripAsciiWhitespace(line.substr(0, colon)) == key) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "";
}

// The first CUDA device, through the driver opened at run time; nothing
// when there is no driver or no device.
void DetectGpu(v1::Capabilities* caps) {
  absl::StatusOr<const runner::CudaDriver*> driver = runner::CudaDriver::Get();
  if (!driver.ok()) return;
  const runner::CudaDriver& d = **driver;
  int version = 0;
  if (d.cuDriverGetVersion(&version) == 0) {
    caps->mutable_fingerprint()->set_cuda_driver(
        absl::StrCat(version / 1000, ".", (version % 1000) / 10));
  }
  int count = 0;
  if (d.cuDeviceGetCount(&count) != 0 || count == 0) return;
  runner::CudaDriver::CUdevice dev = 0;
  if (d.cuDeviceGet(&dev, 0) != 0) return;
  char name[256] = {0};
  d.cuDeviceGetName(name, sizeof(name) - 1, dev);
  int major = 0, minor = 0, clock_khz = 0;
  d.cuDeviceGetAttribute(&major, runner::kCuAttrComputeCapabilityMajor, dev);
  d.cuDeviceGetAttribute(&minor, runner::kCuAttrComputeCapabilityMinor, dev);
  d.cuDeviceGetAttribute(&clock_khz, runner::kCuAttrClockRate, dev);
  caps->set_has_gpu(true);
  caps->set_gpu_name(name);
  caps->add_cuda_archs(absl::StrCat("sm_", major, minor));
  caps->mutable_fingerprint()->set_gpu_name(name);
  if (clock_khz > 0) caps->mutable_fingerprint()->set_gpu_clocks(absl::StrCat(clock_khz / 1000, " MHz"));
}

}  // namespace

v1::Capabilities DetectCapabilities() {
  v1::Capabilities caps;
  utsname u{};
  uname(&u);
  std::string machine = u.machine;
  caps.set_triple(absl::StrCat(machine, "-linux-gnu"));
  caps.set_os(absl::StrCat(u.sysname, " ", u.release));

  std::string model = CpuinfoField("model name");
  if (model.empty()) model = ReadFirstLine("/proc/device-tree/model");  // Jetson, Raspberry Pi
  if (model.empty()) model = CpuinfoField("Hardware");
  if (model.empty()) model = machine;
  caps.set_cpu_model(model);
  caps.mutable_fingerprint()->set_cpu_model(model);
  caps.set_cores(static_cast<int32_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  caps.set_memory_bytes(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));

  // x86 lists "flags", arm64 "Features"; keep the ones that matter for codegen.
  static const std::set<std::string> kInteresting = {
      "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
      "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimddp", "fphp",
      "asimdhp", "sve", "sve2", "i8mm", "bf16"};
  std::string flags = CpuinfoField("flags");
  if (flags.empty()) flags = CpuinfoField("Features");
  for (absl::string_view f : absl::StrSplit(flags, ' ', absl::SkipEmpty())) {
    if (kInteresting.count(std::string(f))) caps.add_features(std::string(f));
  }
  std::string l4t = ReadFirstLine("/etc/nv_tegra_release");
  if (!l4t.empty()) caps.mutable_fingerprint()->set_l4t_release(l4t);
  caps.set_version(TUNEFARM_VERSION);
  DetectGpu(&caps);
  return caps;
}

}  // namespace tunefarm::agent
