// Pieces the server-less commands (compile, tune) share.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir/target.h"

namespace tunefarm::cli {

// Writes "tunefarm: error: MSG" as one line and returns `code`.
int Fail(std::ostream& err, int code, const std::string& msg);

// A --target value: "host" (this machine) or a target string.
absl::StatusOr<ir::Target> ParseTargetFlag(const std::string& value);

}  // namespace tunefarm::cli
