// What the LLVM back end of this build can generate code for.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "compiler/ir/target.h"

namespace tunefarm::codegen {

// Registers the x86 and aarch64 back ends with LLVM (once; thread safe).
void InitLLVMTargets();

// "19.1.7"
std::string LLVMVersion();

// Triples this build can emit objects for (x86_64 and aarch64 Linux).
std::vector<std::string> BuildableTriples();

// The machine this process runs on as an llvm target (host CPU name, all cores).
ir::Target HostTarget();

// OK when LLVM has a back end for the target's triple and knows its -mcpu and
// -mattr features; InvalidArgument naming the unknown one otherwise.
absl::Status CheckLLVMTarget(const ir::Target& target);

// The -mcpu and -mattr names this LLVM knows for `triple` (empty when it
// does not know the triple): what a worker reports, so targets are checked
// at submit.
std::vector<std::string> KnownCpus(const std::string& triple);
std::vector<std::string> KnownFeatures(const std::string& triple);

}  // namespace tunefarm::codegen
