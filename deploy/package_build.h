// Whole-model build: an imported model becomes a ModelPackage (package.proto)
// for one target. Every task occurrence is a compiled kernel (the task's
// chosen schedule, or its default schedule) placed where the last node it
// fuses was; BatchNorm and constant bias adds are folded into the kernel's
// weights and bias; weights are packed into the layouts the schedules chose;
// every other node runs natively in the graph runtime. Values are NCHW (the
// layout ONNX models come in) unless the tasks are channels-last
// (BuildOptions::channels_last): then convolutions and what runs between
// them read and write NHWC, and a Transpose step is placed where an NCHW
// node meets an NHWC value (package_layouts.cc). Intermediates share one
// arena, planned statically from their lifetimes.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/target.h"
#include "tunefarm/v1/package.pb.h"
#include "tunefarm/v1/schedule.pb.h"

namespace tunefarm::deploy {

// What a task's kernel is built from.
struct KernelChoice {
  bool tuned = false;     // false: the default schedule
  v1::Schedule schedule;  // when tuned
  int64_t record_id = 0;
  double tuned_sec = 0;  // measured means on one device (0: unknown)
  double default_sec = 0;
  std::string why;  // one line
};

struct BuildOptions {
  std::string model_name;
  std::string model_sha256;
  // Picks each task's schedule; unset: every task uses its default schedule.
  std::function<absl::StatusOr<KernelChoice>(const frontend::ModelTask&)> choose;
  // When a tuned schedule has no default-schedule time on the same device
  // and the target is this machine: time both kernels here (threads) and
  // keep the faster. Otherwise such a task keeps its default schedule.
  bool compare_locally = true;
  int threads = 1;
  // Channels-last activations (frontend::ExtractOptions::channels_last),
  // converted to and from NCHW by transposes where NCHW nodes meet them;
  // unset: the target's default (frontend::ExtractOptionsFor).
  std::optional<bool> channels_last;
  // Native data movers (Transpose, Concat, Slice, Pad, nearest Resize, ...)
  // as generated kernels (deploy/rearrange.h); unset: yes. A CUDA package
  // needs them: there every step is a kernel or a view.
  std::optional<bool> rearrange_kernels;
  // Every value and kernel in this dtype: DTYPE_FLOAT16 or DTYPE_BFLOAT16
  // (cuda targets; bfloat16 on sm_80 and newer) computes each kernel in
  // float32 between 16-bit loads and stores. DTYPE_TF32 (sm_80 and newer)
  // keeps a float32 package whose products are tf32 workloads.
  v1::DType precision = v1::DTYPE_FLOAT32;
};

absl::StatusOr<v1::ModelPackage> BuildPackage(const frontend::Model& model, const ir::Target& target,
                                              const BuildOptions& options = {});

// The in-model check of the never-slower rule, on this machine: runs the
// untuned and the tuned build of one model (same graph, same steps)
// interleaved with every step timed (TimePaired, profiled), and returns the workload keys of the
// tasks whose tuned kernels, summed over their steps, were not at least
// `margin` faster than the default kernels in the same places (`runs`
// pairs, more where they would take under 0.2 s). A kernel
// faster alone can lose inside the model (cold weights, the neighbours'
// cache footprint); a rebuild with these tasks on their default schedules
// keeps only what pays.
absl::StatusOr<std::set<std::string>> TunedKernelsNotFasterInModel(const v1::ModelPackage& untuned,
                                                                   const v1::ModelPackage& tuned,
                                                                   int threads, int runs = 15,
                                                                   double margin = 0.02);

// Two builds of one model timed against each other at `threads`, in one
// confined child process (runtime::MeasureModel, paired): each run once
// and b's outputs checked against a's (a DataLoss error where they
// disagree), then after a warm-up pair, `runs` back-to-back pairs (more
// where `runs` would take under 0.2 s), the order alternating (drift on a
// shared machine hits both alike), both on one thread pool. `inputs` null:
// the seeded inputs of `a` (GraphRuntime::SeededInputs(7)).
struct PairedTiming {
  double a_seconds = 0, b_seconds = 0;  // median latencies
  double a_over_b = 0;                  // median over the pairs of a_i / b_i
  int runs = 0;  // pairs timed (runtime::TimeModelsPaired: at least those asked for)
};
absl::StatusOr<PairedTiming> TimePaired(
    const v1::ModelPackage& a, const v1::ModelPackage& b, int threads, int runs,
    const std::map<std::string, std::vector<float>>* inputs = nullptr);

// The whole-model side of the never-slower rule: TimePaired(untuned,
// tuned).a_over_b. Below 1, the tuned build as a whole lost on this machine
// (a kernel can win alone and in its own steps yet slow its neighbours),
// and the untuned build is the one to keep.
absl::StatusOr<double> PairedSpeedup(const v1::ModelPackage& untuned,
                                     const v1::ModelPackage& tuned, int threads, int runs = 15);

// The activation layout that runs a model faster on this machine, from two
// builds of it (ExtractOptions channels_last true and false) timed against
// each other at `threads` (TimePaired, `runs` pairs). Channels-last is the
// default; NCHW is chosen where it is at least `margin` faster (e.g. with
// AVX-512's 16 lanes, a model whose channel counts are multiples of 8 only).
// Identical builds are not timed.
struct LayoutChoice {
  bool channels_last = true;
  double nhwc_seconds = 0, nchw_seconds = 0;  // medians; 0 when not timed
  double nhwc_over_nchw = 1;                  // the median of the paired ratios
};
absl::StatusOr<LayoutChoice> ChooseLayout(const v1::ModelPackage& nhwc,
                                          const v1::ModelPackage& nchw, int threads, int runs = 9,
                                          double margin = 0.02);

// ChooseLayout between `model` built with `options` in each layout
// (channels_last set both ways); `chosen`, where given, receives the build
// of the layout kept.
absl::StatusOr<LayoutChoice> ChooseLayoutOf(const frontend::Model& model, const ir::Target& target,
                                            BuildOptions options, int threads,
                                            v1::ModelPackage* chosen = nullptr);

// The static memory plan: offsets (64-byte aligned) for values with the
// given lifetimes [first step, last step] (inclusive) and sizes in bytes, so
// that no two values alive at the same step overlap. Returns the arena size.
int64_t PlanMemory(const std::vector<std::pair<int, int>>& lifetimes,
                   const std::vector<int64_t>& bytes, std::vector<int64_t>* offsets);

}  // namespace tunefarm::deploy
