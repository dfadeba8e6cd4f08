// `tunefarm target --device ID`: the target string that makes code for a
// registered board, from what its agent reported (Capabilities).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tunefarm/v1/records.pb.h"

namespace tunefarm::cli {

struct SuggestedTarget {
  std::string spec;  // the target string, e.g. "llvm -mtriple=aarch64-linux-gnu -mcpu=carmel -num-cores=8"
  std::string why;   // one line: what in the capabilities chose it
};

// The target for an agent of `caps`: its GPU's arch when it has one
// (`gpu`: true), else its CPU's triple, an -mcpu and its cores. The -mcpu
// is the Arm core named by its cpuinfo part number (docs/agent-install.md
// lists the Jetson modules) or, on x86-64, the x86-64 level its features
// reach; a CPU neither names gets the triple's generic CPU, said in `why`.
// An error names what is missing (no triple reported; no GPU when `gpu`).
absl::StatusOr<SuggestedTarget> SuggestTarget(const v1::Capabilities& caps, bool gpu);

}  // namespace tunefarm::cli
