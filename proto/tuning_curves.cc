#include "proto/tuning_curves.h"

#include <algorithm>
#include <map>
#include <string>

namespace tunefarm {

bool Ranks(const v1::Record& r) {
  return r.status() == v1::MEASURE_STATUS_OK && r.costs_sec_size() > 0 &&
         r.confirmation() != v1::CONFIRMATION_PENDING &&
         r.confirmation() != v1::CONFIRMATION_DISPUTED;
}

double MeanCostSec(const v1::Record& r) {
  double sum = 0;
  for (double s : r.costs_sec()) sum += s;
  return r.costs_sec_size() > 0 ? sum / r.costs_sec_size() : 0;
}

TuningCurves CurvesOf(const v1::Job& job, std::vector<v1::Record> records) {
  std::sort(records.begin(), records.end(),
            [](const v1::Record& a, const v1::Record& b) { return a.record_id() < b.record_id(); });
  const int n = job.tasks_size();
  TuningCurves c;
  c.by_trial.resize(size_t(n));
  c.by_minute.resize(size_t(n));
  const int64_t t0 = records.empty() ? 0 : records.front().timestamp_unix_ms();
  std::map<std::string, int> task_of;  // workload key -> index in job.tasks
  for (int i = 0; i < n; ++i) task_of.emplace(job.tasks(i).workload_key(), i);
  std::vector<double> best(size_t(n), 0);  // seconds; 0: none yet
  int with_best = 0;
  for (const v1::Record& r : records) {
    auto it = task_of.find(r.workload_key());
    if (it == task_of.end()) continue;
    const size_t t = size_t(it->second);
    if (Ranks(r)) {
      const double mean = MeanCostSec(r);
      if (best[t] == 0) ++with_best;
      if (best[t] == 0 || mean < best[t]) best[t] = mean;
    }
    const double minutes = double(r.timestamp_unix_ms() - t0) / 60000.0;
    const double gflops = best[t] > 0 ? job.tasks(int(t)).flops() / best[t] * 1e-9 : 0;
    c.by_trial[t].push_back({double(c.by_trial[t].size() + 1), gflops});
    c.by_minute[t].push_back({minutes, gflops});
    // Each best only falls, so once every task has one their weighted sum
    // only falls too (floating-point addition is monotone in each term).
    if (with_best < n) continue;
    double estimate = 0;
    for (int k = 0; k < n; ++k) estimate += job.tasks(k).weight() * best[size_t(k)];
    c.model_ms.push_back({minutes, estimate * 1e3});
  }
  return c;
}

}  // namespace tunefarm
