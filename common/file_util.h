// Whole-file reads shared by the server (TLS files), the CLI and deploy
// (models, packages, .npy files).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tunefarm {

// The file's bytes; NotFound "cannot read PATH" when it cannot be opened.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace tunefarm
