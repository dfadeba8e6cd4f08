// Measures candidates on this machine, CPU and CUDA targets alike, through
// the farm's one build path (codegen::Build, a few threads) and one measure
// path (runtime::Measure: a forked child with a deadline, which checks the
// output against the task's reference on random inputs before timing it,
// median of repeats). A kernel that crashes, hangs or computes a wrong value
// is a result, never a crash of the tuner.
//
// The reference (ir::InterpretReference decides): the float64 interpreter,
// or the output of the default schedule's build (which the compiler tests
// check against the interpreter), computed once per task.
#pragma once

#include <map>
#include <memory>

#include "search/task.h"

namespace tunefarm::search {

struct LocalMeasureOptions {
  int threads = 1;  // kernel threads (CPU)
  int compile_threads = 2;
  double min_repeat_ms = 20;  // time repeats until this much has run
  double warmup_ms = 30;      // untimed runs first (runtime::SandboxOptions)
  int repeats = 5;            // median of this many timings
  double max_timing_s = 0.5;  // fewer repeats for kernels slower than this / repeats
  double timeout_s = 10;      // per candidate, run and check included
  // Once the task has a result: candidates are stopped after 0.25 s +
  // warm-up + min_repeat_ms + slow_factor x the best time (reported as
  // timeout). 0: never cut short.
  double slow_factor = 40;
  double tolerance = 1e-3;  // relative to max(1, |reference|)
  uint64_t input_seed = 1;  // of the random inputs (proto/kernel_signature.h)
  bool flush_cache = false;  // flush the last-level cache (GPU: L2) before every timed run
  // Check against the interpreter up to this many flops instead of the
  // default rule (ir::InterpretReference); 0: the default rule.
  double interpret_up_to_flops = 0;
};

class LocalMeasurer : public Measurer {
 public:
  explicit LocalMeasurer(LocalMeasureOptions options = {});
  ~LocalMeasurer() override;

  std::vector<MeasureResult> Measure(const Task& task,
                                     const std::vector<schedule::Trace>& schedules) override;

 private:
  struct TaskData;
  absl::StatusOr<TaskData*> Prepare(const Task& task);

  LocalMeasureOptions options_;
  std::map<std::string, std::unique_ptr<TaskData>> tasks_;
};

}  // namespace tunefarm::search
