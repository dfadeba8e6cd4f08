#include "compiler/schedule/trace.h"

#include "absl/strings/str_cat.h"
#include "common/overload.h"
#include "compiler/ir/schedule_hash.h"

namespace tunefarm::schedule {

using ir::ScheduleHash;

namespace v1 = ::tunefarm::v1;

namespace {

template <typename T, typename R>
std::vector<T> Vec(const R& repeated) {
  return std::vector<T>(repeated.begin(), repeated.end());
}

template <typename R, typename T>
void Put(const std::vector<T>& v, R* repeated) {
  repeated->Reserve(int(v.size()));
  for (const T& x : v) repeated->Add(x);
}

v1::Step StepToProto(const Step& step) {
  v1::Step out;
  std::visit(
      Overload{
          [&](const SplitStep& s) {
            v1::SplitStep* p = out.mutable_split();
            p->set_stage(s.stage);
            p->set_iter(s.iter);
            Put(s.lengths, p->mutable_lengths());
            p->set_inner_to_outer(s.inner_to_outer);
          },
          [&](const ReorderStep& s) {
            v1::ReorderStep* p = out.mutable_reorder();
            p->set_stage(s.stage);
            Put(s.order, p->mutable_order());
          },
          [&](const FuseStep& s) {
            v1::FuseStep* p = out.mutable_fuse();
            p->set_stage(s.stage);
            Put(s.iters, p->mutable_iters());
          },
          [&](const AnnotateStep& s) {
            v1::AnnotateStep* p = out.mutable_annotate();
            p->set_stage(s.stage);
            p->set_iter(s.iter);
            p->set_annotation(s.annotation);
          },
          [&](const PragmaStep& s) {
            v1::PragmaStep* p = out.mutable_pragma();
            p->set_stage(s.stage);
            p->set_iter(s.iter);
            p->set_kind(s.kind);
            p->set_value(s.value);
          },
          [&](const ComputeAtStep& s) {
            v1::ComputeAtStep* p = out.mutable_compute_at();
            p->set_stage(s.stage);
            p->set_target_stage(s.target_stage);
            p->set_target_iter(s.target_iter);
          },
          [&](const ComputeInlineStep& s) { out.mutable_compute_inline()->set_stage(s.stage); },
          [&](const ComputeRootStep& s) { out.mutable_compute_root()->set_stage(s.stage); },
          [&](const CacheReadStep& s) {
            v1::CacheReadStep* p = out.mutable_cache_read();
            p->set_stage(s.stage);
            p->set_input(s.input);
            p->set_scope(s.scope);
            Put(s.reader_stages, p->mutable_reader_stages());
          },
          [&](const CacheWriteStep& s) {
            v1::CacheWriteStep* p = out.mutable_cache_write();
            p->set_stage(s.stage);
            p->set_scope(s.scope);
          },
          [&](const StorageAlignStep& s) {
            v1::StorageAlignStep* p = out.mutable_storage_align();
            p->set_stage(s.stage);
            p->set_iter(s.iter);
            p->set_factor(s.factor);
            p->set_offset(s.offset);
          },
          [&](const LayoutPackStep& s) {
            v1::LayoutPackStep* p = out.mutable_layout_pack();
            p->set_stage(s.stage);
            p->set_input(s.input);
            Put(s.block, p->mutable_block());
            Put(s.inner_dims, p->mutable_inner_dims());
          },
          [&](const FollowSplitStep& s) {
            v1::FollowSplitStep* p = out.mutable_follow_split();
            p->set_stage(s.stage);
            p->set_iter(s.iter);
            p->set_src_step(s.src_step);
            p->set_n_split(s.n_split);
          },
      },
      step);
  return out;
}

absl::StatusOr<Step> StepFromProto(const v1::Step& p, int index) {
  switch (p.kind_case()) {
    case v1::Step::kSplit:
      return SplitStep{p.split().stage(), p.split().iter(), Vec<int64_t>(p.split().lengths()),
                       p.split().inner_to_outer()};
    case v1::Step::kReorder:
      return ReorderStep{p.reorder().stage(), Vec<int>(p.reorder().order())};
    case v1::Step::kFuse:
      return FuseStep{p.fuse().stage(), Vec<int>(p.fuse().iters())};
    case v1::Step::kAnnotate:
      return AnnotateStep{p.annotate().stage(), p.annotate().iter(), p.annotate().annotation()};
    case v1::Step::kPragma:
      return PragmaStep{p.pragma().stage(), p.pragma().iter(), p.pragma().kind(),
                        p.pragma().value()};
    case v1::Step::kComputeAt:
      return ComputeAtStep{p.compute_at().stage(), p.compute_at().target_stage(),
                           p.compute_at().target_iter()};
    case v1::Step::kComputeInline:
      return ComputeInlineStep{p.compute_inline().stage()};
    case v1::Step::kComputeRoot:
      return ComputeRootStep{p.compute_root().stage()};
    case v1::Step::kCacheRead:
      return CacheReadStep{p.cache_read().stage(), p.cache_read().input(), p.cache_read().scope(),
                           Vec<int>(p.cache_read().reader_stages())};
    case v1::Step::kCacheWrite:
      return CacheWriteStep{p.cache_write().stage(), p.cache_write().scope()};
    case v1::Step::kStorageAlign:
      return StorageAlignStep{p.storage_align().stage(), p.storage_align().iter(),
                              p.storage_align().factor(), p.storage_align().offset()};
    case v1::Step::kLayoutPack:
      return LayoutPackStep{p.layout_pack().stage(), p.layout_pack().input(),
                            Vec<int64_t>(p.layout_pack().block()),
                            Vec<int>(p.layout_pack().inner_dims())};
    case v1::Step::kFollowSplit:
      return FollowSplitStep{p.follow_split().stage(), p.follow_split().iter(),
                             p.follow_split().src_step(), p.follow_split().n_split()};
    case v1::Step::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("step ", index, " (empty): empty step"));
}

}  // namespace

const char* StepName(const Step& step) {
  static constexpr const char* kNames[] = {
      "split",         "reorder",        "fuse",         "annotate",   "pragma",
      "compute_at",    "compute_inline", "compute_root", "cache_read", "cache_write",
      "storage_align", "layout_pack",    "follow_split"};
  static_assert(std::size(kNames) == std::variant_size_v<Step>);
  return kNames[step.index()];
}

v1::Schedule ToProto(const Trace& trace) {
  v1::Schedule out;
  out.mutable_steps()->Reserve(int(trace.steps.size()));
  for (const Step& s : trace.steps) *out.add_steps() = StepToProto(s);
  out.set_sketch_id(trace.sketch_id);
  out.set_is_default(trace.is_default);
  Put(trace.decisions, out.mutable_decisions());
  return out;
}

absl::StatusOr<Trace> TraceFromProto(const v1::Schedule& schedule) {
  Trace out;
  out.steps.reserve(schedule.steps_size());
  for (int i = 0; i < schedule.steps_size(); ++i) {
    absl::StatusOr<Step> s = StepFromProto(schedule.steps(i), i);
    if (!s.ok()) return s.status();
    out.steps.push_back(*std::move(s));
  }
  out.sketch_id = schedule.sketch_id();
  out.is_default = schedule.is_default();
  out.decisions = Vec<int64_t>(schedule.decisions());
  return out;
}

std::string TraceHash(const Trace& trace) { return ScheduleHash(ToProto(trace)); }

}  // namespace tunefarm::schedule
