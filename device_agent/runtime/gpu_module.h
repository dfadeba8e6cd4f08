// A CUDA build's GpuModule (farm.proto) as the plan the runtime launches
// (gpu_plan.h): used by the measure path and by the graph runtime's CUDA
// packages.
#pragma once

#include "absl/status/statusor.h"
#include "device_agent/runtime/gpu_plan.h"
#include "tunefarm/v1/farm.pb.h"

namespace tunefarm::runtime {

// The runner's plan of a CUDA build: each kernel parameter, a tensor id,
// becomes the index of the argument (signature order, the output last) or
// of the workspace it names.
absl::StatusOr<GpuPlan> PlanFromModule(const ::tunefarm::v1::GpuModule& module,
                                       const ::tunefarm::v1::KernelSignature& signature);

}  // namespace tunefarm::runtime
