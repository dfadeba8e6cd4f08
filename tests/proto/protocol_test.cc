#include "proto/protocol.h"

#include <map>

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/client.h"
#include "proto/farm_session.h"
#include "tests/server/test_records.h"
#include "tunefarm/v1/farm.pb.h"
#include "tunefarm/v1/tuning.pb.h"

namespace tunefarm {
namespace {

using google::protobuf::Message;
using google::protobuf::util::MessageDifferencer;

// Binary and JSON round trips must give back an equal message.
void ExpectRoundTrip(const Message& m) {
  std::unique_ptr<Message> bin(m.New());
  ASSERT_TRUE(bin->ParseFromString(m.SerializeAsString()));
  EXPECT_TRUE(MessageDifferencer::Equals(m, *bin)) << m.GetTypeName();
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(m, &json).ok());
  std::unique_ptr<Message> from_json(m.New());
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, from_json.get()).ok()) << json;
  EXPECT_TRUE(MessageDifferencer::Equals(m, *from_json)) << json;
}

TEST(Protocol, RecordAndJobRoundTrip) {
  v1::Record r = testing::MakeRecord(testing::Conv2d(64, 64, 56), testing::kTargetX86, 1e-4, 7);
  r.set_record_id(42);
  r.set_status(v1::MEASURE_STATUS_OK);
  r.mutable_fingerprint()->set_cuda_driver("12.6");
  auto* ca = r.mutable_schedule()->add_steps()->mutable_cache_write();
  ca->set_stage(0);
  ca->set_scope(v1::MEMORY_SCOPE_LOCAL);
  ExpectRoundTrip(r);

  v1::SubmitJobRequest submit;
  submit.set_protocol_version(kProtocolVersion);
  v1::JobSpec* spec = submit.mutable_spec();
  spec->set_name("resnet-block");
  spec->mutable_target()->set_spec("cuda -arch=sm_87");
  spec->set_device_key("jetson-orin-nano");
  spec->mutable_budget()->set_max_trials(2000);
  spec->set_strategy(v1::SEARCH_STRATEGY_RANDOM);
  spec->set_seed(1234567890123ull);
  auto* t = spec->add_tasks();
  *t->mutable_workload() = testing::Dense(1, 1000, 2048);
  t->set_weight(3);
  auto* shape = spec->add_input_shapes();
  shape->set_name("images");
  for (int64_t d : {1, 3, 640, 640}) shape->add_shape(d);
  ExpectRoundTrip(submit);
}

TEST(Protocol, FarmMessagesRoundTrip) {
  v1::WorkLease lease;
  lease.set_lease_id("l-1");
  lease.set_deadline_unix_ms(123);
  auto* m = lease.mutable_measure();
  *m->mutable_workload() = testing::Conv2d(3, 16, 32);
  m->set_kind(v1::ARTIFACT_KIND_CUBIN);
  m->set_artifact(std::string("\x7f" "ELF\0\1\2", 7));
  m->mutable_options()->set_repeat(5);
  ExpectRoundTrip(lease);

  v1::ReportResultRequest report;
  report.set_protocol_version(kProtocolVersion);
  report.set_lease_id("l-1");
  report.mutable_measure()->set_status(v1::MEASURE_STATUS_TIMEOUT);
  report.mutable_measure()->set_error("killed after 10 s");
  ExpectRoundTrip(report);

  v1::RegisterRequest reg;
  reg.set_protocol_version(kProtocolVersion);
  reg.set_role(v1::ROLE_AGENT);
  reg.set_device_key("jetson-orin-nano");
  reg.mutable_capabilities()->add_cuda_archs("sm_87");
  reg.mutable_capabilities()->set_memory_bytes(int64_t{8} << 30);
  ExpectRoundTrip(reg);
}

TEST(Protocol, EveryStepKindRoundTrips) {
  v1::Schedule s;
  const auto* desc = v1::Step::descriptor();
  // One step of each kind of the oneof, so a new kind can't be left unserialisable.
  for (int i = 0; i < desc->field_count(); ++i) {
    v1::Step* step = s.add_steps();
    const auto* field = desc->field(i);
    step->GetReflection()->MutableMessage(step, field);
  }
  EXPECT_EQ(s.steps_size(), 13);
  ExpectRoundTrip(s);
  for (int i = 0; i < s.steps_size(); ++i) {
    EXPECT_NE(s.steps(i).kind_case(), v1::Step::KIND_NOT_SET);
  }
}

TEST(Protocol, VersionCheck) {
  EXPECT_TRUE(CheckProtocolVersion(kProtocolVersion).ok());
  grpc::Status missing = CheckProtocolVersion(0);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(missing.error_message().find("no protocol_version"), std::string::npos);
  grpc::Status future = CheckProtocolVersion(7);
  EXPECT_EQ(future.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(future.error_message().find("unsupported protocol_version 7"), std::string::npos);
}

TEST(Protocol, StatusCodesCarryOver) {
  absl::Status s = absl::ResourceExhaustedError("disk full");
  grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(g.error_message(), "disk full");
  EXPECT_EQ(FromGrpcStatus(g), s);
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

// `--server=HOST` dials the server's default port, not gRPC's 443.
TEST(Client, AHostAloneGetsTheDefaultPort) {
  EXPECT_EQ(WithDefaultPort("localhost"), "localhost:7070");
  EXPECT_EQ(WithDefaultPort("farm.example"), "farm.example:7070");
  EXPECT_EQ(WithDefaultPort("[::1]"), "[::1]:7070");
  for (const char* kept : {"localhost:7071", "[::1]:9", "unix:/run/tf.sock", "dns:///farm:1", ""}) {
    EXPECT_EQ(WithDefaultPort(kept), kept);
  }
}

// Clients dial a server that went away again at least every
// kReconnectBackoffMs (gRPC's own default grows to 120 s), and a farm
// session retries its registration as often.
TEST(Client, ReconnectBackOffIsShort) {
  grpc::ChannelArguments args = DefaultChannelArguments();
  grpc_channel_args c = args.c_channel_args();
  std::map<std::string, int> ints;
  for (size_t i = 0; i < c.num_args; ++i) {
    if (c.args[i].type == GRPC_ARG_INTEGER) ints[c.args[i].key] = c.args[i].value.integer;
  }
  ASSERT_TRUE(ints.count(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS));
  EXPECT_LE(ints[GRPC_ARG_MAX_RECONNECT_BACKOFF_MS], 2000);
  EXPECT_LE(ints[GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS], 1000);
  EXPECT_LE(FarmSession::Options().max_backoff, absl::Seconds(2));
}

TEST(Client, PlainTextOnlyOnLoopback) {
  for (const char* a : {"127.0.0.1:7070", "127.3.2.1:1", "localhost:7070", "[::1]:7070",
                        "ipv4:127.0.0.1:7070", "dns:///localhost:7070", "unix:/run/tf.sock"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:7070", ":7070", "[::]:7070", "10.0.0.7:7070", "farm.example:7070",
                        "127.0.0.1.example.com:7070", "128.0.0.1:7070", "127.0.0.256:1",
                        "localhost.example:7070", "[::2]:7070"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
  ClientOptions o;
  o.server = "farm.example:7070";
  absl::Status s = CheckTransport(o, false);
  EXPECT_TRUE(absl::IsFailedPrecondition(s));
  EXPECT_NE(s.message().find("give --tls_ca=CA.pem"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("--insecure"), absl::string_view::npos) << s;
  EXPECT_TRUE(CheckTransport(o, true).ok());
  o.tls_ca_file = "ca.pem";
  EXPECT_TRUE(CheckTransport(o, false).ok());
  o.tls_ca_file.clear();
  o.server = "127.0.0.1:7070";
  EXPECT_TRUE(CheckTransport(o, false).ok());
}

}  // namespace
}  // namespace tunefarm
