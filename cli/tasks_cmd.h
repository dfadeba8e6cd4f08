// `tunefarm tasks MODEL.onnx`: the tunable workloads of a model, without a
// server.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tunefarm::cli {

// args: everything after "tasks". Returns the exit code (0 or 2).
int RunTasks(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tunefarm::cli
