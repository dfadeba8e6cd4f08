// Helpers the benches share.
#pragma once

#include <string>

namespace tunefarm::bench {

// The path of the program `name` installed beside this one (build/bin).
std::string SiblingBinary(const std::string& name);

// Where scripts/fetch-models.sh keeps the models and ONNX Runtime
// ($TUNEFARM_CACHE, else ~/.cache/tunefarm).
std::string CacheDir();

}  // namespace tunefarm::bench
