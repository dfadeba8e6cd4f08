// Measures CUDA candidates on this machine's GPU with the farm's own parts
// in one process: the compile worker's build (CUDA C through NVRTC, a cubin
// for the target's arch) and the device agent's measurement (the
// tunefarm-runner sandbox: every output checked against the reference on
// random inputs, then timed with CUDA events after a warm-up, L2 flushed
// between repeats). `tunefarm tune --target cuda`, the GPU tests and the
// benches use it where a GPU is present.
//
//   if (absl::Status s = GpuLocalMeasurer::Check(target); !s.ok()) ...  // "no GPU ..."
//   GpuLocalMeasurer m(target);
//   std::vector<MeasureResult> r = m.Measure(task, schedules);
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/search/task.h"
#include "tunefarm/v1/schedule.pb.h"

namespace tunefarm::agent {
class MeasureHandler;
}

namespace tunefarm::search {

struct GpuLocalMeasureOptions {
  double timeout_s = 10;  // per candidate, check and timing included
  uint64_t input_seed = 1;
  bool flush_l2 = true;
  // Candidates of workloads up to this many flops are checked against the
  // float64 interpreter; bigger ones against the default schedule's build.
  double max_interpreted_flops = 5e7;
};

class GpuLocalMeasurer : public Measurer {
 public:
  // OK when this machine can build and time `target`'s kernels: a GPU of
  // the target's arch, a CUDA toolkit in this build that targets it, and a
  // driver at least as new as that toolkit (an older one cannot load what
  // NVRTC builds). Otherwise FailedPrecondition saying which is missing.
  static absl::Status Check(const ir::Target& target);

  // What records measured here carry: the GPU, its driver and NVRTC's version.
  static ::tunefarm::v1::Fingerprint MachineFingerprint();

  explicit GpuLocalMeasurer(GpuLocalMeasureOptions options = {});
  ~GpuLocalMeasurer() override;

  std::vector<MeasureResult> Measure(
      const Task& task, const std::vector<::tunefarm::v1::Schedule>& schedules) override;

 private:
  GpuLocalMeasureOptions options_;
  std::unique_ptr<agent::MeasureHandler> handler_;
  struct Reference {
    ::tunefarm::v1::Schedule schedule;  // the default schedule
    std::string artifact;               // its build
  };
  std::map<std::string, Reference> references_;  // by task key
};

}  // namespace tunefarm::search
