// The `tunefarm` command line: argument parsing and the commands that talk to
// the server. RunCli returns the process exit code:
//   0 ok, 1 the server refused or failed the request, 2 bad usage or input,
//   3 the server could not be reached.
// Every failure prints exactly one line "tunefarm: error: ..." to `err`.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tunefarm::cli {

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tunefarm::cli
