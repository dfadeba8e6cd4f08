// Helpers the benches share.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
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

// A flag's reader: takes its value, false where the value is bad.
using FlagReader = std::function<bool(const std::string& value)>;
// A reader that keeps the value as it is in `to`.
FlagReader TextFlag(std::string* to);
// Reads `args` as "--flag value" pairs with `flags`. 0, or 2 after one line
// on stderr ("tunefarm-bench COMMAND: ...") naming an unknown flag, a flag
// without its value or a bad value.
int ReadFlags(const std::string& command, const std::vector<std::string>& args,
              const std::map<std::string, FlagReader>& flags);

}  // namespace tunefarm::bench
