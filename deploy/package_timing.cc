// Whole builds timed against each other on this machine (package_build.h):
// the never-slower check of tuned kernels inside the model, paired A/B
// timings, the layout choice. The timing loop is the runtime's
// (runtime::TimeModelsPaired).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "deploy/package_build.h"
#include "device_agent/runtime/graph_runtime.h"
#include "device_agent/runtime/model_timing.h"
#include "device_agent/runtime/runner.h"

namespace tunefarm::deploy {

using runtime::GraphRuntime;

absl::StatusOr<std::set<std::string>> TunedKernelsNotFasterInModel(const v1::ModelPackage& untuned,
                                                                   const v1::ModelPackage& tuned,
                                                                   int threads, int runs,
                                                                   double margin) {
  if (untuned.steps_size() != tuned.steps_size())
    return absl::InvalidArgumentError("the two builds have different steps");
  // One pool for both: a second pool's workers, spinning after its run,
  // would hold a core the other build's run needs (as two processes would).
  runtime::ThreadPool pool(threads);
  GraphRuntime::Options o;
  o.threads = threads;
  o.profile = true;
  o.pool = &pool;
  TF_ASSIGN_OR_RETURN(auto ru, GraphRuntime::Load(untuned, o));
  TF_ASSIGN_OR_RETURN(auto rt, GraphRuntime::Load(tuned, o));
  std::map<std::string, std::vector<float>> in;
  for (const std::string& name : untuned.inputs()) {
    int64_t n = 1;
    for (int64_t d : ru->Shape(name)) n *= d;
    std::vector<float>& v = in[name];
    v.resize(size_t(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 7919) % 2001) / 1000.0f - 1.0f;
  }
  TF_ASSIGN_OR_RETURN(runtime::PairedModelTimes t, runtime::TimeModelsPaired(*ru, *rt, in, runs));
  const int steps = untuned.steps_size();
  if (int(t.a_steps.size()) < steps || int(t.b_steps.size()) < steps)
    return absl::InternalError("the profile has another count of steps than the package");
  std::map<std::string, std::pair<double, double>> by_task;  // key -> (default, tuned)
  for (int s = 0; s < steps; ++s) {
    if (!tuned.steps(s).has_kernel()) continue;
    const v1::PackageKernel& k = tuned.kernels(tuned.steps(s).kernel().kernel());
    if (!k.tuned()) continue;
    auto& p = by_task[k.workload_key()];
    p.first += t.a_steps[size_t(s)];
    p.second += t.b_steps[size_t(s)];
  }
  std::set<std::string> slower;
  for (const auto& [key, p] : by_task)
    if (!(p.second < p.first * (1 - margin))) slower.insert(key);
  return slower;
}

absl::StatusOr<PairedTiming> TimePaired(const v1::ModelPackage& a, const v1::ModelPackage& b,
                                        int threads, int runs,
                                        const std::map<std::string, std::vector<float>>* inputs) {
  runtime::ThreadPool pool(threads);  // shared, as in TunedKernelsNotFasterInModel
  GraphRuntime::Options o;
  o.threads = threads;
  o.pool = &pool;
  TF_ASSIGN_OR_RETURN(auto ra, GraphRuntime::Load(a, o));
  TF_ASSIGN_OR_RETURN(auto rb, GraphRuntime::Load(b, o));
  std::map<std::string, std::vector<float>> seeded;
  if (inputs == nullptr) {
    seeded = ra->SeededInputs(7);
    inputs = &seeded;
  }
  TF_ASSIGN_OR_RETURN(runtime::PairedModelTimes t, runtime::TimeModelsPaired(*ra, *rb, *inputs, runs));
  return PairedTiming{t.a_seconds, t.b_seconds, t.a_over_b, t.pairs};
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
