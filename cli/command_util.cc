#include "cli/command_util.h"

#include <algorithm>

#include "compiler/codegen/llvm_target.h"

namespace tunefarm::cli {

int Fail(std::ostream& err, int code, const std::string& msg) {
  std::string one_line = msg;
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  err << "tunefarm: error: " << one_line << "\n";
  return code;
}

absl::StatusOr<ir::Target> ParseTargetFlag(const std::string& value) {
  if (value == "host") return codegen::HostTarget();
  return ir::Target::Parse(value);
}

}  // namespace tunefarm::cli
