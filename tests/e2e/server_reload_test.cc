// A running TLS server with role tokens told to read its files again
// (SIGHUP), with the real binaries on 127.0.0.1: a new tokens file counts
// from the next call (a new token works, a removed one is refused and the
// worker it served is let go, a changed role gives its new rights), a
// tokens file that does not parse changes nothing, and a new certificate
// serves new connections while a bad key keeps the one before. Through all
// of it the agent registered at the start stays online in the session it
// registered (it never registers again).
#include <signal.h>

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm {
namespace {

using testing::BinPath;
using testing::CommandResult;
using testing::Occurrences;
using testing::ReadFileOrEmpty;
using testing::RunCommand;
using testing::ServerProcess;

// Whether `tunefarm devices` output shows device `id` online.
bool ShowsOnline(const std::string& devices_out, const std::string& id) {
  for (absl::string_view line : absl::StrSplit(devices_out, '\n')) {
    if (absl::StartsWith(line, id + " ")) return absl::StrContains(line, " online ");
  }
  return false;
}

class ServerReloadTest : public ::testing::Test {
 protected:
  // The farm: certificates from scripts/make-certs.sh, a tokens file (ops:
  // admin, orin: agent for orin-01, dash: reader, builders: worker), the
  // server, its agent orin-01 and, with `worker`, the worker w-1.
  void StartFarm(bool worker) {
    ASSERT_NO_FATAL_FAILURE(MakeCerts("127.0.0.1"));
    ASSERT_NO_FATAL_FAILURE(Token("ops", {"--role", "admin"}));
    ASSERT_NO_FATAL_FAILURE(
        Token("orin", {"--role", "agent", "--keys", "x86-test", "--devices", "orin-01"}));
    ASSERT_NO_FATAL_FAILURE(Token("dash", {"--role", "reader"}));
    ASSERT_NO_FATAL_FAILURE(Token("builders", {"--role", "worker"}));
    ASSERT_NO_FATAL_FAILURE(Token("viewer", {"--role", "reader"}));  // not in the file yet
    WriteTokens({"ops", "orin", "dash", "builders"});
    // Heartbeats every 2 s: a loaded machine does not lose the session.
    auto server = ServerProcess::Start(
        dir_.File("farm.db"), dir_.path(),
        {"--heartbeat_interval_ms=2000", "--log_level=info",
         "--tls_cert=" + dir_.File("pki/server.pem"), "--tls_key=" + dir_.File("pki/server.key"),
         "--tokens_file=" + dir_.File("tokens")});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    Subprocess::Options log;
    log.capture_stdout = false;
    log.stderr_path = dir_.File("agent.log");
    auto agent =
        Subprocess::Start({BinPath("tunefarm-agent"), "--server=" + server_->address(), CaFlag(),
                           "--token_file=" + dir_.File("orin.token"), server_->server_key_flag(),
                           "--key=x86-test", "--device_id=orin-01", "--report_offline_after=5s"},
                          log);
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = *std::move(agent);
    int expected = 1;
    if (worker) {
      log.stderr_path = dir_.File("worker.log");
      auto w = Subprocess::Start({BinPath("tunefarm-worker"), "--server=" + server_->address(),
                                  CaFlag(), "--token_file=" + dir_.File("builders.token"),
                                  "--device_id=w-1", "--threads=1", "--report_offline_after=5s"},
                                 log);
      ASSERT_TRUE(w.ok()) << w.status();
      worker_ = *std::move(w);
      expected = 2;
    }
    ASSERT_TRUE(testing::WaitFor(
        [&] { return Occurrences(Cli("ops", {"devices"}).out, " online ") == expected; },
        absl::Seconds(120)))
        << Cli("ops", {"devices"}).out << Logs();
  }

  void TearDown() override {
    if (agent_ != nullptr) {
      agent_->Kill(SIGTERM);
      auto st = agent_->Wait(absl::Seconds(30));
      ASSERT_TRUE(st.ok()) << st.status();
      EXPECT_EQ(DescribeWaitStatus(*st), "exited with 0") << Logs();
    }
    if (worker_ != nullptr) {
      worker_->Kill(SIGTERM);
      (void)worker_->Wait(absl::Seconds(30));
    }
  }

  // scripts/make-certs.sh into pki/ (the CA made once, then reused) for
  // the given names.
  void MakeCerts(const std::string& names) {
    std::vector<std::string> argv = {
        "/bin/sh", std::string(TF_SOURCE_DIR) + "/scripts/make-certs.sh", dir_.File("pki")};
    for (absl::string_view n : absl::StrSplit(names, ' ')) argv.emplace_back(n);
    CommandResult r = RunCommand(argv, dir_.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // A new token `name` (its secret in NAME.token), its tokens-file line kept.
  void Token(const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> argv = {
        BinPath("tunefarm"), "token", "--name", name, "--secret-file", dir_.File(name + ".token")};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult r = RunCommand(argv, dir_.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    lines_[name] = std::string(absl::StripAsciiWhitespace(r.out));
  }

  // The tokens file: the lines of `names`, then `extra`.
  void WriteTokens(const std::vector<std::string>& names, const std::string& extra = "") {
    std::string text = "# the farm's tokens\n";
    for (const std::string& n : names) absl::StrAppend(&text, lines_.at(n), "\n");
    testing::WriteFile(dir_.File("tokens"), text + extra);
  }

  std::string CaFlag() const { return "--tls_ca=" + dir_.File("pki/ca.pem"); }

  // `tunefarm` as token `token` (a new connection each time).
  CommandResult Cli(const std::string& token, std::vector<std::string> args) const {
    std::vector<std::string> argv = {BinPath("tunefarm"), "--server=" + server_->address(),
                                     CaFlag(), "--token_file=" + dir_.File(token + ".token")};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, dir_.path());
  }

  // ListDevices as token `token` over a new connection that accepts only
  // a certificate (from the farm's CA) naming `host`.
  grpc::Status ListDevicesNaming(const std::string& host, const std::string& token,
                                 v1::ListDevicesResponse* resp) const {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFileOrEmpty(dir_.File("pki/ca.pem"));
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride(host);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    auto stub = v1::TuningService::NewStub(
        grpc::CreateCustomChannel(server_->address(), grpc::SslCredentials(ssl), args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    ctx.AddMetadata("authorization",
                    "Bearer " + std::string(absl::StripAsciiWhitespace(
                                    ReadFileOrEmpty(dir_.File(token + ".token")))));
    v1::ListDevicesRequest req;
    req.set_protocol_version(kProtocolVersion);
    return stub->ListDevices(&ctx, req, resp);
  }

  std::string ServerLog() const { return ReadFileOrEmpty(dir_.File("server.log")); }
  std::string Logs() const {
    return "server:\n" + ServerLog() + "agent:\n" + ReadFileOrEmpty(dir_.File("agent.log")) +
           "worker:\n" + ReadFileOrEmpty(dir_.File("worker.log"));
  }

  // SIGHUP, then wait until the server has logged the end of that reload
  // (its event=reloaded line: every reload here replaces something).
  ::testing::AssertionResult Sighup() {
    const int before = Occurrences(ServerLog(), "event=reloaded");
    server_->process().Kill(SIGHUP);
    if (testing::WaitFor([&] { return Occurrences(ServerLog(), "event=reloaded") > before; },
                         absl::Seconds(60))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "no new event=reloaded:\n" << Logs();
  }

  // orin-01 is online, in the session it opened at the start.
  void ExpectAgentKeptItsSession() {
    EXPECT_TRUE(ShowsOnline(Cli("ops", {"devices"}).out, "orin-01")) << Logs();
    EXPECT_EQ(Occurrences(ServerLog(), "event=registered device=orin-01"), 1) << Logs();
    EXPECT_EQ(Occurrences(ReadFileOrEmpty(dir_.File("agent.log")), "event=registered"), 1)
        << Logs();
  }

  testing::TempDir dir_;
  std::map<std::string, std::string> lines_;  // tokens-file line by token name
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Subprocess> agent_;
  std::unique_ptr<Subprocess> worker_;
};

TEST_F(ServerReloadTest, NewTokensCountAtOnceAndARemovedOneEndsItsSession) {
  ASSERT_NO_FATAL_FAILURE(StartFarm(/*worker=*/true));
  CommandResult r = Cli("viewer", {"devices"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "token not accepted")) << r.err;
  r = Cli("dash", {"cancel", "999"});
  EXPECT_TRUE(absl::StrContains(r.err, "token 'dash' has the reader role")) << r.err;

  // viewer comes, builders goes, dash becomes a submitter, orin gets a
  // second key (its device stays allowed).
  lines_["dash"] = absl::StrReplaceAll(lines_["dash"], {{" reader ", " submitter "}});
  lines_["orin"] = absl::StrReplaceAll(lines_["orin"], {{"keys=x86-test", "keys=x86-test,spare"}});
  WriteTokens({"ops", "orin", "dash", "viewer"});
  ASSERT_TRUE(Sighup());
  EXPECT_TRUE(absl::StrContains(
      ServerLog(), "event=reloaded tokens=4 added=1 removed=1 changed=2 sessions_ended=1"))
      << ServerLog();

  r = Cli("viewer", {"devices"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(ShowsOnline(r.out, "orin-01")) << r.out;
  r = Cli("dash", {"cancel", "999"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "no job 999")) << r.err;  // let in, as a submitter
  r = Cli("builders", {"devices"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "token not accepted")) << r.err;
  // The worker's session ended, saying why; it is refused when it
  // registers again, and stops.
  auto st = worker_->Wait(absl::Seconds(120));
  ASSERT_TRUE(st.ok()) << st.status() << Logs();
  EXPECT_EQ(DescribeWaitStatus(*st), "exited with 1");
  worker_.reset();
  const std::string worker_log = ReadFileOrEmpty(dir_.File("worker.log"));
  EXPECT_TRUE(absl::StrContains(
      worker_log,
      "token 'builders' is no longer in the tokens file; the session of device 'w-1' ended"))
      << worker_log;
  EXPECT_TRUE(absl::StrContains(worker_log, "refused to register this process: token not accepted"))
      << worker_log;
  EXPECT_FALSE(ShowsOnline(Cli("ops", {"devices"}).out, "w-1"));
  ExpectAgentKeptItsSession();
}

TEST_F(ServerReloadTest, ATokensFileThatDoesNotParseKeepsTheTokensBefore) {
  ASSERT_NO_FATAL_FAILURE(StartFarm(/*worker=*/false));
  // viewer added, dash gone, and a line with no such role.
  WriteTokens({"ops", "orin", "viewer"}, "tf_guess superuser\n");
  ASSERT_TRUE(Sighup());
  EXPECT_TRUE(absl::StrContains(
      ServerLog(), absl::StrCat("event=reload_failed what=tokens "
                                "error=\"tokens file ",
                                dir_.File("tokens"), " line 5: unknown role 'superuser'")))
      << ServerLog();
  EXPECT_FALSE(absl::StrContains(ServerLog(), "event=reloaded tokens=")) << ServerLog();
  CommandResult r = Cli("dash", {"devices"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(ShowsOnline(r.out, "orin-01")) << r.out;
  r = Cli("viewer", {"devices"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "token not accepted")) << r.err;
  ExpectAgentKeptItsSession();
}

TEST_F(ServerReloadTest, ANewCertificateServesNewConnectionsAndABadKeyKeepsTheOldOne) {
  ASSERT_NO_FATAL_FAILURE(StartFarm(/*worker=*/false));
  v1::ListDevicesResponse resp;
  EXPECT_EQ(ListDevicesNaming("reloaded.test", "ops", &resp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // A new certificate from the same CA, that also names reloaded.test:
  // served only once the server is told.
  ASSERT_NO_FATAL_FAILURE(MakeCerts("127.0.0.1 reloaded.test"));
  EXPECT_EQ(ListDevicesNaming("reloaded.test", "ops", &resp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(Sighup());
  CommandResult serial = RunCommand(
      {"/usr/bin/openssl", "x509", "-noout", "-serial", "-in", dir_.File("pki/server.pem")},
      dir_.path());
  ASSERT_EQ(serial.exit_code, 0) << serial.err;
  const std::string new_serial(
      absl::StripPrefix(absl::StripAsciiWhitespace(serial.out), "serial="));
  EXPECT_TRUE(absl::StrContains(ServerLog(), "cert_serial=" + new_serial)) << ServerLog();
  grpc::Status named = ListDevicesNaming("reloaded.test", "ops", &resp);
  ASSERT_TRUE(named.ok()) << named.error_message() << Logs();
  ASSERT_EQ(resp.devices_size(), 1);
  EXPECT_EQ(resp.devices(0).state(), v1::DEVICE_STATE_ONLINE);
  ExpectAgentKeptItsSession();

  // A key that is not the certificate's: refused, the pair before stays.
  CommandResult key = RunCommand(
      {"/usr/bin/openssl", "genpkey", "-algorithm", "ed25519", "-out", dir_.File("pki/server.key")},
      dir_.path());
  ASSERT_EQ(key.exit_code, 0) << key.err;
  ASSERT_TRUE(Sighup());
  EXPECT_TRUE(absl::StrContains(
      ServerLog(),
      absl::StrCat("event=reload_failed what=certificate error=\"the key in ",
                   dir_.File("pki/server.key"), " is not the key of the certificate in ",
                   dir_.File("pki/server.pem"))))
      << ServerLog();
  named = ListDevicesNaming("reloaded.test", "ops", &resp);
  EXPECT_TRUE(named.ok()) << named.error_message();
  // Nor does a certificate file that holds no certificate.
  testing::WriteFile(dir_.File("pki/server.pem"), "not a certificate\n");
  ASSERT_TRUE(Sighup());
  EXPECT_TRUE(absl::StrContains(
      ServerLog(), absl::StrCat("event=reload_failed what=certificate error=\"certificate file ",
                                dir_.File("pki/server.pem"), " holds no PEM certificate")))
      << ServerLog();
  named = ListDevicesNaming("reloaded.test", "ops", &resp);
  EXPECT_TRUE(named.ok()) << named.error_message();
  ExpectAgentKeptItsSession();
}

}  // namespace
}  // namespace tunefarm
