// Measures candidates on this machine: compile (LLVM, a few threads), then
// each kernel in a forked child with a deadline, which checks the output
// against the task's reference on random inputs before timing it (median of
// repeats). A kernel that crashes, hangs or computes a wrong value is a
// result, never a crash of the tuner.
//
// The reference: the float64 interpreter for small workloads; above
// kMaxInterpretedFlops, the output of the default schedule (which the
// compiler tests check against the interpreter), computed once per task.
#pragma once

#include <map>
#include <memory>

#include "server/search/task.h"

namespace tunefarm::search {

struct LocalMeasureOptions {
  int threads = 1;  // kernel threads
  int compile_threads = 2;
  double min_repeat_ms = 20;  // time repeats until this much has run
  double warmup_ms = 30;      // untimed runs first (runner::SandboxOptions)
  int repeats = 5;            // median of this many timings
  double max_timing_s = 0.5;  // fewer repeats for kernels slower than this / repeats
  double timeout_s = 10;      // per candidate, run and check included
  // Once the task has a result: candidates are stopped after 0.25 s +
  // warm-up + min_repeat_ms + slow_factor x the best time (reported as timeout).
  double slow_factor = 40;
  double tolerance = 1e-3;  // relative to max(1, |reference|)
};

class LocalMeasurer : public Measurer {
 public:
  static constexpr double kMaxInterpretedFlops = 5e7;
  explicit LocalMeasurer(LocalMeasureOptions options = {});
  ~LocalMeasurer() override;

  std::vector<MeasureResult> Measure(
      const Task& task, const std::vector<::tunefarm::v1::Schedule>& schedules) override;

 private:
  struct TaskData;
  absl::StatusOr<TaskData*> Prepare(const Task& task);
  // Runs (checks, times) one kernel in the sandbox; `output` receives the
  // kernel's output when given.
  MeasureResult RunChild(const Task& task, const TaskData& data, const std::string& shared_object,
                         const ir::ComputeDAG& scheduled,
                         std::vector<float>* output = nullptr) const;

  LocalMeasureOptions options_;
  std::map<std::string, std::unique_ptr<TaskData>> tasks_;
};

}  // namespace tunefarm::search
