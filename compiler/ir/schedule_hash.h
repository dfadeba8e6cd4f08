// Content hash of a schedule: equal schedules hash equal, so the search can
// skip candidates already measured and the database can index them.
#pragma once

#include <string>

#include "tunefarm/v1/schedule.pb.h"

namespace tunefarm::ir {

// Hex SHA-256 of the schedule's deterministic serialisation without its
// provenance (sketch_id, decisions).
std::string ScheduleHash(::tunefarm::v1::Schedule schedule);

}  // namespace tunefarm::ir
