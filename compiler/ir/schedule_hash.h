// Content hash of a schedule: equal schedules hash equal, so the search can
// skip candidates already measured and the database can index them.
#pragma once

#include <string>

#include "tunefarm/v1/schedule.pb.h"

namespace tunefarm::ir {

// The tensor-core sketch (compiler/schedule/gpu_tensor_core.h): its
// schedules have no steps; the decisions are the whole schedule.
constexpr int kGpuTensorCoreSketchId = 4;

// Hex SHA-256 of the schedule's deterministic serialisation without its
// provenance (sketch_id, decisions), which a tensor-core schedule keeps.
std::string ScheduleHash(::tunefarm::v1::Schedule schedule);

}  // namespace tunefarm::ir
