// The tuning server's services over a real gRPC channel on 127.0.0.1, with
// the server in this process (TunefarmServer, port 0) and a real database.
#include <thread>

#include "common/logging.h"
#include "gtest/gtest.h"
#include "proto/client.h"
#include "proto/farm_session.h"
#include "proto/protocol.h"
#include "server/server.h"
#include "tests/server/test_records.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/farm.grpc.pb.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm::server {
namespace {

using ::tunefarm::testing::Conv2d;
using ::tunefarm::testing::kTargetX86;
using ::tunefarm::testing::MakeRecord;

class ServiceTest : public ::testing::Test {
 protected:
  void StartServer(const std::string& tokens_file = "", int max_message_bytes = 0) {
    TunefarmServer::Options o;
    o.listen = "127.0.0.1:0";
    o.db_path = dir_.File("svc.db");
    o.tokens_file = tokens_file;
    o.heartbeat_interval = absl::Milliseconds(100);
    o.max_message_bytes = max_message_bytes;
    auto s = TunefarmServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    client_.server = "127.0.0.1:" + std::to_string(server_->port());
    auto ch = MakeChannel(client_);
    ASSERT_TRUE(ch.ok());
    tuning_ = v1::TuningService::NewStub(*ch);
    farm_ = v1::FarmService::NewStub(*ch);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  std::unique_ptr<grpc::ClientContext> Ctx() { return MakeContext(client_, absl::Seconds(30)); }

  int64_t Submit() {
    v1::SubmitJobRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.mutable_spec()->set_name("svc");
    req.mutable_spec()->mutable_target()->set_spec(kTargetX86);
    req.mutable_spec()->set_device_key("x86-avx512");
    *req.mutable_spec()->add_tasks()->mutable_workload() = Conv2d(8, 8, 8);
    v1::SubmitJobResponse resp;
    grpc::Status s = tuning_->SubmitJob(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  testing::TempDir dir_;
  std::unique_ptr<TunefarmServer> server_;
  ClientOptions client_;
  std::unique_ptr<v1::TuningService::Stub> tuning_;
  std::unique_ptr<v1::FarmService::Stub> farm_;
};

TEST_F(ServiceTest, RejectsMissingAndUnknownProtocolVersion) {
  StartServer();
  v1::ListJobsRequest req;
  v1::ListJobsResponse resp;
  grpc::Status s = tuning_->ListJobs(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("no protocol_version"), std::string::npos);
  req.set_protocol_version(99);
  s = tuning_->ListJobs(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("99"), std::string::npos);
  v1::RegisterRequest reg;
  v1::RegisterResponse reg_resp;
  s = farm_->Register(Ctx().get(), reg, &reg_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ServiceTest, ImportQueryExport) {
  StartServer();
  v1::ImportRecordsRequest imp;
  imp.set_protocol_version(kProtocolVersion);
  for (int i = 1; i <= 30; ++i)
    *imp.add_records() = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-3 / i, i);
  imp.mutable_records(0)->set_job_id(12345);  // foreign job ids are dropped, not an error
  v1::ImportRecordsResponse imp_resp;
  grpc::Status s = tuning_->ImportRecords(Ctx().get(), imp, &imp_resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(imp_resp.imported(), 30);
  s = tuning_->ImportRecords(Ctx().get(), imp, &imp_resp);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(imp_resp.imported(), 0);
  EXPECT_EQ(imp_resp.duplicates(), 30);

  v1::QueryBestRequest q;
  q.set_protocol_version(kProtocolVersion);
  *q.mutable_workload()->mutable_workload() = Conv2d(8, 8, 8);
  q.mutable_target()->set_spec(kTargetX86);
  q.set_top_k(2);
  v1::QueryBestResponse best;
  s = tuning_->QueryBest(Ctx().get(), q, &best);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(best.entries_size(), 1);
  ASSERT_EQ(best.entries(0).records_size(), 2);
  EXPECT_EQ(best.entries(0).records(0).schedule().steps(0).split().lengths(0), 30);

  v1::ExportRecordsRequest ex;
  ex.set_protocol_version(kProtocolVersion);
  auto ctx = Ctx();
  auto reader = tuning_->ExportRecords(ctx.get(), ex);
  v1::RecordChunk chunk;
  int n = 0;
  while (reader->Read(&chunk)) n += chunk.records_size();
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(n, 30);

  // A bad record rejects the batch and names it.
  v1::ImportRecordsRequest bad;
  bad.set_protocol_version(kProtocolVersion);
  *bad.add_records() = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-3, 100);
  *bad.add_records() = MakeRecord(Conv2d(8, 8, 8), "cuda -arch=sm_1000", 1e-3, 101);
  s = tuning_->ImportRecords(Ctx().get(), bad, &imp_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("record 1"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("-arch"), std::string::npos) << s.error_message();
}

TEST_F(ServiceTest, JobLifecycleAndWatch) {
  StartServer();
  int64_t id = Submit();
  ASSERT_GT(id, 0);
  v1::WatchJobRequest w;
  w.set_protocol_version(kProtocolVersion);
  w.set_job_id(id);
  auto watch_ctx = Ctx();
  auto reader = tuning_->WatchJob(watch_ctx.get(), w);
  v1::JobEvent ev;
  ASSERT_TRUE(reader->Read(&ev));
  // The job starts at once; with no worker or agent connected it waits.
  EXPECT_TRUE(ev.state() == v1::JOB_STATE_QUEUED || ev.state() == v1::JOB_STATE_RUNNING ||
              ev.state() == v1::JOB_STATE_WAITING_FOR_DEVICE)
      << v1::JobState_Name(ev.state());

  v1::CancelJobRequest c;
  c.set_protocol_version(kProtocolVersion);
  c.set_job_id(id);
  v1::Job job;
  ASSERT_TRUE(tuning_->CancelJob(Ctx().get(), c, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  // The watcher sees the change and its stream ends.
  do {
    ASSERT_TRUE(reader->Read(&ev));
  } while (ev.state() != v1::JOB_STATE_CANCELLED);
  EXPECT_FALSE(reader->Read(&ev));
  EXPECT_TRUE(reader->Finish().ok());

  grpc::Status again = tuning_->CancelJob(Ctx().get(), c, &job);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  c.set_job_id(999);
  EXPECT_EQ(tuning_->CancelJob(Ctx().get(), c, &job).error_code(), grpc::StatusCode::NOT_FOUND);

  v1::SubmitJobRequest bad;
  bad.set_protocol_version(kProtocolVersion);
  bad.mutable_spec()->mutable_target()->set_spec("llvm -mtriple=mips-linux-gnu");
  bad.mutable_spec()->set_device_key("k");
  *bad.mutable_spec()->add_tasks()->mutable_workload() = Conv2d(8, 8, 8);
  v1::SubmitJobResponse resp;
  grpc::Status s = tuning_->SubmitJob(Ctx().get(), bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("-mtriple"), std::string::npos);

  // A float16 task for a CPU target: refused at submit, naming the task.
  v1::SubmitJobRequest half = bad;
  half.mutable_spec()->mutable_target()->set_spec(kTargetX86);
  *half.mutable_spec()->add_tasks()->mutable_workload() = Conv2d(8, 8, 8);
  for (v1::TensorSpec& t :
       *half.mutable_spec()->mutable_tasks(1)->mutable_workload()->mutable_inputs())
    t.set_dtype(v1::DTYPE_FLOAT16);
  s = tuning_->SubmitJob(Ctx().get(), half, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("task 1: float16 kernels build for cuda targets only"),
            std::string::npos)
      << s.error_message();
  // A precision belongs to a model job; explicit tasks carry their dtypes.
  v1::SubmitJobRequest with_precision = bad;
  with_precision.mutable_spec()->mutable_target()->set_spec(kTargetX86);
  with_precision.mutable_spec()->set_precision(v1::DTYPE_FLOAT16);
  s = tuning_->SubmitJob(Ctx().get(), with_precision, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("precision goes with an ONNX model"), std::string::npos)
      << s.error_message();
  v1::SubmitJobRequest with_layout = bad;
  with_layout.mutable_spec()->mutable_target()->set_spec(kTargetX86);
  with_layout.mutable_spec()->set_layout(v1::DATA_LAYOUT_NHWC);
  s = tuning_->SubmitJob(Ctx().get(), with_layout, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("layout goes with an ONNX model"), std::string::npos)
      << s.error_message();
  // bfloat16: likewise, and for a cuda arch before sm_80.
  for (v1::TensorSpec& t :
       *half.mutable_spec()->mutable_tasks(1)->mutable_workload()->mutable_inputs())
    t.set_dtype(v1::DTYPE_BFLOAT16);
  s = tuning_->SubmitJob(Ctx().get(), half, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("task 1: bfloat16 kernels build for cuda targets"),
            std::string::npos)
      << s.error_message();
  half.mutable_spec()->mutable_target()->set_spec("cuda -arch=sm_75");
  s = tuning_->SubmitJob(Ctx().get(), half, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("task 1: bfloat16 kernels need sm_80 or newer (sm_75"),
            std::string::npos)
      << s.error_message();
  // A tf32 product: cuda sm_80 and newer too.
  for (v1::TensorSpec& t :
       *half.mutable_spec()->mutable_tasks(1)->mutable_workload()->mutable_inputs())
    t.set_dtype(v1::DTYPE_FLOAT32);
  half.mutable_spec()->mutable_tasks(1)->mutable_workload()->set_tf32(true);
  s = tuning_->SubmitJob(Ctx().get(), half, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("task 1: tf32 products need sm_80 or newer (sm_75 has no tf32"),
            std::string::npos)
      << s.error_message();
  half.mutable_spec()->mutable_target()->set_spec(kTargetX86);
  s = tuning_->SubmitJob(Ctx().get(), half, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("task 1: tf32 products build for cuda targets only"),
            std::string::npos)
      << s.error_message();
}

TEST_F(ServiceTest, OversizedRequestIsRefusedAndStoresNothing) {
  StartServer("", 1 << 20);
  v1::ImportRecordsRequest imp;
  imp.set_protocol_version(kProtocolVersion);
  for (int i = 1; i <= 300; ++i) {
    v1::Record r = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-3, i);
    r.set_error(std::string(8000, 'x'));  // ~2.4 MB in all
    *imp.add_records() = r;
  }
  v1::ImportRecordsResponse resp;
  grpc::Status s = tuning_->ImportRecords(Ctx().get(), imp, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("message larger than max"), std::string::npos)
      << s.error_message();
  imp.mutable_records()->DeleteSubrange(10, 290);
  s = tuning_->ImportRecords(Ctx().get(), imp, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.imported(), 10);
}

TEST_F(ServiceTest, TokensAreRequiredWhenConfigured) {
  std::string tokens = dir_.File("tokens");
  testing::WriteFile(tokens, "# farm tokens\nsecret-1\n");
  StartServer(tokens);
  v1::ListJobsRequest req;
  req.set_protocol_version(kProtocolVersion);
  v1::ListJobsResponse resp;
  EXPECT_EQ(tuning_->ListJobs(Ctx().get(), req, &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  client_.token = "wrong";
  EXPECT_EQ(tuning_->ListJobs(Ctx().get(), req, &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  client_.token = "secret-1";
  EXPECT_TRUE(tuning_->ListJobs(Ctx().get(), req, &resp).ok());
}

TEST_F(ServiceTest, FarmSessionRegistersAndShowsOnline) {
  StartServer();
  FarmSession::Options o;
  o.client = client_;
  o.role = v1::ROLE_AGENT;
  o.device_id = "board-1";
  o.device_key = "x86-avx512";
  o.capabilities.set_cores(4);
  FarmSession session(o, Logger("test"));
  std::thread t([&] {
    session.Run([](const v1::WorkLease&) { return v1::ReportResultRequest(); }).IgnoreError();
  });
  auto device = [&](v1::Device* d) {
    v1::ListDevicesRequest req;
    req.set_protocol_version(kProtocolVersion);
    v1::ListDevicesResponse resp;
    if (!tuning_->ListDevices(Ctx().get(), req, &resp).ok() || resp.devices_size() != 1) {
      return false;
    }
    *d = resp.devices(0);
    return true;
  };
  auto online = [&] {
    v1::Device d;
    return device(&d) && d.state() == v1::DEVICE_STATE_ONLINE && d.capabilities().cores() == 4;
  };
  EXPECT_TRUE(testing::WaitFor(online, absl::Seconds(30)));
  // Heartbeats keep arriving: last_seen moves on by several intervals.
  v1::Device first;
  ASSERT_TRUE(device(&first));
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        v1::Device d;
        return device(&d) && d.state() == v1::DEVICE_STATE_ONLINE &&
               d.last_seen_unix_ms() >= first.last_seen_unix_ms() + 400;
      },
      absl::Seconds(30)));
  session.Stop();
  t.join();
  EXPECT_GE(session.registrations(), 1);
  // Without heartbeats the device goes offline.
  EXPECT_TRUE(testing::WaitFor([&] { return !online(); }, absl::Seconds(30)));

  v1::RegisterRequest bad;
  bad.set_protocol_version(kProtocolVersion);
  bad.set_role(v1::ROLE_AGENT);
  bad.set_device_id("board 2; rm -rf");
  v1::RegisterResponse resp;
  grpc::Status s = farm_->Register(Ctx().get(), bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("device_id"), std::string::npos);
}

}  // namespace
}  // namespace tunefarm::server
