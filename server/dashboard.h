// The dashboard served at / of --http_listen: one static page (HTML, CSS
// and JS in the binary, no outside resources) that polls /api/state every
// 2 s and draws the farm: each device with when it was last seen, what it
// holds now, its trial rate and its error and timeout rates; the queues;
// the newest jobs with their rate, time left, failures by kind, the
// model's time and speed-up over the default, and curves (SVG drawn here
// by proto/svg_chart.h). `/?job=ID` is one job in full, from
// /api/state?job=ID. Read-only; the page passes on the ?token= it was
// opened with.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tuning_curves.h"
#include "server/metrics.h"

namespace tunefarm::server {

const std::string& DashboardHtml();

// What the page shows that is read from the records, kept between polls:
// per job, its curves and counts, until its trial counts or state change
// (a poll of a job that has not moved reads none of its records; at most
// kJobs jobs, the least recently shown forgotten first); the farm's newest
// results per device, until a newer record arrives. Thread safe.
class DashboardCache {
 public:
  static constexpr int kJobs = 16;
  // The newest records read for the devices' rates, and kept per device.
  static constexpr int kFarmResults = 2000, kDeviceResults = 200;
  // Records of a job read for its curves and counts (the oldest first).
  static constexpr int kJobRecords = 10000;

  struct JobView {
    TuningCurves curves;
    // Per task (job order): the default schedule's fastest mean on the
    // job's target and device key, by any job (0: never measured).
    std::vector<double> default_sec;
    std::vector<bool> default_looked_up;  // in the whole log, not only the job's records
    // Failed trials by status (v1::MeasureStatus): the job's, and each
    // task's (empty when the job has more records than were read).
    std::map<int, int64_t> failures;
    std::vector<std::map<int, int64_t>> task_failures;
    // Times of its newest OK records, oldest first, and of its first and
    // last records (unix ms; 0: none).
    std::vector<int64_t> ok_times_ms;
    int64_t first_ms = 0, last_ms = 0;
  };
  struct Result {
    int64_t time_ms;
    int status;  // v1::MeasureStatus
  };

  JobView Job(const ::tunefarm::v1::Job& job, store::TuningLog& log);
  // Per device id, its results among the farm's newest, newest first.
  std::map<std::string, std::vector<Result>> DeviceResults(store::TuningLog& log);

 private:
  struct Entry {
    int64_t trials = -1, failed = -1;
    int state = -1;
    uint64_t used = 0;
    JobView view;
  };
  std::mutex mu_;
  uint64_t uses_ = 0;
  std::map<int64_t, Entry> by_job_;
  int64_t newest_record_ = -1;
  std::map<std::string, std::vector<Result>> by_device_;
};

// The farm as JSON: devices, queues, leases in flight and the `max_jobs`
// newest jobs (each with its first tasks).
std::string DashboardState(const MetricsSources& sources, DashboardCache& cache, int max_jobs = 5);

// One job in full as JSON (every task, with its curve); NotFound for an
// unknown job.
absl::StatusOr<std::string> DashboardJobState(const MetricsSources& sources, DashboardCache& cache,
                                              int64_t job_id);

}  // namespace tunefarm::server
