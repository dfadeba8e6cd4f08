// Writes a Trace step by step on a live ScheduleState, so each step can
// name loops as the previous steps left them (by index, or by the loop's
// variable). The first step that does not apply is kept in status(); it and
// every later step are left out, so a chain of steps is checked once.
//
//   ScheduleBuilder b(dag, target);
//   std::vector<const ExprNode*> k = b.SplitLoop(stage, axis_var, {4, 16});
//   b.AnnotateLoop(stage, k.back(), v1::ANNOTATION_VECTORIZE);
//   if (!b.ok()) return b.status();
//   Trace t = b.Take();
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "compiler/schedule/schedule.h"

namespace tunefarm::schedule {

class ScheduleBuilder {
 public:
  ScheduleBuilder(const ir::ComputeDAG& dag, const ir::Target& target)
      : state_(ScheduleState::Initial(dag)), target_(target) {}

  // Applies `step` and records it; returns status().
  absl::Status Add(Step step);

  // Loops named by index in the stage's current loop list.
  absl::Status Split(int stage, int iter, const std::vector<int64_t>& lengths);
  absl::Status Reorder(int stage, const std::vector<int>& order);
  absl::Status Fuse(int stage, const std::vector<int>& iters);
  absl::Status Annotate(int stage, int iter, Annotation a);
  absl::Status CacheRead(int stage, int input, MemoryScope scope);
  absl::Status ComputeAt(int stage, int target_stage, int target_iter);

  // Loops named by their variable. SplitLoop returns the new loops'
  // variables, outermost first (empty once a step failed).
  int IndexOf(int stage, const ir::ExprNode* var) const;
  std::vector<const ir::ExprNode*> SplitLoop(int stage, const ir::ExprNode* var,
                                         const std::vector<int64_t>& lengths);
  absl::Status ReorderLoops(int stage, const std::vector<const ir::ExprNode*>& order);
  absl::Status AnnotateLoop(int stage, const ir::ExprNode* var, Annotation a);

  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  const ScheduleState& state() const { return state_; }
  Trace Take() { return std::move(trace_); }

 private:
  ScheduleState state_;
  const ir::Target& target_;
  Trace trace_;
  absl::Status status_;
};

// The index of the stage named `name` in `st`, or -1: steps that insert
// stages (cache_read, cache_write) move the others.
int FindStage(const ScheduleState& st, const std::string& name);

}  // namespace tunefarm::schedule
