#include "device_agent/runtime/capabilities.h"

#include <sys/utsname.h>
#include <unistd.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "device_agent/runtime/cuda_driver.h"

namespace tunefarm::runtime {
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
  absl::StatusOr<const runtime::CudaDriver*> driver = runtime::CudaDriver::Get();
  if (!driver.ok()) return;
  const runtime::CudaDriver& d = **driver;
  int version = 0;
  if (d.cuDriverGetVersion(&version) == 0) {
    caps->mutable_fingerprint()->set_cuda_driver(
        absl::StrCat(version / 1000, ".", (version % 1000) / 10));
  }
  int count = 0;
  if (d.cuDeviceGetCount(&count) != 0 || count == 0) return;
  runtime::CudaDriver::CUdevice dev = 0;
  if (d.cuDeviceGet(&dev, 0) != 0) return;
  char name[256] = {0};
  d.cuDeviceGetName(name, sizeof(name) - 1, dev);
  int major = 0, minor = 0, clock_khz = 0;
  d.cuDeviceGetAttribute(&major, runtime::kCuAttrComputeCapabilityMajor, dev);
  d.cuDeviceGetAttribute(&minor, runtime::kCuAttrComputeCapabilityMinor, dev);
  d.cuDeviceGetAttribute(&clock_khz, runtime::kCuAttrClockRate, dev);
  caps->set_has_gpu(true);
  caps->set_gpu_name(name);
  caps->add_cuda_archs(absl::StrCat("sm_", major, minor));
  int shared_optin = 0;
  if (d.cuDeviceGetAttribute(&shared_optin, runtime::kCuAttrMaxSharedMemoryPerBlockOptin, dev) == 0)
    caps->set_gpu_shared_memory_per_block(shared_optin);
  caps->mutable_fingerprint()->set_gpu_name(name);
  if (clock_khz > 0) caps->mutable_fingerprint()->set_gpu_clocks(absl::StrCat(clock_khz / 1000, " MHz"));
}

#if defined(__aarch64__)
// The features as the kernel (or an emulator) grants them to processes:
// the hwcap bits, named as /proc/cpuinfo's "Features" names them.
std::vector<std::string> Aarch64Features() {
  const unsigned long h1 = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
  std::vector<std::string> f;
  if (h1 & HWCAP_ASIMD) f.push_back("asimd");
  if (h1 & HWCAP_ASIMDDP) f.push_back("asimddp");
  if (h1 & HWCAP_FPHP) f.push_back("fphp");
  if (h1 & HWCAP_ASIMDHP) f.push_back("asimdhp");
  if (h1 & HWCAP_SVE) f.push_back("sve");
  if (h2 & HWCAP2_SVE2) f.push_back("sve2");
  if (h2 & HWCAP2_I8MM) f.push_back("i8mm");
  if (h2 & HWCAP2_BF16) f.push_back("bf16");
  return f;
}
#endif

}  // namespace

v1::Capabilities DetectCapabilities() {
  v1::Capabilities caps;
  utsname u{};
  uname(&u);
  std::string machine = u.machine;
  caps.set_triple(absl::StrCat(machine, "-linux-gnu"));
  caps.set_os(absl::StrCat(u.sysname, " ", u.release));

#if defined(__aarch64__)
  // Arm's cpuinfo has no model name (and under qemu-user it is the host's).
  std::string model = ReadFirstLine("/proc/device-tree/model");  // Jetson, Raspberry Pi
  if (model.empty()) model = CpuinfoField("Hardware");
  if (model.empty() && !CpuinfoField("CPU part").empty()) {
    model = absl::StrCat("Arm implementer ", CpuinfoField("CPU implementer"), " part ",
                         CpuinfoField("CPU part"));
  }
#else
  std::string model = CpuinfoField("model name");
  if (model.empty()) model = ReadFirstLine("/proc/device-tree/model");
  if (model.empty()) model = CpuinfoField("Hardware");
#endif
  if (model.empty()) model = machine;
  caps.set_cpu_model(model);
  caps.mutable_fingerprint()->set_cpu_model(model);
  caps.set_cores(static_cast<int32_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  caps.set_memory_bytes(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));

#if defined(__aarch64__)
  // From the auxiliary vector: /proc/cpuinfo under qemu-user is the host's.
  for (const std::string& f : Aarch64Features()) caps.add_features(f);
  if (const std::string part = CpuinfoField("CPU part"); !part.empty()) {
    caps.set_cpu_part(absl::StrCat(CpuinfoField("CPU implementer"), ":", part));
  }
#else
  // x86 lists "flags", Arm "Features"; keep the ones that matter for codegen.
  static const std::set<std::string> kInteresting = {
      "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
      "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimddp", "fphp",
      "asimdhp", "sve", "sve2", "i8mm", "bf16"};
  std::string flags = CpuinfoField("flags");
  if (flags.empty()) flags = CpuinfoField("Features");
  for (absl::string_view f : absl::StrSplit(flags, ' ', absl::SkipEmpty())) {
    if (kInteresting.count(std::string(f))) caps.add_features(std::string(f));
  }
#endif
  std::string l4t = ReadFirstLine("/etc/nv_tegra_release");
  if (!l4t.empty()) caps.mutable_fingerprint()->set_l4t_release(l4t);
  caps.set_version(TUNEFARM_VERSION);
  DetectGpu(&caps);
  return caps;
}

std::string LocalCudaTarget(const v1::Capabilities& caps) {
  if (!caps.has_gpu() || caps.cuda_archs_size() == 0) return "";
  std::string spec = absl::StrCat("cuda -arch=", caps.cuda_archs(0));
  // The parser's default is the 48 KiB every arch allows without opt-in.
  if (caps.gpu_shared_memory_per_block() > 48 * 1024)
    absl::StrAppend(&spec, " -max-shared-memory-per-block=", caps.gpu_shared_memory_per_block());
  return spec;
}

}  // namespace tunefarm::runtime
