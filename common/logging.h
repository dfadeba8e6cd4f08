// Named spdlog loggers for tunefarm processes.
//
// Each binary's main() calls InitLogging() once with the level from its
// --log_level flag; libraries fetch their logger once with Logger("server")
// and keep the pointer. Lines are "time level [name] key=value ...".
// Thread safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace tunefarm {

// Sets the level of every logger created now or later. Level names are
// spdlog's: trace, debug, info, warn, error, critical, off.
absl::Status InitLogging(const std::string& level);

// Returns the logger called `name`, creating a stderr logger on first use.
std::shared_ptr<spdlog::logger> Logger(const std::string& name);

}  // namespace tunefarm
