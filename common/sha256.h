// SHA-256 (FIPS 180-4). Used for content hashes: workload keys, schedule
// hashes, record identities, artifact digests. Not for anything secret.
#pragma once

#include <string>
#include <string_view>

namespace tunefarm {

// Lower-case hex digest of `data` (64 characters).
std::string Sha256Hex(std::string_view data);

}  // namespace tunefarm
