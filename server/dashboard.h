// The dashboard served at / of --http_listen: one static page (HTML, CSS
// and JS in the binary) that polls /api/state every 2 s and draws the farm:
// devices with their state, queues, and the newest jobs with their
// progress and tuning curves (proto/tuning_curves.h) as inline SVG.
// Read-only; the page passes on the ?token= it was opened with.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "proto/tuning_curves.h"
#include "server/metrics.h"

namespace tunefarm::server {

const std::string& DashboardHtml();

// The jobs' curves the page draws, each kept until its job's trial count
// or state changes, so a poll of a job that has not moved reads none of its
// records. Holds the jobs of the last call only. Thread safe.
class CurveCache {
 public:
  // The curves of `job`, from up to 10,000 of its records (read from `log`
  // only when the cached ones are out of date).
  TuningCurves Get(const ::tunefarm::v1::Job& job, store::TuningLog& log);
  // Forgets every job not in `kept`.
  void Keep(const std::vector<int64_t>& kept);

 private:
  struct Entry {
    int64_t trials = -1;
    int state = -1;
    TuningCurves curves;
  };
  std::mutex mu_;
  std::map<int64_t, Entry> by_job_;
};

// The state the page draws, as JSON: devices, queues, leases in flight and
// the `max_jobs` newest jobs with their curves (through `curves`).
std::string DashboardState(const MetricsSources& sources, CurveCache& curves, int max_jobs = 5);

}  // namespace tunefarm::server
