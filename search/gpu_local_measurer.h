// Measures CUDA candidates on this machine's GPU: the LocalMeasurer with a
// GPU's settings (every output checked against the reference on random
// inputs, then timed with CUDA events after a warm-up, L2 flushed between
// repeats), plus the check that this machine can do it. `tunefarm tune
// --target cuda`, the GPU tests and the benches use it where a GPU is
// present.
//
//   if (absl::Status s = GpuLocalMeasurer::Check(target); !s.ok()) ...  // "no GPU ..."
//   GpuLocalMeasurer m;
//   std::vector<MeasureResult> r = m.Measure(task, schedules);
#pragma once

#include <string>

#include "absl/status/status.h"
#include "search/local_measurer.h"
#include "tunefarm/v1/records.pb.h"

namespace tunefarm::search {

struct GpuLocalMeasureOptions {
  double timeout_s = 10;  // per candidate, check and timing included
  uint64_t input_seed = 1;
  bool flush_l2 = true;
  // Check against the interpreter up to this many flops (0: the default
  // rule, ir::InterpretReference).
  double max_interpreted_flops = 0;
};

class GpuLocalMeasurer : public LocalMeasurer {
 public:
  // OK when this machine can build and time `target`'s kernels: a GPU of
  // the target's arch, a CUDA toolkit in this build that targets it, and a
  // driver at least as new as that toolkit (an older one cannot load what
  // NVRTC builds). Otherwise FailedPrecondition saying which is missing.
  static absl::Status Check(const ir::Target& target);

  // What records measured here carry: the GPU, its driver and NVRTC's version.
  static ::tunefarm::v1::Fingerprint MachineFingerprint();

  explicit GpuLocalMeasurer(GpuLocalMeasureOptions options = {});
};

}  // namespace tunefarm::search
