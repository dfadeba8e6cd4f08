#include "compiler/schedule/gpu_sketch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/schedule/gpu_launch.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/schedule_builder.h"
#include "compiler/schedule/sketch.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;

int64_t Pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

std::vector<int64_t> Divisors(int64_t n, int64_t limit) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= std::min(n, limit); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

int64_t RandomDivisor(std::mt19937_64& rng, int64_t n, int64_t limit) {
  std::vector<int64_t> d = Divisors(std::max<int64_t>(1, n), std::max<int64_t>(1, limit));
  return d[Pick(rng, 0, int64_t(d.size()) - 1)];
}

int64_t LargestDivisor(int64_t n, int64_t limit) {
  return Divisors(std::max<int64_t>(1, n), std::max<int64_t>(1, limit)).back();
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Decision layout: per spatial axis (vthread, thread, S3, S4), per
// reduction axis (R1, R2), then the auto-unroll index and storage_align.
constexpr int kPerSpatial = 4;
constexpr int kPerReduce = 2;
constexpr int64_t kUnrollSteps[] = {0, 16, 64, 512};
constexpr int64_t kMaxAccumulators = 64;

struct Shape {
  std::vector<int64_t> spatial, reduce;
  int ns() const { return int(spatial.size()); }
  int nr() const { return int(reduce.size()); }
  size_t size() const { return kPerSpatial * ns() + kPerReduce * nr() + 2; }
  size_t unroll_at() const { return kPerSpatial * ns() + kPerReduce * nr(); }
};

Shape ShapeOf(const ComputeDAG& dag) {
  Shape s;
  const Stage& m = dag.stages[TilingMainStage(dag)];
  for (const IterVar& a : m.axes) s.spatial.push_back(a.extent);
  for (const IterVar& a : m.reduce_axes) s.reduce.push_back(a.extent);
  return s;
}

int64_t Threads(const Shape& sh, const std::vector<int64_t>& d) {
  int64_t t = 1;
  for (int a = 0; a < sh.ns(); ++a) t *= d[kPerSpatial * a + 1];
  return t;
}

int64_t Accumulators(const Shape& sh, const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int a = 0; a < sh.ns(); ++a) {
    const int64_t* x = &d[kPerSpatial * a];
    n *= x[0] * x[2] * x[3];
  }
  return n;
}

bool Fits(const Shape& sh, const std::vector<int64_t>& d, const Target& target) {
  for (int a = 0; a < sh.ns(); ++a) {
    const int64_t* x = &d[kPerSpatial * a];
    if (x[0] < 1 || x[1] < 1 || x[2] < 1 || x[3] < 1) return false;
    if (x[0] * x[1] * x[2] * x[3] > sh.spatial[a] * 2) return false;
  }
  for (int r = 0; r < sh.nr(); ++r) {
    const int64_t* x = &d[kPerSpatial * sh.ns() + kPerReduce * r];
    if (x[0] < 1 || x[1] < 1 || x[0] * x[1] > sh.reduce[r]) return false;
  }
  return Threads(sh, d) <= target.max_threads_per_block && Accumulators(sh, d) <= kMaxAccumulators;
}

// Thread, vthread and register tiles of spatial axis `a` for a thread budget.
void SampleAxis(const Shape& sh, int a, int64_t* budget, std::mt19937_64& rng,
                std::vector<int64_t>* d) {
  int64_t ext = sh.spatial[a];
  int64_t* x = &(*d)[kPerSpatial * a];
  x[1] = RandomDivisor(rng, ext, std::min<int64_t>(*budget, 32));
  *budget /= x[1];
  int64_t rest = CeilDiv(ext, x[1]);
  x[0] = Pick(rng, 0, 3) == 0 ? RandomDivisor(rng, rest, 2) : 1;
  rest = CeilDiv(rest, x[0]);
  x[3] = RandomDivisor(rng, rest, 8);
  rest = CeilDiv(rest, x[3]);
  x[2] = Pick(rng, 0, 1) == 0 ? RandomDivisor(rng, rest, 4) : 1;
}

void SampleReduce(const Shape& sh, int r, std::mt19937_64& rng, std::vector<int64_t>* d) {
  int64_t* x = &(*d)[kPerSpatial * sh.ns() + kPerReduce * r];
  x[1] = RandomDivisor(rng, sh.reduce[r], 8);
  x[0] = Pick(rng, 0, 1) == 0 ? RandomDivisor(rng, sh.reduce[r] / x[1], 8) : 1;
}

}  // namespace

std::vector<int64_t> SampleGpuTilingDecisions(const ComputeDAG& dag, const Target& target,
                                              std::mt19937_64& rng) {
  if (!HasTilingSketch(dag)) return {};
  Shape sh = ShapeOf(dag);
  std::vector<int64_t> d(sh.size(), 1);
  for (int tries = 0; tries < 32; ++tries) {
    static const int64_t kBudgets[] = {32, 64, 128, 256, 512, 1024};
    int64_t budget = std::min<int64_t>(kBudgets[Pick(rng, 0, 5)], target.max_threads_per_block);
    // Innermost axes first: consecutive threads along the contiguous axis.
    for (int a = sh.ns() - 1; a >= 0; --a) SampleAxis(sh, a, &budget, rng, &d);
    if (Accumulators(sh, d) <= kMaxAccumulators) break;
  }
  for (int r = 0; r < sh.nr(); ++r) SampleReduce(sh, r, rng, &d);
  d[sh.unroll_at()] = Pick(rng, 0, 3);
  d[sh.unroll_at() + 1] = Pick(rng, 0, 1);
  if (!Fits(sh, d, target)) {  // fall back to one register per thread
    for (int a = 0; a < sh.ns(); ++a) d[kPerSpatial * a] = d[kPerSpatial * a + 2] = 1;
  }
  return d;
}

std::vector<int64_t> MutateGpuTilingDecisions(const ComputeDAG& dag, const Target& target,
                                              const std::vector<int64_t>& decisions,
                                              std::mt19937_64& rng) {
  if (!HasTilingSketch(dag)) return decisions;
  Shape sh = ShapeOf(dag);
  if (decisions.size() != sh.size()) return SampleGpuTilingDecisions(dag, target, rng);
  for (int tries = 0; tries < 16; ++tries) {
    std::vector<int64_t> d = decisions;
    switch (Pick(rng, 0, 5)) {
      case 0:
      case 1:
      case 2: {  // one tile level of one spatial axis
        int a = int(Pick(rng, 0, sh.ns() - 1));
        int level = int(Pick(rng, 0, 3));
        int64_t* x = &d[kPerSpatial * a];
        int64_t others = 1;
        for (int l = 0; l < 4; ++l) others *= l == level ? 1 : x[l];
        int64_t limit = level == 1 ? 32 : level == 3 ? 8 : 4;
        x[level] = RandomDivisor(rng, std::max<int64_t>(1, sh.spatial[a] / others), limit);
        break;
      }
      case 3:
        if (sh.nr() > 0) SampleReduce(sh, int(Pick(rng, 0, sh.nr() - 1)), rng, &d);
        break;
      case 4:
        d[sh.unroll_at()] = Pick(rng, 0, 3);
        break;
      default:
        d[sh.unroll_at() + 1] = !d[sh.unroll_at() + 1];
    }
    if (d != decisions && Fits(sh, d, target)) return d;
  }
  return decisions;
}

std::vector<int64_t> DefaultGpuTilingDecisions(const ComputeDAG& dag, const Target& target) {
  if (!HasTilingSketch(dag)) return {};
  Shape sh = ShapeOf(dag);
  std::vector<int64_t> d(sh.size(), 1);
  int64_t budget = std::min<int64_t>(128, target.max_threads_per_block);
  int register_axes = 2;
  for (int a = sh.ns() - 1; a >= 0; --a) {
    int64_t* x = &d[kPerSpatial * a];
    x[1] = LargestDivisor(sh.spatial[a], std::min<int64_t>(budget, 16));
    budget /= x[1];
    int64_t rest = sh.spatial[a] / x[1];
    if (rest > 1 && register_axes > 0) {
      x[3] = LargestDivisor(rest, 4);
      --register_axes;
    }
  }
  for (int r = 0; r < sh.nr(); ++r) {
    int64_t* x = &d[kPerSpatial * sh.ns() + kPerReduce * r];
    x[1] = sh.reduce[r] <= 3 ? sh.reduce[r] : LargestDivisor(sh.reduce[r], 4);
  }
  d[sh.unroll_at()] = 2;
  d[sh.unroll_at() + 1] = 0;
  return d;
}

absl::StatusOr<v1::Schedule> BuildGpuTiledSchedule(const ComputeDAG& dag, const Target& target,
                                                   const std::vector<int64_t>& decisions) {
  if (!target.is_gpu()) return absl::InvalidArgumentError("the GPU sketch needs a cuda target");
  const int main = TilingMainStage(dag);
  if (main < 0) return absl::InvalidArgumentError("no reduction to tile");
  Shape sh = ShapeOf(dag);
  if (decisions.size() != sh.size())
    return absl::InvalidArgumentError("decisions do not match the workload");
  const std::vector<int64_t>& d = decisions;
  if (!Fits(sh, d, target))
    return absl::InvalidArgumentError("decisions exceed the target's limits");
  const int ns = sh.ns(), nr = sh.nr();

  ScheduleBuilder b(dag, target);
  const std::string main_name = dag.stages[main].name;
  std::string local_name = main_name, consumer_name;
  if (dag.stages[main].output == dag.output) {
    v1::Step step;
    step.mutable_cache_write()->set_stage(main);
    step.mutable_cache_write()->set_scope(v1::MEMORY_SCOPE_LOCAL);
    b.Add(step);
    local_name = main_name + ".local";
    consumer_name = main_name;
  } else {
    consumer_name = dag.stages[dag.ProducerOf(dag.output)].name;
  }
  if (!b.ok()) return b.status();
  // Every operand of the reduction staged in shared memory.
  const int n_operands = int(StageInputs(b.state().dag().stages[main]).size());
  for (int op = 0; op < n_operands; ++op)
    b.CacheRead(FindStage(b.state(), local_name), op, v1::MEMORY_SCOPE_SHARED);
  if (!b.ok()) return b.status();
  // Cheap stages (padding, the epilogue's inputs) inlined into their readers.
  for (size_t i = 0; i < b.state().dag().stages.size(); ++i) {
    const ComputeDAG& sdag = b.state().dag();
    const Stage& s = sdag.stages[i];
    if (!s.inlinable || s.output == sdag.output || sdag.tensors[s.output].shared) continue;
    v1::Step step;
    step.mutable_compute_inline()->set_stage(int(i));
    b.Add(step);
  }
  if (!b.ok()) return b.status();
  const int C = FindStage(b.state(), consumer_name);
  if (C < 0 || b.state().dag().stages[C].axes.size() != size_t(ns)) {
    return absl::InvalidArgumentError("the reduction's consumer has another shape");
  }
  auto tile = [&](int a, int level) { return d[kPerSpatial * a + level]; };
  // The consumer (write-back and epilogue): block, vthread, thread, inner.
  std::vector<std::vector<const ExprNode*>> cl(ns);
  for (int a = 0; a < ns; ++a) {
    const Stage& cs = b.state().dag().stages[C];
    cl[a] = b.SplitLoop(C, cs.axes[a].var.get(), {tile(a, 0), tile(a, 1), tile(a, 2) * tile(a, 3)});
  }
  if (!b.ok()) return b.status();
  std::vector<const ExprNode*> order;
  for (int level = 0; level < 4; ++level) {
    for (int a = 0; a < ns; ++a) order.push_back(cl[a][level]);
  }
  b.ReorderLoops(C, order);
  if (ns >= 2) {
    for (int group = 0; group < 3; ++group) {
      std::vector<int> iters;
      for (int a = 0; a < ns; ++a) iters.push_back(group + a);
      TF_RETURN_IF_ERROR(b.Fuse(C, iters));
    }
  }
  TF_RETURN_IF_ERROR(b.Annotate(C, 0, v1::ANNOTATION_BLOCK_X));
  TF_RETURN_IF_ERROR(b.Annotate(C, 1, v1::ANNOTATION_VTHREAD));
  TF_RETURN_IF_ERROR(b.Annotate(C, 2, v1::ANNOTATION_THREAD_X));
  // The register tile: S0 S1 S2 R0 R1 S3 R2 S4.
  const int L = FindStage(b.state(), local_name);
  std::vector<std::vector<const ExprNode*>> ll(ns), rl(nr);
  for (int a = 0; a < ns; ++a) {
    const Stage& ls = b.state().dag().stages[L];
    ll[a] = b.SplitLoop(L, ls.axes[a].var.get(), {tile(a, 0), tile(a, 1), tile(a, 2), tile(a, 3)});
  }
  for (int r = 0; r < nr; ++r) {
    const Stage& ls = b.state().dag().stages[L];
    const int64_t* x = &d[kPerSpatial * ns + kPerReduce * r];
    rl[r] = b.SplitLoop(L, ls.reduce_axes[r].var.get(), {x[0], x[1]});
  }
  if (!b.ok()) return b.status();
  order.clear();
  for (int level : {0, 1, 2}) {
    for (int a = 0; a < ns; ++a) order.push_back(ll[a][level]);
  }
  for (int r = 0; r < nr; ++r) order.push_back(rl[r][0]);
  for (int r = 0; r < nr; ++r) order.push_back(rl[r][1]);
  for (int a = 0; a < ns; ++a) order.push_back(ll[a][3]);
  for (int r = 0; r < nr; ++r) order.push_back(rl[r][2]);
  for (int a = 0; a < ns; ++a) order.push_back(ll[a][4]);
  b.ReorderLoops(L, order);
  for (int a = 0; a < ns; ++a) {
    if (tile(a, 3) > 1) b.AnnotateLoop(L, ll[a][4], v1::ANNOTATION_UNROLL);
  }
  int64_t unroll = kUnrollSteps[std::clamp<int64_t>(d[sh.unroll_at()], 0, 3)];
  if (unroll > 0) {
    v1::Step step;
    step.mutable_pragma()->set_stage(L);
    step.mutable_pragma()->set_kind(v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP);
    step.mutable_pragma()->set_value(unroll);
    b.Add(step);
  }
  if (!b.ok()) return b.status();
  // Shared copies at the innermost R0 loop (the whole tile when there is no
  // reduction split), padded against bank conflicts when decided so.
  const ExprNode* attach = nr > 0 ? rl[nr - 1][0] : ll[ns - 1][2];
  for (size_t i = 0; i < b.state().dag().stages.size(); ++i) {
    const ComputeDAG& sdag = b.state().dag();
    if (!sdag.tensors[sdag.stages[i].output].shared) continue;
    b.ComputeAt(int(i), L, b.IndexOf(L, attach));
    if (d[sh.unroll_at() + 1] && sdag.tensors[sdag.stages[i].output].shape.size() >= 2) {
      v1::Step align;
      auto* sa = align.mutable_storage_align();
      sa->set_stage(int(i));
      sa->set_iter(int(sdag.tensors[sdag.stages[i].output].shape.size()) - 2);
      sa->set_factor(32);
      sa->set_offset(1);
      b.Add(align);
    }
  }
  b.ComputeAt(L, C, 2);
  if (!b.ok()) return b.status();
  v1::Schedule out = b.Take();
  out.set_sketch_id(kGpuTilingSketchId);
  for (int64_t x : d) out.add_decisions(x);
  return out;
}

absl::StatusOr<v1::Schedule> GpuFusedSchedule(const ComputeDAG& dag, const Target& target,
                                              int64_t threads) {
  if (!target.is_gpu()) return absl::InvalidArgumentError("the fused GPU schedule needs cuda");
  ScheduleBuilder b(dag, target);
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& s = dag.stages[i];
    if (!s.inlinable || s.output == dag.output) continue;
    v1::Step step;
    step.mutable_compute_inline()->set_stage(int(i));
    b.Add(step);
  }
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    if (b.state().stages()[i].location != StageState::Location::kRoot) continue;
    const int stage = int(i);
    const int ns = int(dag.stages[i].axes.size());
    if (ns == 0) continue;  // a scalar: one thread
    if (ns >= 2) {
      std::vector<int> iters;
      for (int a = 0; a < ns; ++a) iters.push_back(a);
      b.Fuse(stage, iters);
    }
    const LoopIter& fused = b.state().stages()[i].iters[0];
    int64_t t = std::min(threads, fused.extent);
    std::vector<const ExprNode*> parts = b.SplitLoop(stage, fused.var.get(), {t});
    if (parts.size() != 2) break;
    b.AnnotateLoop(stage, parts[0], v1::ANNOTATION_BLOCK_X);
    b.AnnotateLoop(stage, parts[1], v1::ANNOTATION_THREAD_X);
  }
  if (!b.ok()) return b.status();
  v1::Schedule out = b.Take();
  out.set_sketch_id(kGpuFusedSketchId);
  out.add_decisions(threads);
  return out;
}

absl::Status CheckGpuLaunch(const ComputeDAG& dag, const Target& target,
                            const v1::Schedule& schedule) {
  TF_ASSIGN_OR_RETURN(ScheduleState st, ScheduleState::Replay(dag, schedule, target));
  return PlanGpuLaunches(Lower(st), target).status();
}

v1::Schedule DefaultGpuSchedule(const ComputeDAG& dag, const Target& target) {
  if (HasTilingSketch(dag)) {
    absl::StatusOr<v1::Schedule> tiled =
        BuildGpuTiledSchedule(dag, target, DefaultGpuTilingDecisions(dag, target));
    if (tiled.ok() && CheckGpuLaunch(dag, target, *tiled).ok()) {
      tiled->set_is_default(true);
      return *std::move(tiled);
    }
  }
  absl::StatusOr<v1::Schedule> fused =
      GpuFusedSchedule(dag, target, std::min<int64_t>(256, target.max_threads_per_block));
  TF_CHECK(fused.ok());
  fused->set_is_default(true);
  return *std::move(fused);
}

v1::Schedule RandomGpuSchedule(const ComputeDAG& dag, const Target& target, std::mt19937_64& rng) {
  if (HasTilingSketch(dag) && Pick(rng, 0, 3) != 0) {
    for (int tries = 0; tries < 8; ++tries) {
      std::vector<int64_t> d = SampleGpuTilingDecisions(dag, target, rng);
      if (Pick(rng, 0, 2) == 0) d = MutateGpuTilingDecisions(dag, target, d, rng);
      absl::StatusOr<v1::Schedule> tiled = BuildGpuTiledSchedule(dag, target, d);
      if (tiled.ok() && CheckGpuLaunch(dag, target, *tiled).ok()) return *std::move(tiled);
    }
  }
  static const int64_t kThreads[] = {32, 64, 128, 256, 512, 1024};
  int64_t threads = std::min<int64_t>(kThreads[Pick(rng, 0, 5)], target.max_threads_per_block);
  absl::StatusOr<v1::Schedule> fused = GpuFusedSchedule(dag, target, threads);
  TF_CHECK(fused.ok());
  return *std::move(fused);
}

}  // namespace tunefarm::ir
