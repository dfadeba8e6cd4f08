// Mutated requests to every RPC of a real tunefarm-server process on
// 127.0.0.1: valid requests of each method, their bytes flipped, cut,
// grown and spliced, sent raw (so bytes that are not protobuf reach the
// server too). The server must answer every call with a status before its
// deadline (streams may run to it), never INTERNAL (bytes that do not parse
// are INVALID_ARGUMENT), stay up and answer a plain call after, and keep its
// memory bounded.
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/client.h"
#include "proto/protocol.h"
#include "tests/server/test_records.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/farm.pb.h"
#include "tunefarm/v1/tuning.grpc.pb.h"

namespace tunefarm {
namespace {

using ::tunefarm::testing::Conv2d;
using ::tunefarm::testing::kTargetX86;
using ::tunefarm::testing::MakeRecord;

// The server's resident memory, from /proc (kB); -1 when unreadable.
int64_t ResidentKb(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

struct Method {
  std::string name;     // /package.Service/Method
  std::string seed;     // a valid request's bytes
  bool stream = false;  // may run to its deadline
};

std::vector<Method> Methods() {
  const uint32_t v = kProtocolVersion;
  std::vector<Method> m;
  auto add = [&](const std::string& service, const std::string& rpc,
                 const google::protobuf::Message& req, bool stream = false) {
    m.push_back(
        {absl::StrCat("/tunefarm.v1.", service, "/", rpc), req.SerializeAsString(), stream});
  };
  v1::SubmitJobRequest submit;
  submit.set_protocol_version(v);
  submit.mutable_spec()->set_name("fuzz");
  submit.mutable_spec()->mutable_target()->set_spec(kTargetX86);
  submit.mutable_spec()->set_device_key("fuzz-key");
  *submit.mutable_spec()->add_tasks()->mutable_workload() = Conv2d(8, 8, 8);
  submit.mutable_spec()->mutable_budget()->set_max_trials(8);
  add("TuningService", "SubmitJob", submit);
  v1::GetJobRequest get;
  get.set_protocol_version(v);
  get.set_job_id(1);
  add("TuningService", "GetJob", get);
  v1::ListJobsRequest list;
  list.set_protocol_version(v);
  add("TuningService", "ListJobs", list);
  v1::WatchJobRequest watch;
  watch.set_protocol_version(v);
  watch.set_job_id(1);
  add("TuningService", "WatchJob", watch, true);
  v1::CancelJobRequest cancel;
  cancel.set_protocol_version(v);
  cancel.set_job_id(2);
  add("TuningService", "CancelJob", cancel);
  v1::ResumeJobRequest resume;
  resume.set_protocol_version(v);
  resume.set_job_id(2);
  add("TuningService", "ResumeJob", resume);
  v1::QueryBestRequest best;
  best.set_protocol_version(v);
  *best.mutable_workload()->mutable_workload() = Conv2d(8, 8, 8);
  best.mutable_target()->set_spec(kTargetX86);
  best.set_top_k(3);
  add("TuningService", "QueryBest", best);
  v1::ListRecordsRequest records;
  records.set_protocol_version(v);
  add("TuningService", "ListRecords", records);
  v1::ExportRecordsRequest exp;
  exp.set_protocol_version(v);
  add("TuningService", "ExportRecords", exp, true);
  v1::ImportRecordsRequest imp;
  imp.set_protocol_version(v);
  for (int i = 1; i <= 3; ++i)
    *imp.add_records() = MakeRecord(Conv2d(8, 8, 8), kTargetX86, 1e-4, i);
  add("TuningService", "ImportRecords", imp);
  v1::ListDevicesRequest devices;
  devices.set_protocol_version(v);
  add("TuningService", "ListDevices", devices);
  v1::UpdateDeviceRequest update;
  update.set_protocol_version(v);
  update.set_device_id("fuzz-board");
  update.set_action(v1::UpdateDeviceRequest::ACTION_DRAIN);
  add("TuningService", "UpdateDevice", update);
  v1::RunModelRequest run;
  run.set_protocol_version(v);
  run.set_device_key("fuzz-key");
  run.mutable_run()->set_package("not a package");
  add("TuningService", "RunModel", run);
  v1::RegisterRequest reg;
  reg.set_protocol_version(v);
  reg.set_role(v1::ROLE_AGENT);
  reg.set_device_id("fuzz-board");
  reg.set_device_key("fuzz-key");
  reg.mutable_capabilities()->set_cores(2);
  add("FarmService", "Register", reg);
  v1::StreamWorkRequest work;
  work.set_protocol_version(v);
  work.set_session_id("0123456789abcdef0123456789abcdef");
  add("FarmService", "StreamWork", work, true);
  v1::ReportResultRequest report;
  report.set_protocol_version(v);
  report.set_session_id("0123456789abcdef0123456789abcdef");
  report.set_lease_id("L0123456789abcdef0123456789abcdef");
  report.mutable_measure()->set_status(v1::MEASURE_STATUS_OK);
  report.mutable_measure()->add_costs_sec(1e-3);
  add("FarmService", "ReportResult", report);
  v1::HeartbeatRequest hb;
  hb.set_protocol_version(v);
  hb.set_session_id("0123456789abcdef0123456789abcdef");
  hb.add_held_lease_ids("L1");
  add("FarmService", "Heartbeat", hb);
  return m;
}

std::string Mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string s = seed;
  auto pick = [&](size_t n) { return n == 0 ? 0 : size_t(rng() % n); };
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 6) {
      case 0:  // flip a byte
        if (!s.empty()) s[pick(s.size())] ^= char(1 + rng() % 255);
        break;
      case 1:  // cut
        s.resize(pick(s.size() + 1));
        break;
      case 2: {  // insert random bytes
        std::string junk(1 + rng() % 16, '\0');
        for (char& c : junk) c = char(rng());
        s.insert(pick(s.size() + 1), junk);
        break;
      }
      case 3:  // a varint made huge (lengths, counts, ids)
        if (!s.empty()) s[pick(s.size())] = char(0xff);
        break;
      case 4:  // splice a piece of itself
        if (!s.empty()) {
          size_t a = pick(s.size()), n = 1 + pick(s.size() - a);
          s.insert(pick(s.size() + 1), s.substr(a, n));
        }
        break;
      default:  // random bytes altogether
        s.assign(rng() % 64, '\0');
        for (char& c : s) c = char(rng());
    }
  }
  return s;
}

TEST(GrpcFuzz, EveryRpcSurvivesMutatedRequests) {
  testing::TempDir dir;
  auto server = testing::ServerProcess::Start(dir.File("fuzz.db"), dir.path(),
                                              {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions options;
  options.server = (*server)->address();
  auto channel = MakeChannel(options);
  ASSERT_TRUE(channel.ok());
  grpc::GenericStub stub(*channel);
  grpc::CompletionQueue cq;
  std::mt19937_64 rng(20261127);
  const std::vector<Method> methods = Methods();
  constexpr int kPerUnary = 250, kPerStream = 40;
  std::map<grpc::StatusCode, int> codes;
  int calls = 0;
  const int64_t rss_before = ResidentKb((*server)->process().pid());
  for (const Method& m : methods) {
    const int n = m.stream ? kPerStream : kPerUnary;
    for (int i = 0; i < n; ++i) {
      // The first call of each method is its valid request.
      const std::string bytes = i == 0 ? m.seed : Mutate(m.seed, rng);
      grpc::ClientContext ctx;
      const absl::Duration deadline = m.stream ? absl::Milliseconds(300) : absl::Seconds(20);
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
      grpc::Slice slice(bytes);
      grpc::ByteBuffer request(&slice, 1);
      auto rpc = stub.PrepareUnaryCall(&ctx, m.name, request, &cq);
      rpc->StartCall();
      grpc::ByteBuffer response;
      grpc::Status status;
      rpc->Finish(&response, &status, reinterpret_cast<void*>(1));
      void* tag = nullptr;
      bool ok = false;
      ASSERT_TRUE(cq.Next(&tag, &ok));
      ++calls;
      ++codes[status.error_code()];
      ASSERT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE)
          << m.name << " call " << i << ": the server went away: " << status.error_message();
      if (!m.stream) {
        EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
            << m.name << " call " << i << " hung";
      }
    }
  }
  std::ostringstream summary;
  for (const auto& [code, n] : codes) summary << " " << int(code) << ":" << n;
  std::cout << calls << " calls, status code:count" << summary.str() << "\n";
  EXPECT_GE(calls, 3000);
  // Bytes that are not the call's message are the client's fault, said so;
  // nothing a request holds is the server's.
  EXPECT_GT(codes[grpc::StatusCode::INVALID_ARGUMENT], 1000);
  EXPECT_EQ(codes[grpc::StatusCode::INTERNAL], 0);
  EXPECT_EQ(codes[grpc::StatusCode::UNKNOWN], 0);
  // Still up and serving.
  auto tuning = v1::TuningService::NewStub(*channel);
  v1::ListJobsRequest req;
  req.set_protocol_version(kProtocolVersion);
  v1::ListJobsResponse resp;
  std::unique_ptr<grpc::ClientContext> ctx = MakeContext(options, absl::Seconds(30));
  ASSERT_TRUE(tuning->ListJobs(ctx.get(), req, &resp).ok());
  EXPECT_GE(resp.jobs_size(), 1);  // the valid SubmitJob at least
  const int64_t rss_after = ResidentKb((*server)->process().pid());
  std::cout << "server resident memory " << rss_before << " -> " << rss_after << " kB\n";
  EXPECT_LT(rss_after, int64_t{1} << 20) << "over 1 GiB after the fuzzing";
  absl::StatusOr<int> stopped = (*server)->Stop();
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(DescribeWaitStatus(*stopped), "exited with 0");
}

}  // namespace
}  // namespace tunefarm
