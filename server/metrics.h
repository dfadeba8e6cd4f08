// The tuning server's metrics in Prometheus' text exposition format
// (served at /metrics of --http_listen; docs/operations.md lists them).
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace tunefarm::store {
class GroupCommitter;
class TuningLog;
}  // namespace tunefarm::store

namespace tunefarm::server {

class DeviceRegistry;
class WorkQueue;

struct MetricsSources {
  WorkQueue* queue = nullptr;
  DeviceRegistry* devices = nullptr;
  store::TuningLog* log = nullptr;
  const store::GroupCommitter* commits = nullptr;
};

// An enum value's name as the metrics, the dashboard and job messages say
// it: without `prefix`, lower-case ("running" for JOB_STATE_RUNNING).
std::string EnumLabel(absl::string_view name, absl::string_view prefix);

// Every metric with its HELP and TYPE lines; a source that fails to answer
// leaves its metric out (and says so in a comment line).
std::string RenderMetrics(const MetricsSources& sources);

}  // namespace tunefarm::server
