// tunefarm-bench farm: the tuning server's own throughput. A real
// tunefarm-server process on 127.0.0.1 with its SQLite file; compile workers
// and device agents as in-process FarmSessions that answer every lease at
// once (builds return a placeholder artifact, measurements a made-up time:
// the mode exists only here), so what is measured is the server: leases
// handed out, results received, records committed, searches driven.
// Jobs use the random strategy (the cost model is not trained), enough of
// them to keep every agent busy.
//
// Then the real thing: one job through a real server, worker and 1 or 2
// real agents on this machine, trials per minute.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "common/logging.h"
#include "common/subprocess.h"
#include "compiler/ir/target.h"
#include "proto/client.h"
#include "proto/farm_session.h"
#include "proto/protocol.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm::bench {
namespace {

namespace v1 = ::tunefarm::v1;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch directory removed on exit.
struct Scratch {
  std::string path;
  Scratch() {
    char tmpl[] = "/tmp/tunefarm-farm-bench-XXXXXX";
    path = mkdtemp(tmpl) ? tmpl : "/tmp";
  }
  ~Scratch() {
    if (path != "/tmp") std::system(("rm -rf '" + path + "'").c_str());
  }
};

struct ServerProc {
  std::unique_ptr<Subprocess> proc;
  std::string address;
};

absl::StatusOr<ServerProc> StartServer(const std::string& dir) {
  std::string port_file = dir + "/port";
  Subprocess::Options o;
  o.capture_stdout = false;
  o.stderr_path = dir + "/server.log";
  auto p = Subprocess::Start(
      {SiblingBinary("tunefarm-server"), "--listen=127.0.0.1:0", "--db=" + dir + "/farm.db",
       "--port_file=" + port_file, "--log_level=warn", "--heartbeat_interval_ms=1000"},
      o);
  if (!p.ok()) return p.status();
  for (int i = 0; i < 3000; ++i) {
    int port = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(port_file)), &port) && port > 0) {
      return ServerProc{*std::move(p), absl::StrCat("127.0.0.1:", port)};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError("the server did not start: " + ReadFile(dir + "/server.log"));
}

// utime + stime of a process, seconds.
double CpuSeconds(pid_t pid) {
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
  if (f.size() < 13) return 0;
  double ut = 0, st = 0;
  (void)absl::SimpleAtod(f[11], &ut);
  (void)absl::SimpleAtod(f[12], &st);
  return (ut + st) / double(sysconf(_SC_CLK_TCK));
}

struct Api {
  ClientOptions client;
  std::unique_ptr<v1::TuningService::Stub> stub;
  explicit Api(const std::string& address) {
    client.server = address;
    stub = v1::TuningService::NewStub(*MakeChannel(client));
  }
  std::unique_ptr<grpc::ClientContext> Ctx() { return MakeContext(client, absl::Seconds(30)); }
  absl::StatusOr<int64_t> Submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest req;
    req.set_protocol_version(kProtocolVersion);
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    grpc::Status s = stub->SubmitJob(Ctx().get(), req, &resp);
    if (!s.ok()) return absl::InternalError(s.error_message());
    return resp.job_id();
  }
  v1::Job Get(int64_t id) {
    v1::GetJobRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.set_job_id(id);
    v1::Job j;
    (void)stub->GetJob(Ctx().get(), req, &j);
    return j;
  }
  void Cancel(int64_t id) {
    v1::CancelJobRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.set_job_id(id);
    v1::Job j;
    (void)stub->CancelJob(Ctx().get(), req, &j);
  }
};

v1::TaskSpec DenseTask(int m, int n, int k) {
  v1::TaskSpec t;
  t.mutable_workload()->set_op(v1::OP_KIND_DENSE);
  auto* a = t.mutable_workload()->add_inputs();
  a->add_shape(m);
  a->add_shape(k);
  auto* b = t.mutable_workload()->add_inputs();
  b->add_shape(n);
  b->add_shape(k);
  return t;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

struct Row {
  int agents = 0, jobs = 0;
  double seconds = 0, results_per_s = 0, p50_ms = 0, p99_ms = 0, server_cpu = 0;
  int64_t results = 0;
};

// `agents` instant agents and two instant workers against a real server.
absl::StatusOr<Row> Throughput(int agents, double seconds) {
  Scratch dir;
  auto server = StartServer(dir.path);
  if (!server.ok()) return server.status();
  const std::string triple = ir::Target::Parse("llvm")->triple;
  auto log = Logger("bench");
  log->set_level(spdlog::level::warn);

  std::mutex mu;
  std::vector<double> latency_ms;  // queued -> handed to an agent
  std::atomic<bool> counting{false};
  std::vector<std::unique_ptr<FarmSession>> sessions;
  std::vector<std::thread> threads;
  auto start_session = [&](v1::Role role, const std::string& id, int in_flight) {
    FarmSession::Options o;
    o.client.server = server->address;
    o.role = role;
    o.device_id = id;
    o.device_key = role == v1::ROLE_AGENT ? "bench-instant" : "";
    o.capabilities.set_triple(triple);
    o.capabilities.set_cpu_model("bench instant agent");
    if (role == v1::ROLE_WORKER) o.capabilities.add_build_triples(triple);
    o.max_in_flight = in_flight;
    sessions.push_back(std::make_unique<FarmSession>(o, log));
    FarmSession* s = sessions.back().get();
    threads.emplace_back([&, s] {
      (void)s->Run([&](const v1::WorkLease& lease) {
        v1::ReportResultRequest r;
        if (lease.has_build()) {
          r.mutable_build()->set_kind(v1::ARTIFACT_KIND_SHARED_OBJECT);
          r.mutable_build()->set_artifact("placeholder artifact");
          return r;
        }
        if (counting && lease.queued_unix_us() > 0) {
          double ms = double(absl::ToUnixMicros(absl::Now()) - lease.queued_unix_us()) * 1e-3;
          std::lock_guard<std::mutex> l(mu);
          latency_ms.push_back(ms);
        }
        // A made-up time, stable per schedule, so the search sees a signal.
        size_t h = std::hash<std::string>()(lease.measure().schedule().SerializeAsString());
        r.mutable_measure()->set_status(v1::MEASURE_STATUS_OK);
        for (int i = 0; i < 3; ++i)
          r.mutable_measure()->add_costs_sec(1e-4 * (1 + h % 997 / 997.0));
        return r;
      });
    });
  };
  for (int w = 0; w < 2; ++w) start_session(v1::ROLE_WORKER, absl::StrCat("worker-", w), 64);
  for (int a = 0; a < agents; ++a) start_session(v1::ROLE_AGENT, absl::StrCat("agent-", a), 1);

  // Each job keeps a batch of 16 in flight; enough jobs for every agent.
  Api api(server->address);
  const int jobs = std::max(4, (agents * 3 + 15) / 16);
  std::vector<int64_t> ids;
  for (int j = 0; j < jobs; ++j) {
    v1::JobSpec spec;
    spec.set_name(absl::StrCat("bench-", j));
    for (int t = 0; t < 3; ++t) *spec.add_tasks() = DenseTask(64 + 16 * j, 256 + 32 * t, 256);
    spec.mutable_target()->set_spec("llvm");
    spec.set_device_key("bench-instant");
    spec.mutable_budget()->set_max_trials(10000000);
    spec.set_strategy(v1::SEARCH_STRATEGY_RANDOM);
    spec.set_seed(uint64_t(j + 1));
    absl::StatusOr<int64_t> id = api.Submit(spec);
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  auto done = [&] {
    int64_t n = 0;
    for (int64_t id : ids) n += api.Get(id).trials_done();
    return n;
  };
  // Warm up until results flow, then count over the window.
  for (int i = 0; i < 600 && done() < 100; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  counting = true;
  const int64_t n0 = done();
  const double cpu0 = CpuSeconds(server->proc->pid());
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(int64_t(seconds * 1000)));
  const int64_t n1 = done();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu1 = CpuSeconds(server->proc->pid());
  counting = false;

  Row row;
  row.agents = agents;
  row.jobs = jobs;
  row.seconds = wall;
  row.results = n1 - n0;
  row.results_per_s = double(n1 - n0) / wall;
  row.server_cpu = (cpu1 - cpu0) / wall;
  {
    std::lock_guard<std::mutex> l(mu);
    row.p50_ms = Percentile(latency_ms, 0.5);
    row.p99_ms = Percentile(latency_ms, 0.99);
  }
  for (int64_t id : ids) api.Cancel(id);
  for (auto& s : sessions) s->Stop();
  for (auto& t : threads) t.join();
  server->proc->Kill(SIGTERM);
  (void)server->proc->Wait(absl::Seconds(30));
  return row;
}

// One real job: real server, worker and `agents` real agents on this
// machine. Returns trials per minute.
absl::StatusOr<double> RealJob(int agents, int trials) {
  Scratch dir;
  auto server = StartServer(dir.path);
  if (!server.ok()) return server.status();
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir.path + "/procs.log";
  std::vector<std::unique_ptr<Subprocess>> procs;
  auto start = [&](std::vector<std::string> argv) -> absl::Status {
    auto p = Subprocess::Start(argv, quiet);
    if (!p.ok()) return p.status();
    procs.push_back(*std::move(p));
    return absl::OkStatus();
  };
  absl::Status s = start({SiblingBinary("tunefarm-worker"), "--server=" + server->address,
                          "--device_id=worker", "--threads=1"});
  for (int a = 0; a < agents && s.ok(); ++a) {
    s = start({SiblingBinary("tunefarm-agent"), "--server=" + server->address, "--key=local",
               absl::StrCat("--device_id=agent-", a),
               "--server_key=" + dir.path + "/farm.db.signing-key.pub"});
  }
  if (!s.ok()) return s;
  Api api(server->address);
  v1::JobSpec spec;
  spec.set_name("real");
  *spec.add_tasks() = DenseTask(128, 256, 256);
  *spec.add_tasks() = DenseTask(64, 512, 128);
  spec.mutable_target()->set_spec("llvm -num-cores=1");
  spec.set_device_key("local");
  spec.mutable_budget()->set_max_trials(trials);
  spec.set_seed(1);
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<int64_t> id = api.Submit(spec);
  if (!id.ok()) return id.status();
  v1::Job j;
  for (;;) {
    j = api.Get(*id);
    if (j.state() == v1::JOB_STATE_SUCCEEDED || j.state() == v1::JOB_STATE_FAILED ||
        j.state() == v1::JOB_STATE_CANCELLED)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double minutes =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 60;
  for (auto& p : procs) p->Kill(SIGTERM);
  for (auto& p : procs) (void)p->Wait(absl::Seconds(20));
  server->proc->Kill(SIGTERM);
  (void)server->proc->Wait(absl::Seconds(30));
  if (j.state() != v1::JOB_STATE_SUCCEEDED)
    return absl::InternalError(
        absl::StrCat("the job ended ", v1::JobState_Name(j.state()), ": ", j.status_message()));
  return double(j.trials_done()) / minutes;
}

}  // namespace

int RunFarmBench(const std::vector<std::string>& args) {
  std::vector<int> agents = {1, 10, 100};
  double seconds = 10;
  int trials = 96;
  std::string json;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string { return i + 1 < args.size() ? args[++i] : ""; };
    if (args[i] == "--agents") {
      agents.clear();
      for (absl::string_view p : absl::StrSplit(value(), ',')) {
        int v = 0;
        if (absl::SimpleAtoi(p, &v) && v > 0) agents.push_back(v);
      }
    } else if (args[i] == "--seconds") {
      if (!absl::SimpleAtod(value(), &seconds) || seconds <= 0) seconds = 10;
    } else if (args[i] == "--trials") {
      if (!absl::SimpleAtoi(value(), &trials) || trials <= 0) trials = 96;
    } else if (args[i] == "--json") {
      json = value();
    } else {
      std::fprintf(stderr, "tunefarm-bench farm: unknown argument '%s'\n", args[i].c_str());
      return 2;
    }
  }
  std::printf("server throughput: instant agents and workers, random-strategy jobs, %.0f s each\n",
              seconds);
  std::printf("%7s %5s %10s %14s %10s %10s %11s\n", "agents", "jobs", "results", "results/s",
              "p50_ms", "p99_ms", "server_cpu");
  std::vector<Row> rows;
  for (int a : agents) {
    absl::StatusOr<Row> r = Throughput(a, seconds);
    if (!r.ok()) {
      std::fprintf(stderr, "tunefarm-bench farm: %d agents: %s\n", a,
                   std::string(r.status().message()).c_str());
      return 1;
    }
    std::printf("%7d %5d %10lld %14.0f %10.2f %10.2f %10.0f%%\n", r->agents, r->jobs,
                (long long)r->results, r->results_per_s, r->p50_ms, r->p99_ms, 100 * r->server_cpu);
    std::fflush(stdout);
    rows.push_back(*r);
  }
  std::printf("\none real job (2 dense tasks, %d trials, evolutionary, 1 worker), real agents\n",
              trials);
  std::vector<std::pair<int, double>> real;
  for (int a : {1, 2}) {
    absl::StatusOr<double> tpm = RealJob(a, trials);
    if (!tpm.ok()) {
      std::fprintf(stderr, "tunefarm-bench farm: real job with %d agents: %s\n", a,
                   std::string(tpm.status().message()).c_str());
      return 1;
    }
    std::printf("  %d agent%s: %.0f trials/min\n", a, a > 1 ? "s" : " ", *tpm);
    std::fflush(stdout);
    real.emplace_back(a, *tpm);
  }
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out << absl::StrFormat(
          "  {\"agents\": %d, \"jobs\": %d, \"seconds\": %.2f, \"results\": %d, "
          "\"results_per_s\": %.1f, \"p50_schedule_ms\": %.3f, \"p99_schedule_ms\": %.3f, "
          "\"server_cpu\": %.3f}%s\n",
          r.agents, r.jobs, r.seconds, r.results, r.results_per_s, r.p50_ms, r.p99_ms, r.server_cpu,
          i + 1 < rows.size() ? "," : "");
    }
    out << "], \"real_job\": [";
    for (size_t i = 0; i < real.size(); ++i) {
      out << absl::StrFormat("%s{\"agents\": %d, \"trials\": %d, \"trials_per_min\": %.1f}",
                             i ? ", " : "", real[i].first, trials, real[i].second);
    }
    out << "]}\n";
    if (!out) {
      std::fprintf(stderr, "tunefarm-bench farm: cannot write %s\n", json.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace tunefarm::bench
