// The compile worker's work: a BuildRequest in, a BuildResult out. A
// schedule that does not apply or a failed build is a result with `error`
// set, never a crash. Thread safe (the worker builds on several threads).
#pragma once

#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::worker {

::tunefarm::v1::BuildResult Build(const ::tunefarm::v1::BuildRequest& request);

}  // namespace tunefarm::worker
