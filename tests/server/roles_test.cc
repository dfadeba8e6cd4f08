// Tokens with roles against a real server (in this process, gRPC on
// 127.0.0.1, a real database): what each role may call, what an agent or
// worker token may register as, device ids that cannot be taken over, and
// sessions that only their own token can use; a tokens file reloaded while
// the server runs.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/sha256.h"
#include "gtest/gtest.h"
#include "proto/client.h"
#include "proto/protocol.h"
#include "server/server.h"
#include "tests/server/test_records.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/farm.grpc.pb.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm::server {
namespace {

using ::tunefarm::testing::Conv2d;
using ::tunefarm::testing::kTargetX86;
using ::tunefarm::testing::MakeRecord;

class RolesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(dir_.File("tokens"),
                       absl::StrCat("# the farm's tokens\n", "sha256:", Sha256Hex("admin-secret"),
                                    " admin name=ops\n",
                                    "reader-secret reader name=dash\n"
                                    "submitter-secret submitter name=ci\n"
                                    "qa-secret submitter name=qa\n"
                                    "ci-too-secret submitter name=ci\n"
                                    "orin-secret agent name=orin keys=jetson-orin devices=orin-*\n"
                                    "other-agent-secret agent name=lab\n"
                                    "spare-agent-secret agent name=spare\n"
                                    "worker-secret worker name=builders devices=w-1\n"));
    StartServer();
  }
  // A server on the fixture's database and tokens (again after Shutdown:
  // a restart).
  void StartServer(absl::Duration heartbeat_interval = absl::Seconds(2)) {
    TunefarmServer::Options o;
    o.listen = "127.0.0.1:0";
    o.db_path = dir_.File("roles.db");
    o.tokens_file = dir_.File("tokens");
    o.heartbeat_interval = heartbeat_interval;
    auto s = TunefarmServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  struct Stubs {
    std::unique_ptr<v1::TuningService::Stub> tuning;
    std::unique_ptr<v1::FarmService::Stub> farm;
    ClientOptions options;
    std::unique_ptr<grpc::ClientContext> Ctx() { return MakeContext(options, absl::Seconds(30)); }
  };
  Stubs As(const std::string& token) {
    Stubs s;
    s.options.server = absl::StrCat("127.0.0.1:", server_->port());
    s.options.token = token;
    auto ch = MakeChannel(s.options);
    EXPECT_TRUE(ch.ok());
    s.tuning = v1::TuningService::NewStub(*ch);
    s.farm = v1::FarmService::NewStub(*ch);
    return s;
  }

  static grpc::Status Submit(Stubs& s) {
    v1::SubmitJobRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.mutable_spec()->set_name("roles");
    req.mutable_spec()->mutable_target()->set_spec(kTargetX86);
    req.mutable_spec()->set_device_key("jetson-orin");
    *req.mutable_spec()->add_tasks()->mutable_workload() = Conv2d(8, 8, 8);
    v1::SubmitJobResponse resp;
    return s.tuning->SubmitJob(s.Ctx().get(), req, &resp);
  }
  static grpc::Status ListJobs(Stubs& s) {
    v1::ListJobsRequest req;
    req.set_protocol_version(kProtocolVersion);
    v1::ListJobsResponse resp;
    return s.tuning->ListJobs(s.Ctx().get(), req, &resp);
  }
  static grpc::Status ListDevices(Stubs& s) {
    v1::ListDevicesRequest req;
    req.set_protocol_version(kProtocolVersion);
    v1::ListDevicesResponse resp;
    return s.tuning->ListDevices(s.Ctx().get(), req, &resp);
  }
  static grpc::Status Import(Stubs& s) {
    v1::ImportRecordsRequest req;
    req.set_protocol_version(kProtocolVersion);
    *req.add_records() = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-4, 1);
    v1::ImportRecordsResponse resp;
    return s.tuning->ImportRecords(s.Ctx().get(), req, &resp);
  }
  static grpc::Status Cancel(Stubs& s, int64_t job = 1) {
    v1::CancelJobRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.set_job_id(job);
    v1::Job resp;
    return s.tuning->CancelJob(s.Ctx().get(), req, &resp);
  }
  static grpc::Status Resume(Stubs& s, int64_t job) {
    v1::ResumeJobRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.set_job_id(job);
    v1::Job resp;
    return s.tuning->ResumeJob(s.Ctx().get(), req, &resp);
  }
  static grpc::Status Register(Stubs& s, v1::Role role, const std::string& id,
                               const std::string& key, std::string* session = nullptr) {
    v1::RegisterRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.set_role(role);
    req.set_device_id(id);
    req.set_device_key(key);
    v1::RegisterResponse resp;
    grpc::Status st = s.farm->Register(s.Ctx().get(), req, &resp);
    if (session != nullptr) *session = resp.session_id();
    return st;
  }

  testing::TempDir dir_;
  std::unique_ptr<TunefarmServer> server_;
};

#define EXPECT_DENIED(call, text)                                                     \
  do {                                                                                \
    grpc::Status st_ = (call);                                                        \
    EXPECT_EQ(st_.error_code(), grpc::StatusCode::PERMISSION_DENIED) << #call;        \
    EXPECT_TRUE(absl::StrContains(st_.error_message(), text)) << st_.error_message(); \
  } while (0)

TEST_F(RolesTest, EachRoleCallsOnlyWhatItIsFor) {
  Stubs reader = As("reader-secret"), submitter = As("submitter-secret"), agent = As("orin-secret"),
        worker = As("worker-secret"), admin = As("admin-secret");
  // A reader reads and does nothing else.
  EXPECT_TRUE(ListJobs(reader).ok());
  EXPECT_TRUE(ListDevices(reader).ok());
  EXPECT_DENIED(Submit(reader),
                "SubmitJob: token 'dash' has the reader role; this call needs a submitter or "
                "admin token");
  EXPECT_DENIED(Cancel(reader), "CancelJob");
  EXPECT_DENIED(Import(reader), "ImportRecords");
  EXPECT_DENIED(Register(reader, v1::ROLE_AGENT, "orin-01", "jetson-orin"),
                "needs a worker or agent");
  // A submitter submits and cancels, but imports no timings.
  EXPECT_TRUE(Submit(submitter).ok());
  EXPECT_TRUE(Cancel(submitter).ok());
  EXPECT_DENIED(Import(submitter), "needs an admin token");
  EXPECT_DENIED(Register(submitter, v1::ROLE_WORKER, "w-1", ""), "Register");
  // An agent's or a worker's token serves the farm only.
  for (Stubs* s : {&agent, &worker}) {
    EXPECT_DENIED(ListJobs(*s), "ListJobs");
    EXPECT_DENIED(ListDevices(*s), "ListDevices");
    EXPECT_DENIED(Submit(*s), "SubmitJob");
    EXPECT_DENIED(Cancel(*s), "CancelJob");
    EXPECT_DENIED(Import(*s), "ImportRecords");
  }
  // The admin does everything.
  EXPECT_TRUE(Import(admin).ok());
  EXPECT_TRUE(Submit(admin).ok());
  // No token, or an unknown one: not even a read.
  Stubs nobody = As(""), guess = As("orin-secre");
  EXPECT_EQ(ListJobs(nobody).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ListJobs(guess).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// A job is cancelled or resumed by the token that submitted it or by an
// admin; another submitter, even one of the same name, is refused.
TEST_F(RolesTest, OnlyTheOwnerOrAnAdminCancelsOrResumesAJob) {
  Stubs ci = As("submitter-secret"), qa = As("qa-secret"), ci_too = As("ci-too-secret"),
        admin = As("admin-secret");
  ASSERT_TRUE(Submit(ci).ok());  // job 1
  EXPECT_DENIED(Cancel(qa, 1),
                "CancelJob: job 1 belongs to token 'ci'; token 'qa' may not cancel it (its owner "
                "or an admin token may)");
  EXPECT_DENIED(Resume(qa, 1), "token 'qa' may not resume it");
  EXPECT_DENIED(Cancel(ci_too, 1), "job 1 belongs to token 'ci'");
  EXPECT_TRUE(Resume(ci, 1).ok());
  EXPECT_TRUE(Cancel(ci, 1).ok());
  ASSERT_TRUE(Submit(qa).ok());  // job 2
  EXPECT_DENIED(Cancel(ci, 2), "job 2 belongs to token 'qa'");
  EXPECT_TRUE(Cancel(admin, 2).ok());
  // A job that does not exist is not found, whoever asks.
  EXPECT_EQ(Cancel(qa, 99).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(RolesTest, AgentsAndWorkersRegisterOnlyAsTheirTokenAllows) {
  Stubs agent = As("orin-secret"), worker = As("worker-secret");
  EXPECT_DENIED(Register(agent, v1::ROLE_WORKER, "orin-01", ""),
                "token 'orin' is an agent token; it cannot register as a worker");
  EXPECT_DENIED(Register(worker, v1::ROLE_AGENT, "w-1", "jetson-orin"),
                "cannot register as an agent");
  EXPECT_DENIED(Register(agent, v1::ROLE_AGENT, "orin-01", "x86-avx512"),
                "may not register device id 'orin-01' for key 'x86-avx512'");
  EXPECT_DENIED(Register(agent, v1::ROLE_AGENT, "xavier-01", "jetson-orin"), "xavier-01");
  EXPECT_DENIED(Register(worker, v1::ROLE_WORKER, "w-2", ""), "may not register device id 'w-2'");
  EXPECT_TRUE(Register(agent, v1::ROLE_AGENT, "orin-01", "jetson-orin").ok());
  EXPECT_TRUE(Register(worker, v1::ROLE_WORKER, "w-1", "").ok());
}

TEST_F(RolesTest, ADeviceAndItsSessionBelongToTheTokenThatRegisteredIt) {
  Stubs orin = As("orin-secret"), lab = As("other-agent-secret"), worker = As("worker-secret");
  std::string session;
  ASSERT_TRUE(Register(orin, v1::ROLE_AGENT, "orin-01", "jetson-orin", &session).ok());
  ASSERT_FALSE(session.empty());
  // Another agent token, unlimited as it is, cannot take the device id
  // over: orin's devices= names it.
  EXPECT_DENIED(Register(lab, v1::ROLE_AGENT, "orin-01", "jetson-orin"),
                "device id 'orin-01' is reserved by the devices= of token(s) 'orin'; token 'lab' "
                "cannot register it");
  // Nor use its session: heartbeats, the work stream, results.
  v1::HeartbeatRequest hb;
  hb.set_protocol_version(kProtocolVersion);
  hb.set_session_id(session);
  v1::HeartbeatResponse hb_resp;
  EXPECT_DENIED(lab.farm->Heartbeat(lab.Ctx().get(), hb, &hb_resp), "belongs to another token");
  v1::ReportResultRequest forged;
  forged.set_protocol_version(kProtocolVersion);
  forged.set_session_id(session);
  forged.set_lease_id("L0");
  forged.mutable_measure()->set_status(v1::MEASURE_STATUS_OK);
  forged.mutable_measure()->add_costs_sec(1e-9);
  v1::ReportResultResponse rr;
  EXPECT_DENIED(lab.farm->ReportResult(lab.Ctx().get(), forged, &rr), "belongs to another token");
  v1::StreamWorkRequest sw;
  sw.set_protocol_version(kProtocolVersion);
  sw.set_session_id(session);
  auto ctx = lab.Ctx();
  auto stream = lab.farm->StreamWork(ctx.get(), sw);
  v1::WorkLease lease;
  EXPECT_FALSE(stream->Read(&lease));
  EXPECT_DENIED(stream->Finish(), "belongs to another token");
  // Its own token heartbeats it, and registers the board again after a restart.
  EXPECT_TRUE(orin.farm->Heartbeat(orin.Ctx().get(), hb, &hb_resp).ok());
  EXPECT_FALSE(hb_resp.register_again());
  EXPECT_TRUE(Register(orin, v1::ROLE_AGENT, "orin-01", "jetson-orin").ok());
  // An agent session reports no builds; a worker session no measurements.
  v1::ReportResultRequest build = forged;
  build.mutable_build()->set_artifact(
      "\x7f"
      "ELF");
  std::string fresh;
  ASSERT_TRUE(Register(orin, v1::ROLE_AGENT, "orin-02", "jetson-orin", &fresh).ok());
  build.set_session_id(fresh);
  EXPECT_DENIED(orin.farm->ReportResult(orin.Ctx().get(), build, &rr),
                "a ROLE_AGENT session cannot report a build");
  std::string worker_session;
  ASSERT_TRUE(Register(worker, v1::ROLE_WORKER, "w-1", "", &worker_session).ok());
  forged.set_session_id(worker_session);
  EXPECT_DENIED(worker.farm->ReportResult(worker.Ctx().get(), forged, &rr),
                "a ROLE_WORKER session cannot report a measurement or model run");
  // A lease nobody issued is still unknown to the session's own token.
  forged.set_session_id(fresh);
  EXPECT_EQ(orin.farm->ReportResult(orin.Ctx().get(), forged, &rr).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// An id no token's devices= names belongs to the first token that
// registers it, in the database: across a restart too, so that nobody can
// take a board's or a worker's id in the moments before it dials back in.
TEST_F(RolesTest, ADeviceIdStaysItsOwnersAcrossARestart) {
  {
    Stubs lab = As("other-agent-secret"), spare = As("spare-agent-secret");
    ASSERT_TRUE(Register(lab, v1::ROLE_AGENT, "bench-01", "x86").ok());
    grpc::Status taken = Register(spare, v1::ROLE_AGENT, "bench-01", "x86");
    EXPECT_EQ(taken.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_TRUE(absl::StrContains(taken.error_message(),
                                  "device id 'bench-01' belongs to token 'lab'; token 'spare' "
                                  "cannot register it"))
        << taken.error_message();
  }
  server_->Shutdown();
  server_.reset();
  ASSERT_NO_FATAL_FAILURE(StartServer());
  Stubs lab = As("other-agent-secret"), spare = As("spare-agent-secret");
  EXPECT_EQ(Register(spare, v1::ROLE_AGENT, "bench-01", "x86").error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  // Nor as a worker's id, nor the worker's own, reserved by its token.
  EXPECT_DENIED(Register(lab, v1::ROLE_AGENT, "w-1", "x86"),
                "device id 'w-1' is reserved by the devices= of token(s) 'builders'");
  EXPECT_TRUE(Register(lab, v1::ROLE_AGENT, "bench-01", "x86").ok());
  // The owner is shown with the device.
  v1::ListDevicesRequest req;
  req.set_protocol_version(kProtocolVersion);
  v1::ListDevicesResponse resp;
  Stubs admin = As("admin-secret");
  ASSERT_TRUE(admin.tuning->ListDevices(admin.Ctx().get(), req, &resp).ok());
  bool found = false;
  for (const v1::Device& d : resp.devices()) {
    if (d.device_id() != "bench-01") continue;
    found = true;
    EXPECT_EQ(d.owner(), "lab");
  }
  EXPECT_TRUE(found);
}

// A tokens file read again while the server runs: new tokens and new
// rights count from the next call; the sessions of a removed token, or of
// one that may no longer serve its device, end saying why; every other
// session goes on; a file that does not parse changes nothing.
TEST_F(RolesTest, AReloadedTokensFileEndsOnlyTheSessionsItNoLongerAllows) {
  // Sessions live 3 minutes without heartbeats: only the reload ends them.
  server_->Shutdown();
  server_.reset();
  ASSERT_NO_FATAL_FAILURE(StartServer(absl::Minutes(1)));
  Stubs orin = As("orin-secret"), lab = As("other-agent-secret"), worker = As("worker-secret"),
        dash = As("reader-secret"), newbie = As("new-reader-secret");
  std::string orin_session, lab_session, worker_session;
  ASSERT_TRUE(Register(orin, v1::ROLE_AGENT, "orin-01", "jetson-orin", &orin_session).ok());
  ASSERT_TRUE(Register(lab, v1::ROLE_AGENT, "bench-01", "x86", &lab_session).ok());
  ASSERT_TRUE(Register(worker, v1::ROLE_WORKER, "w-1", "", &worker_session).ok());
  auto open_stream = [](Stubs& s, const std::string& session,
                        std::unique_ptr<grpc::ClientContext>* ctx) {
    v1::StreamWorkRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.set_session_id(session);
    *ctx = s.Ctx();
    return s.farm->StreamWork(ctx->get(), req);
  };
  std::unique_ptr<grpc::ClientContext> orin_ctx, worker_ctx;
  auto orin_stream = open_stream(orin, orin_session, &orin_ctx);
  auto worker_stream = open_stream(worker, worker_session, &worker_ctx);
  EXPECT_EQ(ListJobs(newbie).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_DENIED(Submit(dash), "has the reader role");

  // The worker's token goes, orin's no longer covers orin-01, lab is
  // renamed, dash becomes a submitter, and a new reader comes.
  const std::string before = testing::ReadFileOrEmpty(dir_.File("tokens"));
  std::string after = absl::StrReplaceAll(
      before, {{"worker-secret worker name=builders devices=w-1\n", ""},
               {"devices=orin-*", "devices=orin-02"},
               {"other-agent-secret agent name=lab", "other-agent-secret agent name=lab2"},
               {"reader-secret reader name=dash", "reader-secret submitter name=dash"}});
  after += "new-reader-secret reader name=newbie\n";
  ASSERT_NE(after, before);
  testing::WriteFile(dir_.File("tokens"), after);
  ASSERT_TRUE(server_->Reload().ok());

  EXPECT_TRUE(ListJobs(newbie).ok());
  EXPECT_TRUE(Submit(dash).ok());
  EXPECT_EQ(ListJobs(worker).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::WorkLease lease;
  EXPECT_FALSE(worker_stream->Read(&lease));
  grpc::Status worker_end = worker_stream->Finish();
  EXPECT_EQ(worker_end.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(worker_end.error_message(),
            "token 'builders' is no longer in the tokens file; the session of device 'w-1' ended");
  EXPECT_FALSE(orin_stream->Read(&lease));
  grpc::Status orin_end = orin_stream->Finish();
  EXPECT_EQ(orin_end.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(absl::StrContains(orin_end.error_message(),
                                "the tokens file changed: token 'orin' may not register device id "
                                "'orin-01' for key 'jetson-orin'"))
      << orin_end.error_message();
  v1::HeartbeatRequest hb;
  hb.set_protocol_version(kProtocolVersion);
  hb.set_session_id(orin_session);
  v1::HeartbeatResponse hb_resp;
  EXPECT_DENIED(orin.farm->Heartbeat(orin.Ctx().get(), hb, &hb_resp), "ended");
  // The renamed token's session goes on under its new name.
  hb.set_session_id(lab_session);
  ASSERT_TRUE(lab.farm->Heartbeat(lab.Ctx().get(), hb, &hb_resp).ok());
  EXPECT_FALSE(hb_resp.register_again());
  auto online = [&] {
    v1::ListDevicesRequest req;
    req.set_protocol_version(kProtocolVersion);
    v1::ListDevicesResponse resp;
    Stubs admin = As("admin-secret");
    EXPECT_TRUE(admin.tuning->ListDevices(admin.Ctx().get(), req, &resp).ok());
    std::string ids;
    for (const v1::Device& d : resp.devices()) {
      if (d.state() == v1::DEVICE_STATE_ONLINE) absl::StrAppend(&ids, d.device_id(), " ");
    }
    return ids;
  };
  EXPECT_EQ(online(), "bench-01 ");

  // A file that does not parse: the error names it and its line, and the
  // tokens loaded before stay.
  testing::WriteFile(dir_.File("tokens"), after + "guess superuser\n");
  absl::Status broken = server_->Reload();
  EXPECT_TRUE(absl::IsInvalidArgument(broken)) << broken;
  EXPECT_TRUE(absl::StrContains(
      broken.message(),
      absl::StrCat("tokens file ", dir_.File("tokens"), " line 11: unknown role 'superuser'")))
      << broken;
  EXPECT_TRUE(ListJobs(newbie).ok());
  EXPECT_EQ(ListJobs(worker).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(lab.farm->Heartbeat(lab.Ctx().get(), hb, &hb_resp).ok());
  EXPECT_EQ(online(), "bench-01 ");
}

}  // namespace
}  // namespace tunefarm::server
