// Internal to store/: helpers the tuning_log*.cc files (TuningLog's
// implementation, split by concern) share. Nothing outside store/ includes
// this header; the public surface is tuning_log.h.
#pragma once

#include <cstdint>
#include <string>

#include "google/protobuf/message.h"

namespace tunefarm::store::internal {

// The current time, in milliseconds since the Unix epoch.
int64_t NowMs();

// `m` serialized deterministically (map fields in key order), so equal
// messages store equal bytes and hash alike.
std::string DeterministicBytes(const google::protobuf::Message& m);

}  // namespace tunefarm::store::internal
