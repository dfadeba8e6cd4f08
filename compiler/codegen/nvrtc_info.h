// What the NVRTC of this build can compile for.
#pragma once

#include <string>
#include <vector>

namespace tunefarm::codegen {

// True when this build links NVRTC.
bool HaveNvrtc();

// "13.0", or "" without NVRTC.
std::string NvrtcVersion();

// Architectures NVRTC can build cubins for, as "sm_75", ... (empty without NVRTC).
std::vector<std::string> NvrtcSupportedArchs();

}  // namespace tunefarm::codegen
