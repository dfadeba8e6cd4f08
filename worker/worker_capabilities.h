// What this compile worker can build: LLVM triples, and CUDA architectures
// when the build links NVRTC.
#pragma once

#include "tunefarm/v1/records.pb.h"

namespace tunefarm::worker {

::tunefarm::v1::Capabilities DetectWorkerCapabilities();

}  // namespace tunefarm::worker
