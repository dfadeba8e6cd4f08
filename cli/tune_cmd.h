// `tunefarm tune`: tune one workload on this machine (no server), every
// measurement stored in the log database as it arrives.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tunefarm::cli {

// args: everything after "tune". Returns the exit code (0, 1 or 2).
int RunTune(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tunefarm::cli
