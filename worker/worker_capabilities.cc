#include "worker/worker_capabilities.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/build.h"
#include "compiler/codegen/llvm_target.h"
#include "compiler/codegen/nvptx_codegen.h"
#include "compiler/codegen/nvrtc_info.h"

namespace tunefarm::worker {

::tunefarm::v1::Capabilities DetectWorkerCapabilities() {
  ::tunefarm::v1::Capabilities caps;
  utsname u{};
  uname(&u);
  caps.set_triple(absl::StrCat(u.machine, "-linux-gnu"));
  caps.set_os(absl::StrCat(u.sysname, " ", u.release));
  caps.set_cores(static_cast<int32_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  caps.set_memory_bytes(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
  for (const std::string& t : codegen::BuildableTriples()) {
    caps.add_build_triples(t);
    const std::string arch = t.substr(0, t.find('-'));
    for (const std::string& c : codegen::KnownCpus(t)) caps.add_llvm_cpus(arch + ":" + c);
    for (const std::string& f : codegen::KnownFeatures(t)) caps.add_llvm_features(arch + ":" + f);
  }
  // Every arch one of the two routes builds, oldest first; those only
  // LLVM's NVPTX back end builds also in cuda_ptx_archs.
  std::set<std::string> archs;
  for (const std::string& a : codegen::NvrtcSupportedArchs()) archs.insert(a);
  for (const std::string& a : codegen::LlvmCudaArchs()) archs.insert(a);
  std::vector<std::string> sorted(archs.begin(), archs.end());
  auto number = [](const std::string& a) { return std::atoi(a.c_str() + 3); };
  std::sort(sorted.begin(), sorted.end(),
            [&](const std::string& a, const std::string& b) { return number(a) < number(b); });
  for (const std::string& a : sorted) {
    caps.add_cuda_archs(a);
    if (codegen::RouteFor(a) == codegen::GpuRoute::kLlvmPtx) caps.add_cuda_ptx_archs(a);
  }
  caps.set_version(TUNEFARM_VERSION);
  caps.mutable_fingerprint()->set_compiler(
      absl::StrCat("tunefarm ", TUNEFARM_VERSION, " LLVM ", codegen::LLVMVersion()));
  caps.mutable_fingerprint()->set_cuda_toolkit(codegen::NvrtcVersion());
  return caps;
}

}  // namespace tunefarm::worker
