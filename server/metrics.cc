#include "server/metrics.h"

#include <iterator>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "proto/protocol.h"
#include "server/device_registry.h"
#include "store/group_commit.h"
#include "store/tuning_log.h"
#include "server/work_queue.h"

namespace tunefarm::server {
namespace {

namespace v1 = ::tunefarm::v1;

// A label value with backslash, quote and newline escaped.
std::string Label(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? 'n' : c;
  }
  return out;
}

void Head(std::string* out, absl::string_view name, absl::string_view type,
          absl::string_view help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

std::string EnumLabel(absl::string_view name, absl::string_view prefix) {
  absl::ConsumePrefix(&name, prefix);
  return absl::AsciiStrToLower(name);
}

std::string RenderMetrics(const MetricsSources& s) {
  std::string out;
  if (s.queue != nullptr) {
    Head(&out, "tunefarm_queue_depth", "gauge",
         "Work items waiting to be leased, per queue (measure:KEY, build:TRIPLE).");
    for (const auto& [queue, n] : s.queue->QueuedByKey()) {
      absl::StrAppend(&out, "tunefarm_queue_depth{queue=\"", Label(queue), "\"} ", n, "\n");
    }
    Head(&out, "tunefarm_leases_in_flight", "gauge",
         "Work leased to a worker or agent and not yet reported.");
    absl::StrAppend(&out, "tunefarm_leases_in_flight ", s.queue->LeasesOut(), "\n");
  }
  if (s.devices != nullptr) {
    absl::StatusOr<std::vector<v1::Device>> devices = s.devices->List();
    if (devices.ok()) {
      std::map<std::pair<std::string, std::string>, int> n;
      for (const char* role : {"worker", "agent"}) {
        for (const char* state : {"online", "offline"}) n[{role, state}] = 0;
      }
      for (const v1::Device& d : *devices) {
        ++n[{EnumLabel(v1::Role_Name(d.role()), "ROLE_"),
             EnumLabel(v1::DeviceState_Name(d.state()), "DEVICE_STATE_")}];
      }
      Head(&out, "tunefarm_devices", "gauge", "Registered workers and agents by state.");
      for (const auto& [k, count] : n) {
        absl::StrAppend(&out, "tunefarm_devices{role=\"", k.first, "\",state=\"", k.second, "\"} ",
                        count, "\n");
      }
      Head(&out, "tunefarm_device_timings_checked", "counter",
           "An agent's new-best timings measured again on a second device of its key, by "
           "outcome.");
      for (const v1::Device& d : *devices) {
        if (d.role() != v1::ROLE_AGENT) continue;
        for (const auto& [outcome, count] :
             {std::pair<const char*, int>{"confirmed", d.timings_confirmed()},
              {"disputed", d.timings_disputed()}}) {
          absl::StrAppend(&out, "tunefarm_device_timings_checked{device=\"",
                          Label(d.device_id()), "\",outcome=\"", outcome, "\"} ", count, "\n");
        }
      }
      Head(&out, "tunefarm_device_timings_disputed", "gauge",
           "1 for an agent whose timings its peers disputed more often than confirmed.");
      for (const v1::Device& d : *devices) {
        if (d.role() != v1::ROLE_AGENT) continue;
        absl::StrAppend(&out, "tunefarm_device_timings_disputed{device=\"", Label(d.device_id()),
                        "\"} ", TimingsDisputed(d) ? 1 : 0, "\n");
      }
    } else {
      absl::StrAppend(&out, "# tunefarm_devices: ", Label(devices.status().message()), "\n");
    }
  }
  if (s.log != nullptr) {
    absl::StatusOr<std::map<int, int64_t>> jobs = s.log->CountJobsByState();
    if (jobs.ok()) {
      Head(&out, "tunefarm_jobs", "gauge", "Jobs by state.");
      for (int st = v1::JobState_MIN; st <= v1::JobState_MAX; ++st) {
        if (!v1::JobState_IsValid(st) || st == v1::JOB_STATE_UNSPECIFIED) continue;
        auto it = jobs->find(st);
        absl::StrAppend(&out, "tunefarm_jobs{state=\"",
                        EnumLabel(v1::JobState_Name(v1::JobState(st)), "JOB_STATE_"), "\"} ",
                        it == jobs->end() ? 0 : it->second, "\n");
      }
    } else {
      absl::StrAppend(&out, "# tunefarm_jobs: ", Label(jobs.status().message()), "\n");
    }
  }
  if (s.commits != nullptr) {
    const store::GroupCommitter::Stats st = s.commits->stats();
    Head(&out, "tunefarm_results_total", "counter",
         "Measurement results of jobs committed to the database, by status.");
    for (int status = v1::MeasureStatus_MIN; status <= v1::MeasureStatus_MAX; ++status) {
      if (!v1::MeasureStatus_IsValid(status) || status == v1::MEASURE_STATUS_UNSPECIFIED) continue;
      auto it = st.records_by_status.find(status);
      absl::StrAppend(
          &out, "tunefarm_results_total{status=\"",
          EnumLabel(v1::MeasureStatus_Name(v1::MeasureStatus(status)), "MEASURE_STATUS_"), "\"} ",
          it == st.records_by_status.end() ? 0 : it->second, "\n");
    }
    Head(&out, "tunefarm_db_commit_seconds", "histogram",
         "Seconds each database transaction of results took (one fsync).");
    int64_t cumulative = 0;
    for (size_t b = 0; b < std::size(store::GroupCommitter::kCommitBuckets); ++b) {
      cumulative += st.buckets[b];
      absl::StrAppend(&out, "tunefarm_db_commit_seconds_bucket{le=\"",
                      absl::StrFormat("%g", store::GroupCommitter::kCommitBuckets[b]), "\"} ",
                      cumulative, "\n");
    }
    absl::StrAppend(&out, "tunefarm_db_commit_seconds_bucket{le=\"+Inf\"} ", st.count, "\n");
    absl::StrAppend(&out, "tunefarm_db_commit_seconds_sum ", absl::StrFormat("%.6f", st.sum_s),
                    "\n");
    absl::StrAppend(&out, "tunefarm_db_commit_seconds_count ", st.count, "\n");
  }
  return out;
}

}  // namespace tunefarm::server
