#include "compiler/schedule/schedule_builder.h"

namespace tunefarm::ir {

namespace v1 = ::tunefarm::v1;

absl::Status ScheduleBuilder::Add(const v1::Step& step) {
  if (!status_.ok()) return status_;
  status_ = state_.Apply(step, sched_.steps_size(), target_);
  if (status_.ok()) *sched_.add_steps() = step;
  return status_;
}

absl::Status ScheduleBuilder::Split(int stage, int iter, const std::vector<int64_t>& lengths) {
  v1::Step s;
  s.mutable_split()->set_stage(stage);
  s.mutable_split()->set_iter(iter);
  for (int64_t l : lengths) s.mutable_split()->add_lengths(l);
  return Add(s);
}

absl::Status ScheduleBuilder::Reorder(int stage, const std::vector<int>& order) {
  v1::Step s;
  s.mutable_reorder()->set_stage(stage);
  for (int o : order) s.mutable_reorder()->add_order(o);
  return Add(s);
}

absl::Status ScheduleBuilder::Fuse(int stage, const std::vector<int>& iters) {
  v1::Step s;
  s.mutable_fuse()->set_stage(stage);
  for (int i : iters) s.mutable_fuse()->add_iters(i);
  return Add(s);
}

absl::Status ScheduleBuilder::Annotate(int stage, int iter, v1::Annotation a) {
  v1::Step s;
  s.mutable_annotate()->set_stage(stage);
  s.mutable_annotate()->set_iter(iter);
  s.mutable_annotate()->set_annotation(a);
  return Add(s);
}

absl::Status ScheduleBuilder::CacheRead(int stage, int input, v1::MemoryScope scope) {
  v1::Step s;
  s.mutable_cache_read()->set_stage(stage);
  s.mutable_cache_read()->set_input(input);
  s.mutable_cache_read()->set_scope(scope);
  return Add(s);
}

absl::Status ScheduleBuilder::ComputeAt(int stage, int target_stage, int target_iter) {
  v1::Step s;
  s.mutable_compute_at()->set_stage(stage);
  s.mutable_compute_at()->set_target_stage(target_stage);
  s.mutable_compute_at()->set_target_iter(target_iter);
  return Add(s);
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

absl::Status ScheduleBuilder::AnnotateLoop(int stage, const ExprNode* var, v1::Annotation a) {
  return Annotate(stage, IndexOf(stage, var), a);
}

int FindStage(const ScheduleState& st, const std::string& name) {
  const auto& stages = st.dag().stages;
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].name == name) return int(i);
  }
  return -1;
}

}  // namespace tunefarm::ir
