// Reference implementations timed beside our kernels: oneDNN convolution and
// OpenBLAS sgemm. Each returns its output too, so our kernels are checked
// against it in the same run.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::bench {

struct ReferenceRun {
  double seconds = 0;           // median time of one run
  std::vector<float> output;    // in the workload's own layout
};

// oneDNN with its preferred ("any") layouts; only the primitive is timed
// (reorders of inputs and output are not). nullopt for ops it does not cover.
std::optional<ReferenceRun> RunOneDnn(const ::tunefarm::v1::Workload& w,
                                      const std::vector<std::vector<float>>& inputs, int threads);

// OpenBLAS sgemm for dense/matmul; nullopt otherwise.
std::optional<ReferenceRun> RunOpenBlas(const ::tunefarm::v1::Workload& w,
                                        const std::vector<std::vector<float>>& inputs, int threads);

// Measured peak FMA throughput (GFLOP/s) of this CPU with `threads` threads.
double MeasurePeakGflops(int threads);

// Median seconds of fn() over repeats of at least min_ms each.
double TimeIt(const std::function<void()>& fn, double min_ms = 40, int repeats = 5);

}  // namespace tunefarm::bench
