#include "server/dashboard.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "compiler/ir/workload.h"
#include "proto/job_progress.h"
#include "proto/protocol.h"
#include "proto/svg_chart.h"
#include "proto/tuning_curves.h"
#include "server/device_registry.h"
#include "store/tuning_log.h"
#include "server/work_queue.h"

namespace tunefarm::server {
namespace {

namespace v1 = ::tunefarm::v1;

// Rates are counted over the last few minutes.
constexpr int64_t kRateWindowMs = 5 * 60 * 1000;
// Tasks a job shows in the list (the job page shows all).
constexpr int kListedTasks = 8;

// A JSON string literal.
std::string Str(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// A JSON number (0 for what JSON cannot spell).
std::string Num(double v) { return std::isfinite(v) ? absl::StrFormat("%.6g", v) : "0"; }

std::string StatusLabel(int status) {
  return EnumLabel(v1::MeasureStatus_Name(v1::MeasureStatus(status)), "MEASURE_STATUS_");
}

// {"compile_error":2,"timeout":1}: counts by measurement status.
std::string CountsJson(const std::map<int, int64_t>& counts) {
  std::string out = "{";
  for (const auto& [status, n] : counts) {
    absl::StrAppend(&out, out.size() > 1 ? "," : "", Str(StatusLabel(status)), ":", n);
  }
  return out + "}";
}

// Events among `times_ms` (any order) in the rate window ending at
// `now_ms`, which starts no earlier than `since_ms`; and the window's
// length in minutes.
std::pair<int64_t, double> InWindow(const std::vector<int64_t>& times_ms, int64_t now_ms,
                                    int64_t since_ms) {
  const int64_t start = std::max(now_ms - kRateWindowMs, since_ms);
  int64_t n = 0;
  for (int64_t t : times_ms) n += t >= start;
  return {n, double(now_ms - start) / 60000.0};
}

std::map<std::string, int> TaskIndex(const v1::Job& job) {
  std::map<std::string, int> task_of;  // workload key -> index in job.tasks
  for (int i = 0; i < job.tasks_size(); ++i) task_of.emplace(job.tasks(i).workload_key(), i);
  return task_of;
}

// Whether `r` measured the default schedule on the job's device key.
bool IsDefaultTiming(const v1::Record& r, const v1::Job& job) {
  return r.status() == v1::MEASURE_STATUS_OK && r.schedule().is_default() &&
         r.costs_sec_size() > 0 && r.device_key() == job.spec().device_key();
}

// Each task's default time: the fastest in `records` (the job's), else
// the fastest in the whole log on the job's target (looked up once per
// task; `previous` carries what earlier reads found).
absl::Status FindDefaults(const v1::Job& job, store::TuningLog& log,
                          const std::vector<v1::Record>& records,
                          const DashboardCache::JobView* previous, DashboardCache::JobView* v) {
  const size_t n = size_t(job.tasks_size());
  v->default_sec.assign(n, 0);
  v->default_looked_up.assign(n, false);
  if (previous != nullptr && previous->default_sec.size() == n) {
    v->default_sec = previous->default_sec;
    v->default_looked_up = previous->default_looked_up;
  }
  const std::map<std::string, int> task_of = TaskIndex(job);
  auto take = [&](const v1::Record& r) {
    auto it = task_of.find(r.workload_key());
    if (it == task_of.end() || !IsDefaultTiming(r, job)) return;
    double& d = v->default_sec[size_t(it->second)];
    const double mean = MeanCostSec(r);
    if (d == 0 || mean < d) d = mean;
  };
  for (const v1::Record& r : records) take(r);
  for (size_t t = 0; t < n; ++t) {
    if (v->default_sec[t] > 0 || v->default_looked_up[t]) continue;
    store::TuningLog::RecordQuery q;
    q.workload_key = job.tasks(int(t)).workload_key();
    q.target_spec = job.spec().target().spec();
    q.status = v1::MEASURE_STATUS_OK;
    q.limit = DashboardCache::kJobRecords;
    TF_ASSIGN_OR_RETURN(std::vector<v1::Record> all, log.ListRecords(q));
    for (const v1::Record& r : all) take(r);
    v->default_looked_up[t] = true;
  }
  return absl::OkStatus();
}

// Failures by kind and the times of OK records, from the job's records
// when all were read, else counted and read (newest) separately.
absl::Status CountResults(const v1::Job& job, store::TuningLog& log,
                          const std::vector<v1::Record>& records, DashboardCache::JobView* v) {
  const bool complete = records.size() < size_t(DashboardCache::kJobRecords);
  const std::map<std::string, int> task_of = TaskIndex(job);
  if (complete) v->task_failures.resize(size_t(job.tasks_size()));
  for (const v1::Record& r : records) {
    if (v->first_ms == 0) v->first_ms = r.timestamp_unix_ms();
    v->last_ms = std::max(v->last_ms, r.timestamp_unix_ms());
    if (r.status() == v1::MEASURE_STATUS_OK) {
      v->ok_times_ms.push_back(r.timestamp_unix_ms());
      continue;
    }
    ++v->failures[r.status()];
    auto it = task_of.find(r.workload_key());
    if (complete && it != task_of.end()) ++v->task_failures[size_t(it->second)][r.status()];
  }
  if (complete) return absl::OkStatus();
  v->failures.clear();
  store::TuningLog::RecordQuery q;
  q.job_id = job.job_id();
  for (int s = v1::MeasureStatus_MIN; s <= v1::MeasureStatus_MAX; ++s) {
    if (!v1::MeasureStatus_IsValid(s) || s == v1::MEASURE_STATUS_UNSPECIFIED ||
        s == v1::MEASURE_STATUS_OK) {
      continue;
    }
    q.status = v1::MeasureStatus(s);
    TF_ASSIGN_OR_RETURN(int64_t count, log.CountRecords(q));
    if (count > 0) v->failures[s] = count;
  }
  q.status = v1::MEASURE_STATUS_OK;
  q.newest_first = true;
  q.limit = DashboardCache::kFarmResults;
  TF_ASSIGN_OR_RETURN(std::vector<v1::Record> newest, log.ListRecords(q));
  v->ok_times_ms.clear();
  for (auto it = newest.rbegin(); it != newest.rend(); ++it) {
    v->ok_times_ms.push_back(it->timestamp_unix_ms());
    v->last_ms = std::max(v->last_ms, it->timestamp_unix_ms());
  }
  return absl::OkStatus();
}

absl::StatusOr<DashboardCache::JobView> ReadJobView(const v1::Job& job, store::TuningLog& log,
                                                    const DashboardCache::JobView* previous) {
  store::TuningLog::RecordQuery q;
  q.job_id = job.job_id();
  q.limit = DashboardCache::kJobRecords;
  TF_ASSIGN_OR_RETURN(std::vector<v1::Record> records, log.ListRecords(q));
  DashboardCache::JobView v;
  TF_RETURN_IF_ERROR(CountResults(job, log, records, &v));
  TF_RETURN_IF_ERROR(FindDefaults(job, log, records, previous, &v));
  v.curves = CurvesOf(job, std::move(records));
  return v;
}

}  // namespace

DashboardCache::JobView DashboardCache::Job(const v1::Job& job, store::TuningLog& log) {
  std::optional<JobView> previous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_job_.find(job.job_id());
    if (it != by_job_.end()) {
      it->second.used = ++uses_;
      const Entry& e = it->second;
      if (e.trials == job.trials_done() && e.failed == job.failed_trials() &&
          e.state == int(job.state())) {
        return e.view;
      }
      previous = e.view;
    }
  }
  absl::StatusOr<JobView> view = ReadJobView(job, log, previous ? &*previous : nullptr);
  if (!view.ok()) {  // not kept: the next poll reads again
    JobView empty;
    empty.curves = CurvesOf(job, {});
    return empty;
  }
  std::lock_guard<std::mutex> lock(mu_);
  by_job_[job.job_id()] =
      Entry{job.trials_done(), job.failed_trials(), int(job.state()), ++uses_, *view};
  while (by_job_.size() > size_t(kJobs)) {
    by_job_.erase(std::min_element(
        by_job_.begin(), by_job_.end(),
        [](const auto& a, const auto& b) { return a.second.used < b.second.used; }));
  }
  return *std::move(view);
}

std::map<std::string, std::vector<DashboardCache::Result>> DashboardCache::DeviceResults(
    store::TuningLog& log) {
  store::TuningLog::RecordQuery q;
  q.newest_first = true;
  q.limit = 1;
  absl::StatusOr<std::vector<v1::Record>> top = log.ListRecords(q);
  if (!top.ok()) return {};
  const int64_t newest = top->empty() ? 0 : top->front().record_id();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (newest == newest_record_) return by_device_;
  }
  q.limit = kFarmResults;
  absl::StatusOr<std::vector<v1::Record>> recent = log.ListRecords(q);
  if (!recent.ok()) return {};
  std::map<std::string, std::vector<Result>> by_device;
  for (const v1::Record& r : *recent) {
    if (r.device_id().empty()) continue;
    std::vector<Result>& v = by_device[r.device_id()];
    if (v.size() < size_t(kDeviceResults)) v.push_back({r.timestamp_unix_ms(), int(r.status())});
  }
  std::lock_guard<std::mutex> lock(mu_);
  newest_record_ = newest;
  by_device_ = by_device;
  return by_device;
}

namespace {

// The leases `device` holds, as JSON.
std::string LeasesJson(const std::vector<WorkQueue::LeaseView>& leases, const std::string& device,
                       absl::Time now) {
  std::string out = "[";
  for (const WorkQueue::LeaseView& l : leases) {
    if (l.device_id != device) continue;
    absl::StrAppend(
        &out, out.size() > 1 ? "," : "", "{\"job\":", l.job_id, ",\"kind\":", Str(l.kind),
        ",\"what\":", Str(l.kind == "model run" ? std::string() : ir::Describe(l.workload)),
        ",\"sec\":", Num(absl::ToDoubleSeconds(now - l.leased_at)), "}");
  }
  return out + "]";
}

// A device: what the registry knows, when it was last seen, what it holds
// and its rates over `results`, its newest (none: null rates).
std::string DeviceJson(const v1::Device& d, const std::string& leases,
                       const std::vector<DashboardCache::Result>& results, int64_t now_ms) {
  const v1::Capabilities& c = d.capabilities();
  std::string out =
      absl::StrCat("{\"id\":", Str(d.device_id()),
                   ",\"role\":", Str(EnumLabel(v1::Role_Name(d.role()), "ROLE_")),
                   ",\"key\":", Str(d.device_key()),
                   ",\"state\":", Str(EnumLabel(v1::DeviceState_Name(d.state()), "DEVICE_STATE_")),
                   ",\"drained\":", d.drained() ? "true" : "false",
                   ",\"timings_confirmed\":", d.timings_confirmed(),
                   ",\"timings_disputed\":", d.timings_disputed(),
                   ",\"timings_flagged\":", TimingsDisputed(d) ? "true" : "false",
                   ",\"triple\":", Str(c.triple()), ",\"cpu\":", Str(c.cpu_model()),
                   ",\"gpu\":", Str(c.has_gpu() ? c.gpu_name() : ""));
  absl::StrAppend(&out, ",\"last_seen_sec\":",
                  Num(double(std::max<int64_t>(0, now_ms - d.last_seen_unix_ms())) / 1000),
                  ",\"leases\":", leases);
  int64_t errors = 0, timeouts = 0;
  std::vector<int64_t> times;
  for (const DashboardCache::Result& r : results) {
    times.push_back(r.time_ms);
    if (r.status == v1::MEASURE_STATUS_TIMEOUT) {
      ++timeouts;
    } else if (r.status != v1::MEASURE_STATUS_OK) {
      ++errors;
    }
  }
  const auto [recent, minutes] = InWindow(times, now_ms, d.registered_unix_ms());
  const double n = double(results.size());
  absl::StrAppend(&out, ",\"results\":", results.size(),
                  ",\"trials_per_minute\":", Num(minutes > 0 ? double(recent) / minutes : 0),
                  ",\"error_rate\":", n > 0 ? Num(double(errors) / n) : "null",
                  ",\"timeout_rate\":", n > 0 ? Num(double(timeouts) / n) : "null", "}");
  return out;
}

std::string DevicesJson(const MetricsSources& s, DashboardCache& cache, absl::Time now) {
  std::string out = "[";
  if (s.devices == nullptr) return out + "]";
  absl::StatusOr<std::vector<v1::Device>> devices = s.devices->List();
  if (!devices.ok()) return out + "]";
  const std::vector<WorkQueue::LeaseView> leases =
      s.queue != nullptr ? s.queue->Leases() : std::vector<WorkQueue::LeaseView>{};
  const std::map<std::string, std::vector<DashboardCache::Result>> results =
      s.log != nullptr ? cache.DeviceResults(*s.log)
                       : std::map<std::string, std::vector<DashboardCache::Result>>{};
  static const std::vector<DashboardCache::Result> kNone;
  for (const v1::Device& d : *devices) {
    auto r = results.find(d.device_id());
    absl::StrAppend(&out, out.size() > 1 ? "," : "",
                    DeviceJson(d, LeasesJson(leases, d.device_id(), now),
                               r == results.end() ? kNone : r->second, absl::ToUnixMillis(now)));
  }
  return out + "]";
}

std::string QueuesJson(const MetricsSources& s) {
  std::string out = "\"queues\":[";
  if (s.queue == nullptr) return out + "],\"leases\":0";
  for (const auto& [name, depth] : s.queue->QueuedByKey()) {
    absl::StrAppend(&out, out.back() == '[' ? "" : ",", "{\"name\":", Str(name),
                    ",\"depth\":", depth, "}");
  }
  return absl::StrCat(out, "],\"leases\":", s.queue->LeasesOut());
}

std::string ModelChart(const v1::Job& j, const DashboardCache::JobView& v, bool full) {
  SvgChart c;
  c.title = absl::StrCat("job ", j.job_id(), ": the model's time by the best so far");
  c.x_label = "minutes";
  c.y_label = "ms";
  c.points = v.curves.model_ms;
  c.color = "#2ca02c";
  c.empty_note = "not every task has a time yet";
  c.width = full ? 560 : 420;
  c.height = full ? 240 : 200;
  c.font_px = 10;
  return SvgChartElement(c);
}

std::string TaskJson(const v1::Job& j, const DashboardCache::JobView& v, int t, bool full) {
  const v1::Task& task = j.tasks(t);
  const double def = size_t(t) < v.default_sec.size() ? v.default_sec[size_t(t)] : 0;
  const double best = task.best_cost_sec();
  const std::string desc = ir::Describe(task.workload());
  std::string out = absl::StrCat(
      "{\"n\":", t + 1, ",\"desc\":", Str(desc), ",\"weight\":", Num(task.weight()),
      ",\"trials\":", task.trials(), ",\"failed\":", task.failed_trials(), ",\"failures\":",
      size_t(t) < v.task_failures.size() ? CountsJson(v.task_failures[size_t(t)]) : "null",
      ",\"default_us\":", Num(def * 1e6), ",\"best_us\":", Num(best * 1e6),
      ",\"speedup\":", Num(def > 0 && best > 0 ? def / best : 0));
  if (full && size_t(t) < v.curves.by_trial.size()) {
    SvgChart c;
    c.title = absl::StrCat("#", t + 1, " ", desc, " x", task.weight());
    c.x_label = "trials";
    c.y_label = "best GFLOP/s";
    c.points = v.curves.by_trial[size_t(t)];
    c.color = "#d62728";
    c.width = 380;
    c.height = 210;
    c.font_px = 10;
    absl::StrAppend(&out, ",\"svg\":", Str(SvgChartElement(c)));
  }
  return out + "}";
}

// A job: progress, rates, failures, the model's time against the
// default's, its curve and its tasks (the first kListedTasks unless `full`).
std::string JobJson(const v1::Job& j, const DashboardCache::JobView& v, int64_t now_ms, bool full) {
  // A running job's rate over the last minutes; a stopped one's over its run.
  JobProgress p;
  if (j.state() == v1::JOB_STATE_RUNNING) {
    const auto [recent, minutes] = InWindow(v.ok_times_ms, now_ms, v.first_ms);
    p = ProgressOf(j, recent, minutes);
  } else {
    p = ProgressOf(j, j.trials_done(), double(v.last_ms - v.first_ms) / 60000.0);
  }
  double default_model = 0;
  bool all_defaults = j.tasks_size() > 0;
  for (int t = 0; t < j.tasks_size(); ++t) {
    const double def = size_t(t) < v.default_sec.size() ? v.default_sec[size_t(t)] : 0;
    all_defaults &= def > 0;
    default_model += j.tasks(t).weight() * def;
  }
  const bool all_best = p.tasks > 0 && p.tasks_with_best == p.tasks;
  const double speedup =
      all_defaults && all_best && p.model_best_sec > 0 ? default_model / p.model_best_sec : 0;
  std::string out = absl::StrCat(
      "{\"id\":", j.job_id(), ",\"name\":", Str(j.spec().name()),
      ",\"state\":", Str(EnumLabel(v1::JobState_Name(j.state()), "JOB_STATE_")),
      ",\"message\":", Str(j.status_message()), ",\"trials\":", j.trials_done(),
      ",\"failed\":", j.failed_trials(), ",\"budget\":", TrialBudget(j),
      ",\"key\":", Str(j.spec().device_key()), ",\"target\":", Str(j.spec().target().spec()));
  absl::StrAppend(&out, ",\"trials_per_minute\":", Num(p.trials_per_minute),
                  ",\"eta_sec\":", Num(p.eta_sec), ",\"failures\":", CountsJson(v.failures),
                  ",\"model_ms\":", Num(p.model_best_sec * 1e3),
                  ",\"tasks_with_best\":", p.tasks_with_best,
                  ",\"default_model_ms\":", Num(all_defaults ? default_model * 1e3 : 0),
                  ",\"speedup\":", Num(speedup), ",\"model_svg\":", Str(ModelChart(j, v, full)),
                  ",\"task_count\":", j.tasks_size(), ",\"tasks\":[");
  const int shown = full ? j.tasks_size() : std::min(j.tasks_size(), kListedTasks);
  for (int t = 0; t < shown; ++t) absl::StrAppend(&out, t ? "," : "", TaskJson(j, v, t, full));
  return out + "]}";
}

}  // namespace

std::string DashboardState(const MetricsSources& s, DashboardCache& cache, int max_jobs) {
  const absl::Time now = absl::Now();
  std::string out =
      absl::StrCat("{\"now_unix_ms\":", absl::ToUnixMillis(now),
                   ",\"devices\":", DevicesJson(s, cache, now), ",", QueuesJson(s), ",\"jobs\":[");
  if (s.log != nullptr) {
    if (auto jobs = s.log->ListJobs(v1::JOB_STATE_UNSPECIFIED, max_jobs); jobs.ok()) {
      for (size_t i = 0; i < jobs->size(); ++i) {
        const v1::Job& j = (*jobs)[i];
        absl::StrAppend(&out, i ? "," : "",
                        JobJson(j, cache.Job(j, *s.log), absl::ToUnixMillis(now), false));
      }
    }
  }
  return out + "]}";
}

absl::StatusOr<std::string> DashboardJobState(const MetricsSources& s, DashboardCache& cache,
                                              int64_t job_id) {
  if (s.log == nullptr) return absl::UnavailableError("the server has no database");
  TF_ASSIGN_OR_RETURN(v1::Job job, s.log->GetJob(job_id));
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  return absl::StrCat("{\"now_unix_ms\":", now_ms,
                      ",\"job\":", JobJson(job, cache.Job(job, *s.log), now_ms, true), "}");
}

namespace {

// The page: its style sheet and the tables the script fills in, up to the
// opening <script> tag.
constexpr const char* kPageHtml = R"html(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>tunefarm</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin-bottom:1.5em}
td,th{border-bottom:1px solid #ddd;padding:3px 10px;text-align:left;font-size:13px;vertical-align:top}
.num{text-align:right}
.online{color:#2a7} .offline{color:#999} .drained{color:#c70} .disputed{color:#c22;font-weight:bold}
.idle,.empty{color:#888}
.bar{display:inline-block;width:120px;height:8px;background:#eee;vertical-align:middle}
.bar i{display:block;height:8px;background:#48c}
.job{margin-bottom:2em} .job div{margin:3px 0}
.charts svg{margin:0 12px 12px 0;border:1px solid #eee;vertical-align:top}
#error{color:#c33}
</style></head><body>
<h1>tunefarm</h1><div id="error"></div><div id="updated"></div>
<div id="farm">
<h2>Devices</h2><table id="devices"></table>
<h2>Queues</h2><table id="queues"></table><div id="leases"></div>
<h2>Jobs</h2><div id="jobs"></div>
</div>
<div id="jobpage" hidden></div>
<script>
)html";

// The script's start: the page's query (token, job), links, and the
// formatting of durations, shares, times and lease lines.
constexpr const char* kFormatScript = R"html(const params=new URLSearchParams(location.search);
const token=params.get('token'), jobId=params.get('job');
function esc(s){return String(s).replace(/[&<>"']/g,c=>'&#'+c.charCodeAt(0)+';');}
function link(job){
  const p=new URLSearchParams(); if(job!=null) p.set('job',job); if(token) p.set('token',token);
  const q=p.toString(); return esc(location.pathname+(q?'?'+q:''));
}
function dur(s){
  s=Math.round(s); const p=n=>String(n).padStart(2,'0');
  if(s<60) return s+'s';
  if(s<3600) return Math.floor(s/60)+'m'+p(s%60)+'s';
  return Math.floor(s/3600)+'h'+p(Math.floor(s%3600/60))+'m';
}
function ago(s){return s<1?'just now':dur(s)+' ago';}
function pct(x){return x==null?'&mdash;':(100*x).toFixed(x>0&&x<0.1?1:0)+'%';}
function time(us){return us>0?(us>=1000?(us/1000).toPrecision(4)+' ms':us.toPrecision(4)+' &micro;s'):'&mdash;';}
function times(x){return x>0?x.toFixed(2)+'x':'&mdash;';}
function kinds(f){const k=Object.keys(f);return k.length?k.map(n=>esc(n)+' '+f[n]).join(', '):'none';}
function leaseText(l){
  return esc(l.kind)+(l.what?' '+esc(l.what):'')+' &middot; <a href="'+link(l.job)+'">job '+l.job+'</a> &middot; '+dur(l.sec);
}
)html";

// The rendering of one device row, a job's task table and a job card (the
// job page shows each task's chart as well).
constexpr const char* kRenderScript = R"html(function deviceRow(v){
  const st=v.drained?'drained':v.state, live=v.state=='online';
  const checked=v.timings_confirmed+v.timings_disputed?v.timings_confirmed+' confirmed, '+v.timings_disputed+' disputed':'';
  const leases=v.leases.length?v.leases.map(leaseText).join('<br>'):(live?'idle':'&mdash;');
  const of=' title="of its last '+v.results+' results"';
  return '<tr class="device"><td>'+esc(v.id)+'</td><td>'+esc(v.role)+'</td><td>'+esc(v.key)+
    '</td><td class="'+esc(st)+'">'+esc(st)+'</td><td class="seen">'+ago(v.last_seen_sec)+
    '</td><td class="lease'+(v.leases.length?'':' idle')+'">'+leases+
    '</td><td class="num tpm">'+(v.results?v.trials_per_minute.toFixed(1):'&mdash;')+
    '</td><td class="num errors"'+of+'>'+pct(v.error_rate)+'</td><td class="num timeouts"'+of+'>'+pct(v.timeout_rate)+
    '</td><td class="'+(v.timings_flagged?'disputed':'')+'">'+(v.timings_flagged?'TIMINGS DISPUTED by its peers: ':'')+esc(checked)+
    '</td><td>'+esc(v.triple+' '+v.cpu+(v.gpu?', '+v.gpu:''))+'</td></tr>';
}
function taskTable(v){
  let t='<table class="tasks"><tr><th>#</th><th>task</th><th class="num">weight</th><th class="num">trials</th>'+
    '<th>failures</th><th class="num">default</th><th class="num">best</th><th class="num">speed-up</th></tr>';
  for(const k of v.tasks){
    t+='<tr class="task"><td>'+k.n+'</td><td>'+esc(k.desc)+'</td><td class="num">'+k.weight+
      '</td><td class="num trials">'+k.trials+'</td><td class="failures">'+k.failed+
      (k.failed&&k.failures?' ('+kinds(k.failures)+')':'')+'</td><td class="num default">'+time(k.default_us)+
      '</td><td class="num best">'+time(k.best_us)+'</td><td class="num speedup">'+times(k.speedup)+'</td></tr>';
  }
  t+='</table>';
  if(v.task_count>v.tasks.length) t+='<div><a href="'+link(v.id)+'">'+(v.task_count-v.tasks.length)+' more tasks on the job page</a></div>';
  return t;
}
function jobCard(v,full){
  const pc=v.budget>0?Math.min(100,100*v.trials/v.budget):0;
  let h='<div class="job" id="job-'+v.id+'"><h3><a href="'+link(v.id)+'">job '+v.id+' '+esc(v.name)+
    '</a> <span class="state">'+esc(v.state)+'</span></h3><div class="summary">'+esc(v.target)+' on '+esc(v.key)+
    ' &middot; trials '+v.trials+(v.budget>0?'/'+v.budget:'')+' <span class="bar"><i style="width:'+pc+'%"></i></span>'+
    ' &middot; <span class="tpm">'+(v.trials_per_minute>0?v.trials_per_minute.toFixed(1)+' trials/min':'no trial rate yet')+'</span>'+
    (v.state=='running'?' &middot; <span class="eta">'+(v.eta_sec>0?'about '+dur(v.eta_sec)+' left':'time left unknown')+'</span>':'')+
    ' &middot; failures: <span class="failures">'+kinds(v.failures)+'</span></div>'+
    '<div class="model">model <span class="model-ms">'+time(1000*v.model_ms)+'</span>'+
    (v.tasks_with_best<v.task_count?' ('+v.tasks_with_best+'/'+v.task_count+' tasks timed)':'')+' by the best so far'+
    (v.default_model_ms>0?', default '+time(1000*v.default_model_ms):'')+
    ' &middot; speed-up over the default <span class="speedup">'+times(v.speedup)+'</span></div>'+
    (v.message?'<div class="message">'+esc(v.message)+'</div>':'')+taskTable(v)+'<div class="charts">'+v.model_svg;
  if(full) for(const k of v.tasks) h+=k.svg;
  return h+'</div></div>';
}
)html";

// The farm page's tables, and the poll of /api/state every 2 s that redraws
// the farm or the one job; then the end of the page.
constexpr const char* kPollScript = R"html(function drawFarm(s){
  let d='<tr><th>device</th><th>role</th><th>key</th><th>state</th><th>last seen</th><th>now</th>'+
    '<th class="num">trials/min</th><th class="num">errors</th><th class="num">timeouts</th><th>timings checked</th><th>runs</th></tr>';
  for(const v of s.devices) d+=deviceRow(v);
  if(!s.devices.length) d+='<tr><td colspan="11" class="empty">no devices registered yet</td></tr>';
  document.getElementById('devices').innerHTML=d;
  let q='<tr><th>queue</th><th>waiting</th></tr>';
  for(const v of s.queues) q+='<tr><td>'+esc(v.name)+'</td><td>'+v.depth+'</td></tr>';
  if(!s.queues.length) q+='<tr><td colspan="2" class="empty">no work queued</td></tr>';
  document.getElementById('queues').innerHTML=q;
  document.getElementById('leases').textContent='leases in flight: '+s.leases;
  document.getElementById('jobs').innerHTML=s.jobs.length?s.jobs.map(v=>jobCard(v,false)).join(''):'<p class="empty">no jobs yet</p>';
}
async function poll(){
  try{
    const url='/api/state'+(jobId!=null?'?job='+encodeURIComponent(jobId):'');
    const r=await fetch(url,{headers:token?{'Authorization':'Bearer '+token}:{}});
    if(!r.ok) throw new Error(r.status+' '+(await r.text()));
    const s=await r.json();
    if(jobId!=null){
      document.getElementById('farm').hidden=true;
      const page=document.getElementById('jobpage');
      page.hidden=false;
      page.innerHTML='<div><a href="'+link(null)+'">&larr; all jobs</a></div>'+jobCard(s.job,true);
    }else{
      drawFarm(s);
    }
    document.getElementById('error').textContent='';
    document.getElementById('updated').textContent='updated '+new Date().toLocaleTimeString();
  }catch(e){document.getElementById('error').textContent=String(e);}
  setTimeout(poll,2000);
}
poll();
</script></body></html>
)html";

}  // namespace

const std::string& DashboardHtml() {
  static const std::string html =
      absl::StrCat(kPageHtml, kFormatScript, kRenderScript, kPollScript);
  return html;
}

}  // namespace tunefarm::server
