#include "common/logging.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "common/status_macros.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace tunefarm {
namespace {
std::mutex g_mu;
spdlog::level::level_enum g_level = spdlog::level::info;
}  // namespace

absl::Status InitLogging(const std::string& level) {
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  // from_str answers "off" for anything it does not know.
  if (lvl == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        "unknown log level '" + level + "' (trace, debug, info, warn, error, critical, off)");
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_level = lvl;
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  return absl::OkStatus();
}

std::shared_ptr<spdlog::logger> Logger(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = spdlog::stderr_logger_mt(name);
  logger->set_level(g_level);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l [%n] %v");
  return logger;
}

namespace internal {
void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, cond);
  std::abort();
}
}  // namespace internal

}  // namespace tunefarm
