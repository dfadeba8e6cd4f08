#include "cli/target_cmd.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "device_agent/runtime/capabilities.h"

namespace tunefarm::cli {
namespace {

// LLVM's -mcpu for an Arm core by "implementer:part" as /proc/cpuinfo gives
// them (the MIDR fields; Linux's arch/arm64/include/asm/cputype.h names them).
const std::map<std::string, std::string>& ArmCores() {
  static const auto* cores = new std::map<std::string, std::string>{
      {"0x41:0xd03", "cortex-a53"},  {"0x41:0xd04", "cortex-a35"},  {"0x41:0xd05", "cortex-a55"},
      {"0x41:0xd07", "cortex-a57"},  {"0x41:0xd08", "cortex-a72"},  {"0x41:0xd09", "cortex-a73"},
      {"0x41:0xd0a", "cortex-a75"},  {"0x41:0xd0b", "cortex-a76"},  {"0x41:0xd0c", "neoverse-n1"},
      {"0x41:0xd0d", "cortex-a77"},  {"0x41:0xd0e", "cortex-a76ae"}, {"0x41:0xd40", "neoverse-v1"},
      {"0x41:0xd41", "cortex-a78"},  {"0x41:0xd42", "cortex-a78ae"}, {"0x41:0xd44", "cortex-x1"},
      {"0x41:0xd46", "cortex-a510"}, {"0x41:0xd47", "cortex-a710"}, {"0x41:0xd48", "cortex-x2"},
      {"0x41:0xd49", "neoverse-n2"}, {"0x41:0xd4b", "cortex-a78c"}, {"0x41:0xd4f", "neoverse-v2"},
      {"0x4e:0x004", "carmel"},  // NVIDIA Carmel: Jetson Xavier
  };
  return *cores;
}

// The x86-64 microarchitecture level the features reach (psABI levels, as
// LLVM names them), by the features the agents report.
std::string X86Level(const std::set<std::string>& f, std::string* because) {
  if (f.count("avx512f") && f.count("avx512bw") && f.count("avx512vl")) {
    *because = "avx512f, avx512bw, avx512vl";
    return "x86-64-v4";
  }
  if (f.count("avx2") && f.count("fma")) {
    *because = "avx2, fma";
    return "x86-64-v3";
  }
  if (f.count("sse4_2")) {
    *because = "sse4_2";
    return "x86-64-v2";
  }
  *because = "none of sse4_2, avx2, avx512f";
  return "x86-64";
}

}  // namespace

absl::StatusOr<SuggestedTarget> SuggestTarget(const v1::Capabilities& caps, bool gpu) {
  SuggestedTarget t;
  if (gpu) {
    if (!caps.has_gpu() || caps.cuda_archs_size() == 0) {
      return absl::FailedPreconditionError("it reported no GPU");
    }
    t.spec = runtime::LocalCudaTarget(caps);
    t.why = absl::StrCat("its GPU, ", caps.gpu_name(), ", is ", caps.cuda_archs(0));
    return t;
  }
  if (caps.triple().empty()) return absl::FailedPreconditionError("it reported no triple");
  const std::set<std::string> features(caps.features().begin(), caps.features().end());
  std::string cpu, because;
  if (caps.triple().rfind("aarch64", 0) == 0) {
    auto core = ArmCores().find(absl::AsciiStrToLower(caps.cpu_part()));
    if (core != ArmCores().end()) {
      cpu = core->second;
      because = absl::StrCat("its CPU part ", caps.cpu_part(), " is ", cpu);
    } else {
      because = caps.cpu_part().empty()
                    ? "its cpuinfo names no CPU part (under qemu-user it is the host's): the "
                      "generic aarch64 CPU; give -mcpu for the board (docs/agent-install.md)"
                    : absl::StrCat("CPU part ", caps.cpu_part(),
                                   " is not one tunefarm knows: the generic aarch64 CPU");
    }
  } else if (caps.triple().rfind("x86_64", 0) == 0) {
    std::string feats;
    cpu = X86Level(features, &feats);
    because = absl::StrCat("its features (", feats, ") reach ", cpu);
  } else {
    because = "the triple's generic CPU";
  }
  t.spec = absl::StrCat("llvm -mtriple=", caps.triple());
  if (!cpu.empty()) absl::StrAppend(&t.spec, " -mcpu=", cpu);
  if (caps.cores() > 0) absl::StrAppend(&t.spec, " -num-cores=", caps.cores());
  t.why = absl::StrCat(because, "; ", caps.cores(), " cores");
  return t;
}

}  // namespace tunefarm::cli
