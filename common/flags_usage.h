// Flags of the daemons (tunefarm-server, -worker, -agent), which define
// them with absl, parsed the way the CLI parses its own: --help prints the
// usage line and every flag of the program's *_main.cc with its default
// (no source paths) and exits 0; an unknown flag (with the nearest known
// name), a bad value, or an argument that is not a flag is one line on
// stderr and exit 2.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tunefarm {

// Sets the usage line --help prints first.
void SetDaemonUsage(absl::string_view usage);

// Parses argv into the program's absl flags; on --help, or on an error,
// prints and exits (0, 2). Flags are --name=value, --name value, --name
// and --noname for booleans; "--" ends them. --flagfile=FILE reads flags
// from FILE in its place (one --name=value a line; blank lines and # lines
// skipped); an error in it names FILE:LINE.
void ParseDaemonFlags(int argc, char** argv);

// What ParseDaemonFlags does, without exiting or printing: the text to
// print and the exit code (-1: go on). For tests.
struct DaemonFlagsOutcome {
  int exit_code = -1;
  std::string text;
};
DaemonFlagsOutcome ParseDaemonFlagsOrExplain(const std::vector<std::string>& args,
                                             absl::string_view program);

}  // namespace tunefarm
