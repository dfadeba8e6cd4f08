// tunefarm submit, jobs, job, cancel, resume, watch, plot (cli/client_command.h).
#include "cli/client_command.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cli/command_util.h"
#include "cli/plot.h"
#include "cli/records_jsonl.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/tasks.h"
#include "compiler/ir/target.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "proto/protocol.h"
#include "search/policy.h"

namespace tunefarm::cli {

namespace {

// --workloads FILE: one workload spec per line (`SPEC` or `SPEC xWEIGHT`),
// blank lines and # comments skipped; a bad line names FILE:LINE.
Result ReadWorkloadsFile(const std::string& path, v1::JobSpec* spec) {
  std::ifstream in(path);
  if (!in) return Usage(absl::StrCat("cannot read ", path));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string text(absl::StripAsciiWhitespace(line.substr(0, line.find('#'))));
    if (text.empty()) continue;
    double weight = 1;
    size_t x = text.rfind(" x");
    if (x != std::string::npos && absl::SimpleAtod(text.substr(x + 2), &weight)) {
      text = std::string(absl::StripAsciiWhitespace(text.substr(0, x)));
      if (!(weight > 0)) return Usage(absl::StrCat(path, ":", n, ": weight must be positive"));
    }
    absl::StatusOr<v1::Workload> w = ir::ParseWorkloadSpec(text);
    if (!w.ok()) return Usage(absl::StrCat(path, ":", n, ": ", w.status().message()));
    v1::TaskSpec* t = spec->add_tasks();
    *t->mutable_workload() = *std::move(w);
    t->set_weight(weight);
  }
  if (spec->tasks().empty()) return Usage(absl::StrCat(path, ": no workloads"));
  return std::nullopt;
}

// submit MODEL.onnx: the model, its --shape and --value overrides, and its
// --precision and --layout, into `spec` (the server extracts the tasks).
// The model is imported here first: what does not import is bad usage (exit 2).
Result ReadModelSpec(const Args& a, v1::JobSpec* spec) {
  // A model: the server extracts its tasks (weights = occurrences).
  std::ifstream in(a.positional()[0], std::ios::binary);
  if (!in) return Usage(absl::StrCat("cannot read ", a.positional()[0]));
  std::stringstream ss;
  ss << in.rdbuf();
  spec->set_onnx_model(ss.str());
  std::string base = a.positional()[0].substr(a.positional()[0].rfind('/') + 1);
  spec->set_name(base.substr(0, base.size() - 5));
  if (a.Has("shape")) {
    for (absl::string_view one : absl::StrSplit(a.Get("shape"), ',')) {
      auto parsed = frontend::ParseShapeOverride(std::string(one));
      if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
      v1::InputShape* is = spec->add_input_shapes();
      is->set_name(parsed->first);
      for (int64_t d : parsed->second) is->add_shape(d);
    }
  }
  for (const std::string& one : a.All("value")) {
    auto parsed = frontend::ParseValueOverride(one);
    if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
    v1::InputValue* iv = spec->add_input_values();
    iv->set_name(parsed->first);
    for (double v : parsed->second) iv->add_values(v);
  }
  // The model imported here first, as `tasks` and `build` do: a dynamic
  // input without --shape, or an operator not supported, is a usage error
  // (exit 2) in every command, not the server's refusal.
  std::vector<std::string> shapes;
  if (a.Has("shape")) shapes = absl::StrSplit(a.Get("shape"), ',');
  absl::StatusOr<frontend::ImportOptions> o = ImportOverrides(shapes, a.All("value"));
  if (!o.ok()) return Usage(std::string(o.status().message()));
  if (absl::StatusOr<frontend::Model> m = frontend::ImportOnnxFile(a.positional()[0], *o);
      !m.ok()) {
    return Usage(std::string(m.status().message()));
  }
  if (a.Has("precision")) {
    absl::StatusOr<ir::Target> t = ParseTargetFlag(a.Get("target"));
    if (!t.ok()) return Usage(std::string(t.status().message()));
    absl::StatusOr<v1::DType> precision = ParsePrecisionFlag(a.Get("precision"), *t);
    if (!precision.ok()) return Usage(std::string(precision.status().message()));
    spec->set_precision(*precision);
  }
  absl::StatusOr<std::optional<bool>> layout = ParseLayoutFlag(a.Get("layout"));
  if (!layout.ok()) return Usage(std::string(layout.status().message()));
  if (layout->has_value())
    spec->set_layout(**layout ? v1::DATA_LAYOUT_NHWC : v1::DATA_LAYOUT_NCHW);
  return std::nullopt;
}

// submit SPEC.json: the one positional argument, a JSON JobSpec, into
// `spec`; model flags and anything not JSON are bad usage.
Result ReadJobSpecFile(const Args& a, v1::JobSpec* spec) {
  if (a.positional().size() != 1) {
    return Usage(
        "submit takes one job spec file (JSON JobSpec), a model (MODEL.onnx) or "
        "--workloads FILE");
  }
  if (a.Has("shape") || a.Has("value") || a.Has("precision") || a.Has("layout"))
    return Usage(
        "--shape, --value, --precision and --layout go with a model (MODEL.onnx; a workload "
        "spec says its dtype and layout itself)");
  std::ifstream in(a.positional()[0]);
  if (!in) return Usage(absl::StrCat("cannot read ", a.positional()[0]));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{') {
    return Usage(absl::StrCat(a.positional()[0],
                              " is not a JSON job spec; a list of workloads goes with "
                              "--workloads=",
                              a.positional()[0]));
  }
  auto st = google::protobuf::util::JsonStringToMessage(text, spec);
  if (!st.ok()) {
    return Usage(absl::StrCat(a.positional()[0], ": not a job spec: ", st.message().as_string()));
  }
  return std::nullopt;
}

// The flags that override the spec: the budget (each a positive number when
// given), --target, --device_key, --name and --strategy, into `spec`.
Result ApplySpecFlags(const Args& a, v1::JobSpec* spec) {
  v1::Budget* budget = spec->mutable_budget();
  struct BudgetFlag {
    const char* name;
    const char* unit;
    void (v1::Budget::*set)(int64_t);
  };
  for (const BudgetFlag& f : {BudgetFlag{"time_limit", " of seconds", &v1::Budget::set_max_seconds},
                              BudgetFlag{"trials", "", &v1::Budget::set_max_trials},
                              BudgetFlag{"trials_per_task", "", &v1::Budget::set_max_trials_per_task},
                              BudgetFlag{"early_stop", " of trials", &v1::Budget::set_early_stop_trials}}) {
    if (!a.Has(f.name)) continue;
    int64_t n;
    if (!ParseInt64(a.Get(f.name), &n) || n <= 0)
      return Usage(absl::StrCat("--", f.name, " needs a positive number", f.unit));
    (budget->*f.set)(n);
  }
  if (a.Has("target")) spec->mutable_target()->set_spec(a.Get("target"));
  if (a.Has("device_key")) spec->set_device_key(a.Get("device_key"));
  if (a.Has("name")) spec->set_name(a.Get("name"));
  if (a.Has("strategy")) {
    absl::StatusOr<search::Strategy> st = search::ParseStrategy(a.Get("strategy"));
    if (!st.ok()) return Usage(std::string(st.status().message()));
    spec->set_strategy(*st == search::Strategy::kRandom ? v1::SEARCH_STRATEGY_RANDOM
                                                        : v1::SEARCH_STRATEGY_EVOLUTIONARY);
  }
  return std::nullopt;
}

}  // namespace

Result CmdSubmit(Client& c, const Args& a, std::ostream& out) {
  v1::SubmitJobRequest req;
  req.set_protocol_version(kProtocolVersion);
  if (a.Has("workloads")) {
    if (!a.positional().empty())
      return Usage("submit takes a job spec file or --workloads, not both");
    if (a.Has("precision") || a.Has("layout"))
      return Usage(
          "--precision and --layout go with a model (MODEL.onnx); a workload spec says its dtype "
          "and layout");
    if (Result r = ReadWorkloadsFile(a.Get("workloads"), req.mutable_spec())) return r;
  } else if (a.positional().size() == 1 && absl::EndsWith(a.positional()[0], ".onnx")) {
    if (Result r = ReadModelSpec(a, req.mutable_spec())) return r;
  } else {
    if (Result r = ReadJobSpecFile(a, req.mutable_spec())) return r;
  }
  if (Result r = ApplySpecFlags(a, req.mutable_spec())) return r;
  if (req.spec().target().spec().empty())
    return Usage("submit needs --target=T (llvm, host, or cuda -arch=sm_XX): the spec names none");
  if (req.spec().device_key().empty())
    return Usage("submit needs --device_key=K (the key of the agents that measure the job)");
  req.set_wait_for_device(a.Has("wait_for_device"));
  v1::SubmitJobResponse resp;
  grpc::Status s = c.stub().SubmitJob(c.Context().get(), req, &resp);
  if (!s.ok()) return RpcFailure(c, s);
  out << "submitted job " << resp.job_id() << "\n";
  return std::nullopt;
}

namespace {

void PrintJobLine(const v1::Job& j, std::ostream& out) {
  out << absl::StrFormat("%-6d %-20s %-12s %6d %8d  %s\n", j.job_id(), Printable(j.spec().name()),
                         StateName(j.state()), j.tasks_size(), j.trials_done(),
                         j.spec().target().spec());
}

}  // namespace

Result CmdJobs(Client& c, const Args& a, std::ostream& out) {
  v1::ListJobsRequest req;
  req.set_protocol_version(kProtocolVersion);
  if (a.Has("state")) {
    v1::JobState st;
    if (Result r = StateFromName(a.Get("state"), &st)) return r;
    req.set_state(st);
  }
  v1::ListJobsResponse resp;
  grpc::Status s = c.stub().ListJobs(c.Context().get(), req, &resp);
  if (!s.ok()) return RpcFailure(c, s);
  if (a.Has("json")) {
    out << JsonOf(resp) << "\n";
    return std::nullopt;
  }
  out << absl::StrFormat("%-6s %-20s %-12s %6s %8s  %s\n", "job", "name", "state", "tasks",
                         "trials", "target");
  for (const v1::Job& j : resp.jobs()) PrintJobLine(j, out);
  return std::nullopt;
}

namespace {

// Each task's share of the model's time: weight x best cost over the sum
// of those of the tasks with a best cost (-1: none yet).
std::vector<double> TaskShares(const v1::Job& j) {
  double total = 0;
  for (const v1::Task& t : j.tasks()) total += t.weight() * t.best_cost_sec();
  std::vector<double> out;
  for (const v1::Task& t : j.tasks())
    out.push_back(t.best_cost_sec() > 0 && total > 0 ? t.weight() * t.best_cost_sec() / total : -1);
  return out;
}

// "#2 41%, #3 25%, #1 8%": the `n` tasks (numbered as `tunefarm job` lists
// them) that take most of the model's time; empty for a one-task job or
// before two tasks have a time.
std::string TopShares(const v1::Job& j, size_t n) {
  std::vector<double> shares = TaskShares(j);
  std::vector<size_t> order;
  for (size_t i = 0; i < shares.size(); ++i) {
    if (shares[i] >= 0) order.push_back(i);
  }
  if (order.size() < 2) return "";
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return shares[a] > shares[b]; });
  order.resize(std::min(order.size(), n));
  const std::vector<int64_t> percent = ApportionShares(shares, 100);  // all tasks' add up to 100
  std::vector<std::string> parts;
  for (size_t i : order) parts.push_back(absl::StrFormat("#%d %d%%", i + 1, percent[i]));
  return absl::StrJoin(parts, ", ");
}

// `default_cost`: per workload key, the default schedule's fastest record
// (mean of its repeats) on the job's target (absent where never measured).
void PrintJob(const v1::Job& j, const std::map<std::string, double>& default_cost,
              std::ostream& out) {
  out << "job " << j.job_id() << " \"" << Printable(j.spec().name())
      << "\": " << StateName(j.state()) << " (" << Printable(j.status_message()) << ")\n";
  out << "target: " << j.spec().target().spec() << "   device key: " << j.spec().device_key()
      << "   trials: " << j.trials_done()
      << (j.failed_trials() > 0 ? absl::StrCat(" (and ", j.failed_trials(), " that did not run)")
                                : "")
      << "\n";
  const v1::Budget& b = j.spec().budget();
  std::string budget;
  if (b.max_trials() > 0) absl::StrAppend(&budget, "   trials ", b.max_trials());
  if (b.max_trials_per_task() > 0)
    absl::StrAppend(&budget, "   per task ", b.max_trials_per_task());
  if (b.max_seconds() > 0) absl::StrAppend(&budget, "   wall time ", b.max_seconds(), " s");
  if (b.early_stop_trials() > 0) {
    absl::StrAppend(&budget, "   early stop after ", b.early_stop_trials(),
                    " trials without a better schedule");
  }
  out << "search: "
      << (j.spec().strategy() == v1::SEARCH_STRATEGY_RANDOM ? "random" : "evolutionary")
      << "   budget:" << (budget.empty() ? "   the server's default trials per task" : budget)
      << "\n";
  out << absl::StrFormat("%-3s %-36s %7s %10s %7s %12s %12s %8s %6s  %s\n", "#", "task", "weight",
                         "mflops", "trials", "default_us", "best_us", "speedup", "share",
                         "workload");
  const std::vector<int64_t> shares = ApportionShares(TaskShares(j), 100);  // adding up to 100
  for (int i = 0; i < j.tasks_size(); ++i) {
    const v1::Task& t = j.tasks(i);
    auto d = default_cost.find(t.workload_key());
    double def = d == default_cost.end() ? 0 : d->second;
    double best = t.best_cost_sec();
    out << absl::StrFormat(
        "%-3d %-36s %7g %10.2f %7d %12s %12s %8s %6s  %s\n", i + 1, t.workload_key(), t.weight(),
        t.flops() * 1e-6, t.trials(), def > 0 ? absl::StrFormat("%.3f", def * 1e6) : "-",
        best > 0 ? absl::StrFormat("%.3f", best * 1e6) : "-",
        def > 0 && best > 0 ? absl::StrFormat("%.2fx", def / best) : "-",
        shares[size_t(i)] >= 0 ? absl::StrFormat("%d%%", shares[size_t(i)]) : "-",
        ir::Describe(t.workload()));
  }
}

}  // namespace

Result CmdJob(Client& c, const Args& a, std::ostream& out) {
  int64_t id;
  if (Result r = JobIdArg(a, "job", &id)) return r;
  v1::Job job;
  if (Result r = FetchJob(c, id, &job)) return r;
  if (a.Has("json")) {
    out << JsonOf(job) << "\n";
    return std::nullopt;
  }
  // The default schedule's cost per task on the job's target and device
  // key: the fastest of its measurements, by any job, as the best is the
  // fastest of any schedule's (each a mean of repeats), so the speed-up
  // compares like with like and does not rest on one timing.
  std::map<std::string, double> default_cost;
  absl::StatusOr<ir::Target> target = ir::Target::Parse(job.spec().target().spec());
  for (const v1::Task& t : job.tasks()) {
    if (!target.ok()) break;
    v1::RecordFilter filter;
    filter.set_workload_key(t.workload_key());
    filter.mutable_target()->set_spec(target->ToString());
    filter.set_status(v1::MEASURE_STATUS_OK);
    Result r = ForEachRecord(c, filter, [&](const v1::Record& rec) {
      if (!rec.schedule().is_default() || rec.costs_sec().empty() ||
          rec.device_key() != job.spec().device_key()) {
        return;
      }
      const double mean = MeanCost(rec);
      auto [it, fresh] = default_cost.emplace(t.workload_key(), mean);
      if (!fresh) it->second = std::min(it->second, mean);
    });
    if (r) return r;
  }
  PrintJob(job, default_cost, out);
  return std::nullopt;
}

namespace {

// cancel / resume: one job id in, the job's new state out.
template <typename Request>
Result JobAction(Client& c, const Args& a, std::ostream& out, const std::string& cmd,
                 grpc::Status (v1::TuningService::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                              v1::Job*)) {
  int64_t id;
  if (Result r = JobIdArg(a, cmd, &id)) return r;
  Request req;
  req.set_protocol_version(kProtocolVersion);
  req.set_job_id(id);
  v1::Job job;
  grpc::Status s = (c.stub().*rpc)(c.Context().get(), req, &job);
  if (!s.ok()) return RpcFailure(c, s);
  out << "job " << id << " " << StateName(job.state()) << "\n";
  return std::nullopt;
}

}  // namespace

Result CmdCancel(Client& c, const Args& a, std::ostream& out) {
  return JobAction<v1::CancelJobRequest>(c, a, out, "cancel", &v1::TuningService::Stub::CancelJob);
}

Result CmdResume(Client& c, const Args& a, std::ostream& out) {
  return JobAction<v1::ResumeJobRequest>(c, a, out, "resume", &v1::TuningService::Stub::ResumeJob);
}

namespace {

// "1m05s", "42s".
std::string ShortDuration(double s) {
  if (s < 60) return absl::StrFormat("%.0fs", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", int(s) / 60, int(s) % 60);
  return absl::StrFormat("%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
}

}  // namespace

Result CmdWatch(Client& c, const Args& a, std::ostream& out) {
  int64_t id;
  if (Result r = JobIdArg(a, "watch", &id)) return r;
  const bool json = a.Has("json") > 0;
  v1::Job job;
  if (Result r = FetchJob(c, id, &job)) return r;
  const int64_t total = job.spec().budget().max_trials();
  // A progress bar redrawn in place on a terminal; one line per change when piped.
  const bool terminal = &out == &std::cout && isatty(STDOUT_FILENO);
  v1::WatchJobRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_job_id(id);
  auto ctx = c.Context(absl::Hours(24 * 30));
  auto reader = c.stub().WatchJob(ctx.get(), req);
  v1::JobEvent ev;
  absl::Time first_time = absl::Now();
  int64_t first_trials = -1;
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  auto clock = [](const v1::JobEvent& e) {
    return absl::FormatTime("%H:%M:%S", absl::FromUnixMillis(e.timestamp_unix_ms()),
                            absl::LocalTimeZone());
  };
  while (reader->Read(&ev)) {
    last = ev.state();
    if (ev.task_id() != 0) {
      // A task's new best: a line of its own when piped (the bar shows the model's).
      if (json) {
        out << JsonOf(ev) << std::endl;
      } else if (!terminal) {
        // Numbered as `tunefarm job` lists the tasks (a server that does not
        // send the number: the database's task id).
        out << clock(ev) << " job " << ev.job_id() << " task "
            << (ev.task_number() > 0 ? absl::StrCat("#", ev.task_number())
                                     : absl::StrCat("id ", ev.task_id()))
            << " best "
            << absl::StrFormat("%.3f us", ev.best_cost_sec() * 1e6) << std::endl;
      }
      continue;
    }
    if (first_trials < 0) first_trials = ev.trials_done(), first_time = absl::Now();
    std::string progress = absl::StrCat("trials ", ev.trials_done());
    // Where the model's time is, by the tasks' best costs so far.
    if (!json && job.tasks_size() > 1 && ev.trials_done() > 0) {
      v1::Job latest;
      if (!FetchJob(c, id, &latest)) {
        const std::string top = TopShares(latest, 3);
        if (!top.empty()) absl::StrAppend(&progress, "  time: ", top);
      }
    }
    std::string eta;
    if (total > 0) absl::StrAppend(&progress, "/", total);
    if (ev.tasks_with_best() > 0) {
      absl::StrAppend(&progress, absl::StrFormat("  model %.3f ms", ev.model_best_sec() * 1e3));
      if (ev.tasks_with_best() < ev.tasks())
        absl::StrAppend(&progress, " (", ev.tasks_with_best(), "/", ev.tasks(), " tasks)");
    }
    if (ev.trials_per_minute() > 0)
      absl::StrAppend(&progress, absl::StrFormat("  %.1f trials/min", ev.trials_per_minute()));
    if (ev.eta_sec() > 0) {
      eta = absl::StrCat("  about ", ShortDuration(ev.eta_sec()), " left");
    } else if (total > 0) {
      double rate = double(ev.trials_done() - first_trials) /
                    std::max(1e-3, absl::ToDoubleSeconds(absl::Now() - first_time));
      if (rate > 0 && ev.trials_done() < total && ev.state() == v1::JOB_STATE_RUNNING)
        eta = absl::StrCat("  about ", ShortDuration((total - ev.trials_done()) / rate), " left");
    }
    if (json) {
      out << JsonOf(ev) << std::endl;  // one event per line, as it arrives
    } else if (terminal) {
      constexpr int kWidth = 30;
      int filled = total > 0 ? int(kWidth * std::min<int64_t>(ev.trials_done(), total) / total) : 0;
      out << "\r[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] "
          << progress << "  " << StateName(ev.state()) << eta
          << (ev.message().empty() ? "" : "  " + ev.message()) << "\x1b[K" << std::flush;
    } else {
      out << clock(ev) << " job " << ev.job_id() << " " << StateName(ev.state()) << " " << progress
          << eta << " " << ev.message() << std::endl;
    }
  }
  if (terminal && !json) out << "\n";
  grpc::Status s = reader->Finish();
  if (!s.ok()) return RpcFailure(c, s);
  if (last == v1::JOB_STATE_SUCCEEDED && !json) {
    out << "\n";
    return CmdJob(c, a, out);  // default vs best per task
  }
  return std::nullopt;
}

// plot JOB -o FILE.svg: the job's tuning curves (cli/plot.h) from all its records.
Result CmdPlot(Client& c, const Args& a, std::ostream& out) {
  int64_t id;
  if (Result r = JobIdArg(a, "plot", &id)) return r;
  if (!a.Has("o")) return Usage("plot needs -o FILE.svg");
  v1::Job job;
  if (Result r = FetchJob(c, id, &job)) return r;
  std::vector<v1::Record> records;
  v1::RecordFilter filter;
  filter.set_job_id(id);
  if (Result r = ForEachRecord(c, filter, [&](const v1::Record& rec) { records.push_back(rec); }))
    return r;
  const std::string path = a.Get("o"), tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << TuningCurvesSvg(job, records);
    if (!f) return Failure{kExitFailed, absl::StrCat("cannot write ", tmp)};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Failure{kExitFailed, absl::StrCat("cannot write ", path)};
  }
  out << "wrote " << path << ": " << records.size() << " trials of " << job.tasks_size()
      << " tasks\n";
  return std::nullopt;
}

}  // namespace tunefarm::cli
