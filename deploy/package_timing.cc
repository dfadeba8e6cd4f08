// Whole builds timed against each other on this machine (package_build.h):
// the never-slower check of tuned kernels inside the model, paired A/B
// timings, the layout choice. Each is one paired runtime::MeasureModel: a
// confined child runs both builds, checks that their outputs agree and
// times them pair by pair.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "common/status_macros.h"
#include "deploy/package_build.h"
#include "device_agent/runtime/model_run.h"

namespace tunefarm::deploy {
namespace {

// A paired run of two whole builds: load, the checked first runs and the
// pairs together. Generous: a model of a second per run timed for 15 pairs
// takes under a minute.
constexpr double kPairedTimeLimitS = 1800;

// How far the outputs of two builds may differ: each may be its precision's
// model tolerance away from the exact outputs (common/float16.h), so twice
// that, and at least 1e-3 of the output's range.
double PairTolerance(const v1::ModelPackage& p) {
  std::optional<HalfKind> half;
  if (p.precision() == v1::DTYPE_FLOAT16) half = HalfKind::kFloat16;
  if (p.precision() == v1::DTYPE_BFLOAT16) half = HalfKind::kBFloat16;
  return std::max(1e-3, 2 * ModelTolerance(half, p.precision() == v1::DTYPE_TF32));
}

// `a` and `b` timed against each other at `threads` (runtime::MeasureModel,
// paired): `runs` pairs at least, each step profiled where `profile`.
// `inputs` null: the seeded inputs (seed 7).
absl::StatusOr<v1::ModelRunPair> MeasurePair(
    const v1::ModelPackage& a, const v1::ModelPackage& b, int threads, int runs, bool profile,
    const std::map<std::string, std::vector<float>>* inputs) {
  v1::ModelRunRequest req;
  req.set_package(a.SerializeAsString());
  req.set_paired_package(b.SerializeAsString());
  req.set_threads(threads);
  req.set_repeats(runs);
  req.set_input_seed(7);
  req.set_profile(profile);
  req.set_time_limit_s(kPairedTimeLimitS);
  req.set_output_tolerance(std::max(PairTolerance(a), PairTolerance(b)));
  if (inputs != nullptr) runtime::SetModelInputs(a, *inputs, &req);
  const v1::ModelRunResult r = runtime::MeasureModel(req);
  TF_RETURN_IF_ERROR(runtime::ModelRunStatus(r));
  return r.pair();
}

}  // namespace

absl::StatusOr<std::set<std::string>> TunedKernelsNotFasterInModel(const v1::ModelPackage& untuned,
                                                                   const v1::ModelPackage& tuned,
                                                                   int threads, int runs,
                                                                   double margin) {
  if (untuned.steps_size() != tuned.steps_size())
    return absl::InvalidArgumentError("the two builds have different steps");
  TF_ASSIGN_OR_RETURN(v1::ModelRunPair t,
                      MeasurePair(untuned, tuned, threads, runs, /*profile=*/true, nullptr));
  const int steps = untuned.steps_size();
  if (t.a_step_sec_size() < steps || t.b_step_sec_size() < steps)
    return absl::InternalError("the profile has another count of steps than the package");
  std::map<std::string, std::pair<double, double>> by_task;  // key -> (default, tuned)
  for (int s = 0; s < steps; ++s) {
    if (!tuned.steps(s).has_kernel()) continue;
    const v1::PackageKernel& k = tuned.kernels(tuned.steps(s).kernel().kernel());
    if (!k.tuned()) continue;
    auto& p = by_task[k.workload_key()];
    p.first += t.a_step_sec(s);
    p.second += t.b_step_sec(s);
  }
  std::set<std::string> slower;
  for (const auto& [key, p] : by_task)
    if (!(p.second < p.first * (1 - margin))) slower.insert(key);
  return slower;
}

absl::StatusOr<PairedTiming> TimePaired(const v1::ModelPackage& a, const v1::ModelPackage& b,
                                        int threads, int runs,
                                        const std::map<std::string, std::vector<float>>* inputs) {
  TF_ASSIGN_OR_RETURN(v1::ModelRunPair t,
                      MeasurePair(a, b, threads, runs, /*profile=*/false, inputs));
  return PairedTiming{t.a_sec(), t.b_sec(), t.a_over_b(), t.pairs()};
}

absl::StatusOr<double> PairedSpeedup(const v1::ModelPackage& untuned,
                                     const v1::ModelPackage& tuned, int threads, int runs) {
  TF_ASSIGN_OR_RETURN(PairedTiming t, TimePaired(untuned, tuned, threads, runs));
  return t.a_over_b;
}

absl::StatusOr<LayoutChoice> ChooseLayout(const v1::ModelPackage& nhwc,
                                          const v1::ModelPackage& nchw, int threads, int runs,
                                          double margin) {
  LayoutChoice c;
  if (nhwc.SerializeAsString() == nchw.SerializeAsString()) return c;
  TF_ASSIGN_OR_RETURN(PairedTiming t, TimePaired(nhwc, nchw, threads, runs));
  c.nhwc_seconds = t.a_seconds;
  c.nchw_seconds = t.b_seconds;
  c.nhwc_over_nchw = t.a_over_b;
  c.channels_last = t.a_over_b * (1 - margin) <= 1;
  return c;
}

absl::StatusOr<LayoutChoice> ChooseLayoutOf(const frontend::Model& model, const ir::Target& target,
                                            BuildOptions options, int threads,
                                            v1::ModelPackage* chosen) {
  options.channels_last = true;
  TF_ASSIGN_OR_RETURN(v1::ModelPackage nhwc, BuildPackage(model, target, options));
  options.channels_last = false;
  TF_ASSIGN_OR_RETURN(v1::ModelPackage nchw, BuildPackage(model, target, options));
  TF_ASSIGN_OR_RETURN(LayoutChoice c, ChooseLayout(nhwc, nchw, threads));
  if (chosen != nullptr) *chosen = c.channels_last ? std::move(nhwc) : std::move(nchw);
  return c;
}

}  // namespace tunefarm::deploy
