// Helpers the benches share.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tunefarm::bench {

// The path of the program `name` installed beside this one (build/bin).
std::string SiblingBinary(const std::string& name);

// Where scripts/fetch-models.sh keeps the models and ONNX Runtime
// ($TUNEFARM_CACHE, else ~/.cache/tunefarm).
std::string CacheDir();

// Runs `tunefarm ARGS...` (the binary beside this one) to its end within
// `limit`, its stdout to `log` and its stderr to `log`.err; `lines` gets
// every line it printed. A failure names the last line of its stderr.
absl::Status RunTunefarm(const std::vector<std::string>& args, const std::filesystem::path& log,
                         absl::Duration limit, std::vector<std::string>* lines);

}  // namespace tunefarm::bench
