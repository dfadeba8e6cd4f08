// Random points of the schedule space, for property tests and as the
// exploration part of the search: any sequence of valid primitives, with
// tile sizes that need not divide the extents.
#pragma once

#include <random>

#include "compiler/ir/compute.h"
#include "compiler/ir/target.h"
#include "compiler/schedule/trace.h"

namespace tunefarm::search::space {

// Every step of the result applies (Replay succeeds). Deterministic for a seed.
// On a cuda target this is RandomGpuSchedule (space/gpu_sketch.h): the GPU
// sketches, every one within the target's launch limits.
schedule::Trace RandomSchedule(const ir::ComputeDAG& dag, const ir::Target& target, std::mt19937_64& rng);

}  // namespace tunefarm::search::space
