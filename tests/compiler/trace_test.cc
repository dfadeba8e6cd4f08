// The trace codec: ToProto and TraceFromProto are inverse on every step kind
// and on the schedules the space makes, and a trace's hash is its wire
// form's, so record keys do not depend on which form computed them.
#include "compiler/schedule/trace.h"

#include <random>
#include <string>

#include "absl/strings/match.h"
#include "compiler/ir/schedule_hash.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/schedule.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "search/space/random_schedule.h"

namespace tunefarm {
namespace {

namespace v1 = ::tunefarm::v1;
namespace pb = ::google::protobuf;

std::string Bytes(const v1::Schedule& s) {
  std::string out;
  {
    pb::io::StringOutputStream stream(&out);
    pb::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    s.SerializeToCodedStream(&coded);
  }
  return out;
}

// Every field of `m` set to a value other than its default, different per
// field (`seed`): repeated fields get two elements, enums their last value.
void FillAll(pb::Message* m, int seed) {
  const pb::Descriptor* d = m->GetDescriptor();
  const pb::Reflection* r = m->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const int v = seed + 3 * i + 2;
    for (int k = 0; k < (f->is_repeated() ? 2 : 1); ++k) {
      switch (f->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_INT32:
          f->is_repeated() ? r->AddInt32(m, f, v + k) : r->SetInt32(m, f, v);
          break;
        case pb::FieldDescriptor::CPPTYPE_INT64:
          f->is_repeated() ? r->AddInt64(m, f, v + k) : r->SetInt64(m, f, v);
          break;
        case pb::FieldDescriptor::CPPTYPE_BOOL:
          r->SetBool(m, f, true);
          break;
        case pb::FieldDescriptor::CPPTYPE_ENUM: {
          const pb::EnumDescriptor* e = f->enum_type();
          const pb::EnumValueDescriptor* last = e->value(e->value_count() - 1);
          f->is_repeated() ? r->AddEnum(m, f, last) : r->SetEnum(m, f, last);
          break;
        }
        default:
          ADD_FAILURE() << d->full_name() << "." << f->name()
                        << ": a field type the test does not fill";
      }
    }
  }
}

TEST(Trace, EveryStepKindAndFieldRoundTrips) {
  v1::Schedule s;
  const pb::Descriptor* step = v1::Step::descriptor();
  for (int i = 0; i < step->field_count(); ++i) {
    v1::Step* st = s.add_steps();
    FillAll(st->GetReflection()->MutableMessage(st, step->field(i)), i);
  }
  s.set_sketch_id(3);
  s.set_is_default(true);
  s.add_decisions(7);
  s.add_decisions(-1);
  absl::StatusOr<schedule::Trace> t = schedule::TraceFromProto(s);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->steps.size(), size_t(step->field_count()));
  for (int i = 0; i < step->field_count(); ++i) {
    EXPECT_EQ(schedule::StepName(t->steps[i]), step->field(i)->name()) << i;
  }
  EXPECT_EQ(t->sketch_id, 3);
  EXPECT_TRUE(t->is_default);
  EXPECT_EQ(t->decisions, (std::vector<int64_t>{7, -1}));
  EXPECT_EQ(Bytes(schedule::ToProto(*t)), Bytes(s)) << schedule::ToProto(*t).ShortDebugString() << "\n"
                                              << s.ShortDebugString();
  EXPECT_EQ(schedule::TraceHash(*t), ir::ScheduleHash(s));
}

TEST(Trace, SpaceSchedulesRoundTripWithTheirHash) {
  const std::vector<std::string> specs = {
      "conv2d_nchw(N=1,C=8,H=12,W=12,K=16,R=3,S=3,pad=1)+bias+relu", "dense(M=8,N=32,K=24)+bias",
      "matmul(M=16,N=16,K=16)", "depthwise_conv2d_nchw(N=1,C=8,H=10,W=10,R=3,S=3,pad=1)",
      "max_pool2d_nchw(N=1,C=3,H=9,W=9,R=3,S=3,stride=2,pad=1)"};
  std::mt19937_64 rng(11);
  int steps = 0;
  for (const char* spec_target :
       {"llvm -mtriple=x86_64-linux-gnu -mcpu=znver3", "cuda -arch=sm_87"}) {
    const ir::Target target = *ir::Target::Parse(spec_target);
    for (const std::string& spec : specs) {
      const ir::ComputeDAG dag = *ir::BuildComputeDAG(*ir::ParseWorkloadSpec(spec));
      std::vector<schedule::Trace> traces = {schedule::DefaultSchedule(dag, target)};
      for (int i = 0; i < 8; ++i) traces.push_back(search::space::RandomSchedule(dag, target, rng));
      for (const schedule::Trace& t : traces) {
        const v1::Schedule wire = schedule::ToProto(t);
        absl::StatusOr<schedule::Trace> back = schedule::TraceFromProto(wire);
        ASSERT_TRUE(back.ok()) << back.status();
        EXPECT_EQ(Bytes(schedule::ToProto(*back)), Bytes(wire)) << spec;
        EXPECT_EQ(schedule::TraceHash(t), ir::ScheduleHash(wire));
        // The same program either way.
        EXPECT_TRUE(schedule::ScheduleState::Replay(dag, *back, target).ok()) << spec;
        steps += int(t.steps.size());
      }
    }
  }
  EXPECT_GT(steps, 100);
}

TEST(Trace, ProvenanceIsNotIdentity) {
  schedule::Trace a;
  a.steps.push_back(schedule::SplitStep{1, 0, {4}});
  schedule::Trace b = a;
  b.sketch_id = 2;
  b.decisions = {4};
  EXPECT_EQ(schedule::TraceHash(a), schedule::TraceHash(b));
  b.steps.push_back(schedule::ComputeRootStep{0});
  EXPECT_NE(schedule::TraceHash(a), schedule::TraceHash(b));
}

TEST(Trace, AStepWithNoKindIsRefusedByIndex) {
  v1::Schedule s;
  s.add_steps()->mutable_fuse()->set_stage(0);
  s.add_steps();
  absl::StatusOr<schedule::Trace> t = schedule::TraceFromProto(s);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), "step 1 (empty)")) << t.status();
}

}  // namespace
}  // namespace tunefarm
