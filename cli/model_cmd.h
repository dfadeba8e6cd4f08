// `tunefarm build` (a whole model into a package, kernels chosen from the log
// database) and `tunefarm run` (a package on this machine).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tunefarm::cli {

// args: everything after the command. Return the exit code (0, 1 or 2).
int RunBuild(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunModel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tunefarm::cli
