// Reference implementations timed beside our kernels: oneDNN convolution and
// OpenBLAS sgemm. Each returns its output too, so our kernels are checked
// against it in the same run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::bench {

struct ReferenceRun {
  double seconds = 0;           // median time of one run
  std::vector<float> output;    // in the workload's own layout
};

// How a time is taken: at least `warmup_ms` of untimed runs (at least one),
// then `repeats` repeats of at least `min_ms` each; the median repeat's time
// per run. Compare two times only when both were taken the same way.
struct Timing {
  double min_ms = 40;
  int repeats = 5;
  double warmup_ms = 0;
};

// Largest |got[i] - want[i]| / max(1, |want[i]|) over the n values of `got`:
// how every bench checks an output, ours or a library's. +inf when n differs
// from want's size or a value is NaN or off beyond 1e30.
template <typename T>
double MaxRelError(const float* got, size_t n, const std::vector<T>& want) {
  if (n != want.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(double(got[i]) - double(want[i])) /
                     std::max(1.0, std::fabs(double(want[i])));
    if (!(e <= 1e30)) return INFINITY;
    worst = std::max(worst, e);
  }
  return worst;
}

// oneDNN with its preferred ("any") layouts; only the primitive is timed
// (reorders of inputs and output are not). nullopt for ops it does not cover.
std::optional<ReferenceRun> RunOneDnn(const ::tunefarm::v1::Workload& w,
                                      const std::vector<std::vector<float>>& inputs, int threads,
                                      const Timing& timing = {});

// OpenBLAS sgemm for dense/matmul; nullopt otherwise.
std::optional<ReferenceRun> RunOpenBlas(const ::tunefarm::v1::Workload& w,
                                        const std::vector<std::vector<float>>& inputs, int threads,
                                        const Timing& timing = {});

// Measured peak FMA throughput (GFLOP/s) of this CPU with `threads` threads.
double MeasurePeakGflops(int threads);

// Median seconds of fn() per run, taken as `timing` says.
double TimeIt(const std::function<void()>& fn, const Timing& timing);
inline double TimeIt(const std::function<void()>& fn, double min_ms = 40, int repeats = 5) {
  return TimeIt(fn, Timing{min_ms, repeats, 0});
}

}  // namespace tunefarm::bench
