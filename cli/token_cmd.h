// `tunefarm token`: a new access token and its line for the server's tokens
// file (common/access_tokens.h), without a server.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tunefarm::cli {

// args: everything after "token". Returns the exit code (0, 1 or 2).
int RunToken(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tunefarm::cli
