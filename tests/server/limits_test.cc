// The server's bounds against a real server in this process (gRPC on
// 127.0.0.1, a real database): every request past one is refused naming
// the field and the bound, and nothing of it is stored.
#include "server/limits.h"

#include <dirent.h>

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/client.h"
#include "proto/protocol.h"
#include "server/job_runner.h"
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

// The stop rule's kinds: the same failure with another temporary file,
// lease or size is one kind; another failure is another.
TEST(FailureKind, VaryingPartsAreTakenOut) {
  EXPECT_EQ(FailureKind("the kernel library did not load: /tmp/tunefarm-kernel-a8Xk2.so: cannot "
                        "open shared object file"),
            FailureKind("the kernel library did not load: /tmp/tunefarm-kernel-Q0zz7.so: cannot "
                        "open shared object file"));
  EXPECT_EQ(FailureKind("kernel process killed by signal 11 after 0.31 s"),
            "kernel process killed by signal # after #.# s");
  EXPECT_EQ(FailureKind("lease L3f9a0b off by 1e-3"), FailureKind("lease Lc0ffee77 off by 2e-5"));
  EXPECT_NE(FailureKind("kernel process killed by signal 11"),
            FailureKind("no result within 10.00 s"));
  EXPECT_EQ(FailureKind("this agent has no GPU: it cannot run a CUDA build (cubin/PTX)"),
            "this agent has no GPU: it cannot run a CUDA build <path>");
}

// A board whose CUDA driver predates every worker's toolkit gets PTX built
// through LLVM; a current one, a board of another key, an offline one or a
// farm without NVRTC workers does not.
TEST(NeedsLlvmPtx, OnlyForBoardsOlderThanEveryWorkersToolkit) {
  auto device = [](v1::Role role, const std::string& id, const std::string& key,
                   const std::string& cuda, bool online = true) {
    v1::Device d;
    d.set_role(role);
    d.set_device_id(id);
    d.set_device_key(key);
    d.set_state(online ? v1::DEVICE_STATE_ONLINE : v1::DEVICE_STATE_OFFLINE);
    v1::Capabilities* c = d.mutable_capabilities();
    if (role == v1::ROLE_AGENT) {
      c->set_has_gpu(true);
      c->mutable_fingerprint()->set_cuda_driver(cuda);
    } else {
      c->mutable_fingerprint()->set_cuda_toolkit(cuda);
    }
    return d;
  };
  const v1::Device worker13 = device(v1::ROLE_WORKER, "w13", "", "13.0");
  const v1::Device worker12 = device(v1::ROLE_WORKER, "w12", "", "12.4");
  const v1::Device jetpack5 = device(v1::ROLE_AGENT, "orin-01", "orin", "11.4");
  const v1::Device current = device(v1::ROLE_AGENT, "h100-01", "h100", "13.0");
  std::string why;
  EXPECT_TRUE(NeedsLlvmPtx({worker13, jetpack5}, "orin", &why));
  EXPECT_EQ(why, "orin-01's CUDA driver is 11.4, the workers' NVRTC 13.0: PTX through LLVM");
  EXPECT_FALSE(NeedsLlvmPtx({worker13, current}, "h100", nullptr));
  EXPECT_FALSE(NeedsLlvmPtx({worker13, jetpack5}, "h100", nullptr));
  EXPECT_FALSE(NeedsLlvmPtx({device(v1::ROLE_WORKER, "w", "", "")}, "orin", nullptr));
  EXPECT_FALSE(
      NeedsLlvmPtx({worker13, device(v1::ROLE_AGENT, "orin-02", "orin", "11.4", /*online=*/false)},
                   "orin", nullptr));
  // Against the oldest toolkit: a 12.x board with a 12.4 worker online is served by it.
  EXPECT_FALSE(NeedsLlvmPtx({worker13, worker12, device(v1::ROLE_AGENT, "o", "orin", "12.6")},
                            "orin", nullptr));
  EXPECT_TRUE(NeedsLlvmPtx({worker13, worker12, jetpack5}, "orin", nullptr));
}

class LimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TunefarmServer::Options o;
    o.listen = "127.0.0.1:0";
    o.db_path = dir_.File("limits.db");
    auto s = TunefarmServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    client_.server = absl::StrCat("127.0.0.1:", server_->port());
    auto ch = MakeChannel(client_);
    ASSERT_TRUE(ch.ok());
    tuning_ = v1::TuningService::NewStub(*ch);
    farm_ = v1::FarmService::NewStub(*ch);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  std::unique_ptr<grpc::ClientContext> Ctx() { return MakeContext(client_, absl::Seconds(30)); }

  v1::JobSpec Spec() {
    v1::JobSpec spec;
    spec.set_name("limits");
    spec.mutable_target()->set_spec(kTargetX86);
    spec.set_device_key("x86-avx512");
    *spec.add_tasks()->mutable_workload() = Conv2d(8, 8, 8);
    return spec;
  }
  grpc::Status Submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest req;
    req.set_protocol_version(kProtocolVersion);
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    return tuning_->SubmitJob(Ctx().get(), req, &resp);
  }
  int Jobs() {
    v1::ListJobsRequest req;
    req.set_protocol_version(kProtocolVersion);
    v1::ListJobsResponse resp;
    EXPECT_TRUE(tuning_->ListJobs(Ctx().get(), req, &resp).ok());
    return resp.jobs_size();
  }

  testing::TempDir dir_;
  std::unique_ptr<TunefarmServer> server_;
  ClientOptions client_;
  std::unique_ptr<v1::TuningService::Stub> tuning_;
  std::unique_ptr<v1::FarmService::Stub> farm_;
};

#define EXPECT_REFUSED(call, text)                                                    \
  do {                                                                                \
    grpc::Status st_ = (call);                                                        \
    EXPECT_EQ(st_.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << #call;         \
    EXPECT_TRUE(absl::StrContains(st_.error_message(), text)) << st_.error_message(); \
  } while (0)

TEST_F(LimitsTest, JobSpecsPastABoundAreRefusedAndNotStored) {
  v1::JobSpec s = Spec();
  s.set_name(std::string(300, 'n'));
  EXPECT_REFUSED(Submit(s), "the job name's length is 300, over the bound of 200");
  s = Spec();
  s.set_name("ok\n6      forged  succeeded");
  EXPECT_REFUSED(Submit(s), "the job name holds a control character (0x0a)");
  s = Spec();
  s.set_device_key("x86 avx512");
  EXPECT_REFUSED(Submit(s), "a device key is [A-Za-z0-9._:-]");
  s = Spec();
  s.mutable_measure()->set_timeout_ms(2147483647);
  EXPECT_REFUSED(Submit(s), "measure.timeout_ms is 2147483647, over the bound of 600000");
  s = Spec();
  s.mutable_measure()->set_number(-1);
  EXPECT_REFUSED(Submit(s), "measure.number is -1; it cannot be negative");
  // A workload whose buffers no board holds (2 TiB of weights) is refused
  // before any agent makes its inputs.
  s = Spec();
  s.clear_tasks();
  v1::Workload* dense = s.add_tasks()->mutable_workload();
  dense->set_op(v1::OP_KIND_DENSE);
  for (auto shape : {std::vector<int64_t>{1, 1048576}, std::vector<int64_t>{524288, 1048576}}) {
    v1::TensorSpec* t = dense->add_inputs();
    for (int64_t d : shape) t->add_shape(d);
  }
  EXPECT_REFUSED(Submit(s), "needs 2048.0 GiB for its inputs and output, more than the bound");
  EXPECT_EQ(Jobs(), 0);

  // With an agent of the key that has 8 GiB, its memory is the bound.
  v1::RegisterRequest reg;
  reg.set_protocol_version(kProtocolVersion);
  reg.set_role(v1::ROLE_AGENT);
  reg.set_device_id("board-1");
  reg.set_device_key("x86-avx512");
  reg.mutable_capabilities()->set_memory_bytes(int64_t{8} << 30);
  v1::RegisterResponse reg_resp;
  ASSERT_TRUE(farm_->Register(Ctx().get(), reg, &reg_resp).ok());
  s = Spec();
  s.clear_tasks();
  v1::Workload* big = s.add_tasks()->mutable_workload();
  big->set_op(v1::OP_KIND_DENSE);
  for (auto shape : {std::vector<int64_t>{1, 65536}, std::vector<int64_t>{65536, 65536}}) {
    v1::TensorSpec* t = big->add_inputs();
    for (int64_t d : shape) t->add_shape(d);
  }
  EXPECT_REFUSED(Submit(s), "more than the memory of any agent of the key (8.0 GiB)");
  EXPECT_TRUE(Submit(Spec()).ok());
  EXPECT_EQ(Jobs(), 1);

  // Capabilities past their bound at registration.
  reg.set_device_id("board-2");
  reg.mutable_capabilities()->set_gpu_name(std::string(100000, 'g'));
  EXPECT_REFUSED(farm_->Register(Ctx().get(), reg, &reg_resp), "the capabilities' size in bytes");
}

TEST_F(LimitsTest, ImportsOfImplausibleOrOversizedRecordsAreRefused) {
  auto import = [&](std::vector<v1::Record> records) {
    v1::ImportRecordsRequest req;
    req.set_protocol_version(kProtocolVersion);
    for (v1::Record& r : records) *req.add_records() = r;
    v1::ImportRecordsResponse resp;
    return tuning_->ImportRecords(Ctx().get(), req, &resp);
  };
  // 5e-324 s and 1 ns for a conv of ~0.6 MFLOP: faster than physics.
  v1::Record tiny = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 5e-324, 1);
  EXPECT_REFUSED(import({MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-3, 2), tiny}),
                 "record 1: implausible timing");
  v1::Record steps = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-3, 3);
  for (int i = 0; i < 5000; ++i) *steps.mutable_schedule()->add_steps() = steps.schedule().steps(0);
  EXPECT_REFUSED(import({steps}),
                 "record 0: its schedule's step count is 5002, over the bound of 4096");
  std::vector<v1::Record> many(10001, MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-3, 4));
  EXPECT_REFUSED(import(many), "the batch's record count is 10001, over the bound of 10000");
  // Nothing of the refused batches was stored; a plausible one is.
  v1::ListRecordsRequest list;
  list.set_protocol_version(kProtocolVersion);
  v1::ListRecordsResponse listed;
  ASSERT_TRUE(tuning_->ListRecords(Ctx().get(), list, &listed).ok());
  EXPECT_EQ(listed.records_size(), 0);
  EXPECT_TRUE(import({MakeRecord(Conv2d(8, 8, 8), kTargetX86, 2e-6, 5)}).ok());
}

TEST(Limits, TimingFloor) {
  auto target = [](const char* spec) { return PeakFlops(*ir::Target::Parse(spec)); };
  const double one_core = target("llvm -num-cores=1"), h100 = target("cuda -arch=sm_90");
  EXPECT_EQ(one_core, 1e12);
  EXPECT_EQ(target("llvm -num-cores=8"), 8e12);
  EXPECT_EQ(h100, 2e15);
  // dense 64x64x64 (524,288 FLOP) on one core: 1 ns would be 524 TFLOP/s.
  EXPECT_FALSE(CheckTiming(1e-9, 524288, one_core).ok());
  EXPECT_TRUE(CheckTiming(5.3e-6, 524288, one_core).ok());  // 99 GFLOP/s
  EXPECT_TRUE(CheckTiming(1e-9, 524288, h100).ok());        // 524 TFLOP/s on a GPU: possible
  EXPECT_FALSE(CheckTiming(5e-10, 0, one_core).ok());       // under a nanosecond
  EXPECT_TRUE(CheckTiming(1e-7, 64, one_core).ok());        // a 64-value copy: 0.1 us is real
  EXPECT_FALSE(CheckTiming(std::nan(""), 1, one_core).ok());
  EXPECT_FALSE(CheckTiming(-1, 1, one_core).ok());
}

int Threads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// Jobs past --max_running_jobs wait, queued, without threads of their own;
// a token past --max_jobs_per_token is refused; a finished slot starts the
// next job.
TEST(JobLimits, RunningJobsAreBoundedAndSoAreEachTokensJobs) {
  testing::TempDir dir;
  TunefarmServer::Options o;
  o.listen = "127.0.0.1:0";
  o.db_path = dir.File("jobs.db");
  o.max_running_jobs = 2;
  o.max_jobs_per_token = 12;
  auto server = TunefarmServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions client;
  client.server = absl::StrCat("127.0.0.1:", (*server)->port());
  auto stub = v1::TuningService::NewStub(*MakeChannel(client));
  auto submit = [&] {
    v1::SubmitJobRequest req;
    req.set_protocol_version(kProtocolVersion);
    req.mutable_spec()->set_name("bounded");
    req.mutable_spec()->mutable_target()->set_spec(kTargetX86);
    req.mutable_spec()->set_device_key("nobody-here");
    *req.mutable_spec()->add_tasks()->mutable_workload() = Conv2d(8, 8, 8);
    v1::SubmitJobResponse resp;
    return stub->SubmitJob(MakeContext(client, absl::Seconds(30)).get(), req, &resp);
  };
  auto states = [&] {
    v1::ListJobsRequest req;
    req.set_protocol_version(kProtocolVersion);
    v1::ListJobsResponse resp;
    EXPECT_TRUE(stub->ListJobs(MakeContext(client, absl::Seconds(30)).get(), req, &resp).ok());
    std::map<v1::JobState, int> n;
    for (const v1::Job& j : resp.jobs()) ++n[j.state()];
    return n;
  };
  ASSERT_TRUE(submit().ok());
  ASSERT_TRUE(testing::WaitFor([&] { return states()[v1::JOB_STATE_WAITING_FOR_DEVICE] == 1; },
                               absl::Seconds(60)));
  const int threads_before = Threads();
  for (int i = 1; i < 12; ++i) ASSERT_TRUE(submit().ok()) << i;
  // The 13th job of the same (anonymous) token is refused.
  grpc::Status over = submit();
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(over.error_message(), "token 'anonymous' has 12 jobs"))
      << over.error_message();
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        auto n = states();
        return n[v1::JOB_STATE_WAITING_FOR_DEVICE] == 2 && n[v1::JOB_STATE_QUEUED] == 10;
      },
      absl::Seconds(60)));
  // Eleven more jobs, one more running thread.
  EXPECT_LT(Threads() - threads_before, 8) << "threads per waiting job";
  v1::GetJobRequest get;
  get.set_protocol_version(kProtocolVersion);
  get.set_job_id(12);
  v1::Job twelfth;
  ASSERT_TRUE(stub->GetJob(MakeContext(client, absl::Seconds(30)).get(), get, &twelfth).ok());
  EXPECT_TRUE(absl::StrContains(twelfth.status_message(), "waiting for a slot"))
      << twelfth.status_message();
  // A cancelled running job frees its slot for the next in line.
  v1::CancelJobRequest cancel;
  cancel.set_protocol_version(kProtocolVersion);
  cancel.set_job_id(1);
  v1::Job cancelled;
  ASSERT_TRUE(
      stub->CancelJob(MakeContext(client, absl::Seconds(30)).get(), cancel, &cancelled).ok());
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        auto n = states();
        return n[v1::JOB_STATE_WAITING_FOR_DEVICE] == 2 && n[v1::JOB_STATE_QUEUED] == 9 &&
               n[v1::JOB_STATE_CANCELLED] == 1;
      },
      absl::Seconds(60)));
  EXPECT_TRUE(submit().ok()) << "a slot of the token's freed by the cancel";
  (*server)->Shutdown();
}

}  // namespace
}  // namespace tunefarm::server
