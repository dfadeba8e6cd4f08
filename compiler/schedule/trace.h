// Trace: a schedule as the compiler and the search hold it, the ordered
// primitive steps that shape a ComputeDAG's loops (ScheduleState::Replay),
// plus where they came from. Its wire form is tunefarm.v1.Schedule
// (schedule.proto documents each step's renumbering); ToProto and
// TraceFromProto are the only translation, and code that stores or sends a
// schedule calls them at that edge.
//
//   Trace t;
//   t.steps.push_back(SplitStep{/*stage=*/0, /*iter=*/1, /*lengths=*/{4, 16}});
//   std::string key = TraceHash(t);  // the record key: the wire form's hash
//
// The steps use the wire enums for annotations, memory scopes and pragmas:
// they are plain values with names, shared with the JSON forms users write.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "tunefarm/v1/schedule.pb.h"

namespace tunefarm::schedule {

using ::tunefarm::v1::Annotation;
using ::tunefarm::v1::MemoryScope;
using ::tunefarm::v1::PragmaKind;

struct SplitStep {
  int stage = 0;
  int iter = 0;
  std::vector<int64_t> lengths;  // inner factors, outermost-inner first; 0 = unfilled
  bool inner_to_outer = false;
};
struct ReorderStep {
  int stage = 0;
  std::vector<int> order;
};
struct FuseStep {
  int stage = 0;
  std::vector<int> iters;
};
struct AnnotateStep {
  int stage = 0;
  int iter = 0;
  Annotation annotation = ::tunefarm::v1::ANNOTATION_UNSPECIFIED;
};
struct PragmaStep {
  int stage = 0;
  int iter = 0;
  PragmaKind kind = ::tunefarm::v1::PRAGMA_KIND_UNSPECIFIED;
  int64_t value = 0;
};
struct ComputeAtStep {
  int stage = 0;
  int target_stage = 0;
  int target_iter = 0;
};
struct ComputeInlineStep {
  int stage = 0;
};
struct ComputeRootStep {
  int stage = 0;
};
struct CacheReadStep {
  int stage = 0;
  int input = 0;
  MemoryScope scope = ::tunefarm::v1::MEMORY_SCOPE_UNSPECIFIED;
  std::vector<int> reader_stages;  // empty: `stage` alone
};
struct CacheWriteStep {
  int stage = 0;
  MemoryScope scope = ::tunefarm::v1::MEMORY_SCOPE_UNSPECIFIED;
};
struct StorageAlignStep {
  int stage = 0;
  int iter = 0;
  int factor = 0;
  int offset = 0;
};
struct LayoutPackStep {
  int stage = 0;
  int input = 0;
  std::vector<int64_t> block;  // per dimension, 0 = not blocked
  std::vector<int> inner_dims;
};
struct FollowSplitStep {
  int stage = 0;
  int iter = 0;
  int src_step = 0;
  int n_split = 0;
};

using Step = std::variant<SplitStep, ReorderStep, FuseStep, AnnotateStep, PragmaStep, ComputeAtStep,
                          ComputeInlineStep, ComputeRootStep, CacheReadStep, CacheWriteStep,
                          StorageAlignStep, LayoutPackStep, FollowSplitStep>;

// The step's name as the wire form's oneof names it ("split", "cache_read").
const char* StepName(const Step& step);

struct Trace {
  std::vector<Step> steps;
  // Provenance, not structure (left out of TraceHash): the sketch that made
  // the steps, whether it is the workload's default, and the sketch's
  // decisions in their wire form (space::Sketch::Decode reads them).
  int sketch_id = 0;
  bool is_default = false;
  std::vector<int64_t> decisions;
};

::tunefarm::v1::Schedule ToProto(const Trace& trace);
// InvalidArgument "step N (empty): empty step" for a step with no kind set.
absl::StatusOr<Trace> TraceFromProto(const ::tunefarm::v1::Schedule& schedule);

// The schedule's identity, the record key: ScheduleHash of ToProto(trace),
// so a trace and its wire form have the same hash.
std::string TraceHash(const Trace& trace);

}  // namespace tunefarm::schedule
