// Mutated requests to every RPC of a real tunefarm-server process on
// 127.0.0.1: valid requests of each method, their bytes flipped, cut,
// grown and spliced, sent raw (so bytes that are not protobuf reach the
// server too); server-streaming methods are called as streams and read to
// their end. Each method's valid request gets its expected status first.
// The server must answer every call with a status before its deadline
// (streams may run to it), never INTERNAL (bytes that do not parse are
// INVALID_ARGUMENT), stay up and answer a plain call after, and its memory
// may not grow by more than a bound over the fuzzing.
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <random>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/client.h"
#include "proto/protocol.h"
#include "tests/server/test_records.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/farm.pb.h"
#include "tunefarm/v1/farm.grpc.pb.h"
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

// How much the server's resident memory may grow over the fuzzing (kB).
constexpr int64_t kMaxRssGrowthKb = 16 << 10;  // 4.5 kB per mutated call

struct Method {
  std::string name;     // /package.Service/Method
  std::string seed;     // a valid request's bytes
  bool stream = false;  // server streaming: read to its end or its deadline
  // What the valid request gets: OK, unless the comment at its seed says
  // why not; and at least this many streamed messages.
  grpc::StatusCode seed_code = grpc::StatusCode::OK;
  int seed_messages = 0;
};

// `session`: a session the test registered (FarmService.Register), so the
// farm methods' valid requests name one the server knows.
std::vector<Method> Methods(const std::string& session) {
  const uint32_t v = kProtocolVersion;
  std::vector<Method> m;
  auto add = [&](const std::string& service, const std::string& rpc,
                 const google::protobuf::Message& req, bool stream = false,
                 grpc::StatusCode seed_code = grpc::StatusCode::OK, int seed_messages = 0) {
    m.push_back({absl::StrCat("/tunefarm.v1.", service, "/", rpc), req.SerializeAsString(),
                 stream, seed_code, seed_messages});
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
  // The job has no board to run on, so it stays queued and its watch runs
  // to the deadline, after the events so far (submitted, tasks, ...).
  add("TuningService", "WatchJob", watch, true, grpc::StatusCode::DEADLINE_EXCEEDED, 1);
  v1::CancelJobRequest cancel;
  cancel.set_protocol_version(v);
  cancel.set_job_id(1);
  add("TuningService", "CancelJob", cancel);
  v1::ResumeJobRequest resume;
  resume.set_protocol_version(v);
  resume.set_job_id(1);
  // Job 1 was cancelled just before: an ended job is not resumed (only one
  // a restart or a failed board interrupted), and the answer says so.
  add("TuningService", "ResumeJob", resume, false, grpc::StatusCode::FAILED_PRECONDITION);
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
  // A run needs a built package and a board that takes work; the request's
  // own checks come first, and this one names what is wrong.
  add("TuningService", "RunModel", run, false, grpc::StatusCode::INVALID_ARGUMENT);
  v1::RegisterRequest reg;
  reg.set_protocol_version(v);
  reg.set_role(v1::ROLE_AGENT);
  reg.set_device_id("fuzz-board-2");
  reg.set_device_key("fuzz-key");
  reg.mutable_capabilities()->set_cores(2);
  add("FarmService", "Register", reg);
  v1::StreamWorkRequest work;
  work.set_protocol_version(v);
  work.set_session_id(session);
  // No work for the key (the job was cancelled): the stream waits to the
  // deadline.
  add("FarmService", "StreamWork", work, true, grpc::StatusCode::DEADLINE_EXCEEDED);
  v1::ReportResultRequest report;
  report.set_protocol_version(v);
  report.set_session_id(session);
  report.set_lease_id("L0123456789abcdef0123456789abcdef");
  report.mutable_measure()->set_status(v1::MEASURE_STATUS_OK);
  report.mutable_measure()->add_costs_sec(1e-3);
  // A lease exists only once work was handed out (a board measuring a
  // job); this one names no lease of the session, and NOT_FOUND says so.
  add("FarmService", "ReportResult", report, false, grpc::StatusCode::NOT_FOUND);
  v1::HeartbeatRequest hb;
  hb.set_protocol_version(v);
  hb.set_session_id(session);
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

// One unary call of `method` with `bytes` as its request.
grpc::Status CallUnary(grpc::GenericStub& stub, grpc::CompletionQueue& cq, const std::string& method,
                       const std::string& bytes, absl::Duration deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  auto rpc = stub.PrepareUnaryCall(&ctx, method, request, &cq);
  rpc->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  rpc->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok)) return grpc::Status(grpc::StatusCode::INTERNAL, "queue shut down");
  return status;
}

// One server-streaming call: the request written as the only message, then
// every response read until the stream ends or the deadline passes;
// `messages` counts them.
grpc::Status CallStream(grpc::GenericStub& stub, grpc::CompletionQueue& cq,
                        const std::string& method, const std::string& bytes,
                        absl::Duration deadline, int* messages) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  void* tag = nullptr;
  bool ok = false;
  auto next = [&] { return cq.Next(&tag, &ok) && ok; };
  auto call = stub.PrepareCall(&ctx, method, &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  if (next()) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
    next();
    for (;;) {
      grpc::ByteBuffer response;
      call->Read(&response, reinterpret_cast<void*>(3));
      if (!next()) break;
      ++*messages;
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  return status;
}

TEST(GrpcFuzz, EveryRpcSurvivesMutatedRequests) {
  testing::TempDir dir;
  auto server = testing::ServerProcess::Start(dir.File("fuzz.db"), dir.path(),
                                              {"--heartbeat_interval_ms=1000"});
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions options;
  options.server = (*server)->address();
  auto channel = MakeChannel(options);
  ASSERT_TRUE(channel.ok());
  grpc::GenericStub stub(*channel);
  grpc::CompletionQueue cq;
  std::mt19937_64 rng(20261127);
  // A board of the test's own, registered, for the farm methods' sessions
  // and UpdateDevice.
  auto farm = v1::FarmService::NewStub(*channel);
  v1::RegisterRequest reg;
  reg.set_protocol_version(kProtocolVersion);
  reg.set_role(v1::ROLE_AGENT);
  reg.set_device_id("fuzz-board");
  reg.set_device_key("fuzz-key");
  reg.mutable_capabilities()->set_cores(2);
  v1::RegisterResponse registered;
  {
    std::unique_ptr<grpc::ClientContext> ctx = MakeContext(options, absl::Seconds(30));
    grpc::Status st = farm->Register(ctx.get(), reg, &registered);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  const std::vector<Method> methods = Methods(registered.session_id());
  // The board heartbeats its session for the whole test, as an agent does,
  // so the seed statuses of the farm methods do not depend on how soon the
  // loop reaches them (a session lives 3 heartbeat intervals unseen).
  std::mutex keepalive_mu;
  std::condition_variable keepalive_cv;
  bool keepalive_stop = false;
  std::thread keepalive([&] {
    v1::HeartbeatRequest hb;
    hb.set_protocol_version(kProtocolVersion);
    hb.set_session_id(registered.session_id());
    std::unique_lock<std::mutex> lock(keepalive_mu);
    while (!keepalive_stop) {
      lock.unlock();
      v1::HeartbeatResponse ignored;
      std::unique_ptr<grpc::ClientContext> ctx = MakeContext(options, absl::Seconds(5));
      (void)farm->Heartbeat(ctx.get(), hb, &ignored);
      lock.lock();
      keepalive_cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return keepalive_stop; });
    }
  });
  auto stop_keepalive = [&] {
    {
      std::lock_guard<std::mutex> lock(keepalive_mu);
      keepalive_stop = true;
    }
    keepalive_cv.notify_all();
    if (keepalive.joinable()) keepalive.join();
  };
  absl::Cleanup stop_keepalive_on_exit = stop_keepalive;
  constexpr int kPerUnary = 250, kPerStream = 40;
  std::map<grpc::StatusCode, int> codes;
  int calls = 0;
  auto call = [&](const Method& m, const std::string& bytes, int* messages) {
    // Streams may run to their deadline (a job watched, work waited for).
    return m.stream ? CallStream(stub, cq, m.name, bytes, absl::Milliseconds(300), messages)
                    : CallUnary(stub, cq, m.name, bytes, absl::Seconds(20));
  };
  // Each valid request first, in order (SubmitJob makes the job the others
  // name): the status it gets.
  for (const Method& m : methods) {
    int messages = 0;
    const grpc::Status status = call(m, m.seed, &messages);
    EXPECT_EQ(status.error_code(), m.seed_code)
        << m.name << ": the valid request got " << int(status.error_code()) << " "
        << status.error_message();
    EXPECT_GE(messages, m.seed_messages) << m.name << ": too few messages streamed";
    std::cout << m.name << ": valid request " << int(status.error_code()) << ", " << messages
              << " message(s)\n";
  }
  const int64_t rss_before = ResidentKb((*server)->process().pid());
  for (const Method& m : methods) {
    const int n = m.stream ? kPerStream : kPerUnary;
    for (int i = 0; i < n; ++i) {
      int messages = 0;
      const grpc::Status status = call(m, Mutate(m.seed, rng), &messages);
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
  std::cout << "server resident memory after the valid requests " << rss_before
            << " kB, after the fuzzing " << rss_after << " kB\n";
  ASSERT_GT(rss_before, 0);
  // What ~3,000 rejected calls may leave behind: allocator caches and
  // gRPC's per-call arenas, not the requests themselves.
  EXPECT_LT(rss_after - rss_before, kMaxRssGrowthKb) << "the server's memory grew";
  stop_keepalive();
  absl::StatusOr<int> stopped = (*server)->Stop();
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(DescribeWaitStatus(*stopped), "exited with 0");
}

}  // namespace
}  // namespace tunefarm
