// End to end: the real tunefarm-server, tunefarm CLI, tunefarm-agent and
// tunefarm-worker binaries on 127.0.0.1 with ports picked by the OS.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/records_jsonl.h"
#include "common/logging.h"
#include "common/signing.h"
#include "compiler/codegen/nvrtc_info.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/client.h"
#include "proto/farm_session.h"
#include "proto/protocol.h"
#include "proto/tuning_curves.h"
#include "tests/server/test_records.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/farm.grpc.pb.h"
#include "tunefarm/v1/tuning.pb.h"

namespace tunefarm {
namespace {

using testing::BinPath;
using testing::CommandResult;
using testing::RunCommand;
using testing::ServerProcess;

// SIGTERM to each, then waits for it to exit.
void StopAll(std::initializer_list<Subprocess*> procs) {
  for (Subprocess* p : procs) {
    p->Kill(SIGTERM);
    ASSERT_TRUE(p->Wait(absl::Seconds(20)).ok());
  }
}

class E2ETest : public ::testing::Test {
 protected:
  CommandResult Cli(const ServerProcess& server, std::vector<std::string> args) {
    return server.Cli(std::move(args), dir_.path());
  }
  std::string WriteRecords(int n) {
    std::string path = dir_.File("records.jsonl");
    std::ofstream out(path);
    for (int i = 1; i <= n; ++i) {
      v1::Record r =
          testing::MakeRecord(testing::Conv2d(32, 32, 28), testing::kTargetX86, 1e-3 / i, i);
      out << cli::RecordToJsonLine(r) << "\n";
    }
    return path;
  }
  std::string WorkloadKey(const ServerProcess& server) {
    CommandResult r = Cli(server, {"records", "--limit=1", "--json"});
    size_t at = r.out.find("\"workload_key\":\"");
    if (at == std::string::npos) return "";
    at += 16;
    return r.out.substr(at, r.out.find('"', at) - at);
  }

  // The records of job `job`, through `tunefarm records --json`.
  std::vector<v1::Record> JobRecords(const ServerProcess& server, int job) {
    CommandResult out =
        Cli(server, {"records", "--job=" + std::to_string(job), "--limit=1000", "--json"});
    std::istringstream in(out.out);
    auto parsed = cli::ParseRecordsJsonl(in, "records --json");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? *parsed : std::vector<v1::Record>();
  }

  // An agent of key x86-test (installed with `server`'s key) and a
  // 2-thread worker dialling `server`; their logs go to procs.log.
  std::pair<absl::StatusOr<std::unique_ptr<Subprocess>>,
            absl::StatusOr<std::unique_ptr<Subprocess>>>
  StartAgentAndWorker(const ServerProcess& server) {
    const std::string addr = server.address();
    Subprocess::Options quiet;
    quiet.capture_stdout = false;
    quiet.stderr_path = dir_.File("procs.log");
    return {Subprocess::Start({BinPath("tunefarm-agent"), "--server=" + addr, "--key=x86-test",
                               "--device_id=agent-1", server.server_key_flag()},
                              quiet),
            Subprocess::Start({BinPath("tunefarm-worker"), "--server=" + addr,
                               "--device_id=worker-1", "--threads=2"},
                              quiet)};
  }

  testing::TempDir dir_;
};

TEST_F(E2ETest, ImportQueryRestartQueryAgain) {
  std::string db = dir_.File("farm.db");
  auto server = ServerProcess::Start(db, dir_.path());
  ASSERT_TRUE(server.ok()) << server.status();

  CommandResult imp = Cli(**server, {"import", WriteRecords(40)});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  EXPECT_TRUE(absl::StrContains(imp.out, "imported 40 records (0 already present)")) << imp.out;
  // Importing again changes nothing.
  imp = Cli(**server, {"import", dir_.File("records.jsonl")});
  EXPECT_TRUE(absl::StrContains(imp.out, "imported 0 records (40 already present)")) << imp.out;

  std::string key = WorkloadKey(**server);
  ASSERT_FALSE(key.empty());
  std::vector<std::string> best_args = {"best", "--workload=" + key,
                                        "--target=llvm -mcpu=skylake-avx512", "--json"};
  CommandResult best = Cli(**server, best_args);
  ASSERT_EQ(best.exit_code, 0) << best.err;
  // Salt 40 is the fastest record (1e-3 / 40 s).
  EXPECT_TRUE(absl::StrContains(best.out, "\"lengths\":[\"40\",\"4\"]")) << best.out;
  std::string before = best.out;

  auto stopped = (*server)->Stop();
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(DescribeWaitStatus(*stopped), "exited with 0");

  auto again = ServerProcess::Start(db, dir_.path());
  ASSERT_TRUE(again.ok()) << again.status();
  best = Cli(**again, best_args);
  ASSERT_EQ(best.exit_code, 0) << best.err;
  EXPECT_EQ(best.out, before);

  // The human table names the record and its speed.
  CommandResult table = Cli(**again, {"best", "--workload=" + key,
                                      "--target=" + std::string(testing::kTargetX86), "--top=3"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(absl::StrContains(table.out, "mean_us")) << table.out;
  EXPECT_TRUE(absl::StrContains(table.out, "25.000")) << table.out;  // 1e-3/40 s = 25 us
  // Filters that match nothing: one line naming them, not a bare header.
  CommandResult none =
      Cli(**again, {"records", "--job=99", "--status=ok", "--target=llvm -mcpu=znver3"});
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.out, "no records match --target='llvm -mcpu=znver3' --job=99 --status=ok\n");

  // Export gives back the 40 records, and a second farm imports them all.
  std::string exported = dir_.File("export.jsonl");
  CommandResult ex = Cli(**again, {"export", "-o", exported});
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_TRUE(absl::StrContains(ex.out, "exported 40 records")) << ex.out;
  testing::TempDir other_dir;
  auto other = ServerProcess::Start(other_dir.File("other.db"), other_dir.path());
  ASSERT_TRUE(other.ok());
  imp = Cli(**other, {"import", exported});
  EXPECT_TRUE(absl::StrContains(imp.out, "imported 40 records")) << imp.out << imp.err;
}

// A file of several batches is read a line at a time (checked whole, then
// sent batch by batch); standard input gives the same.
TEST_F(E2ETest, ImportsInBatchesFromAFileOrStandardInput) {
  auto server = ServerProcess::Start(dir_.File("farm.db"), dir_.path());
  ASSERT_TRUE(server.ok()) << server.status();
  auto stored = [&] {
    CommandResult r = Cli(**server, {"records", "--limit=5000", "--json"});
    return std::count(r.out.begin(), r.out.end(), '\n');
  };
  // A bad last line after two batches' worth: nothing of the file is sent.
  testing::WriteFile(dir_.File("tail.jsonl"), testing::ReadFileOrEmpty(WriteRecords(2200)) + "{\n");
  CommandResult bad = Cli(**server, {"import", dir_.File("tail.jsonl")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bad.err, "tail.jsonl:2201: not a record")) << bad.err;
  EXPECT_EQ(stored(), 0);
  const std::string file = WriteRecords(2500);
  CommandResult imp = Cli(**server, {"import", file});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  EXPECT_EQ(imp.out, "imported 2500 records (0 already present) from " + file + "\n");
  EXPECT_EQ(stored(), 2500);
  CommandResult piped = RunCommand(
      {"/bin/sh", "-c",
       absl::StrCat(BinPath("tunefarm"), " --server=", (*server)->address(), " import - < ", file)},
      dir_.path());
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.out, "imported 0 records (2500 already present) from -\n");
}

TEST_F(E2ETest, ErrorsAreOneLineWithExitCodes) {
  // Held until the end, so the port stays closed after the server stops.
  auto port = testing::ReservedPort::Take();
  ASSERT_TRUE(port.ok()) << port.status();
  auto server = ServerProcess::Start(dir_.File("farm.db"), dir_.path(), {(*port)->listen_flag()});
  ASSERT_TRUE(server.ok()) << server.status();
  std::string bad = dir_.File("bad.jsonl");
  testing::WriteFile(bad, "{\"status\": 1}\nnot json\n");
  CommandResult r = Cli(**server, {"import", bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "tunefarm: error: " + bad +
                       ":2: not a record: " + r.err.substr(r.err.find("not a record: ") + 14));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = Cli(**server, {"best", "--workload=x", "--target=llvm -mcpu"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "-name=value")) << r.err;
  r = Cli(**server, {"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "unknown command 'frobnicate'")) << r.err;
  r = Cli(**server, {"job", "12345"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "no job 12345")) << r.err;
  r = Cli(**server, {"records", "--bogus=1"});
  EXPECT_EQ(r.exit_code, 2);

  // Nothing listens on the port of a stopped server.
  std::string addr = (*server)->address();
  ASSERT_TRUE((*server)->Stop().ok());
  r = RunCommand({BinPath("tunefarm"), "--server=" + addr, "--timeout=2", "jobs"}, dir_.path());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(absl::StrContains(r.err, "cannot reach the server")) << r.err;

  // A server refuses a file that is not its database, with one line, exit 1.
  std::string junk = dir_.File("junk.db");
  testing::WriteFile(junk, std::string(4096, 'j'));
  r = RunCommand({BinPath("tunefarm-server"), "--listen=127.0.0.1:0", "--db=" + junk}, dir_.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "is not a tunefarm database")) << r.err;
}

TEST_F(E2ETest, JobsThroughTheCli) {
  auto server = ServerProcess::Start(dir_.File("farm.db"), dir_.path());
  ASSERT_TRUE(server.ok()) << server.status();
  std::string spec = dir_.File("job.json");
  testing::WriteFile(spec, R"({"name": "demo", "tasks": [
    {"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [1, 512]}, {"shape": [1000, 512]}]},
     "weight": 1}]})");
  CommandResult r = Cli(**server, {"submit", spec, "--target=llvm -mcpu=znver3",
                                   "--device_key=x86-avx2", "--trials=100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "submitted job 1\n");
  // No worker or agent is connected: the job waits and says for what.
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(Cli(**server, {"job", "1"}).out, "waiting");
      },
      absl::Seconds(30)));
  r = Cli(**server, {"job", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "waiting for a compile worker that builds x86_64-linux-gnu"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "dense 1x512 * 1000x512")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "1.02")) << r.out;  // 2*1000*512 flops = 1.02 MFLOP
  r = Cli(**server, {"cancel", "1"});
  EXPECT_EQ(r.out, "job 1 cancelled\n");
  r = Cli(**server, {"watch", "1"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.out, "cancelled")) << r.out;
  r = Cli(**server, {"watch", "1", "--json"});
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_FALSE(r.out.empty());
  for (absl::string_view line : absl::StrSplit(absl::StripSuffix(r.out, "\n"), '\n')) {
    EXPECT_TRUE(absl::StartsWith(line, "{") && absl::EndsWith(line, "}")) << line;
  }
  EXPECT_TRUE(absl::StrContains(r.out, "JOB_STATE_CANCELLED")) << r.out;
  r = Cli(**server, {"jobs", "--state=cancelled"});
  EXPECT_TRUE(absl::StrContains(r.out, "demo")) << r.out;
  r = Cli(**server, {"records"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no records: the database holds none\n");

  // A task given as the CLI's workload spec string: the server parses it
  // into the job's workload; a bad one names the task and the column.
  testing::WriteFile(spec, R"j({"tasks": [{"workloadSpec": "matmul(M=8,N=8,K=8)+relu"},
                                           {"workload_spec": "matmul(M=4,N=4,K=4)", "weight": 3}]})j");
  r = Cli(**server, {"submit", spec, "--target=llvm", "--device_key=none", "--wait-for-device"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "submitted job 2\n");
  r = Cli(**server, {"job", "2", "--json"});
  v1::Job from_specs;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &from_specs).ok()) << r.out;
  ASSERT_EQ(from_specs.tasks_size(), 2) << r.out;
  EXPECT_EQ(from_specs.tasks(0).workload().op(), v1::OP_KIND_MATMUL) << r.out;
  EXPECT_EQ(from_specs.tasks(0).workload().epilogue_size(), 1) << r.out;
  EXPECT_EQ(from_specs.tasks(1).weight(), 3) << r.out;
  for (const v1::TaskSpec& t : from_specs.spec().tasks()) EXPECT_EQ(t.workload_spec(), "");
  Cli(**server, {"cancel", "2"});
  testing::WriteFile(spec, R"j({"tasks": [{"workloadSpec": "matmul(M=8,N=8,K=8)"},
                                           {"workloadSpec": "matmul(M=8,N=8)"}]})j");
  r = Cli(**server, {"submit", spec, "--target=llvm", "--device_key=none", "--wait-for-device"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "SubmitJob: tasks[1].workload_spec: workload spec "
                                       "'matmul(M=8,N=8)' at column 16: matmul needs K"))
      << r.err;
  testing::WriteFile(spec, R"j({"tasks": [{"workloadSpec": "matmul(M=8,N=8,K=8)",
    "workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [1, 8]}, {"shape": [8, 8]}]}}]})j");
  r = Cli(**server, {"submit", spec, "--target=llvm", "--device_key=none", "--wait-for-device"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "tasks[0].workload_spec: the task has a workload too"))
      << r.err;

  // A plain list of workload specs; a bad line is named.
  std::string list = dir_.File("workloads.txt");
  testing::WriteFile(list, "# two tasks\nmatmul(M=8,N=8,K=8)\n\nmatmul(M=4,N=4,K=4) x3\n");
  r = Cli(**server, {"submit", "--workloads=" + list, "--target=llvm", "--device_key=none",
                     "--time_limit=600"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "submitted job 3\n");
  r = Cli(**server, {"job", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "\"max_seconds\":\"600\"")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"weight\":3")) << r.out;
  testing::WriteFile(list, "matmul(M=8,N=8,K=8)\nmatmul(M=8,N=8)\n");
  r = Cli(**server, {"submit", "--workloads=" + list, "--device_key=none"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "workloads.txt:2: ")) << r.err;
  r = Cli(**server, {"jobs", "--json"});
  EXPECT_TRUE(absl::StrContains(r.out, "\"jobs\"")) << r.out;
  Cli(**server, {"cancel", "3"});
}

TEST_F(E2ETest, AgentAndWorkerDialInAndReconnect) {
  std::string db = dir_.File("farm.db");
  // The restarted server takes the same port, held here meanwhile.
  auto port = testing::ReservedPort::Take();
  ASSERT_TRUE(port.ok()) << port.status();
  auto server = ServerProcess::Start(db, dir_.path(),
                                     {"--heartbeat_interval_ms=200", (*port)->listen_flag()});
  ASSERT_TRUE(server.ok()) << server.status();
  std::string addr = (*server)->address();
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir_.File("procs.log");
  auto agent = Subprocess::Start({BinPath("tunefarm-agent"), "--server=" + addr,
                                  "--key=x86-test", "--device_id=agent-1",
                                  (*server)->server_key_flag()},
                                 quiet);
  auto worker = Subprocess::Start(
      {BinPath("tunefarm-worker"), "--server=" + addr, "--device_id=worker-1"}, quiet);
  ASSERT_TRUE(agent.ok() && worker.ok());
  auto both_online = [&](ServerProcess& s) {
    CommandResult r = Cli(s, {"devices"});
    size_t online = 0, pos = 0;
    while ((pos = r.out.find(" online ", pos)) != std::string::npos) ++online, ++pos;
    return online == 2 && absl::StrContains(r.out, "agent-1") &&
           absl::StrContains(r.out, "worker-1");
  };
  EXPECT_TRUE(testing::WaitFor([&] { return both_online(**server); }, absl::Seconds(60)))
      << Cli(**server, {"devices"}).out << testing::ReadFileOrEmpty(dir_.File("procs.log"));
  CommandResult devices = Cli(**server, {"devices"});
  EXPECT_TRUE(absl::StrContains(devices.out, "builds x86_64-linux-gnu,aarch64-linux-gnu"))
      << devices.out;

  // The server dies hard; a new one on the same port and file gets both back.
  (*server)->process().Kill(SIGKILL);
  ASSERT_TRUE((*server)->process().Wait(absl::Seconds(10)).ok());
  auto revived = ServerProcess::Start(
      db, dir_.path(),
      {"--heartbeat_interval_ms=200", (*port)->listen_flag()});
  ASSERT_TRUE(revived.ok()) << revived.status();
  EXPECT_TRUE(testing::WaitFor([&] { return both_online(**revived); }, absl::Seconds(60)))
      << Cli(**revived, {"devices"}).out;

  // A process that cannot even try (its CA file is missing) says so and exits.
  CommandResult bad = RunCommand(
      {BinPath("tunefarm-agent"), "--server=" + addr, "--key=k", "--tls_ca=/nonexistent/ca.pem",
       (*revived)->server_key_flag()},
      dir_.path());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(bad.err, "cannot read CA file /nonexistent/ca.pem")) << bad.err;

  for (auto* p : {&*agent, &*worker}) {
    (*p)->Kill(SIGTERM);
    auto st = (*p)->Wait(absl::Seconds(20));
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(DescribeWaitStatus(*st), "exited with 0");
  }
}

// The farm runs a job: the server's search hands builds to the worker and
// measurements to the agent; every result lands in the database with the
// job's id; then the server is killed mid-job, restarted, and `resume`
// finishes the budget without measuring any schedule twice.
TEST_F(E2ETest, FarmRunsAJobAndResumesItAfterAServerCrash) {
  std::string db = dir_.File("farm.db");
  // The restarted server takes the same port, held here meanwhile.
  auto port = testing::ReservedPort::Take();
  ASSERT_TRUE(port.ok()) << port.status();
  auto server = ServerProcess::Start(db, dir_.path(),
                                     {"--heartbeat_interval_ms=200", (*port)->listen_flag()});
  ASSERT_TRUE(server.ok()) << server.status();
  std::string addr = (*server)->address();
  auto [agent, worker] = StartAgentAndWorker(**server);
  ASSERT_TRUE(agent.ok() && worker.ok());
  std::string spec = dir_.File("job.json");
  testing::WriteFile(spec, R"({"name": "farm", "tasks": [
    {"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [8, 48]}, {"shape": [40, 48]}]}},
    {"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [4, 32]}, {"shape": [24, 32]}]},
     "weight": 2}]})");
  const int kTrials = 120;  // far more than the 20 seen before the kill
  CommandResult r = Cli(**server, {"submit", spec, "--target=llvm", "--device_key=x86-test",
                                   "--trials=" + std::to_string(kTrials)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto records = [&](ServerProcess& s) { return JobRecords(s, 1); };
  // Part of the budget, then the server dies hard.
  ASSERT_TRUE(testing::WaitFor([&] { return records(**server).size() >= 20; }, absl::Seconds(120)))
      << Cli(**server, {"job", "1"}).out << testing::ReadFileOrEmpty(dir_.File("procs.log"));
  (*server)->process().Kill(SIGKILL);
  ASSERT_TRUE((*server)->process().Wait(absl::Seconds(10)).ok());
  auto revived = ServerProcess::Start(
      db, dir_.path(),
      {"--heartbeat_interval_ms=200", (*port)->listen_flag()});
  ASSERT_TRUE(revived.ok()) << revived.status();
  r = Cli(**revived, {"job", "1"});
  EXPECT_TRUE(absl::StrContains(r.out, "interrupted")) << r.out;
  size_t before = records(**revived).size();
  EXPECT_GE(before, 20u);
  EXPECT_LT(before, size_t(kTrials));
  r = Cli(**revived, {"resume", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(Cli(**revived, {"job", "1"}).out, "succeeded");
      },
      absl::Seconds(180)))
      << Cli(**revived, {"job", "1"}).out << testing::ReadFileOrEmpty(dir_.File("procs.log"));
  EXPECT_TRUE(absl::StrContains(
      Cli(**revived, {"job", "1"}).out,
      "resumed after " + std::to_string(before) + " trials from its saved search state"))
      << Cli(**revived, {"job", "1"}).out;
  // Each task's share of the model's time (weight x best), adding up.
  const std::string table = Cli(**revived, {"job", "1"}).out;
  std::regex share_re("  ([0-9]+)%  dense ");
  int share_sum = 0, share_rows = 0;
  for (std::sregex_iterator it(table.begin(), table.end(), share_re), end; it != end; ++it) {
    share_sum += std::stoi((*it)[1]);
    ++share_rows;
  }
  EXPECT_EQ(share_rows, 2) << table;
  EXPECT_GE(share_sum, 99) << table;
  EXPECT_LE(share_sum, 101) << table;
  // watch names the tasks that take most of the time.
  const std::string watched = Cli(**revived, {"watch", "1"}).out;
  EXPECT_TRUE(std::regex_search(watched, std::regex("time: #[12] [0-9]+%, #[12] [0-9]+%")))
      << watched;
  // A second job on the same workloads measures no default again (warm
  // start), and still shows each task's default time, from job 1's records:
  // never above the best's, as both are the fastest record of their kind.
  r = Cli(**revived, {"submit", spec, "--target=llvm", "--device_key=x86-test", "--trials=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(Cli(**revived, {"job", "2"}).out, "succeeded");
      },
      absl::Seconds(180)))
      << Cli(**revived, {"job", "2"}).out;
  const std::string second = Cli(**revived, {"job", "2"}).out;
  std::regex row_re(" ([0-9.]+) +([0-9.]+) +([0-9.]+)x +[0-9]+%  dense ");
  int rows = 0;
  for (std::sregex_iterator it(second.begin(), second.end(), row_re), end; it != end; ++it) {
    EXPECT_GE(std::stod((*it)[1]), std::stod((*it)[2])) << second;
    EXPECT_GE(std::stod((*it)[3]), 1.0) << second;
    ++rows;
  }
  EXPECT_EQ(rows, 2) << second;
  std::vector<v1::Record> all = records(**revived);
  EXPECT_EQ(all.size(), size_t(kTrials));
  std::set<std::string> seen;
  int ok = 0;
  for (const v1::Record& rec : all) {
    const std::string line = cli::RecordToJsonLine(rec);
    EXPECT_TRUE(seen.insert(rec.workload_key() + rec.schedule_hash()).second)
        << "measured twice: " << line;
    EXPECT_EQ(rec.device_key(), "x86-test");
    EXPECT_EQ(rec.job_id(), 1);
    EXPECT_NE(rec.status(), v1::MEASURE_STATUS_WRONG_RESULT) << line;
    if (rec.status() == v1::MEASURE_STATUS_OK) {
      ++ok;
      EXPECT_GT(rec.costs_sec_size(), 0);
      EXPECT_FALSE(rec.fingerprint().compiler().empty()) << line;
      EXPECT_FALSE(rec.fingerprint().cpu_model().empty()) << line;
    }
  }
  EXPECT_GT(ok, kTrials / 2);
  for (auto* p : {&*agent, &*worker}) {
    (*p)->Kill(SIGTERM);
    auto st = (*p)->Wait(absl::Seconds(20));
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(DescribeWaitStatus(*st), "exited with 0");
  }
}

// What a job's spec chooses, through the CLI and the real farm: a per-task
// trial limit with no total; the random strategy with a wall time alone;
// early stop. An evolutionary job stores its final cost model, and the next
// one on the target starts from it.
TEST_F(E2ETest, JobBudgetsStrategiesAndTheStoredModel) {
  std::string db = dir_.File("farm.db");
  auto server = ServerProcess::Start(db, dir_.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  std::string addr = (*server)->address();
  auto [agent, worker] = StartAgentAndWorker(**server);
  ASSERT_TRUE(agent.ok() && worker.ok());
  std::string spec = dir_.File("job.json");
  testing::WriteFile(spec, R"({"name": "budgets", "tasks": [
    {"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [8, 48]}, {"shape": [40, 48]}]}},
    {"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [4, 32]}, {"shape": [24, 32]}]}}]})");
  auto records = [&](int job) { return JobRecords(**server, job); };
  auto finished = [&](int job) {
    const std::string id = std::to_string(job);
    bool done = testing::WaitFor(
        [&] { return absl::StrContains(Cli(**server, {"job", id}).out, "succeeded"); },
        absl::Seconds(300));
    std::string out = Cli(**server, {"job", id}).out;
    EXPECT_TRUE(done) << out << testing::ReadFileOrEmpty(dir_.File("procs.log"));
    return out;
  };

  // 1: 40 trials per task, no total.
  CommandResult r = Cli(**server, {"submit", spec, "--target=llvm", "--device_key=x86-test",
                                   "--trials_per_task=40"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string job = finished(1);
  EXPECT_TRUE(absl::StrContains(job, "search: evolutionary   budget:   per task 40")) << job;
  EXPECT_TRUE(absl::StrContains(job, "every task stopped")) << job;
  std::map<std::string, int> per_task;
  for (const v1::Record& rec : records(1)) ++per_task[rec.workload_key()];
  ASSERT_EQ(per_task.size(), 2u);
  for (const auto& [key, n] : per_task) EXPECT_EQ(n, 40) << key;

  // 2: random, 3 seconds of wall time and no trial count.
  r = Cli(**server, {"submit", spec, "--target=llvm", "--device_key=x86-test",
                     "--strategy=random", "--time_limit=3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  job = finished(2);
  EXPECT_TRUE(absl::StrContains(job, "search: random   budget:   wall time 3 s")) << job;
  EXPECT_TRUE(absl::StrContains(job, "wall-time budget of 3 s reached")) << job;
  EXPECT_FALSE(records(2).empty());

  // 3: evolutionary from job 1's stored model; it stops once a round of
  // each task finds nothing better, long before 1,000 trials.
  r = Cli(**server, {"submit", spec, "--target=llvm", "--device_key=x86-test", "--trials=1000",
                     "--early_stop=8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  job = finished(3);
  EXPECT_TRUE(absl::StrContains(job, "early stop after 8 trials")) << job;
  EXPECT_TRUE(absl::StrContains(job, "every task stopped")) << job;
  EXPECT_TRUE(absl::StrContains(job, "the search started from stored model #")) << job;
  EXPECT_LT(records(3).size(), 1000u);
  std::printf("job 3 stopped early after %zu trials:\n%s", records(3).size(), job.c_str());

  // Bad values are one line and exit 2.
  r = Cli(**server, {"submit", spec, "--device_key=x86-test", "--strategy=greedy"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "unknown search strategy 'greedy'")) << r.err;
  r = Cli(**server, {"submit", spec, "--device_key=x86-test", "--early_stop=-3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "--early_stop needs a positive number")) << r.err;
  StopAll({agent->get(), worker->get()});
}

// Records of the job's workload made on other hardware (another CPU model in
// their fingerprint): reused with a note by default, left out (and measured
// again) with --fingerprint_policy=refuse.
TEST_F(E2ETest, RecordsFromOtherHardwareFollowThePolicy) {
  for (std::string policy : {"refuse", "warn"}) {
    testing::TempDir dir;
    auto server =
        ServerProcess::Start(dir.File("farm.db"), dir.path(),
                             {"--heartbeat_interval_ms=200", "--fingerprint_policy=" + policy});
    ASSERT_TRUE(server.ok()) << server.status();
    std::string addr = (*server)->address();
    Subprocess::Options quiet;
    quiet.capture_stdout = false;
    quiet.stderr_path = dir.File("procs.log");
    auto agent = Subprocess::Start({BinPath("tunefarm-agent"), "--server=" + addr,
                                    "--key=x86-test", "--device_id=a1",
                                    (*server)->server_key_flag()},
                                   quiet);
    auto worker = Subprocess::Start(
        {BinPath("tunefarm-worker"), "--server=" + addr, "--device_id=w1"}, quiet);
    ASSERT_TRUE(agent.ok() && worker.ok());
    // Both must be registered before the job starts: its warm start tells
    // foreign records by the fingerprints of the devices it knows then.
    auto online = [&] {
      size_t n = 0, pos = 0;
      const std::string out = Cli(**server, {"devices"}).out;
      while ((pos = out.find(" online ", pos)) != std::string::npos) ++n, ++pos;
      return n == 2;
    };
    ASSERT_TRUE(testing::WaitFor(online, absl::Seconds(60)))
        << Cli(**server, {"devices"}).out << testing::ReadFileOrEmpty(dir.File("procs.log"));
    std::string records = dir.File("foreign.jsonl");
    {
      std::ofstream out(records);
      for (int i = 1; i <= 5; ++i) {
        v1::Record r = testing::MakeRecord(testing::Dense(8, 40, 48), "llvm", 1e-6 * i, i);
        r.mutable_fingerprint()->set_cpu_model("Imaginary CPU 9000");
        out << cli::RecordToJsonLine(r) << "\n";
      }
      // Same board (no CPU named), another compiler than the worker's.
      for (int i = 6; i <= 8; ++i) {
        v1::Record r = testing::MakeRecord(testing::Dense(8, 40, 48), "llvm", 1e-6 * i, i);
        r.mutable_fingerprint()->clear_cpu_model();
        r.mutable_fingerprint()->set_compiler("tunefarm 0.1 LLVM 14.0.6");
        out << cli::RecordToJsonLine(r) << "\n";
      }
    }
    ASSERT_EQ(Cli(**server, {"import", records}).exit_code, 0);
    std::string spec = dir.File("job.json");
    testing::WriteFile(spec, R"({"name": "fp", "tasks": [
      {"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [8, 48]}, {"shape": [40, 48]}]}}]})");
    CommandResult r =
        Cli(**server, {"submit", spec, "--target=llvm", "--device_key=x86-test", "--trials=8"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          return absl::StrContains(Cli(**server, {"job", "1"}).out, "succeeded");
        },
        absl::Seconds(120)))
        << Cli(**server, {"job", "1"}).out << testing::ReadFileOrEmpty(dir.File("procs.log"));
    r = Cli(**server, {"job", "1"});
    EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("5 records measured on other hardware ",
                                                      policy == "refuse" ? "left out" : "reused",
                                                      " (fingerprint policy ", policy, ")")))
        << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("3 records built by another compiler ",
                                                      policy == "refuse" ? "left out" : "reused")))
        << r.out;
    for (auto* p : {&*agent, &*worker}) (*p)->Kill(SIGTERM);
    for (auto* p : {&*agent, &*worker}) ASSERT_TRUE((*p)->Wait(absl::Seconds(20)).ok());
  }
}

}  // namespace
}  // namespace tunefarm

namespace tunefarm {
namespace {

// The agent must build and run on a board with few packages: no compiler,
// cost model or database in its binary.
// A CUDA job whose arch no connected worker's toolkit builds, or whose
// device key's connected agents have no GPU of its arch, is refused at
// submission, naming what they have, instead of waiting forever.
TEST_F(E2ETest, CudaJobNeedsAWorkerThatBuildsItsArch) {
  auto server =
      ServerProcess::Start(dir_.File("farm.db"), dir_.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string list = dir_.File("w.txt");
  testing::WriteFile(list, "matmul(M=64,N=64,K=64)\n");
  // No worker at all: the job is accepted and waits, like a CPU job.
  CommandResult r = Cli(**server, {"submit", "--workloads=" + list, "--target=cuda -arch=sm_35",
                                   "--device_key=kepler"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Cli(**server, {"cancel", "1"});

  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir_.File("procs.log");
  auto worker = Subprocess::Start(
      {BinPath("tunefarm-worker"), "--server=" + (*server)->address(), "--device_id=w1"}, quiet);
  ASSERT_TRUE(worker.ok());
  ASSERT_TRUE(
      testing::WaitFor([&] { return absl::StrContains(Cli(**server, {"devices"}).out, "online"); },
                       absl::Seconds(30)));
  // The worker is this build's: it builds sm_50 and newer, through LLVM's
  // NVPTX back end where its NVRTC (if any) does not.
  const std::string workers = Cli(**server, {"devices"}).out;
  ASSERT_TRUE(absl::StrContains(workers, " cuda sm_50..")) << workers;
  EXPECT_TRUE(absl::StrContains(workers, "(PTX through LLVM: sm_50..")) << workers;
  const bool has_cuda = codegen::HaveNvrtc();
  r = Cli(**server,
          {"submit", "--workloads=" + list, "--target=cuda -arch=sm_35", "--device_key=kepler"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(
      absl::StrContains(r.err, "no connected compile worker builds sm_35 (the 1 connected "))
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "build sm_50, sm_52")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "older archs need a worker with an older CUDA toolkit"))
      << r.err;
  if (has_cuda) {
    // No agent of the key yet: accepted, it waits for one.
    r = Cli(**server, {"submit", "--workloads=" + list, "--target=cuda -arch=sm_87",
                       "--device_key=orin", "--trials=64"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    // The agent that then comes has no sm_87 GPU: the worker builds real
    // sm_87 cubins, the agent cannot run them, and every trial is a device
    // failure with the reason, stamped with the toolkit that built it: a
    // runtime error where the agent has no GPU, an upload error (the module
    // did not load) where it has a GPU of another arch. After 16 such
    // failures in a row the job stops, failed, naming the error, well before
    // its budget.
    auto agent = Subprocess::Start({BinPath("tunefarm-agent"), "--server=" + (*server)->address(),
                                    "--key=orin", "--device_id=a1", (*server)->server_key_flag()},
                                   quiet);
    ASSERT_TRUE(agent.ok());
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          return absl::StrContains(Cli(**server, {"job", "2"}).out, "failed");
        },
        absl::Seconds(120)))
        << Cli(**server, {"job", "2"}).out << testing::ReadFileOrEmpty(dir_.File("procs.log"));
    const std::string job = Cli(**server, {"job", "2"}).out;
    const std::string devices = Cli(**server, {"devices"}).out;
    const bool agent_has_gpu =
        !absl::StrContains(devices, "no GPU") && absl::StrContains(devices, "a1 ");
    const v1::MeasureStatus expected =
        agent_has_gpu ? v1::MEASURE_STATUS_UPLOAD_ERROR : v1::MEASURE_STATUS_RUNTIME_ERROR;
    EXPECT_TRUE(absl::StrContains(job, "failed on the device with the same kind of error")) << job;
    std::istringstream in(Cli(**server, {"records", "--job=2", "--json"}).out);
    auto records = cli::ParseRecordsJsonl(in, "records --json");
    ASSERT_TRUE(records.ok()) << records.status();
    EXPECT_GE(records->size(), 16u);
    EXPECT_LT(records->size(), 64u);
    for (const v1::Record& rec : *records) {
      EXPECT_EQ(rec.status(), expected) << devices << cli::RecordToJsonLine(rec);
      EXPECT_TRUE(absl::StrContains(rec.error(), "GPU") || absl::StrContains(rec.error(), "CUDA"))
          << rec.error();
      EXPECT_FALSE(rec.fingerprint().cuda_toolkit().empty()) << cli::RecordToJsonLine(rec);
      EXPECT_EQ(rec.device_id(), "a1");
    }
    // Now that it is connected, a new sm_87 job is refused, naming the agent.
    r = Cli(**server,
            {"submit", "--workloads=" + list, "--target=cuda -arch=sm_87", "--device_key=orin"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(
        absl::StrContains(r.err, "no connected agent with device key 'orin' has a sm_87 GPU (a1: "))
        << r.err;
    (*agent)->Kill(SIGTERM);
    ASSERT_TRUE((*agent)->Wait(absl::Seconds(20)).ok());
  }
  (*worker)->Kill(SIGTERM);
  ASSERT_TRUE((*worker)->Wait(absl::Seconds(20)).ok());
  if (!has_cuda) TF_SKIP("no-cuda-toolkit") << "the CUDA worker's half was not run";
}

// A JetPack 5 board: its CUDA driver (11.4) predates the workers' NVRTC,
// whose builds it could not load, so the job's kernels reach it as PTX
// through LLVM (PTX 7.4 for Orin's sm_87, which that driver compiles). The
// board is a gRPC client reporting that driver (there is no such board
// here); the server and the worker are the real processes.
TEST_F(E2ETest, JetPackBoardsGetPtxTheirDriverLoads) {
  if (!codegen::HaveNvrtc()) TF_SKIP("no-cuda-toolkit") << "this build has no NVRTC";
  auto server =
      ServerProcess::Start(dir_.File("farm.db"), dir_.path(), {"--heartbeat_interval_ms=300"});
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions options;
  options.server = (*server)->address();
  auto channel = MakeChannel(options);
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto farm = v1::FarmService::NewStub(*channel);
  v1::RegisterRequest reg;
  reg.set_protocol_version(kProtocolVersion);
  reg.set_role(v1::ROLE_AGENT);
  reg.set_device_id("orin-jp5");
  reg.set_device_key("orin-jp5");
  v1::Capabilities* caps = reg.mutable_capabilities();
  caps->set_triple("aarch64-linux-gnu");
  caps->set_cores(8);
  caps->set_memory_bytes(int64_t{8} << 30);
  caps->set_has_gpu(true);
  caps->set_gpu_name("Orin (nvgpu)");
  caps->add_cuda_archs("sm_87");
  caps->set_gpu_shared_memory_per_block(166912);  // Orin's opt-in limit, 163 KiB
  caps->mutable_fingerprint()->set_cuda_driver("11.4");
  v1::RegisterResponse registered;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(farm->Register(&ctx, reg, &registered).ok());
  }
  std::atomic<bool> done{false};
  std::thread heartbeats([&] {
    while (!done) {
      v1::HeartbeatRequest hb;
      hb.set_protocol_version(kProtocolVersion);
      hb.set_session_id(registered.session_id());
      v1::HeartbeatResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      farm->Heartbeat(&ctx, hb, &resp);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir_.File("worker.log");
  auto worker = Subprocess::Start(
      {BinPath("tunefarm-worker"), "--server=" + (*server)->address(), "--device_id=w1"}, quiet);
  ASSERT_TRUE(worker.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        const std::string d = Cli(**server, {"devices"}).out;
        return absl::StrContains(d, "w1 ") && absl::StrContains(d, "orin-jp5");
      },
      absl::Seconds(60)))
      << Cli(**server, {"devices"}).out;
  // The board's GPU as `devices` shows it: arch and the shared memory a
  // block may opt in to.
  EXPECT_TRUE(absl::StrContains(Cli(**server, {"devices"}).out,
                                "Orin (nvgpu) sm_87 (166912 B shared per block)"))
      << Cli(**server, {"devices"}).out;
  const std::string list = dir_.File("w.txt");
  testing::WriteFile(list, "matmul(M=64,N=64,K=64)\n");
  // More shared memory per block than the board's GPU lets a block take:
  // refused at submit, naming what the board has.
  CommandResult r = Cli(**server, {"submit", "--workloads=" + list,
                                   "--target=cuda -arch=sm_87 -max-shared-memory-per-block=200000",
                                   "--device_key=orin-jp5", "--trials=2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err,
                                "has a sm_87 GPU with 200000 B of shared memory "
                                "(orin-jp5: Orin (nvgpu) sm_87, 166912 B shared)"))
      << r.err;
  r = Cli(**server, {"submit", "--workloads=" + list, "--target=cuda -arch=sm_87",
                     "--device_key=orin-jp5", "--trials=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  v1::StreamWorkRequest sw;
  sw.set_protocol_version(kProtocolVersion);
  sw.set_session_id(registered.session_id());
  grpc::ClientContext stream_ctx;
  stream_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto stream = farm->StreamWork(&stream_ctx, sw);
  v1::WorkLease lease;
  const bool got = stream->Read(&lease);
  stream_ctx.TryCancel();
  done = true;
  heartbeats.join();
  ASSERT_TRUE(got) << Cli(**server, {"job", "1"}).out
                   << testing::ReadFileOrEmpty(dir_.File("worker.log"));
  ASSERT_TRUE(lease.has_measure()) << lease.ShortDebugString().substr(0, 300);
  EXPECT_EQ(lease.measure().kind(), v1::ARTIFACT_KIND_PTX);
  v1::GpuModule module;
  ASSERT_TRUE(module.ParseFromString(lease.measure().artifact()));
  EXPECT_EQ(module.arch(), "sm_87");
  EXPECT_TRUE(absl::StrContains(module.image(), ".version 7.4\n.target sm_87"))
      << module.image().substr(0, 300);
  Cli(**server, {"cancel", "1"});
  (*worker)->Kill(SIGTERM);
  ASSERT_TRUE((*worker)->Wait(absl::Seconds(20)).ok());
}

// A CPU job whose target the key's agents cannot run: refused at submit
// when they are connected, naming each agent's triple or missing features;
// accepted while none is, and then stopped, failed, once its agent fails
// 16 candidates in a row with the same kind of error.
TEST_F(E2ETest, CpuJobsAreCheckedAgainstTheBoardsThatRunThem) {
  auto server =
      ServerProcess::Start(dir_.File("farm.db"), dir_.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string list = dir_.File("w.txt");
  testing::WriteFile(list, "matmul(M=16,N=16,K=16)\n");
  const std::string arm = "--target=llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a78";
  CommandResult r =
      Cli(**server, {"submit", "--workloads=" + list, arm, "--device_key=late", "--trials=64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Fewer attempts than the stop rule's 16 (twice the budget): the attempt
  // limit ends it, all failed.
  r = Cli(**server, {"submit", "--workloads=" + list, arm, "--device_key=late", "--trials=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto [agent, worker] = StartAgentAndWorker(**server);
  ASSERT_TRUE(agent.ok() && worker.ok());
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir_.File("late.log");
  auto late = Subprocess::Start({BinPath("tunefarm-agent"), "--server=" + (*server)->address(),
                                 "--key=late", "--device_id=x86-late",
                                 (*server)->server_key_flag()},
                                quiet);
  ASSERT_TRUE(late.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(Cli(**server, {"job", "1"}).out, "failed");
      },
      absl::Seconds(180)))
      << Cli(**server, {"job", "1"}).out << testing::ReadFileOrEmpty(dir_.File("late.log"));
  const std::string job = Cli(**server, {"job", "1"}).out;
  EXPECT_TRUE(absl::StrContains(job, "failed on the device with the same kind of error")) << job;
  const std::vector<v1::Record> records = JobRecords(**server, 1);
  EXPECT_GE(records.size(), 16u);
  EXPECT_LT(records.size(), 64u);
  // A job whose every trial failed is failed, never succeeded, with its
  // failures grouped by kind.
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(Cli(**server, {"job", "2"}).out, "failed");
      },
      absl::Seconds(180)))
      << Cli(**server, {"job", "2"}).out;
  EXPECT_TRUE(absl::StrContains(Cli(**server, {"job", "2"}).out,
                                "all 8 trials failed: 8 upload_error; 8 x upload_error: "))
      << Cli(**server, {"job", "2"}).out;

  // records: newest first, a page at a time, saying how many more, with
  // each failure's error.
  const std::string page = Cli(**server, {"records", "--job=1", "--limit=5"}).out;
  std::regex row_re("\n([0-9]+) +[a-z0-9-]+ +[a-z_]+ +- +- +llvm [^\n]*did not load");
  std::vector<int64_t> ids;
  for (std::sregex_iterator it(page.begin(), page.end(), row_re), end; it != end; ++it) {
    ids.push_back(std::stoll((*it)[1]));
  }
  ASSERT_EQ(ids.size(), 5u) << page;
  EXPECT_TRUE(std::is_sorted(ids.rbegin(), ids.rend())) << page;
  const std::string more = absl::StrCat(records.size() - 5, " more, older: --before=", ids.back());
  EXPECT_TRUE(absl::StrContains(page, more)) << page;
  const std::string next =
      Cli(**server, {"records", "--job=1", "--limit=5", absl::StrCat("--before=", ids.back())}).out;
  std::vector<int64_t> all;
  for (const v1::Record& rec : records) all.push_back(rec.record_id());
  std::sort(all.rbegin(), all.rend());
  EXPECT_EQ(std::vector<int64_t>(all.begin(), all.begin() + 5), ids) << page;
  EXPECT_TRUE(absl::StrContains(next, absl::StrCat("\n", all[5], " "))) << next;
  EXPECT_FALSE(absl::StrContains(next, absl::StrCat("\n", all[4], " "))) << next;

  // Now the key's agent is connected: refused at once, naming it.
  r = Cli(**server, {"submit", "--workloads=" + list, arm, "--device_key=late"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err,
                                "no connected agent with device key 'late' can run its "
                                "code (x86-late is x86_64-linux-gnu)"))
      << r.err;
  // And a feature this machine's CPU lacks (AMX tiles, where it has none).
  if (!absl::StrContains(testing::ReadFileOrEmpty("/proc/cpuinfo"), " amx_tile")) {
    r = Cli(**server, {"submit", "--workloads=" + list, "--target=llvm -mattr=+amx-tile",
                       "--device_key=late"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(absl::StrContains(r.err, "x86-late lacks amx_tile")) << r.err;
  }
  // What it can run is accepted.
  r = Cli(**server,
          {"submit", "--workloads=" + list, "--target=llvm", "--device_key=late", "--trials=1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  StopAll({agent->get(), worker->get(), late->get()});
}

// What a new user gets wrong first, each answered by a message that names
// the flag and what would be right.
TEST_F(E2ETest, SubmitMistakesAreNamed) {
  auto server = ServerProcess::Start(dir_.File("farm.db"), dir_.path());
  ASSERT_TRUE(server.ok()) << server.status();
  auto [agent, worker] = StartAgentAndWorker(**server);
  ASSERT_TRUE(agent.ok() && worker.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        const std::string d = Cli(**server, {"devices"}).out;
        return absl::StrContains(d, "agent-1") && absl::StrContains(d, "worker-1");
      },
      absl::Seconds(60)));
  const std::string list = dir_.File("w.txt");
  testing::WriteFile(list, "matmul(M=16,N=16,K=16)\n");
  // A typo in the device key: refused, naming the keys there are.
  CommandResult r =
      Cli(**server, {"submit", "--workloads=" + list, "--target=llvm", "--device_key=x86-tset"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err,
                                "--device_key 'x86-tset': no agent with this key has ever "
                                "registered (the key there is x86-test)"))
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "--wait-for-device")) << r.err;
  // ... unless the board is on its way.
  r = Cli(**server, {"submit", "--workloads=" + list, "--target=llvm", "--device_key=x86-new",
                     "--wait-for-device"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A CPU LLVM does not know: refused with the close ones.
  r = Cli(**server,
          {"submit", "--workloads=" + list, "--target=llvm -mcpu=znver9", "--device_key=x86-test"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err,
                                "-mcpu='znver9' is not a CPU the connected workers' LLVM "
                                "knows for x86_64 (close: znver1"))
      << r.err;
  r = Cli(**server, {"submit", "--workloads=" + list, "--target=llvm -mattr=+avx513f",
                     "--device_key=x86-test"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "-mattr feature 'avx513f'")) << r.err;
  // The CLI names a missing required flag, and a workloads list given as a spec.
  r = Cli(**server, {"submit", "--workloads=" + list, "--device_key=x86-test"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, "submit needs --target=T")) << r.err;
  r = Cli(**server, {"submit", list, "--target=llvm", "--device_key=x86-test"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err,
                                "is not a JSON job spec; a list of workloads goes with "
                                "--workloads="))
      << r.err;
  // A model with a dynamic input and no --shape: the same usage error (exit
  // 2) whether it is listed here or submitted to the server.
  const std::string model = dir_.File("dynamic.onnx");
  CommandResult made =
      RunCommand({"/usr/bin/python3", "-c",
                  "import onnx, onnx.helper as h\n"
                  "g = h.make_graph([h.make_node('Relu', ['x'], ['y'])], 'g',\n"
                  "  [h.make_tensor_value_info('x', onnx.TensorProto.FLOAT, ['N', 64])],\n"
                  "  [h.make_tensor_value_info('y', onnx.TensorProto.FLOAT, ['N', 64])])\n"
                  "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), '" +
                      model + "')\n"},
                 dir_.path());
  ASSERT_EQ(made.exit_code, 0) << made.err;
  CommandResult tasks = RunCommand({BinPath("tunefarm"), "tasks", model}, dir_.path());
  r = Cli(**server, {"submit", model, "--target=llvm", "--device_key=x86-test"});
  EXPECT_EQ(tasks.exit_code, 2) << tasks.err;
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "give its shape with --shape x=")) << r.err;
  // Help: `help CMD` is `CMD --help`, and the daemons list their flags.
  r = Cli(**server, {"help", "submit"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.out, "--device_key=K")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "--wait-for-device")) << r.out;
  for (const auto& [bin, flag] :
       std::vector<std::pair<std::string, std::string>>{{"tunefarm-server", "--listen"},
                                                        {"tunefarm-worker", "--server"},
                                                        {"tunefarm-agent", "--key"}}) {
    CommandResult h = RunCommand({BinPath(bin), "--help"}, dir_.path());
    EXPECT_EQ(h.exit_code, 0) << bin;
    EXPECT_TRUE(absl::StrContains(h.out, flag)) << bin << ": " << h.out << h.err;
    EXPECT_FALSE(absl::StrContains(h.out, "_main.cc")) << bin << ": a source path\n" << h.out;
    // Mistakes are one line naming the fix, exit 2, as the CLI's.
    for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{flag + "x=1"}, "unknown flag " + flag + "x; did you mean " + flag + "?"},
             {{"--log_level=loud"}, ""},
             {{"--log_levle=debug"}, "did you mean --log_level?"},
             {{"stray"}, "unexpected argument 'stray'"},
             {{"--report_offline_after=soon"}, "--report_offline_after=soon: "}}) {
      if (bin == "tunefarm-server" && args[0] == "--report_offline_after=soon") continue;
      std::vector<std::string> argv = {BinPath(bin)};
      argv.insert(argv.end(), args.begin(), args.end());
      CommandResult bad = RunCommand(argv, dir_.path());
      EXPECT_EQ(bad.exit_code, 2) << bin << " " << args[0] << ": " << bad.err;
      EXPECT_TRUE(absl::StrContains(bad.err, says)) << bin << " " << args[0] << ": " << bad.err;
      EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
    }
  }
  // Flags from a file (the systemd units' one config file): read in place,
  // a mistake named by FILE:LINE.
  const std::string flags = dir_.File("agent.flags");
  testing::WriteFile(flags, "# the board\n--key=orin\n\n--print_capabilities\n");
  CommandResult from_file =
      RunCommand({BinPath("tunefarm-agent"), "--flagfile=" + flags}, dir_.path());
  EXPECT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_TRUE(absl::StrContains(from_file.out, "\"triple\"")) << from_file.out;
  testing::WriteFile(flags, "# the board\n--key=orin\n--log_levle=debug\n");
  from_file = RunCommand({BinPath("tunefarm-agent"), "--flagfile", flags}, dir_.path());
  EXPECT_EQ(from_file.exit_code, 2) << from_file.err;
  EXPECT_TRUE(absl::StrContains(from_file.err, flags + ":3: unknown flag --log_levle; did you "
                                                       "mean --log_level?"))
      << from_file.err;
  from_file = RunCommand({BinPath("tunefarm-worker"), "--flagfile=" + dir_.File("none")},
                         dir_.path());
  EXPECT_EQ(from_file.exit_code, 2) << from_file.err;
  EXPECT_TRUE(absl::StrContains(from_file.err, "none: cannot read it")) << from_file.err;
  // A CA file that is no certificate says so.
  testing::WriteFile(dir_.File("not-a-ca.pem"), "hello\n");
  CommandResult ca = RunCommand({BinPath("tunefarm-worker"), "--server=" + (*server)->address(),
                                 "--tls_ca=" + dir_.File("not-a-ca.pem")},
                                dir_.path());
  EXPECT_EQ(ca.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(ca.err, "holds no PEM certificate")) << ca.err;
  StopAll({agent->get(), worker->get()});
}

// `watch --json` while a job runs: events stamped when they happened, each
// task's new best numbered as `job` lists the tasks, the model's time by the
// best so far and the trial rate. The job's tasks are workload spec strings
// in its JSON spec, which the server parses.
TEST_F(E2ETest, WatchShowsTrueTimesAndTheBestSoFar) {
  auto server = ServerProcess::Start(dir_.File("farm.db"), dir_.path());
  ASSERT_TRUE(server.ok()) << server.status();
  auto [agent, worker] = StartAgentAndWorker(**server);
  ASSERT_TRUE(agent.ok() && worker.ok());
  // A first job takes the database's task ids 1 and 2, so the watched
  // job's are 3 and 4 while its tasks are #1 and #2.
  const std::string list = dir_.File("w.txt");
  testing::WriteFile(list, "matmul(M=8,N=8,K=8)\nmatmul(M=4,N=4,K=4)\n");
  CommandResult r = Cli(**server, {"submit", "--workloads=" + list, "--target=llvm",
                                   "--device_key=elsewhere", "--wait-for-device"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(Cli(**server, {"cancel", "1"}).exit_code, 0);
  const std::string spec = dir_.File("job.json");
  testing::WriteFile(spec, R"j({"name": "specs", "tasks": [
    {"workloadSpec": "matmul(M=32,N=32,K=32)"},
    {"workloadSpec": "matmul(M=16,N=48,K=32)", "weight": 2}]})j");
  r = Cli(**server, {"submit", spec, "--target=llvm", "--device_key=x86-test", "--trials=24"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "submitted job 2\n");
  r = Cli(**server, {"watch", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<v1::JobEvent> job_events, task_events;
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    v1::JobEvent ev;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &ev).ok()) << line;
    (ev.task_id() == 0 ? job_events : task_events).push_back(ev);
  }
  ASSERT_GE(job_events.size(), 2u) << r.out;
  for (size_t i = 1; i < job_events.size(); ++i) {
    EXPECT_GE(job_events[i].timestamp_unix_ms(), job_events[i - 1].timestamp_unix_ms()) << r.out;
  }
  EXPECT_GT(job_events.back().timestamp_unix_ms(), job_events.front().timestamp_unix_ms())
      << "every event carries the same time: " << r.out;
  // The first event says what the job is.
  EXPECT_TRUE(absl::StartsWith(job_events.front().message(), "2 tasks; budget: 24 trials"))
      << r.out;
  const v1::JobEvent& done = job_events.back();
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << r.out;
  EXPECT_EQ(done.tasks(), 2);
  EXPECT_EQ(done.tasks_with_best(), 2) << r.out;
  EXPECT_GT(done.model_best_sec(), 0) << r.out;
  v1::Job job;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(Cli(**server, {"job", "2", "--json"}).out, &job)
          .ok());
  ASSERT_EQ(job.tasks_size(), 2);
  EXPECT_EQ(job.tasks(0).task_id(), 3);
  std::set<int> improved;
  for (const v1::JobEvent& ev : task_events) {
    EXPECT_GT(ev.best_cost_sec(), 0);
    ASSERT_TRUE(ev.task_number() == 1 || ev.task_number() == 2) << r.out;
    EXPECT_EQ(ev.task_id(), job.tasks(ev.task_number() - 1).task_id()) << r.out;
    improved.insert(ev.task_number());
  }
  EXPECT_EQ(improved.size(), 2u) << r.out;
  bool rate = false;
  for (const v1::JobEvent& ev : job_events) rate |= ev.trials_per_minute() > 0;
  EXPECT_TRUE(rate) << r.out;
  // The same, as lines: the model's time and each task's new best, by
  // the task's number in the job.
  r = Cli(**server, {"watch", "2"});
  EXPECT_TRUE(absl::StrContains(r.out, " model ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "job 2 task #1 best ")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "job 2 task #2 best ")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "task #3")) << r.out;
  // And as curves in an SVG: the model's time, then each task's best over
  // its trials and over the minutes, a point per trial.
  const std::string svg_path = dir_.File("curves.svg");
  r = Cli(**server, {"plot", "2", "-o", svg_path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t trials = JobRecords(**server, 2).size();
  EXPECT_TRUE(absl::StrContains(
      r.out, absl::StrCat("wrote ", svg_path, ": ", trials, " trials of 2 tasks")))
      << r.out;
  const std::string svg = testing::ReadFileOrEmpty(svg_path);
  EXPECT_TRUE(absl::StartsWith(svg, "<svg ") && absl::EndsWith(svg, "</svg>\n")) << svg;
  std::regex poly("points='([^']*)'");
  std::vector<size_t> points;
  for (std::sregex_iterator it(svg.begin(), svg.end(), poly), end; it != end; ++it) {
    const std::string p = (*it)[1];
    points.push_back(size_t(std::count(p.begin(), p.end(), ' ')) + 1);
  }
  ASSERT_EQ(points.size(), 5u) << svg;
  // The model's time from the first trial after which both tasks have a
  // time, a point per trial from there on.
  std::vector<v1::Record> records = JobRecords(**server, 2);
  std::sort(records.begin(), records.end(), [](const v1::Record& a, const v1::Record& b) {
    return a.record_id() < b.record_id();
  });
  std::set<std::string> timed;
  size_t from = records.size();
  for (size_t i = 0; i < records.size() && from == records.size(); ++i) {
    if (Ranks(records[i])) timed.insert(records[i].workload_key());
    if (timed.size() == 2) from = i;
  }
  EXPECT_EQ(points[0], trials - from);
  EXPECT_EQ(points[1], points[2]);
  EXPECT_EQ(points[3], points[4]);
  EXPECT_EQ(points[1] + points[3], trials);
  StopAll({agent->get(), worker->get()});
}

// Draining a board: it finishes what it holds and gets nothing new (a job
// for its key waits), resuming gives it work again, and an offline board
// can be removed from the listing (an online one cannot).
TEST_F(E2ETest, DevicesAreDrainedResumedAndRemoved) {
  auto server =
      ServerProcess::Start(dir_.File("farm.db"), dir_.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto [agent, worker] = StartAgentAndWorker(**server);
  ASSERT_TRUE(agent.ok() && worker.ok());
  auto row = [&](const std::string& id) {
    const std::string d = Cli(**server, {"devices"}).out;
    const size_t at = d.find("\n" + id + " ");
    return at == std::string::npos ? std::string()
                                   : d.substr(at + 1, d.find('\n', at + 1) - at - 1);
  };
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(row("agent-1"), " online ") &&
               absl::StrContains(row("worker-1"), " online ");
      },
      absl::Seconds(60)));
  CommandResult r = Cli(**server, {"devices", "drain", "agent-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "drained agent-1")) << r.out;
  EXPECT_TRUE(absl::StrContains(row("agent-1"), " drained ")) << row("agent-1");
  const std::string list = dir_.File("w.txt");
  testing::WriteFile(list, "matmul(M=16,N=16,K=16)\n");
  r = Cli(**server, {"submit", "--workloads=" + list, "--target=llvm", "--device_key=x86-test",
                     "--trials=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(Cli(**server, {"job", "1"}).out,
                                 "waiting for an agent with device key x86-test");
      },
      absl::Seconds(60)))
      << Cli(**server, {"job", "1"}).out;
  EXPECT_TRUE(JobRecords(**server, 1).empty());
  r = Cli(**server, {"devices", "resume", "agent-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(Cli(**server, {"job", "1"}).out, "succeeded");
      },
      absl::Seconds(120)))
      << Cli(**server, {"job", "1"}).out;
  // Online: not removed.
  r = Cli(**server, {"devices", "remove", "agent-1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "is online: drain it, stop its process")) << r.err;
  r = Cli(**server, {"devices", "remove", "no-such-board"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "no device 'no-such-board'")) << r.err;
  (*agent)->Kill(SIGTERM);
  ASSERT_TRUE((*agent)->Wait(absl::Seconds(20)).ok());
  ASSERT_TRUE(testing::WaitFor([&] { return absl::StrContains(row("agent-1"), " offline "); },
                               absl::Seconds(60)));
  r = Cli(**server, {"devices", "remove", "agent-1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(row("agent-1"), "");
  EXPECT_FALSE(absl::StrContains(Cli(**server, {"devices", "--all"}).out, "agent-1"));
  // A device offline for over a day leaves the default listing.
  (*worker)->Kill(SIGTERM);
  ASSERT_TRUE((*worker)->Wait(absl::Seconds(20)).ok());
  ASSERT_TRUE(testing::WaitFor([&] { return absl::StrContains(row("worker-1"), " offline "); },
                               absl::Seconds(60)));
  // (Its last sighting moved two days back, the server restarted on the file.)
  ASSERT_TRUE((*server)->Stop().ok());
  const int64_t two_days_ago = absl::ToUnixMillis(absl::Now() - absl::Hours(48));
  CommandResult aged =
      RunCommand({"/usr/bin/sqlite3", dir_.File("farm.db"),
                  absl::StrCat("UPDATE devices SET last_seen_unix_ms = ", two_days_ago,
                               " WHERE device_id = 'worker-1'")},
                 dir_.path());
  ASSERT_EQ(aged.exit_code, 0) << aged.err;
  server = ServerProcess::Start(dir_.File("farm.db"), dir_.path());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string listed = Cli(**server, {"devices"}).out;
  EXPECT_EQ(row("worker-1"), "") << listed;
  EXPECT_TRUE(absl::StrContains(listed, "1 offline for over a day not shown (--all shows them)"))
      << listed;
  EXPECT_TRUE(absl::StrContains(Cli(**server, {"devices", "--all"}).out, "worker-1"));
}

// One HTTP/1.1 GET on 127.0.0.1:`port`: the status code and the body.
std::pair<int, std::string> HttpGet(int port, const std::string& target,
                                    const std::string& extra_headers = "",
                                    const std::string& method = "GET") {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return {-1, "connect failed"};
  }
  const std::string req =
      method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers + "\r\n";
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) resp.append(buf, size_t(n));
  close(fd);
  int status = -1;
  if (resp.size() > 12) absl::SimpleAtoi(resp.substr(9, 3), &status);
  const size_t body = resp.find("\r\n\r\n");
  return {status, body == std::string::npos ? "" : resp.substr(body + 4)};
}

// A server (database DIR/farm.db, `extra` flags) whose HTTP pages listen on
// a port of their own choosing, set in *http once the server writes it.
absl::StatusOr<std::unique_ptr<ServerProcess>> StartServerWithHttp(const std::string& dir,
                                                                   std::vector<std::string> extra,
                                                                   int* http) {
  const std::string port_file = dir + "/http-port";
  extra.push_back("--http_listen=127.0.0.1:0");
  extra.push_back("--http_port_file=" + port_file);
  auto server = ServerProcess::Start(dir + "/farm.db", dir, extra);
  if (!server.ok()) return server.status();
  const bool up = testing::WaitFor(
      [&] {
        return absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::ReadFileOrEmpty(port_file)),
                                http) &&
               *http > 0;
      },
      absl::Seconds(30));
  if (!up) return absl::DeadlineExceededError("the server wrote no HTTP port");
  return server;
}

// The metrics a Prometheus scrapes, from a real server after a real job:
// valid text format, and numbers that match what happened.
TEST_F(E2ETest, MetricsForPrometheus) {
  int http = 0;
  auto server = StartServerWithHttp(dir_.path(), {}, &http);
  ASSERT_TRUE(server.ok()) << server.status();
  auto [agent, worker] = StartAgentAndWorker(**server);
  ASSERT_TRUE(agent.ok() && worker.ok());
  const std::string list = dir_.File("w.txt");
  testing::WriteFile(list, "matmul(M=16,N=16,K=16)\n");
  CommandResult r = Cli(**server, {"submit", "--workloads=" + list, "--target=llvm",
                                   "--device_key=x86-test", "--trials=8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(Cli(**server, {"job", "1"}).out, "succeeded");
      },
      absl::Seconds(120)));
  auto [status, text] = HttpGet(http, "/metrics");
  ASSERT_EQ(status, 200) << text;
  // The exposition format: comments, or NAME{LABELS} VALUE.
  std::regex sample("[a-z_]+(\\{[a-z_]+=\"[^\"]*\"(,[a-z_]+=\"[^\"]*\")*\\})? [-+0-9.e]+");
  std::map<std::string, double> values;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    EXPECT_TRUE(std::regex_match(std::string(line), sample)) << line;
    const size_t sp = line.rfind(' ');
    double v = 0;
    ASSERT_TRUE(absl::SimpleAtod(line.substr(sp + 1), &v)) << line;
    values[std::string(line.substr(0, sp))] = v;
  }
  std::vector<v1::Record> records = JobRecords(**server, 1);
  int ok = 0;
  for (const v1::Record& rec : records) ok += rec.status() == v1::MEASURE_STATUS_OK;
  EXPECT_EQ(values["tunefarm_results_total{status=\"ok\"}"], ok) << text;
  EXPECT_EQ(values["tunefarm_jobs{state=\"succeeded\"}"], 1) << text;
  EXPECT_EQ(values["tunefarm_devices{role=\"agent\",state=\"online\"}"], 1) << text;
  EXPECT_EQ(values["tunefarm_devices{role=\"worker\",state=\"online\"}"], 1) << text;
  EXPECT_EQ(values["tunefarm_leases_in_flight"], 0) << text;
  EXPECT_GE(values["tunefarm_db_commit_seconds_count"], 1) << text;
  EXPECT_EQ(values["tunefarm_db_commit_seconds_bucket{le=\"+Inf\"}"],
            values["tunefarm_db_commit_seconds_count"]);
  EXPECT_EQ(HttpGet(http, "/nowhere").first, 404);
  EXPECT_EQ(HttpGet(http, "/metrics", "", "HEAD").first, 200);
  EXPECT_EQ(HttpGet(http, "/metrics", "", "POST").first, 405);
  StopAll({agent->get(), worker->get()});
}

// What the dashboard's script drew: the page up to the script (whose text
// spells what it might draw) once headless chromium ran it.
std::string DrawnPage(const std::string& chromium, const testing::TempDir& dir, int http,
                      const std::string& path) {
  CommandResult page = RunCommand({chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                   "--disable-dev-shm-usage", "--user-data-dir=" + dir.File("chromium"),
                                   "--virtual-time-budget=5000", "--dump-dom",
                                   absl::StrCat("http://127.0.0.1:", http, path)},
                                  dir.path());
  EXPECT_TRUE(absl::StrContains(page.out, "<h1>tunefarm</h1>")) << page.err.substr(0, 2000);
  return page.out.substr(0, page.out.find("<script"));
}

// The number in group 1 of each match of `pattern` in `text`.
std::vector<double> Numbers(const std::string& text, const std::string& pattern) {
  std::vector<double> out;
  const std::regex re(pattern);
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    double v = 0;
    EXPECT_TRUE(absl::SimpleAtod((*it)[1].str(), &v)) << (*it)[0].str();
    out.push_back(v);
  }
  return out;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The dashboard in a real headless browser (Debian's chromium) against a
// real server, drawn by the page's own script from /api/state: the empty
// farm says so; after a real job, each device's last heartbeat, what it
// holds and its rates, and the job's rate, failures by kind, model time
// and speed-up over the default, with a link to the job's page, which
// shows every task with its times and curve.
TEST_F(E2ETest, DashboardInAHeadlessBrowser) {
  const std::string chromium = "/usr/bin/chromium";
  if (access(chromium.c_str(), X_OK) != 0) {
    TF_SKIP("no-package") << "chromium is not installed (scripts/install-deps.sh installs it)";
  }
  int http = 0;
  auto server = StartServerWithHttp(dir_.path(), {}, &http);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string drawn = DrawnPage(chromium, dir_, http, "/");
  EXPECT_TRUE(absl::StrContains(drawn, "no devices registered yet")) << drawn;
  EXPECT_TRUE(absl::StrContains(drawn, "no jobs yet")) << drawn;
  EXPECT_TRUE(absl::StrContains(drawn, "no work queued")) << drawn;

  auto [agent, worker] = StartAgentAndWorker(**server);
  ASSERT_TRUE(agent.ok() && worker.ok());
  const std::string list = dir_.File("w.txt");
  testing::WriteFile(list, "matmul(M=32,N=32,K=32)\nmatmul(M=16,N=48,K=32) x2\n");
  CommandResult r = Cli(**server, {"submit", "--workloads=" + list, "--target=llvm",
                                   "--device_key=x86-test", "--trials=16", "--name=dash"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(Cli(**server, {"job", "1"}).out, "succeeded");
      },
      absl::Seconds(120)));
  const std::vector<v1::Record> records = JobRecords(**server, 1);
  drawn = DrawnPage(chromium, dir_, http, "/");
  // The devices, online, seen at their last heartbeat, idle now the job is done.
  EXPECT_TRUE(absl::StrContains(drawn, "<td>agent-1</td><td>agent</td><td>x86-test</td>")) << drawn;
  EXPECT_TRUE(absl::StrContains(drawn, "<td>worker-1</td><td>worker</td>")) << drawn;
  EXPECT_TRUE(absl::StrContains(drawn, "class=\"online\">online</td>")) << drawn;
  const size_t at = drawn.find("<td>agent-1</td>");
  ASSERT_NE(at, std::string::npos) << drawn;
  const std::string agent_row = drawn.substr(at, drawn.find("</tr>", at) - at);
  EXPECT_TRUE(std::regex_search(agent_row, std::regex("class=\"seen\">(just now|[0-9]+s ago)<")))
      << agent_row;
  EXPECT_TRUE(absl::StrContains(agent_row, "class=\"lease idle\">idle<")) << agent_row;
  // Its rates, over its results: every record of the job is one.
  const std::vector<double> agent_rate = Numbers(agent_row, "class=\"num tpm\">([0-9.]+)<");
  ASSERT_EQ(agent_rate.size(), 1u) << agent_row;
  EXPECT_GT(agent_rate[0], 0) << agent_row;
  const auto measured = std::count_if(records.begin(), records.end(),
                                      [](const v1::Record& r) { return r.device_id() == "agent-1"; });
  for (const char* rate : {"errors", "timeouts"}) {
    const std::vector<double> pct = Numbers(
        agent_row, absl::StrCat("class=\"num ", rate, "\" title=\"of its last ", measured,
                                " results\">([0-9.]+)%<"));
    ASSERT_EQ(pct.size(), 1u) << rate << ": " << agent_row;
    EXPECT_TRUE(pct[0] >= 0 && pct[0] <= 100) << agent_row;
  }
  // The job, linked to its page: progress, rate, failures by kind (as the
  // records have them), the model's time and its speed-up over the default.
  EXPECT_TRUE(absl::StrContains(
      drawn, "<a href=\"/?job=1\">job 1 dash</a> <span class=\"state\">succeeded</span>"))
      << drawn;
  EXPECT_TRUE(absl::StrContains(drawn, "trials 16/16")) << drawn;
  const std::vector<double> job_rate = Numbers(drawn, "class=\"tpm\">([0-9.]+) trials/min<");
  ASSERT_EQ(job_rate.size(), 1u) << drawn;
  EXPECT_GT(job_rate[0], 0);
  std::map<int, int> failed;
  for (const v1::Record& rec : records) {
    if (rec.status() != v1::MEASURE_STATUS_OK) ++failed[rec.status()];
  }
  std::string failures;
  for (const auto& [status, n] : failed) {
    absl::StrAppend(&failures, failures.empty() ? "" : ", ",
                    absl::AsciiStrToLower(absl::StripPrefix(
                        v1::MeasureStatus_Name(v1::MeasureStatus(status)), "MEASURE_STATUS_")),
                    " ", n);
  }
  EXPECT_TRUE(absl::StrContains(drawn, absl::StrCat("failures: <span class=\"failures\">",
                                                    failures.empty() ? "none" : failures, "<")))
      << failures << "\n" << drawn;
  const std::vector<double> model = Numbers(drawn, "class=\"model-ms\">([0-9.]+) (ms|µs)<");
  ASSERT_EQ(model.size(), 1u) << drawn;
  EXPECT_GT(model[0], 0);
  // The job measured each task's default schedule, and its best is at least as fast.
  const std::vector<double> speedup = Numbers(drawn, "class=\"speedup\">([0-9.]+)x<");
  ASSERT_EQ(speedup.size(), 1u) << drawn;
  EXPECT_GE(speedup[0], 1.0) << drawn;
  EXPECT_EQ(Count(drawn, "<tr class=\"task\">"), 2u) << drawn;
  EXPECT_EQ(Count(drawn.substr(drawn.find("<div id=\"jobs\">")), "<polyline"), 1u)
      << "the model's curve: " << drawn;
  EXPECT_TRUE(absl::StrContains(drawn, "leases in flight: 0")) << drawn;
  EXPECT_FALSE(absl::StrContains(drawn, "<div id=\"error\">E")) << drawn;

  // The job's page: every task with its default and best times, speed-up,
  // trials and failures, and a curve each.
  drawn = DrawnPage(chromium, dir_, http, "/?job=1");
  EXPECT_TRUE(absl::StrContains(drawn, "&larr; all jobs") || absl::StrContains(drawn, "← all jobs"))
      << drawn;
  EXPECT_TRUE(absl::StrContains(drawn, "job 1 dash</a>")) << drawn;
  const std::string page = drawn.substr(drawn.find("<div id=\"jobpage\""));
  EXPECT_EQ(Count(page, "<tr class=\"task\">"), 2u) << page;
  const std::vector<double> defaults = Numbers(page, "class=\"num default\">([0-9.]+) (µs|ms)<");
  const std::vector<double> bests = Numbers(page, "class=\"num best\">([0-9.]+) (µs|ms)<");
  const std::vector<double> speedups = Numbers(page, "class=\"num speedup\">([0-9.]+)x<");
  const std::vector<double> trials = Numbers(page, "class=\"num trials\">([0-9]+)<");
  ASSERT_EQ(defaults.size(), 2u) << page;
  ASSERT_EQ(bests.size(), 2u) << page;
  ASSERT_EQ(speedups.size(), 2u) << page;
  ASSERT_EQ(trials.size(), 2u) << page;
  for (size_t t = 0; t < 2; ++t) {
    EXPECT_GT(defaults[t], 0);
    EXPECT_GT(bests[t], 0);
    EXPECT_GE(speedups[t], 1.0) << page;
  }
  EXPECT_EQ(trials[0] + trials[1], 16) << page;
  EXPECT_EQ(Count(page, "class=\"failures\">"), 1u + 2u) << page;
  EXPECT_EQ(Count(page, "<polyline"), 3u) << "the model's and each task's curve: " << page;
  // A job that does not exist says so; a job id that is no number is refused.
  drawn = DrawnPage(chromium, dir_, http, "/?job=99");
  EXPECT_TRUE(absl::StrContains(drawn, "404 no job 99")) << drawn;
  EXPECT_EQ(HttpGet(http, "/api/state?job=x").first, 400);
  StopAll({agent->get(), worker->get()});
}

// The HTTP pages take the gRPC port's tokens: a reader's, as a bearer
// header or ?token=; none is 401, an agent's 403. Beyond loopback they are
// refused without --insecure (they have no TLS).
TEST(Security, HttpPagesTakeTheSameTokens) {
  testing::TempDir dir;
  const std::string reader = "tf_reader0000000000000000000000000000000000000";
  const std::string agent = "tf_agent00000000000000000000000000000000000000";
  testing::WriteFile(dir.File("tokens"),
                     reader + " reader name=dash\n" + agent + " agent name=board keys=k\n");
  int http = 0;
  auto server = StartServerWithHttp(dir.path(), {"--tokens_file=" + dir.File("tokens")}, &http);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(HttpGet(http, "/metrics").first, 401);
  EXPECT_EQ(HttpGet(http, "/metrics?token=wrong").first, 401);
  auto denied = HttpGet(http, "/metrics", "Authorization: Bearer " + agent + "\r\n");
  EXPECT_EQ(denied.first, 403);
  EXPECT_TRUE(absl::StrContains(denied.second, "token 'board' has the agent role"))
      << denied.second;
  EXPECT_EQ(HttpGet(http, "/metrics", "Authorization: Bearer " + reader + "\r\n").first, 200);
  EXPECT_EQ(HttpGet(http, "/metrics?token=" + reader).first, 200);
  CommandResult open = RunCommand(
      {BinPath("tunefarm-server"), "--db=" + dir.File("x.db"), "--http_listen=0.0.0.0:0"},
      dir.path());
  EXPECT_EQ(open.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(open.err, "refusing to serve HTTP on 0.0.0.0:0")) << open.err;
}

// An agent copied alone runs no other build's runner: it finds its runner
// only beside itself (or at $TUNEFARM_RUNNER), else it does not start.
TEST(Layout, ACopiedAgentNeedsItsRunnerBesideIt) {
  testing::TempDir dir;
  const std::string copy = dir.File("tunefarm-agent");
  ASSERT_EQ(RunCommand({"/bin/cp", BinPath("tunefarm-agent"), copy}, dir.path()).exit_code, 0);
  Subprocess::Options o;
  o.stderr_path = dir.File("agent.err");
  auto agent = Subprocess::Start({copy, "--key=x86-test", "--server=127.0.0.1:1"}, o);
  ASSERT_TRUE(agent.ok()) << agent.status();
  absl::StatusOr<int> st = (*agent)->Wait(absl::Seconds(60));
  ASSERT_TRUE(st.ok()) << "the copied agent started without its runner";
  EXPECT_EQ(DescribeWaitStatus(*st), "exited with 2");
  EXPECT_TRUE(absl::StrContains(testing::ReadFileOrEmpty(dir.File("agent.err")),
                                "tunefarm-runner not found beside tunefarm-agent"))
      << testing::ReadFileOrEmpty(dir.File("agent.err"));
}

TEST(Layout, AgentLinksNoCompilerOrDatabase) {
  testing::TempDir dir;
  CommandResult r = RunCommand({"/usr/bin/ldd", BinPath("tunefarm-agent")}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "libgrpc++")) << r.out;
  for (const char* lib : {"libLLVM", "libxgboost", "libsqlite3", "libnvrtc", "libcuda"}) {
    EXPECT_FALSE(absl::StrContains(r.out, lib)) << lib << " in\n" << r.out;
  }
  // Nor does the process that runs whole models on the board.
  r = RunCommand({"/usr/bin/ldd", BinPath("tunefarm-model-runner")}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* lib : {"libLLVM", "libxgboost", "libsqlite3", "libnvrtc", "libcuda", "onnx"}) {
    EXPECT_FALSE(absl::StrContains(r.out, lib)) << lib << " in\n" << r.out;
  }
  // It starts without a GPU and says what it found.
  CommandResult caps = RunCommand({BinPath("tunefarm-agent"), "--print_capabilities"}, dir.path());
  ASSERT_EQ(caps.exit_code, 0) << caps.err;
  EXPECT_TRUE(absl::StrContains(caps.out, "\"cores\"")) << caps.out;
  EXPECT_TRUE(absl::StrContains(caps.out, "-linux-gnu")) << caps.out;
}

}  // namespace
}  // namespace tunefarm

namespace tunefarm {
namespace {

// TLS and tokens together, with a certificate made for the test.
TEST(Security, TlsAndTokens) {
  testing::TempDir dir;
  std::string key = dir.File("key.pem"), cert = dir.File("cert.pem");
  CommandResult gen = RunCommand(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
       "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert},
      dir.path());
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  testing::WriteFile(dir.File("tokens"), "farm-token\n");
  testing::WriteFile(dir.File("my-token"), "farm-token\n");
  testing::WriteFile(dir.File("bad-token"), "guess\n");
  auto server = ServerProcess::Start(
      dir.File("tls.db"), dir.path(),
      {"--tls_cert=" + cert, "--tls_key=" + key, "--tokens_file=" + dir.File("tokens")});
  ASSERT_TRUE(server.ok()) << server.status();
  auto cli = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinPath("tunefarm"), "--server=" + (*server)->address(),
                                     "--timeout=5"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("jobs");
    return RunCommand(argv, dir.path());
  };
  CommandResult ok = cli({"--tls_ca=" + cert, "--token_file=" + dir.File("my-token")});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(absl::StrContains(ok.out, "state")) << ok.out;
  CommandResult no_token = cli({"--tls_ca=" + cert});
  EXPECT_EQ(no_token.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(no_token.err, "requires a token")) << no_token.err;
  CommandResult wrong = cli({"--tls_ca=" + cert, "--token_file=" + dir.File("bad-token")});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(wrong.err, "token not accepted")) << wrong.err;
  // Plain text to a TLS port does not get through.
  CommandResult plain = cli({"--token_file=" + dir.File("my-token")});
  EXPECT_NE(plain.exit_code, 0);

  // The daemons name the fix too: a worker speaking plain text to the TLS
  // port says so at its first retry; one with a token the server does not
  // know exits 1 saying where the token's line belongs.
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir.File("plain-worker.log");
  auto plain_worker = Subprocess::Start({BinPath("tunefarm-worker"),
                                         "--server=" + (*server)->address(),
                                         "--token_file=" + dir.File("my-token")},
                                        quiet);
  ASSERT_TRUE(plain_worker.ok()) << plain_worker.status();
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(testing::ReadFileOrEmpty(dir.File("plain-worker.log")),
                                 "give --tls_ca");
      },
      absl::Seconds(60)))
      << testing::ReadFileOrEmpty(dir.File("plain-worker.log"));
  (*plain_worker)->Kill(SIGTERM);
  ASSERT_TRUE((*plain_worker)->Wait(absl::Seconds(30)).ok());
  CommandResult bad_token = RunCommand(
      {BinPath("tunefarm-worker"), "--server=" + (*server)->address(), "--tls_ca=" + cert,
       "--token_file=" + dir.File("bad-token")},
      dir.path());
  EXPECT_EQ(bad_token.exit_code, 1) << bad_token.err;
  EXPECT_TRUE(absl::StrContains(bad_token.err, "token not accepted (the server's tokens file has "
                                               "no line for the secret in --token_file"))
      << bad_token.err;
}

}  // namespace
}  // namespace tunefarm

namespace tunefarm {
namespace {

// Tokens made by `tunefarm token`, a real server, CLI and agents: a reader
// cannot cancel jobs, an agent token cannot register a board it was not
// made for nor take over another token's board, and a refused agent exits
// with the reason instead of retrying forever.
TEST(Security, RolesWithRealProcesses) {
  testing::TempDir dir;
  std::string lines;
  auto token = [&](std::vector<std::string> args, const std::string& secret_file) {
    std::vector<std::string> argv = {BinPath("tunefarm"), "token", "--secret-file", secret_file};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = RunCommand(argv, dir.path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(absl::StartsWith(r.out, "sha256:")) << r.out;  // no secret on stdout
    lines += r.out;
  };
  token({"--role", "admin", "--name", "ops"}, dir.File("admin.token"));
  token({"--role", "reader", "--name", "dash"}, dir.File("reader.token"));
  token({"--role", "agent", "--name", "orin", "--keys", "jetson-orin", "--devices", "orin-01"},
        dir.File("orin.token"));
  token({"--role", "agent", "--name", "lab"}, dir.File("lab.token"));
  token({"--role", "agent", "--name", "spare"}, dir.File("spare.token"));
  testing::WriteFile(dir.File("tokens"), lines);
  EXPECT_FALSE(absl::StrContains(lines, testing::ReadFileOrEmpty(dir.File("admin.token"))));
  auto server =
      ServerProcess::Start(dir.File("roles.db"), dir.path(),
                           {"--heartbeat_interval_ms=200", "--tokens_file=" + dir.File("tokens")});
  ASSERT_TRUE(server.ok()) << server.status();
  auto cli = [&](const std::string& token_file, std::vector<std::string> args) {
    args.insert(args.begin(), "--token_file=" + token_file);
    return (*server)->Cli(args, dir.path());
  };
  CommandResult jobs = cli(dir.File("reader.token"), {"jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.err;
  CommandResult cancel = cli(dir.File("reader.token"), {"cancel", "1"});
  EXPECT_EQ(cancel.exit_code, 1) << cancel.out;
  EXPECT_TRUE(absl::StrContains(cancel.err, "CancelJob: token 'dash' has the reader role"))
      << cancel.err;

  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  auto agent = [&](const std::string& token_file, const std::string& id, const std::string& log) {
    quiet.stderr_path = dir.File(log);
    return Subprocess::Start(
        {BinPath("tunefarm-agent"), "--server=" + (*server)->address(), "--key=jetson-orin",
         "--device_id=" + id, "--token_file=" + token_file, (*server)->server_key_flag()},
        quiet);
  };
  auto exits_refused = [&](absl::StatusOr<std::unique_ptr<Subprocess>> p, const std::string& log,
                           const std::string& why) {
    ASSERT_TRUE(p.ok()) << p.status();
    absl::StatusOr<int> st = (*p)->Wait(absl::Seconds(60));
    ASSERT_TRUE(st.ok()) << "the refused agent kept running";
    EXPECT_EQ(DescribeWaitStatus(*st), "exited with 1");
    std::string err = testing::ReadFileOrEmpty(dir.File(log));
    EXPECT_TRUE(absl::StrContains(err, "refused to register this process")) << err;
    EXPECT_TRUE(absl::StrContains(err, why)) << err;
  };
  exits_refused(agent(dir.File("orin.token"), "xavier-01", "xavier.log"), "xavier.log",
                "may not register device id 'xavier-01'");
  auto orin = agent(dir.File("orin.token"), "orin-01", "orin.log");
  ASSERT_TRUE(orin.ok()) << orin.status();
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        CommandResult d = cli(dir.File("admin.token"), {"devices"});
        return absl::StrContains(d.out, "orin-01") && absl::StrContains(d.out, " online ");
      },
      absl::Seconds(60)))
      << testing::ReadFileOrEmpty(dir.File("orin.log"));
  exits_refused(agent(dir.File("lab.token"), "orin-01", "lab.log"), "lab.log",
                "device id 'orin-01' is reserved by the devices= of token(s) 'orin'");
  // The board's own agent is still there.
  CommandResult d = cli(dir.File("admin.token"), {"devices"});
  EXPECT_TRUE(absl::StrContains(d.out, " online ")) << d.out;
  (*orin)->Kill(SIGTERM);
  ASSERT_TRUE((*orin)->Wait(absl::Seconds(20)).ok());

  // An id no devices= names is its first token's: another token's agent
  // is refused, but keeps asking (an admin may release the id) instead of
  // exiting, and gets in once the id is removed.
  auto first = agent(dir.File("lab.token"), "bench-01", "bench-first.log");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(cli(dir.File("admin.token"), {"devices"}).out, "bench-01");
      },
      absl::Seconds(60)));
  (*first)->Kill(SIGTERM);
  ASSERT_TRUE((*first)->Wait(absl::Seconds(20)).ok());
  auto second = agent(dir.File("spare.token"), "bench-01", "bench-second.log");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(testing::ReadFileOrEmpty(dir.File("bench-second.log")),
                                 "device id 'bench-01' belongs to token 'lab'");
      },
      absl::Seconds(60)))
      << testing::ReadFileOrEmpty(dir.File("bench-second.log"));
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return cli(dir.File("admin.token"), {"devices", "remove", "bench-01"}).exit_code == 0;
      },
      absl::Seconds(60)))
      << cli(dir.File("admin.token"), {"devices"}).out;
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        CommandResult list = cli(dir.File("admin.token"), {"devices"});
        return absl::StrContains(list.out, "bench-01") && absl::StrContains(list.out, " online ");
      },
      absl::Seconds(90)))
      << testing::ReadFileOrEmpty(dir.File("bench-second.log"));
  EXPECT_FALSE(absl::StrContains(testing::ReadFileOrEmpty(dir.File("bench-second.log")),
                                 "refused to register this process"));
  (*second)->Kill(SIGTERM);
  auto st = (*second)->Wait(absl::Seconds(20));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(DescribeWaitStatus(*st), "exited with 0");
}

// Secure by default: no plain text or open door beyond loopback unless
// asked for, and the documented script makes a CA and a certificate that
// a real server and client accept.
TEST(Security, SecureByDefault) {
  testing::TempDir dir;
  CommandResult open =
      RunCommand({BinPath("tunefarm-server"), "--listen=0.0.0.0:0", "--db=" + dir.File("open.db")},
                 dir.path());
  EXPECT_EQ(open.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(open.err, "refusing to listen on 0.0.0.0:0 without TLS and tokens"))
      << open.err;
  testing::WriteFile(dir.File("tokens"), "t admin\n");
  CommandResult no_tls =
      RunCommand({BinPath("tunefarm-server"), "--listen=0.0.0.0:0", "--db=" + dir.File("open.db"),
                  "--tokens_file=" + dir.File("tokens")},
                 dir.path());
  EXPECT_EQ(no_tls.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(no_tls.err, "without TLS: give --tls_cert")) << no_tls.err;
  EXPECT_NE(access(dir.File("open.db").c_str(), F_OK), 0) << "a refused server made its database";
  // Agents, workers and the CLI with a token refuse plain text beyond
  // loopback before dialling.
  for (std::string bin : {"tunefarm-agent", "tunefarm-worker"}) {
    std::vector<std::string> argv = {BinPath(bin), "--server=192.0.2.1:7070",
                                     "--token_file=" + dir.File("tokens")};
    if (bin == "tunefarm-agent") argv.push_back("--key=k");
    CommandResult r = RunCommand(argv, dir.path());
    EXPECT_EQ(r.exit_code, 2) << bin;
    EXPECT_TRUE(absl::StrContains(r.err, "refusing to talk to 192.0.2.1:7070 in plain text"))
        << bin << ": " << r.err;
  }
  CommandResult cli = RunCommand({BinPath("tunefarm"), "--server=192.0.2.1:7070",
                                  "--token_file=" + dir.File("tokens"), "jobs"},
                                 dir.path());
  EXPECT_EQ(cli.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(cli.err, "give --tls_ca=CA.pem")) << cli.err;

  // scripts/make-certs.sh: a CA and a server certificate for 127.0.0.1.
  CommandResult certs =
      RunCommand({"/bin/sh", std::string(TF_SOURCE_DIR) + "/scripts/make-certs.sh", dir.File("pki"),
                  "127.0.0.1", "localhost"},
                 dir.path());
  ASSERT_EQ(certs.exit_code, 0) << certs.err;
  auto server = ServerProcess::Start(
      dir.File("tls.db"), dir.path(),
      {"--tls_cert=" + dir.File("pki/server.pem"), "--tls_key=" + dir.File("pki/server.key"),
       "--tokens_file=" + dir.File("tokens")});
  ASSERT_TRUE(server.ok()) << server.status();
  testing::WriteFile(dir.File("t.token"), "t\n");
  CommandResult jobs = (*server)->Cli(
      {"--tls_ca=" + dir.File("pki/ca.pem"), "--token_file=" + dir.File("t.token"), "jobs"},
      dir.path());
  EXPECT_EQ(jobs.exit_code, 0) << jobs.err;
  // TLS mistakes say what to change, in one line.
  auto one_line_hint = [&](const CommandResult& r, const std::string& hint) {
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, hint)) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  };
  one_line_hint((*server)->Cli({"--timeout=10", "jobs"}, dir.path()),
                "a server that serves TLS closes plain-text connections: give --tls_ca=CA.pem");
  CommandResult other_ca =
      RunCommand({"/bin/sh", std::string(TF_SOURCE_DIR) + "/scripts/make-certs.sh",
                  dir.File("other-pki"), "127.0.0.1"},
                 dir.path());
  ASSERT_EQ(other_ca.exit_code, 0) << other_ca.err;
  one_line_hint((*server)->Cli({"--timeout=10", "--tls_ca=" + dir.File("other-pki/ca.pem"), "jobs"},
                               dir.path()),
                "its certificate is not from the CA of --tls_ca");
  auto plain = ServerProcess::Start(dir.File("plain.db"), dir.path());
  ASSERT_TRUE(plain.ok()) << plain.status();
  one_line_hint(
      (*plain)->Cli({"--timeout=10", "--tls_ca=" + dir.File("pki/ca.pem"), "jobs"}, dir.path()),
      "the server speaks plain text, not TLS: drop --tls_ca");
  // A second certificate from the same CA: the clients' trust file stays valid.
  certs = RunCommand({"/bin/sh", std::string(TF_SOURCE_DIR) + "/scripts/make-certs.sh",
                      dir.File("pki"), "127.0.0.1"},
                     dir.path());
  ASSERT_EQ(certs.exit_code, 0) << certs.err;
  CommandResult verify = RunCommand(
      {"/usr/bin/openssl", "verify", "-CAfile", dir.File("pki/ca.pem"), dir.File("pki/server.pem")},
      dir.path());
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// A board that lies about its timings: an agent of key x86-test, in this
// process, that answers every measurement OK with `seconds` per run after
// `delay` (as long as a real measurement takes, so that an honest agent
// beside it gets its share); stopped when it goes.
class LyingAgent {
 public:
  LyingAgent(const std::string& server, double seconds, absl::Duration delay) {
    FarmSession::Options o;
    o.client.server = server;
    o.role = v1::ROLE_AGENT;
    o.device_id = "liar";
    o.device_key = "x86-test";
    o.capabilities.set_cores(1);
    session_ = std::make_unique<FarmSession>(o, Logger("liar"));
    thread_ = std::thread([this, seconds, delay] {
      session_
          ->Run([this, seconds, delay](const v1::WorkLease&) {
            v1::ReportResultRequest r;
            r.mutable_measure()->set_status(v1::MEASURE_STATUS_OK);
            for (int i = 0; i < 3; ++i) r.mutable_measure()->add_costs_sec(seconds);
            ++lies_;
            absl::SleepFor(delay);
            return r;
          })
          .IgnoreError();
    });
  }
  ~LyingAgent() {
    session_->Stop();
    thread_.join();
  }
  int lies() const { return lies_.load(); }

 private:
  std::unique_ptr<FarmSession> session_;
  std::thread thread_;
  std::atomic<int> lies_{0};
};

// An agent that lies about its timings (1 ns for every candidate, the fault
// a real board cannot produce on demand): with a real server and a real
// worker, none of its timings becomes a record's OK, nor the job's best.
TEST(Security, ForgedTimingsAreRefused) {
  testing::TempDir dir;
  auto server =
      ServerProcess::Start(dir.File("forged.db"), dir.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir.File("worker.log");
  auto worker = Subprocess::Start({BinPath("tunefarm-worker"), "--server=" + (*server)->address(),
                                   "--device_id=w1", "--threads=1"},
                                  quiet);
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto liar = std::make_unique<LyingAgent>((*server)->address(), 1e-9, absl::ZeroDuration());
  const std::string list = dir.File("w.txt");
  testing::WriteFile(list, "dense(M=64,N=64,K=64)\n");
  CommandResult sub = (*server)->Cli({"submit", "--workloads=" + list, "--target=llvm -num-cores=1",
                                      "--device_key=x86-test", "--trials=4"},
                                     dir.path());
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        std::string out = (*server)->Cli({"job", "1"}, dir.path()).out;
        return absl::StrContains(out, "succeeded") || absl::StrContains(out, "failed");
      },
      absl::Seconds(120)))
      << (*server)->Cli({"job", "1"}, dir.path()).out
      << testing::ReadFileOrEmpty(dir.File("worker.log"));
  EXPECT_GT(liar->lies(), 0);
  liar.reset();
  CommandResult out = (*server)->Cli({"records", "--json"}, dir.path());
  ASSERT_EQ(out.exit_code, 0) << out.err;
  std::istringstream in(out.out);
  auto records = cli::ParseRecordsJsonl(in, "records --json");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_FALSE(records->empty());
  for (const v1::Record& r : *records) {
    EXPECT_NE(r.status(), v1::MEASURE_STATUS_OK) << cli::RecordToJsonLine(r);
    EXPECT_TRUE(absl::StrContains(r.error(), "refused from liar: implausible timing 1e-09 s"))
        << r.error();
  }
  (*worker)->Kill(SIGTERM);
  ASSERT_TRUE((*worker)->Wait(absl::Seconds(20)).ok());
}

// An agent that reports plausible timings (1 us for a 32x32x32 product,
// 65 GFLOP/s, above the physical floor) beside an honest agent of the same
// key: every claim of its that would rank first is measured again by the
// honest one, disputed and left out of the ranking, so `best` names the
// honest agent's schedule; its own claims as the second measurer of the
// honest agent's bests count against it too, and `devices` and /metrics
// flag it while the honest one stays clean.
TEST(Security, PlausibleForgedTimingsDoNotRank) {
  testing::TempDir dir;
  int http = 0;
  auto server = StartServerWithHttp(dir.path(), {"--heartbeat_interval_ms=200"}, &http);
  ASSERT_TRUE(server.ok()) << server.status();
  auto cli = [&](std::vector<std::string> args) { return (*server)->Cli(args, dir.path()); };
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir.File("procs.log");
  auto worker = Subprocess::Start({BinPath("tunefarm-worker"), "--server=" + (*server)->address(),
                                   "--device_id=w1", "--threads=1"},
                                  quiet);
  auto honest = Subprocess::Start({BinPath("tunefarm-agent"), "--server=" + (*server)->address(),
                                   "--key=x86-test", "--device_id=honest",
                                   (*server)->server_key_flag()},
                                  quiet);
  ASSERT_TRUE(worker.ok() && honest.ok());
  // 100 ns for 65536 FLOP: above the server's physical floor (65.5 ns at
  // 1 TFLOP/s), and more than 1 + confirm_tolerance times faster than any
  // one core runs the workload, however fast the machine.
  LyingAgent liar((*server)->address(), 1e-7, absl::Milliseconds(200));
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return testing::Occurrences(cli({"devices"}).out, " online ") == 3;
      },
      absl::Seconds(60)))
      << cli({"devices"}).out;
  const std::string list = dir.File("w.txt");
  testing::WriteFile(list, "dense(M=32,N=32,K=32)\n");
  auto records = [&] {
    CommandResult out = cli({"records", "--json", "--limit=1000"});
    std::istringstream in(out.out);
    auto parsed = cli::ParseRecordsJsonl(in, "records --json");
    return parsed.ok() ? *parsed : std::vector<v1::Record>();
  };
  // Jobs of 16 trials until each agent measured some candidates first (the
  // liar also measures again the honest agent's new bests, ahead of new
  // work, so which takes which candidate varies, and on a loaded machine
  // one agent can take every lease of several jobs); each job ends, and
  // every second measurement it asked for has come back.
  int liar_ok = 0, honest_ok = 0;
  for (int job = 1; job <= 24 && (liar_ok == 0 || honest_ok == 0); ++job) {
    CommandResult sub = cli({"submit", "--workloads=" + list, "--target=llvm -num-cores=1",
                             "--device_key=x86-test", "--trials=16"});
    ASSERT_EQ(sub.exit_code, 0) << sub.err;
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          if (!absl::StrContains(cli({"job", std::to_string(job)}).out, "succeeded")) return false;
          for (const v1::Record& r : records()) {
            if (r.confirmation() == v1::CONFIRMATION_PENDING) return false;
          }
          return true;
        },
        absl::Seconds(240)))
        << cli({"job", std::to_string(job)}).out
        << testing::ReadFileOrEmpty(dir.File("procs.log"));
    liar_ok = honest_ok = 0;
    for (const v1::Record& r : records()) {
      if (r.status() != v1::MEASURE_STATUS_OK) continue;
      ++(r.device_id() == "liar" ? liar_ok : honest_ok);
    }
  }
  EXPECT_GT(liar.lies(), 0);
  std::string all;
  for (const v1::Record& r : records()) all += cli::RecordToJsonLine(r) + "\n";
  ASSERT_GT(liar_ok, 0) << all;
  ASSERT_GT(honest_ok, 0) << all;
  for (const v1::Record& r : records()) {
    if (r.status() != v1::MEASURE_STATUS_OK) continue;
    if (r.device_id() == "liar") {
      // Faster than anything that ranked when it arrived: checked, and the
      // honest agent measured it slower.
      EXPECT_EQ(r.confirmation(), v1::CONFIRMATION_DISPUTED) << cli::RecordToJsonLine(r);
      EXPECT_EQ(r.confirmed_by(), "honest") << cli::RecordToJsonLine(r);
    } else {
      EXPECT_NE(r.confirmation(), v1::CONFIRMATION_DISPUTED) << cli::RecordToJsonLine(r);
    }
  }
  CommandResult best = cli({"best", "--target=llvm -num-cores=1", "--job=1", "--json"});
  ASSERT_EQ(best.exit_code, 0) << best.err;
  EXPECT_TRUE(absl::StrContains(best.out, "\"device_id\":\"honest\"")) << best.out;
  EXPECT_FALSE(absl::StrContains(best.out, "\"device_id\":\"liar\"")) << best.out;
  const std::string devices = cli({"devices"}).out;
  std::string liar_line, honest_line;
  for (absl::string_view line : absl::StrSplit(devices, '\n')) {
    if (absl::StartsWith(line, "liar ")) liar_line = std::string(line);
    if (absl::StartsWith(line, "honest ")) honest_line = std::string(line);
  }
  EXPECT_TRUE(absl::StrContains(liar_line, "TIMINGS DISPUTED by its peers")) << devices;
  EXPECT_FALSE(absl::StrContains(honest_line, "DISPUTED")) << devices;
  auto metrics = HttpGet(http, "/metrics");
  ASSERT_EQ(metrics.first, 200);
  EXPECT_TRUE(absl::StrContains(metrics.second,
                                "tunefarm_device_timings_disputed{device=\"liar\"} 1"))
      << metrics.second;
  EXPECT_TRUE(absl::StrContains(metrics.second,
                                "tunefarm_device_timings_disputed{device=\"honest\"} 0"))
      << metrics.second;
  for (auto* p : {&*honest, &*worker}) {
    (*p)->Kill(SIGTERM);
    ASSERT_TRUE((*p)->Wait(absl::Seconds(20)).ok());
  }
}

// The children of `pid` named `comm` (from /proc/*/stat).
std::vector<pid_t> ChildrenNamed(pid_t pid, const std::string& comm) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    pid_t child = 0;
    if (!absl::SimpleAtoi(e->d_name, &child)) continue;
    std::string stat = testing::ReadFileOrEmpty(absl::StrCat("/proc/", child, "/stat"));
    size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::vector<std::string> rest = absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t parent = 0;
    if (rest.size() > 1 && absl::SimpleAtoi(rest[1], &parent) && parent == pid &&
        stat.substr(open + 1, close - open - 1) == comm) {
      out.push_back(child);
    }
  }
  closedir(d);
  return out;
}

// Seconds since process `pid` started (from /proc); -1 when unknown.
double ProcessAge(pid_t pid) {
  std::string stat = testing::ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/stat"));
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
  double uptime = 0, start = 0;
  std::istringstream(testing::ReadFileOrEmpty("/proc/uptime")) >> uptime;
  if (f.size() < 20 || !absl::SimpleAtod(f[19], &start)) return -1;
  return uptime - start / double(sysconf(_SC_CLK_TCK));
}

// `cancel` stops the kernel an agent is running for the job, not only the
// job: the server takes the lease back, the agent's next heartbeat hears of
// it and kills the runner, and the agent carries on.
TEST(Security, CancelKillsTheRunningMeasurement) {
  testing::TempDir dir;
  auto server =
      ServerProcess::Start(dir.File("cancel.db"), dir.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir.File("worker.log");
  auto worker = Subprocess::Start({BinPath("tunefarm-worker"), "--server=" + (*server)->address(),
                                   "--device_id=w1", "--threads=1"},
                                  quiet);
  quiet.stderr_path = dir.File("agent.log");
  // (Installed with the server's key: every lease it runs is signed.)
  auto agent = Subprocess::Start(
      {BinPath("tunefarm-agent"), "--server=" + (*server)->address(), "--key=x86-test",
       "--device_id=a1", "--server_key=" + dir.File("cancel.db.signing-key.pub")},
      quiet);
  ASSERT_TRUE(worker.ok() && agent.ok());
  // Every measurement would run for a minute.
  const std::string spec = dir.File("slow.json");
  testing::WriteFile(spec,
                     R"({"name": "slow", "measure": {"min_repeat_ms": 60000, "timeout_ms": 300000},
    "tasks": [{"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [8, 48]}, {"shape": [40, 48]}]}}]})");
  CommandResult sub = (*server)->Cli(
      {"submit", spec, "--target=llvm -num-cores=1", "--device_key=x86-test", "--trials=4"},
      dir.path());
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  const pid_t agent_pid = (*agent)->pid();
  // A runner 2 s old is one of the minute-long measurements (the job's first
  // measurement, of the default schedule, is short).
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        for (pid_t r : ChildrenNamed(agent_pid, "tunefarm-runner")) {
          if (ProcessAge(r) >= 2) return true;
        }
        return false;
      },
      absl::Seconds(120)))
      << testing::ReadFileOrEmpty(dir.File("agent.log"));
  CommandResult cancel = (*server)->Cli({"cancel", "1"}, dir.path());
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_TRUE(testing::WaitFor([&] { return ChildrenNamed(agent_pid, "tunefarm-runner").empty(); },
                               absl::Seconds(30)))
      << "the runner still runs for a cancelled job";
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains(testing::ReadFileOrEmpty(dir.File("agent.log")),
                                 "cancelled: the server took the lease back");
      },
      absl::Seconds(30)))
      << testing::ReadFileOrEmpty(dir.File("agent.log"));
  // The agent is still up and registered.
  EXPECT_TRUE(absl::StrContains((*server)->Cli({"devices"}, dir.path()).out, " online "));
  StopAll({agent->get(), worker->get()});
}

// A server that is not the farm's (an impostor on the network, or a
// compromised relay) hands a real agent a measurement whose kernel is a
// hand-made library. An agent installed with the farm's public key refuses
// it unless the farm's key signed that lease and that code; the library's
// constructor never runs.
class ImpostorFarm final : public v1::FarmService::Service {
 public:
  explicit ImpostorFarm(std::vector<v1::WorkLease> leases) : leases_(std::move(leases)) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*,
                        v1::RegisterResponse* resp) override {
    resp->set_session_id("impostor");
    resp->set_heartbeat_interval_ms(200);
    resp->set_lease_timeout_ms(60000);
    return grpc::Status::OK;
  }
  grpc::Status StreamWork(grpc::ServerContext* ctx, const v1::StreamWorkRequest*,
                          grpc::ServerWriter<v1::WorkLease>* writer) override {
    std::vector<v1::WorkLease> to_send;
    {
      std::lock_guard<std::mutex> l(mu_);
      to_send.swap(leases_);
    }
    for (const v1::WorkLease& lease : to_send) writer->Write(lease);
    while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return grpc::Status::CANCELLED;
  }
  grpc::Status ReportResult(grpc::ServerContext*, const v1::ReportResultRequest* req,
                            v1::ReportResultResponse*) override {
    std::lock_guard<std::mutex> l(mu_);
    results_[req->lease_id()] = req->measure();
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override {
    return grpc::Status::OK;
  }
  std::map<std::string, v1::MeasureResult> results() {
    std::lock_guard<std::mutex> l(mu_);
    return results_;
  }

 private:
  std::mutex mu_;
  std::vector<v1::WorkLease> leases_;
  std::map<std::string, v1::MeasureResult> results_;
};

TEST(Security, AgentsRunOnlyCodeTheFarmsKeySigned) {
  testing::TempDir dir;
  absl::StatusOr<Signer> farm_key = Signer::LoadOrCreate(dir.File("farm.signing-key"));
  absl::StatusOr<Signer> other_key = Signer::LoadOrCreate(dir.File("other.signing-key"));
  ASSERT_TRUE(farm_key.ok() && other_key.ok());
  // The hand-made kernel: its constructor drops a file.
  const std::string c = dir.File("evil.c"), so = dir.File("evil.so"), dropped = dir.File("dropped");
  testing::WriteFile(
      c, absl::StrCat("#include <fcntl.h>\n#include <unistd.h>\n",
                      "__attribute__((constructor)) static void evil(void) {\n", "  close(open(\"",
                      dropped, "\", O_WRONLY | O_CREAT, 0644));\n}\n",
                      "int tf_main(void* const* b, const void* rt) { return 0; }\n"));
  CommandResult cc = RunCommand({"/usr/bin/cc", "-shared", "-fPIC", "-o", so, c}, dir.path());
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  auto lease = [&](const std::string& id, const Signer* key) {
    v1::WorkLease l;
    l.set_lease_id(id);
    v1::MeasureRequest* m = l.mutable_measure();
    m->set_kind(v1::ARTIFACT_KIND_SHARED_OBJECT);
    m->set_artifact(testing::ReadFileOrEmpty(so));
    for (int i = 0; i < 2; ++i) {
      v1::KernelArgument* a = m->mutable_signature()->add_args();
      a->add_shape(4);
      a->set_dtype(v1::DTYPE_FLOAT32);
    }
    m->set_reference_output(std::string(16, '\0'));
    m->set_reference_key(id);
    if (key != nullptr) {
      l.set_server_signature(*key->Sign(SignedPartOf(l)));
    }
    return l;
  };
  // Signed by the farm's key, then its argument sizes changed on the way.
  v1::WorkLease altered = lease("altered", &*farm_key);
  altered.mutable_measure()->mutable_signature()->mutable_args(0)->set_shape(0, 1 << 20);
  ImpostorFarm impostor({lease("unsigned", nullptr), lease("other-key", &*other_key), altered});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&impostor);
  std::unique_ptr<grpc::Server> fake = builder.BuildAndStart();
  ASSERT_NE(fake, nullptr);
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir.File("agent.log");
  auto agent = Subprocess::Start(
      {BinPath("tunefarm-agent"), absl::StrCat("--server=127.0.0.1:", port), "--key=k",
       "--device_id=a1", "--server_key=" + dir.File("farm.signing-key.pub")},
      quiet);
  ASSERT_TRUE(agent.ok());
  ASSERT_TRUE(testing::WaitFor([&] { return impostor.results().size() == 3; }, absl::Seconds(60)))
      << testing::ReadFileOrEmpty(dir.File("agent.log"));
  for (const auto& [id, r] : impostor.results()) {
    EXPECT_EQ(r.status(), v1::MEASURE_STATUS_UPLOAD_ERROR) << id;
    EXPECT_TRUE(absl::StrContains(r.error(), "not signed by the server's key")) << id << r.error();
  }
  EXPECT_NE(access(dropped.c_str(), F_OK), 0) << "the unsigned library ran";
  (*agent)->Kill(SIGTERM);
  ASSERT_TRUE((*agent)->Wait(absl::Seconds(20)).ok());

  // Without the farm's key an agent does not start (it used to run
  // whatever the server it dialled sent): it names the key and dials
  // nothing.
  CommandResult keyless = RunCommand({BinPath("tunefarm-agent"),
                                      absl::StrCat("--server=127.0.0.1:", port), "--key=k",
                                      "--device_id=a0"},
                                     dir.path());
  EXPECT_EQ(keyless.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(keyless.err, "no server key: give --server_key=")) << keyless.err;
  EXPECT_EQ(impostor.results().size(), 3u);
  // The key can come in the token file, after the token: the same refusal.
  testing::WriteFile(dir.File("agent.token"),
                     "tf_board\n" + testing::ReadFileOrEmpty(dir.File("farm.signing-key.pub")));
  ImpostorFarm impostor3({lease("unsigned-3", nullptr)});
  grpc::ServerBuilder b3;
  int port3 = 0;
  b3.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port3);
  b3.RegisterService(&impostor3);
  std::unique_ptr<grpc::Server> fake3 = b3.BuildAndStart();
  ASSERT_NE(fake3, nullptr);
  auto agent3 = Subprocess::Start({BinPath("tunefarm-agent"),
                                   absl::StrCat("--server=127.0.0.1:", port3), "--key=k",
                                   "--device_id=a3", "--token_file=" + dir.File("agent.token")},
                                  quiet);
  ASSERT_TRUE(agent3.ok());
  ASSERT_TRUE(testing::WaitFor([&] { return impostor3.results().size() == 1; }, absl::Seconds(60)))
      << testing::ReadFileOrEmpty(dir.File("agent.log"));
  EXPECT_EQ(impostor3.results().at("unsigned-3").status(), v1::MEASURE_STATUS_UPLOAD_ERROR);
  EXPECT_NE(access(dropped.c_str(), F_OK), 0) << "the unsigned library ran";
  (*agent3)->Kill(SIGTERM);
  ASSERT_TRUE((*agent3)->Wait(absl::Seconds(20)).ok());
  fake3->Shutdown();

  // The same code, signed by the farm's key for its lease, does load (its
  // constructor then runs inside the sandbox, which it cannot write out of).
  ImpostorFarm signed_farm({lease("signed", &*farm_key)});
  grpc::ServerBuilder b2;
  int port2 = 0;
  b2.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port2);
  b2.RegisterService(&signed_farm);
  std::unique_ptr<grpc::Server> fake2 = b2.BuildAndStart();
  ASSERT_NE(fake2, nullptr);
  auto agent2 = Subprocess::Start(
      {BinPath("tunefarm-agent"), absl::StrCat("--server=127.0.0.1:", port2), "--key=k",
       "--device_id=a2", "--server_key=" + dir.File("farm.signing-key.pub")},
      quiet);
  ASSERT_TRUE(agent2.ok());
  ASSERT_TRUE(
      testing::WaitFor([&] { return signed_farm.results().size() == 1; }, absl::Seconds(60)))
      << testing::ReadFileOrEmpty(dir.File("agent.log"));
  const v1::MeasureResult r = signed_farm.results().at("signed");
  EXPECT_EQ(r.status(), v1::MEASURE_STATUS_SANDBOX_VIOLATION) << r.error();
  EXPECT_NE(access(dropped.c_str(), F_OK), 0);
  (*agent2)->Kill(SIGTERM);
  ASSERT_TRUE((*agent2)->Wait(absl::Seconds(20)).ok());
  fake->Shutdown();
  fake2->Shutdown();
}

}  // namespace
}  // namespace tunefarm
