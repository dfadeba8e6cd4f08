#include "compiler/schedule/schedule_builder.h"

namespace tunefarm::schedule {

using ir::ExprNode;

namespace v1 = ::tunefarm::v1;

absl::Status ScheduleBuilder::Add(Step step) {
  if (!status_.ok()) return status_;
  status_ = state_.Apply(step, int(trace_.steps.size()), target_);
  if (status_.ok()) trace_.steps.push_back(std::move(step));
  return status_;
}

absl::Status ScheduleBuilder::Split(int stage, int iter, const std::vector<int64_t>& lengths) {
  return Add(SplitStep{stage, iter, lengths});
}

absl::Status ScheduleBuilder::Reorder(int stage, const std::vector<int>& order) {
  return Add(ReorderStep{stage, order});
}

absl::Status ScheduleBuilder::Fuse(int stage, const std::vector<int>& iters) {
  return Add(FuseStep{stage, iters});
}

absl::Status ScheduleBuilder::Annotate(int stage, int iter, Annotation a) {
  return Add(AnnotateStep{stage, iter, a});
}

absl::Status ScheduleBuilder::CacheRead(int stage, int input, MemoryScope scope) {
  return Add(CacheReadStep{stage, input, scope});
}

absl::Status ScheduleBuilder::ComputeAt(int stage, int target_stage, int target_iter) {
  return Add(ComputeAtStep{stage, target_stage, target_iter});
}

int ScheduleBuilder::IndexOf(int stage, const ExprNode* var) const {
  const auto& iters = state_.stages()[stage].iters;
  for (size_t i = 0; i < iters.size(); ++i) {
    if (iters[i].var.get() == var) return int(i);
  }
  return -1;
}

std::vector<const ExprNode*> ScheduleBuilder::SplitLoop(int stage, const ExprNode* var,
                                                        const std::vector<int64_t>& lengths) {
  int at = IndexOf(stage, var);
  if (status_.ok() && at < 0) status_ = absl::InvalidArgumentError("split of a loop that is gone");
  if (!Split(stage, at, lengths).ok()) return {};
  std::vector<const ExprNode*> out;
  for (size_t k = 0; k <= lengths.size(); ++k)
    out.push_back(state_.stages()[stage].iters[at + k].var.get());
  return out;
}

absl::Status ScheduleBuilder::ReorderLoops(int stage, const std::vector<const ExprNode*>& order) {
  std::vector<int> idx;
  for (const ExprNode* v : order) idx.push_back(IndexOf(stage, v));
  return Reorder(stage, idx);
}

absl::Status ScheduleBuilder::AnnotateLoop(int stage, const ExprNode* var, Annotation a) {
  return Annotate(stage, IndexOf(stage, var), a);
}

int FindStage(const ScheduleState& st, const std::string& name) {
  const auto& stages = st.dag().stages;
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].name == name) return int(i);
  }
  return -1;
}

}  // namespace tunefarm::schedule
