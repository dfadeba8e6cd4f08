// A CUDA package run in the SIMT interpreter (tests/compiler/gpu_sim.h), so
// that what a GPU package computes (its kernels' lowered programs, its memory
// plan and views, float16 rounding) is checked on machines without a GPU.
// One host arena laid out as the package's plan holds what the device would
// (float16 values in a float16 package, as floats); constants and inputs are
// rounded to the package's precision as GpuGraph rounds them; each kernel is
// lowered from the workload and schedule the package stores. View steps run
// nothing, as on the device; any other native step is an error.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tunefarm/v1/package.pb.h"

namespace tunefarm::testing {

struct SimulatedPackage {
  std::map<std::string, std::vector<float>> outputs;
  int kernel_steps = 0;  // steps simulated
};

absl::StatusOr<SimulatedPackage> SimulatePackage(
    const v1::ModelPackage& pkg, const std::map<std::string, std::vector<float>>& inputs);

}  // namespace tunefarm::testing
