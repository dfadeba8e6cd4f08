// `tunefarm build` (a whole model into a package, kernels chosen from the log
// database) and `tunefarm run` (a package on this machine, or on an agent).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/client.h"

namespace tunefarm::cli {

// args: everything after the command. Return the exit code (0, 1 or 2).
int RunBuild(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunModel(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// `tunefarm run ... --device-key KEY`: the package runs on an agent through
// the server (RunsOnAgent tells the two forms apart).
bool RunsOnAgent(const std::vector<std::string>& args);
int RunModelOnAgent(const ClientOptions& client, absl::Duration timeout,
                    const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tunefarm::cli
