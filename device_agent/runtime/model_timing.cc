#include "device_agent/runtime/model_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/status/status.h"
#include "common/status_macros.h"

namespace tunefarm::runtime {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Per step, the median over the runs of `per_run` (one StepSeconds each).
std::vector<double> StepMedians(const std::vector<std::vector<double>>& per_run) {
  std::vector<double> out;
  if (per_run.empty()) return out;
  for (size_t s = 0; s < per_run.front().size(); ++s) {
    std::vector<double> v;
    for (const std::vector<double>& run : per_run) {
      if (s < run.size()) v.push_back(run[s]);
    }
    out.push_back(Median(std::move(v)));
  }
  return out;
}

}  // namespace

absl::StatusOr<ModelTimes> TimeModel(GraphRuntime& rt, const ModelInputs& inputs,
                                     const ModelRunCount& count) {
  ModelTimes t;
  std::vector<std::vector<double>> steps;
  double spent = 0;
  for (int64_t r = 0;
       r < count.runs && (r < count.min_runs || count.max_seconds <= 0 || spent < count.max_seconds);
       ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    TF_RETURN_IF_ERROR(rt.Run(inputs, nullptr));
    t.latencies.push_back(Since(t0));
    spent += t.latencies.back();
    if (!rt.StepSeconds().empty()) steps.push_back(rt.StepSeconds());
  }
  t.step_seconds = StepMedians(steps);
  return t;
}

absl::StatusOr<PairedModelTimes> TimeModelsPaired(GraphRuntime& a, GraphRuntime& b,
                                                  const ModelInputs& inputs, int pairs) {
  // The warm-up pair, timed: how many pairs fill kMinPairedSeconds.
  const auto t0 = std::chrono::steady_clock::now();
  TF_RETURN_IF_ERROR(a.Run(inputs, nullptr));
  TF_RETURN_IF_ERROR(b.Run(inputs, nullptr));
  const double pair = Since(t0);
  pairs = std::max(pairs, int(std::min(20000.0, std::ceil(kMinPairedSeconds /
                                                          std::max(pair, 1e-7)))));
  if (pairs < 1) return absl::InvalidArgumentError("no timed runs");
  std::vector<double> sa, sb, ratio;
  std::vector<std::vector<double>> steps_a, steps_b;
  for (int i = 0; i < pairs; ++i) {
    double secs[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      const int which = (i + k) % 2;  // 0: a
      GraphRuntime& g = which == 0 ? a : b;
      const auto start = std::chrono::steady_clock::now();
      TF_RETURN_IF_ERROR(g.Run(inputs, nullptr));
      secs[which] = Since(start);
      if (!g.StepSeconds().empty()) (which == 0 ? steps_a : steps_b).push_back(g.StepSeconds());
    }
    sa.push_back(secs[0]);
    sb.push_back(secs[1]);
    ratio.push_back(secs[0] / std::max(secs[1], 1e-12));
  }
  PairedModelTimes t;
  t.a_seconds = Median(sa);
  t.b_seconds = Median(sb);
  t.a_over_b = Median(ratio);
  t.pairs = pairs;
  t.a_steps = StepMedians(steps_a);
  t.b_steps = StepMedians(steps_b);
  return t;
}

double OutputError(const std::vector<float>& expected, const std::vector<float>& got) {
  if (expected.size() != got.size()) return INFINITY;
  double err = 0, scale = 0.01;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = expected[i], g = got[i];
    if (std::isnan(e) || std::isnan(g)) {
      if (std::isnan(e) != std::isnan(g)) return INFINITY;
      continue;
    }
    if (std::isfinite(e)) scale = std::max(scale, std::fabs(e));
    if (e != g) err = std::max(err, std::fabs(g - e));  // infinite where one side is
  }
  return err / scale;
}

}  // namespace tunefarm::runtime
