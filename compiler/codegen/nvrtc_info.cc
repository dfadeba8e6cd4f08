#include "compiler/codegen/nvrtc_info.h"

#include "absl/strings/str_cat.h"

#ifdef TUNEFARM_HAVE_CUDA
#include <nvrtc.h>
#endif

namespace tunefarm::codegen {

#ifdef TUNEFARM_HAVE_CUDA
bool HaveNvrtc() { return true; }

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "";
  return absl::StrCat(major, ".", minor);
}

std::vector<std::string> NvrtcSupportedArchs() {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return {};
  std::vector<int> archs(n);
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  std::vector<std::string> out;
  for (int a : archs) out.push_back(absl::StrCat("sm_", a));
  return out;
}
#else
bool HaveNvrtc() { return false; }
std::string NvrtcVersion() { return ""; }
std::vector<std::string> NvrtcSupportedArchs() { return {}; }
#endif

}  // namespace tunefarm::codegen
