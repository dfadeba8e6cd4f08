// A farm that comes back on its own, with the real binaries on 127.0.0.1:
// a TLS server with role tokens is killed in the middle of a job and kept
// down until its worker and agent have backed off and said, in one line,
// why they are out; restarted on the same port, certificate and database,
// it gets both back without anyone touching them, their device ids stay
// theirs (an unlimited agent token cannot take either over meanwhile), and
// the resumed job finishes its budget with nothing measured twice.
#include <signal.h>

#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/records_jsonl.h"
#include "gtest/gtest.h"
#include "proto/client.h"
#include "proto/protocol.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/farm.grpc.pb.h"

namespace tunefarm {
namespace {

using testing::BinPath;
using testing::CommandResult;
using testing::RunCommand;
using testing::ServerProcess;

TEST(FarmRestart, TlsFarmWithTokensComesBackAfterALongOutage) {
  testing::TempDir dir;
  const std::string db = dir.File("farm.db");
  CommandResult certs = RunCommand({"/bin/sh", std::string(TF_SOURCE_DIR) + "/scripts/make-certs.sh",
                                    dir.File("pki"), "127.0.0.1"},
                                   dir.path());
  ASSERT_EQ(certs.exit_code, 0) << certs.err;
  // The server's first start makes its signing key; agents are installed
  // with its public half, here inside their token file.
  {
    auto first = ServerProcess::Start(db, dir.path());
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE((*first)->Stop().ok());
  }
  std::string lines;
  auto token = [&](std::vector<std::string> args, const std::string& file) {
    std::vector<std::string> argv = {BinPath("tunefarm"), "token", "--secret-file", dir.File(file)};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = RunCommand(argv, dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    lines += r.out;
  };
  token({"--role", "admin", "--name", "ops"}, "admin.token");
  token({"--role", "worker", "--name", "builders"}, "worker.token");
  token({"--role", "agent", "--name", "orin", "--keys", "x86-test", "--devices", "orin-01",
         "--server_key", db + ".signing-key.pub"},
        "agent.token");
  token({"--role", "agent", "--name", "lab"}, "lab.token");
  testing::WriteFile(dir.File("tokens"), lines);
  EXPECT_TRUE(absl::StrContains(testing::ReadFileOrEmpty(dir.File("agent.token")),
                                "-----BEGIN PUBLIC KEY-----"));

  auto port = testing::ReservedPort::Take();
  ASSERT_TRUE(port.ok()) << port.status();
  const std::vector<std::string> server_flags = {
      "--heartbeat_interval_ms=200", (*port)->listen_flag(),
      "--tls_cert=" + dir.File("pki/server.pem"), "--tls_key=" + dir.File("pki/server.key"),
      "--tokens_file=" + dir.File("tokens")};
  auto server = ServerProcess::Start(db, dir.path(), server_flags);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = (*server)->address();
  const std::string ca = "--tls_ca=" + dir.File("pki/ca.pem");
  auto cli = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {BinPath("tunefarm"), "--server=" + addr, ca,
                                     "--token_file=" + dir.File("admin.token")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, dir.path());
  };
  Subprocess::Options worker_log, agent_log;
  worker_log.capture_stdout = agent_log.capture_stdout = false;
  worker_log.stderr_path = dir.File("worker.log");
  agent_log.stderr_path = dir.File("agent.log");
  // The agent has no --server_key of its own: its token file carries it.
  auto worker = Subprocess::Start({BinPath("tunefarm-worker"), "--server=" + addr, ca,
                                   "--token_file=" + dir.File("worker.token"), "--device_id=w-1",
                                   "--threads=2", "--report_offline_after=5s"},
                                  worker_log);
  auto agent = Subprocess::Start({BinPath("tunefarm-agent"), "--server=" + addr, ca,
                                  "--token_file=" + dir.File("agent.token"), "--key=x86-test",
                                  "--device_id=orin-01", "--report_offline_after=5s"},
                                 agent_log);
  ASSERT_TRUE(worker.ok() && agent.ok());
  auto logs = [&] {
    return testing::ReadFileOrEmpty(dir.File("worker.log")) +
           testing::ReadFileOrEmpty(dir.File("agent.log"));
  };
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return testing::Occurrences(cli({"devices"}).out, " online ") == 2;
      },
      absl::Seconds(60)))
      << cli({"devices"}).out << logs();

  const std::string spec = dir.File("job.json");
  testing::WriteFile(spec, R"({"name": "restart", "tasks": [
    {"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [8, 48]}, {"shape": [40, 48]}]}},
    {"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [4, 32]}, {"shape": [24, 32]}]}}]})");
  const int kTrials = 40;
  CommandResult r = cli({"submit", spec, "--target=llvm", "--device_key=x86-test",
                         "--trials=" + std::to_string(kTrials)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto records = [&] {
    CommandResult out = cli({"records", "--job=1", "--limit=1000", "--json"});
    std::istringstream in(out.out);
    auto parsed = cli::ParseRecordsJsonl(in, "records --json");
    return parsed.ok() ? *parsed : std::vector<v1::Record>();
  };
  ASSERT_TRUE(testing::WaitFor([&] { return records().size() >= 8; }, absl::Seconds(180)))
      << cli({"job", "1"}).out << logs();

  // Down hard, and kept down until both have said why they are out (once
  // per outage, after 5 s: past gRPC's longest back-off between dials).
  (*server)->process().Kill(SIGKILL);
  ASSERT_TRUE((*server)->process().Wait(absl::Seconds(10)).ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return testing::Occurrences(
                   testing::ReadFileOrEmpty(dir.File("worker.log")),
                   "event=offline") == 1 &&
               testing::Occurrences(
                   testing::ReadFileOrEmpty(dir.File("agent.log")),
                   "event=offline") == 1;
      },
      absl::Seconds(120)))
      << logs();
  EXPECT_TRUE(absl::StrContains(testing::ReadFileOrEmpty(dir.File("agent.log")),
                                "hint=\"nothing listens there"))
      << logs();

  auto revived = ServerProcess::Start(db, dir.path(), server_flags);
  ASSERT_TRUE(revived.ok()) << revived.status();
  // Right after the restart, an agent token without limits cannot take
  // the worker's id (stored as the worker token's) nor the board's (named
  // in its token's devices=), whoever dials in first.
  {
    ClientOptions o;
    o.server = addr;
    o.tls_ca_file = dir.File("pki/ca.pem");
    auto lab = ReadTokenFile(dir.File("lab.token"));
    ASSERT_TRUE(lab.ok()) << lab.status();
    o.token = *lab;
    auto channel = MakeChannel(o);
    ASSERT_TRUE(channel.ok()) << channel.status();
    auto stub = v1::FarmService::NewStub(*channel);
    auto take = [&](const std::string& id) {
      v1::RegisterRequest req;
      req.set_protocol_version(kProtocolVersion);
      req.set_role(v1::ROLE_AGENT);
      req.set_device_id(id);
      req.set_device_key("x86-test");
      v1::RegisterResponse resp;
      auto ctx = MakeContext(o, absl::Seconds(30));
      ctx->set_wait_for_ready(true);
      return stub->Register(ctx.get(), req, &resp);
    };
    grpc::Status worker_id = take("w-1");
    EXPECT_EQ(worker_id.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_TRUE(absl::StrContains(worker_id.error_message(),
                                  "device id 'w-1' belongs to token 'builders'"))
        << worker_id.error_message();
    grpc::Status board_id = take("orin-01");
    EXPECT_EQ(board_id.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_TRUE(absl::StrContains(board_id.error_message(),
                                  "device id 'orin-01' is reserved by the devices= of token(s) "
                                  "'orin'"))
        << board_id.error_message();
  }
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return testing::Occurrences(cli({"devices"}).out, " online ") == 2;
      },
      absl::Seconds(120)))
      << cli({"devices"}).out << logs();
  EXPECT_EQ(testing::Occurrences(logs(), "event=registered"), 4) << logs();

  r = cli({"resume", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] { return absl::StrContains(cli({"job", "1"}).out, "succeeded"); }, absl::Seconds(300)))
      << cli({"job", "1"}).out << logs();
  // The budget counts measured trials; a failed one is recorded too.
  std::vector<v1::Record> all = records();
  size_t ok = 0;
  std::string statuses;
  for (const v1::Record& rec : all) {
    ok += rec.status() == v1::MEASURE_STATUS_OK;
    absl::StrAppend(&statuses, v1::MeasureStatus_Name(rec.status()), " ", rec.error(), "\n");
  }
  EXPECT_EQ(ok, size_t(kTrials)) << statuses;
  std::set<std::string> seen;
  for (const v1::Record& rec : all) {
    EXPECT_TRUE(seen.insert(rec.workload_key() + rec.schedule_hash()).second)
        << "measured twice: " << cli::RecordToJsonLine(rec);
    EXPECT_EQ(rec.device_id(), "orin-01");
  }
  for (auto* p : {&*agent, &*worker}) {
    (*p)->Kill(SIGTERM);
    auto st = (*p)->Wait(absl::Seconds(20));
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(DescribeWaitStatus(*st), "exited with 0");
  }
}

}  // namespace
}  // namespace tunefarm
