// `tunefarm compile`: what a schedule becomes, without a server.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tunefarm::cli {

// args: everything after "compile". Returns the exit code (0, 1 or 2).
int RunCompile(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tunefarm::cli
