#include "search/space/random_schedule.h"

#include <algorithm>
#include <numeric>

#include "common/status_macros.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/tiling.h"
#include "search/space/cpu_sketch.h"
#include "search/space/draw.h"
#include "search/space/gpu_sketch.h"

namespace tunefarm::search::space {
namespace {

using ir::ComputeDAG;
using schedule::ScheduleState;
using ir::Stage;
using schedule::StageState;
using ir::Target;

namespace v1 = ::tunefarm::v1;

// A split factor for an extent: usually a divisor, sometimes not.
int64_t Factor(std::mt19937_64& rng, int64_t extent) {
  if (extent <= 1) return 1;
  if (Pick(rng, 0, 3) == 0) return Pick(rng, 1, extent);
  return RandomDivisor(rng, extent, extent);
}

}  // namespace

schedule::Trace RandomSchedule(const ComputeDAG& dag, const Target& target, std::mt19937_64& rng) {
  if (target.is_gpu()) return RandomGpuSchedule(dag, target, rng);
  if (Pick(rng, 0, 1) == 0 && schedule::HasTilingSketch(dag)) {
    absl::StatusOr<schedule::Trace> tiled =
        schedule::BuildTiledSchedule(dag, target, CpuSketch(dag, target).SampleTiling(rng, true));
    if (tiled.ok()) return *std::move(tiled);
  }
  schedule::Trace sched;
  ScheduleState st = ScheduleState::Initial(dag);
  // Steps are tried on the state first and kept only if they apply.
  auto try_apply = [&](schedule::Step step) {
    if (!st.Apply(step, int(sched.steps.size()), target).ok()) return false;
    sched.steps.push_back(std::move(step));
    return true;
  };
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& s = dag.stages[i];
    if (s.inlinable && s.output != dag.output && Pick(rng, 0, 4) != 0) {
      try_apply(schedule::ComputeInlineStep{int(i)});
    }
  }
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    if (st.stages()[i].location == StageState::Location::kInline) continue;
    int stage = int(i);
    // Multi-level splits, innermost loops first so indices stay valid.
    int n = int(st.stages()[i].iters.size());
    for (int it = n - 1; it >= 0; --it) {
      int levels = int(Pick(rng, 0, 2));
      if (levels == 0) continue;
      int64_t extent = st.stages()[i].iters[it].extent;
      schedule::SplitStep sp{stage, it};
      int64_t rest = extent;
      for (int l = 0; l < levels; ++l) {
        int64_t f = Factor(rng, rest);
        sp.lengths.push_back(f);
        rest = std::max<int64_t>(1, (rest + f - 1) / f);
      }
      try_apply(std::move(sp));
    }
    n = int(st.stages()[i].iters.size());
    if (Pick(rng, 0, 2) != 0) {
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      try_apply(schedule::ReorderStep{stage, std::move(order)});
    }
    if (n >= 2 && Pick(rng, 0, 1) == 0) {
      int first = int(Pick(rng, 0, n - 2));
      try_apply(schedule::FuseStep{stage, {first, first + 1}});
    }
    n = int(st.stages()[i].iters.size());
    for (v1::Annotation a :
         {v1::ANNOTATION_PARALLEL, v1::ANNOTATION_VECTORIZE, v1::ANNOTATION_UNROLL}) {
      if (Pick(rng, 0, 2) == 0) continue;
      const int iter = a == v1::ANNOTATION_VECTORIZE ? n - 1 : int(Pick(rng, 0, n - 1));
      try_apply(schedule::AnnotateStep{stage, iter, a});
    }
    if (Pick(rng, 0, 1) == 0) {
      static const int64_t kSteps[] = {0, 16, 64, 512};
      try_apply(
          schedule::PragmaStep{stage, 0, v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP, kSteps[Pick(rng, 0, 3)]});
    }
  }
  return sched;
}

}  // namespace tunefarm::search::space
