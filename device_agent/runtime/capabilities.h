// What this board is: detected from /proc, sysconf and, when a GPU driver is
// installed, the CUDA driver API opened with dlopen (so no CUDA is needed to
// build or start the agent).
#pragma once

#include <string>

#include "tunefarm/v1/records.pb.h"

namespace tunefarm::runtime {

::tunefarm::v1::Capabilities DetectCapabilities();

// The cuda target of the GPU `caps` describes: its arch and, where it
// reports more, the shared memory a block may opt in to
// ("cuda -arch=sm_90 -max-shared-memory-per-block=232448"); "" without a
// GPU.
std::string LocalCudaTarget(const ::tunefarm::v1::Capabilities& caps);

}  // namespace tunefarm::runtime
