// The compiler's canonical forms for the log database (store::Canon):
// ir::Canonicalize for workloads, ir::Target for target specs,
// ir::ScheduleHash for schedules. Whoever opens a TuningLog passes it:
//
//   store::TuningLog::Options o;
//   o.canon = search::CompilerCanon();
#pragma once

#include "store/canon.h"

namespace tunefarm::search {

store::Canon CompilerCanon();

}  // namespace tunefarm::search
