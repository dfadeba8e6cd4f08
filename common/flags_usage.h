// --help for the daemons (tunefarm-server, -worker, -agent), which parse
// their flags with absl: the usage line, then every flag of the program's
// own *_main.cc with its default (absl's default lists only flags of a file
// named like the program, so it found none).
#pragma once

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace tunefarm {

inline void SetDaemonUsage(absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "_main.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace tunefarm
