#include "compiler/schedule/gpu_tiling.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/schedule/gpu_launch.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/schedule_builder.h"

namespace tunefarm::schedule {

using ir::ComputeDAG;
using ir::ExprNode;
using ir::ReduceKind;
using ir::Stage;
using ir::StageInputs;
using ir::Target;
namespace {

namespace v1 = ::tunefarm::v1;

constexpr int64_t kUnrollSteps[] = {0, 16, 64, 512};
constexpr size_t kPerSpatial = 4, kPerReduce = 2;

int64_t LargestDivisor(int64_t n, int64_t limit) {
  n = std::max<int64_t>(1, n);
  for (int64_t d = std::min(n, std::max<int64_t>(1, limit)); d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

}  // namespace

GpuTiling GpuTiling::Shaped(const TilingNest& nest) {
  GpuTiling t;
  t.spatial.resize(size_t(nest.ns()));
  t.reduce.resize(size_t(nest.nr()));
  return t;
}

std::optional<GpuTiling> GpuTiling::Decode(const TilingNest& nest, absl::Span<const int64_t> wire) {
  const size_t base = kPerSpatial * size_t(nest.ns()) + kPerReduce * size_t(nest.nr()) + 2;
  if (wire.size() != base && !(wire.size() == base + 1 && wire[base] == 1)) return std::nullopt;
  GpuTiling t;
  size_t at = 0;
  for (int a = 0; a < nest.ns(); ++a, at += kPerSpatial)
    t.spatial.push_back({wire[at], wire[at + 1], wire[at + 2], wire[at + 3]});
  for (int r = 0; r < nest.nr(); ++r, at += kPerReduce)
    t.reduce.push_back({wire[at], wire[at + 1]});
  t.unroll = wire[at];
  t.storage_align = wire[at + 1] != 0;
  t.double_buffer = wire.size() > base;
  return t;
}

std::vector<int64_t> GpuTiling::Encode() const {
  std::vector<int64_t> w;
  for (const Axis& a : spatial) w.insert(w.end(), {a.vthread, a.thread, a.s3, a.s4});
  for (const Reduce& r : reduce) w.insert(w.end(), {r.r1, r.r2});
  w.push_back(unroll);
  w.push_back(storage_align);
  if (double_buffer) w.push_back(1);
  return w;
}

int64_t GpuTiling::Threads() const {
  int64_t t = 1;
  for (const Axis& a : spatial) t *= a.thread;
  return t;
}

int64_t GpuTiling::Accumulators() const {
  int64_t n = 1;
  for (const Axis& a : spatial) n *= a.vthread * a.s3 * a.s4;
  return n;
}

int GpuTiling::PipelinedReduce(const TilingNest& nest) const {
  for (int r = nest.nr() - 1; r >= 0; --r) {
    const int64_t step = reduce[size_t(r)].r1 * reduce[size_t(r)].r2;
    if ((nest.reduce[size_t(r)] + step - 1) / step >= 2) return r;
  }
  return -1;
}

bool GpuTiling::Fits(const TilingNest& nest, const Target& target) const {
  if (int(spatial.size()) != nest.ns() || int(reduce.size()) != nest.nr()) return false;
  for (int a = 0; a < nest.ns(); ++a) {
    const Axis& x = spatial[size_t(a)];
    if (x.vthread < 1 || x.thread < 1 || x.s3 < 1 || x.s4 < 1) return false;
    if (x.vthread * x.thread * x.s3 * x.s4 > nest.spatial[size_t(a)] * 2) return false;
  }
  for (int r = 0; r < nest.nr(); ++r) {
    const Reduce& x = reduce[size_t(r)];
    if (x.r1 < 1 || x.r2 < 1 || x.r1 * x.r2 > nest.reduce[size_t(r)]) return false;
  }
  return Threads() <= target.max_threads_per_block && Accumulators() <= kMaxGpuAccumulators;
}

GpuTiling DefaultGpuTiling(const ComputeDAG& dag, const Target& target) {
  const TilingNest sh = TilingNest::Of(dag);
  GpuTiling d = GpuTiling::Shaped(sh);
  int64_t budget = std::min<int64_t>(128, target.max_threads_per_block);
  int register_axes = 2;
  for (int a = sh.ns() - 1; a >= 0; --a) {
    GpuTiling::Axis& x = d.spatial[size_t(a)];
    x.thread = LargestDivisor(sh.spatial[size_t(a)], std::min<int64_t>(budget, 16));
    budget /= x.thread;
    const int64_t rest = sh.spatial[size_t(a)] / x.thread;
    if (rest > 1 && register_axes > 0) {
      x.s4 = LargestDivisor(rest, 4);
      --register_axes;
    }
  }
  for (int r = 0; r < sh.nr(); ++r) {
    const int64_t extent = sh.reduce[size_t(r)];
    d.reduce[size_t(r)].r2 = extent <= 3 ? extent : LargestDivisor(extent, 4);
  }
  d.unroll = 2;
  d.storage_align = false;
  return d;
}

absl::StatusOr<Trace> BuildGpuTiledSchedule(const ComputeDAG& dag, const Target& target,
                                            absl::Span<const int64_t> wire) {
  if (!target.is_gpu()) return absl::InvalidArgumentError("the GPU sketch needs a cuda target");
  if (!HasTilingSketch(dag)) return absl::InvalidArgumentError("no reduction to tile");
  std::optional<GpuTiling> tiling = GpuTiling::Decode(TilingNest::Of(dag), wire);
  if (!tiling) return absl::InvalidArgumentError("decisions do not match the workload");
  return BuildGpuTiledSchedule(dag, target, *tiling);
}

absl::StatusOr<Trace> BuildGpuTiledSchedule(const ComputeDAG& dag, const Target& target,
                                            const GpuTiling& d) {
  if (!target.is_gpu()) return absl::InvalidArgumentError("the GPU sketch needs a cuda target");
  const int main = TilingMainStage(dag);
  if (main < 0) return absl::InvalidArgumentError("no reduction to tile");
  const TilingNest sh = TilingNest::Of(dag);
  if (int(d.spatial.size()) != sh.ns() || int(d.reduce.size()) != sh.nr())
    return absl::InvalidArgumentError("decisions do not match the workload");
  if (!d.Fits(sh, target))
    return absl::InvalidArgumentError("decisions exceed the target's limits");
  const int ns = sh.ns(), nr = sh.nr();

  ScheduleBuilder b(dag, target);
  const std::string main_name = dag.stages[main].name;
  std::string local_name = main_name, consumer_name;
  if (dag.stages[main].output == dag.output) {
    b.Add(CacheWriteStep{main, v1::MEMORY_SCOPE_LOCAL});
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
    b.Add(ComputeInlineStep{int(i)});
  }
  if (!b.ok()) return b.status();
  const int C = FindStage(b.state(), consumer_name);
  if (C < 0 || b.state().dag().stages[C].axes.size() != size_t(ns)) {
    return absl::InvalidArgumentError("the reduction's consumer has another shape");
  }
  auto tile = [&](int a, int level) { return d.spatial[size_t(a)].tile(level); };
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
    const GpuTiling::Reduce& x = d.reduce[size_t(r)];
    rl[r] = b.SplitLoop(L, ls.reduce_axes[r].var.get(), {x.r1, x.r2});
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
  int64_t unroll = kUnrollSteps[std::clamp<int64_t>(d.unroll, 0, 3)];
  if (unroll > 0) {
    b.Add(PragmaStep{L, 0, v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP, unroll});
  }
  if (!b.ok()) return b.status();
  // Shared copies at the innermost R0 loop (the whole tile when there is no
  // reduction split), padded against bank conflicts when decided so.
  // Double-buffered ones sit at the innermost R0 loop that runs twice or
  // more, the R0 loops inside it running once (the same boxes), so that the
  // pipeline spans the loop that iterates (a convolution's channels when
  // its kernel window is covered by R1 and R2).
  const int pipelined = d.double_buffer ? d.PipelinedReduce(sh) : -1;
  const ExprNode* attach = nr > 0 ? rl[pipelined >= 0 ? pipelined : nr - 1][0] : ll[ns - 1][2];
  for (size_t i = 0; i < b.state().dag().stages.size(); ++i) {
    const ComputeDAG& sdag = b.state().dag();
    if (!sdag.tensors[sdag.stages[i].output].shared) continue;
    b.ComputeAt(int(i), L, b.IndexOf(L, attach));
    if (d.storage_align && sdag.tensors[sdag.stages[i].output].shape.size() >= 2) {
      b.Add(StorageAlignStep{int(i), int(sdag.tensors[sdag.stages[i].output].shape.size()) - 2,
                             /*factor=*/32, /*offset=*/1});
    }
  }
  if (d.double_buffer && nr > 0) b.AnnotateLoop(L, attach, v1::ANNOTATION_DOUBLE_BUFFER);
  b.ComputeAt(L, C, 2);
  if (!b.ok()) return b.status();
  Trace out = b.Take();
  out.sketch_id = kGpuTilingSketchId;
  out.decisions = d.Encode();
  return out;
}

absl::StatusOr<Trace> GpuFusedSchedule(const ComputeDAG& dag, const Target& target,
                                       int64_t threads) {
  if (!target.is_gpu()) return absl::InvalidArgumentError("the fused GPU schedule needs cuda");
  ScheduleBuilder b(dag, target);
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& s = dag.stages[i];
    if (!s.inlinable || s.output == dag.output) continue;
    b.Add(ComputeInlineStep{int(i)});
  }
  // A reduction into a 16-bit tensor accumulates in a float32 register
  // (cache_write local, computed at the thread's loop) and rounds once.
  std::vector<std::string> accumulated;
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& s = dag.stages[i];
    if (s.reduce == ReduceKind::kNone || !dag.tensors[size_t(s.output)].float16 ||
        b.state().stages()[i].location != StageState::Location::kRoot || s.axes.empty())
      continue;
    accumulated.push_back(s.name);
  }
  for (const std::string& name : accumulated)
    b.Add(CacheWriteStep{FindStage(b.state(), name), v1::MEMORY_SCOPE_LOCAL});
  if (!b.ok()) return b.status();
  std::set<std::string> locals;
  for (const std::string& name : accumulated) locals.insert(name + ".local");
  const size_t stages = b.state().dag().stages.size();
  for (size_t i = 0; i < stages; ++i) {
    if (b.state().stages()[i].location != StageState::Location::kRoot) continue;
    const int stage = int(i);
    const Stage& s = b.state().dag().stages[i];
    const int ns = int(s.axes.size());
    if (locals.count(s.name)) continue;  // computed at its copy's thread loop below
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
  for (const std::string& name : accumulated)
    b.ComputeAt(FindStage(b.state(), name + ".local"), FindStage(b.state(), name), 1);
  if (!b.ok()) return b.status();
  Trace out = b.Take();
  out.sketch_id = kGpuFusedSketchId;
  out.decisions = {threads};
  return out;
}

absl::Status CheckGpuLaunch(const ComputeDAG& dag, const Target& target, const Trace& schedule) {
  TF_ASSIGN_OR_RETURN(ScheduleState st, ScheduleState::Replay(dag, schedule, target));
  return PlanGpuLaunches(st.dag(), Lower(st), target).status();
}

Trace DefaultGpuSchedule(const ComputeDAG& dag, const Target& target) {
  if (HasTilingSketch(dag)) {
    absl::StatusOr<Trace> tiled = BuildGpuTiledSchedule(dag, target, DefaultGpuTiling(dag, target));
    if (tiled.ok() && CheckGpuLaunch(dag, target, *tiled).ok()) {
      tiled->is_default = true;
      return *std::move(tiled);
    }
  }
  absl::StatusOr<Trace> fused =
      GpuFusedSchedule(dag, target, std::min<int64_t>(256, target.max_threads_per_block));
  TF_CHECK(fused.ok());
  fused->is_default = true;
  return *std::move(fused);
}

}  // namespace tunefarm::schedule
