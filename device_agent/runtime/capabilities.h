// What this board is: detected from /proc, sysconf and, when a GPU driver is
// installed, the CUDA driver API opened with dlopen (so no CUDA is needed to
// build or start the agent).
#pragma once

#include "tunefarm/v1/records.pb.h"

namespace tunefarm::agent {

::tunefarm::v1::Capabilities DetectCapabilities();

}  // namespace tunefarm::agent
