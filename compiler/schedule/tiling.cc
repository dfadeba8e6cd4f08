#include "compiler/schedule/tiling.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "compiler/schedule/schedule.h"
#include "compiler/schedule/schedule_builder.h"

namespace tunefarm::schedule {

using ir::ComputeDAG;
using ir::ExprNode;
using ir::IterVar;
using ir::Mentions;
using ir::ReduceKind;
using ir::Stage;
using ir::StageInputs;
using ir::Target;
using ir::TensorDecl;
using ir::VisitLoads;
namespace {

namespace v1 = ::tunefarm::v1;

constexpr int64_t kPragmaSteps[] = {0, 16, 64, 512};

// Wire layout: the fixed decisions, kPerAxis per spatial axis, one step per
// reduction axis, then the placement.
constexpr size_t kFixed = 5, kPerAxis = 4, kPlacement = 2;

size_t LegacySize(const TilingNest& nest) {
  return kFixed + kPerAxis * size_t(nest.ns()) + size_t(nest.nr());
}

}  // namespace

int TilingMainStage(const ComputeDAG& dag) {
  int main = -1;
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    if (dag.stages[i].reduce == ReduceKind::kSum && !dag.stages[i].reduce_axes.empty())
      main = int(i);
  }
  return main;
}

bool HasTilingSketch(const ComputeDAG& dag) { return TilingMainStage(dag) >= 0; }

TilingNest TilingNest::Of(const ComputeDAG& dag) {
  TilingNest nest;
  const Stage& m = dag.stages[TilingMainStage(dag)];
  for (const IterVar& a : m.axes) nest.spatial.push_back(a.extent);
  for (const IterVar& a : m.reduce_axes) nest.reduce.push_back(a.extent);
  return nest;
}

bool CpuTiling::operator==(const CpuTiling& o) const {
  return pad_pass == o.pad_pass && vector_axis == o.vector_axis && unroll_tile == o.unroll_tile &&
         pragma == o.pragma && pack == o.pack && spatial == o.spatial &&
         reduce_steps == o.reduce_steps && compute_at == o.compute_at && parallel == o.parallel;
}

std::optional<CpuTiling> CpuTiling::Decode(const TilingNest& nest, absl::Span<const int64_t> wire) {
  const size_t legacy = LegacySize(nest);
  if (wire.size() != legacy && wire.size() != legacy + kPlacement) return std::nullopt;
  CpuTiling t;
  t.pad_pass = wire[0] != 0;
  t.vector_axis = wire[1];
  t.unroll_tile = wire[2] != 0;
  t.pragma = wire[3];
  t.pack = wire[4] != 0;
  size_t at = kFixed;
  for (int a = 0; a < nest.ns(); ++a, at += kPerAxis)
    t.spatial.push_back({wire[at], wire[at + 1], wire[at + 2], wire[at + 3] != 0});
  for (int r = 0; r < nest.nr(); ++r) t.reduce_steps.push_back(wire[at++]);
  if (wire.size() == legacy) {
    t.compute_at = kComputeAtS0;
    t.parallel = DefaultParallel(nest);
  } else {
    t.compute_at = wire[at];
    t.parallel = wire[at + 1];
  }
  return t;
}

std::vector<int64_t> CpuTiling::Encode() const {
  std::vector<int64_t> w = {pad_pass, vector_axis, unroll_tile, pragma, pack};
  for (const Axis& a : spatial) w.insert(w.end(), {a.s1, a.s2, a.s3, a.unroll});
  w.insert(w.end(), reduce_steps.begin(), reduce_steps.end());
  w.push_back(compute_at);
  w.push_back(parallel);
  return w;
}

int64_t CpuTiling::MaxParallel(const TilingNest& nest, int64_t level) {
  return level == kComputeAtS0 ? nest.ns() : 2 * nest.ns();
}

bool CpuTiling::PlacementValid(const TilingNest& nest) const {
  return compute_at >= kComputeAtS0 && compute_at <= kComputeAtS2 && parallel >= 1 &&
         parallel <= MaxParallel(nest, compute_at);
}

int64_t CpuTiling::OuterExtent(const TilingNest& nest, int j) const {
  const int a = j % nest.ns();
  const Axis& x = spatial[size_t(a)];
  if (j >= nest.ns()) return x.s1;
  const int64_t tile = std::max<int64_t>(1, x.s1 * x.s2 * x.s3);
  return (nest.spatial[size_t(a)] + tile - 1) / tile;
}

bool CpuTiling::LevelTrivial(int level) const {
  for (const Axis& x : spatial) {
    if (x.tile(level - 1) > 1) return false;
  }
  return true;
}

CpuTiling::Placement CpuTiling::EffectivePlacement(const TilingNest& nest) const {
  Placement pl{compute_at, parallel};
  while (pl.level > kComputeAtS0 && LevelTrivial(int(pl.level))) --pl.level;
  // Parallel S1 loops left past a location moved out are one iteration long.
  pl.parallel = std::min(pl.parallel, MaxParallel(nest, pl.level));
  const int64_t ns = DefaultParallel(nest);
  if (pl.parallel < ns) {
    bool rest_trivial = true;
    for (int j = int(pl.parallel); j < ns; ++j) rest_trivial &= OuterExtent(nest, j) == 1;
    if (rest_trivial) pl.parallel = ns;
  }
  while (pl.parallel > 1 && pl.parallel != ns && OuterExtent(nest, int(pl.parallel) - 1) == 1)
    --pl.parallel;
  return pl;
}

int64_t CpuTiling::LocalElements() const {
  int64_t n = 1;
  for (const Axis& x : spatial) n *= x.s1 * x.s2 * x.s3;
  return n;
}

int64_t CpuTiling::Accumulators(int64_t lanes) const {
  int64_t acc = 1;
  for (size_t a = 0; a < spatial.size(); ++a) {
    const int64_t t3 = spatial[a].s3;
    acc *= int64_t(a) == vector_axis ? (t3 + lanes - 1) / lanes : t3;
  }
  return acc;
}

absl::StatusOr<Trace> BuildTiledSchedule(const ComputeDAG& dag, const Target& target,
                                         absl::Span<const int64_t> wire) {
  if (!HasTilingSketch(dag)) return absl::InvalidArgumentError("no reduction to tile");
  std::optional<CpuTiling> tiling = CpuTiling::Decode(TilingNest::Of(dag), wire);
  if (!tiling) return absl::InvalidArgumentError("decisions do not match the workload");
  return BuildTiledSchedule(dag, target, *tiling);
}

namespace {

// What BuildTiledSchedule's steps share: the decisions, the builder, and
// the loops they split (per spatial axis: S0..S3 of the consumer, `cl`,
// and of the local stage, `ll`; per reduction axis its two parts, `rl`).
struct TiledBuild {
  TiledBuild(const ComputeDAG& dag, const Target& target, const CpuTiling& d, int main)
      : dag(dag), d(d), sh(TilingNest::Of(dag)), b(dag, target), main(main), local(main) {}
  const ComputeDAG& dag;
  const CpuTiling& d;
  const TilingNest sh;
  ScheduleBuilder b;
  int ns = 0, v = 0;
  std::vector<int64_t> m, t2, t3;  // S1, S2, S3 tile sizes per spatial axis
  int main, local, consumer = -1;
  std::vector<int> passes;  // padding stages kept as passes of their own
  std::vector<std::vector<const ExprNode*>> cl, ll, rl;
};

// Cheap stages inlined, except padding read by the reduction, which stays
// a pass of its own (parallel, vectorized) when the decision says so; the
// reduction's result cached locally when it is the output. Sets the
// consumer (the stage that writes the output).
absl::Status InlineAndFindConsumer(TiledBuild& t) {
  ScheduleBuilder& b = t.b;
  const ComputeDAG& dag = t.dag;
  for (int i = 0; i < int(dag.stages.size()); ++i) {
    const Stage& s = dag.stages[i];
    if (!s.inlinable || s.output == dag.output) continue;
    bool feeds_main = false;
    VisitLoads(dag.stages[t.main].body,
               [&](const ExprNode& n) { feeds_main |= n.tensor == s.output; });
    if (feeds_main && t.d.pad_pass) {
      t.passes.push_back(i);
      continue;
    }
    b.Add(ComputeInlineStep{i});
  }
  if (dag.stages[t.main].output == dag.output) {
    b.Add(CacheWriteStep{t.main, v1::MEMORY_SCOPE_LOCAL});
    t.consumer = t.main + 1;
  } else {
    for (int j = t.main + 1; j < int(dag.stages.size()); ++j) {
      if (b.state().stages()[j].location == StageState::Location::kRoot) t.consumer = j;
    }
    if (t.consumer < 0 || dag.stages[t.consumer].output != dag.output) {
      return absl::InvalidArgumentError("the reduction's consumer is not the output");
    }
  }
  if (!b.ok()) return absl::InvalidArgumentError("sketch does not apply");
  return absl::OkStatus();
}

// The padding passes: outer loops fused and parallel, the innermost vectorized.
void SchedulePasses(TiledBuild& t) {
  ScheduleBuilder& b = t.b;
  for (int p : t.passes) {
    const auto& iters = b.state().stages()[p].iters;
    if (iters.size() < 2) continue;
    if (iters.size() > 2) {
      FuseStep fuse{p};
      for (size_t k = 0; k + 1 < iters.size(); ++k) fuse.iters.push_back(int(k));
      b.Add(std::move(fuse));
    }
    b.AnnotateLoop(p, b.state().stages()[p].iters[0].var.get(), v1::ANNOTATION_PARALLEL);
    b.AnnotateLoop(p, b.state().stages()[p].iters.back().var.get(), v1::ANNOTATION_VECTORIZE);
  }
}

// The consumer: tiles of m*t2*t3 per axis, split like the local stage so
// its reads of the tile are plain; its first `parallel` outer loops (S0
// of every axis, then S1) fused and parallel.
absl::Status TileConsumer(TiledBuild& t, const Stage& C, const CpuTiling::Placement& place) {
  ScheduleBuilder& b = t.b;
  const int ns = t.ns, v = t.v;
  t.cl.assign(size_t(ns), {});
  for (int a = 0; a < ns; ++a)
    t.cl[a] = b.SplitLoop(t.consumer, C.axes[a].var.get(), {t.m[a], t.t2[a], t.t3[a]});
  if (!b.ok()) return absl::InvalidArgumentError("tile sizes do not apply");
  std::vector<const ExprNode*> order;
  for (int level = 0; level < 4; ++level) {
    for (int a = 0; a < ns; ++a) {
      if (level == 3 && a == v) continue;
      order.push_back(t.cl[a][level]);
    }
  }
  order.push_back(t.cl[v][3]);
  b.ReorderLoops(t.consumer, order);
  if (place.parallel >= 2) {
    FuseStep fuse{t.consumer};
    for (int j = 0; j < place.parallel; ++j) fuse.iters.push_back(j);
    b.Add(std::move(fuse));
  }
  if (!b.ok()) return absl::InvalidArgumentError("consumer tiling does not apply");
  b.AnnotateLoop(t.consumer, b.state().stages()[t.consumer].iters[0].var.get(),
                 v1::ANNOTATION_PARALLEL);
  if (t.t3[v] > 1) b.AnnotateLoop(t.consumer, t.cl[v][3], v1::ANNOTATION_VECTORIZE);
  for (int a = 0; a < ns; ++a) {
    if (a != v && t.t3[a] > 1 && t.d.spatial[a].unroll)
      b.AnnotateLoop(t.consumer, t.cl[a][3], v1::ANNOTATION_UNROLL);
  }
  return absl::OkStatus();
}

// The local stage: S0 S1 R0 S2 R1 S3, the vector tile vectorized, the
// register tile unrolled where the decisions say, and the unroll pragma.
absl::Status TileLocal(TiledBuild& t, const Stage& L) {
  ScheduleBuilder& b = t.b;
  const int ns = t.ns, v = t.v;
  t.ll.assign(size_t(ns), {});
  for (int a = 0; a < ns; ++a)
    t.ll[a] = b.SplitLoop(t.local, L.axes[a].var.get(), {t.m[a], t.t2[a], t.t3[a]});
  for (int r = 0; r < t.sh.nr(); ++r) {
    int64_t inner = std::clamp<int64_t>(t.d.reduce_steps[r], 1, L.reduce_axes[r].extent);
    t.rl.push_back(b.SplitLoop(t.local, L.reduce_axes[r].var.get(), {inner}));
  }
  if (!b.ok()) return absl::InvalidArgumentError("local tiling does not apply");
  std::vector<const ExprNode*> order;
  for (int a = 0; a < ns; ++a) order.push_back(t.ll[a][0]);
  for (int a = 0; a < ns; ++a) order.push_back(t.ll[a][1]);
  for (auto& r : t.rl) order.push_back(r[0]);
  for (int a = 0; a < ns; ++a) order.push_back(t.ll[a][2]);
  for (auto& r : t.rl) order.push_back(r[1]);
  for (int a = 0; a < ns; ++a) {
    if (a != v) order.push_back(t.ll[a][3]);
  }
  order.push_back(t.ll[v][3]);
  b.ReorderLoops(t.local, order);
  if (t.t3[v] > 1) b.AnnotateLoop(t.local, t.ll[v][3], v1::ANNOTATION_VECTORIZE);
  for (int a = 0; a < ns; ++a) {
    if (a != v && t.t3[a] > 1 && t.d.unroll_tile)
      b.AnnotateLoop(t.local, t.ll[a][3], v1::ANNOTATION_UNROLL);
  }
  if (t.d.pragma >= 0 && t.d.pragma < 4) {
    b.Add(PragmaStep{t.local, 0, v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP, kPragmaSteps[t.d.pragma]});
  }
  return absl::OkStatus();
}

// Operands indexed by the vector axis get a blocked layout: a constant
// (weight) is repacked by the vector tile once, ahead of time; any other
// input is copied per reduction step into a buffer of its tile (returned:
// operand, copy's name, for a cache_read), so the register tile streams
// contiguous rows instead of rows a whole tensor row apart.
std::vector<std::pair<int, std::string>> PackOperands(TiledBuild& t, const ComputeDAG& sdag,
                                                      const Stage& L) {
  std::vector<std::pair<int, std::string>> copied;
  const int v = t.v;
  if (t.t3[v] <= 1 || !t.d.pack) return copied;
  std::vector<int> inputs = StageInputs(L);
  for (size_t op = 0; op < inputs.size(); ++op) {
    const TensorDecl& td = sdag.tensors[inputs[op]];
    // The dimension the vector axis indexes, and those any spatial axis reaches.
    int dim = -1;
    std::vector<bool> spatial(td.shape.size(), false);
    VisitLoads(L.body, [&](const ExprNode& n) {
      if (n.tensor != inputs[op]) return;
      for (size_t k = 0; k < n.args.size(); ++k) {
        if (n.args[k].same_as(L.axes[v].var)) dim = int(k);
        for (const IterVar& a : L.axes)
          spatial[k] = spatial[k] || Mentions(n.args[k], a.var.get());
      }
    });
    if (dim < 0 || td.shape[dim] < t.t3[v]) continue;
    if (!td.is_constant) {
      if (td.role == TensorDecl::Role::kInput && dim + 1 == int(td.shape.size()) && t.sh.nr() > 0)
        copied.emplace_back(int(op), td.name + ".local");
      continue;
    }
    // Blocked by the vector tile, with the dimensions read only through
    // reduction axes inside it (whole), ahead of the vector block: each
    // channel vector's weights are then one sequential stream over the
    // reduction ([K/8][R][S][C][8] for an RSCK weight), which the
    // hardware prefetchers follow when the weight comes from memory.
    LayoutPackStep lp{t.local, int(op)};
    lp.block.assign(td.shape.size(), 0);
    lp.block[size_t(dim)] = t.t3[v];
    for (size_t k = 0; k < td.shape.size(); ++k) {
      if (int(k) == dim || spatial[k] || td.shape[k] == 1) continue;
      lp.block[k] = td.shape[k];
      lp.inner_dims.push_back(int(k));
    }
    lp.inner_dims.push_back(dim);
    t.b.Add(std::move(lp));
  }
  return copied;
}

}  // namespace

absl::StatusOr<Trace> BuildTiledSchedule(const ComputeDAG& dag, const Target& target,
                                         const CpuTiling& d) {
  int main = TilingMainStage(dag);
  if (main < 0) return absl::InvalidArgumentError("no reduction to tile");
  TiledBuild t(dag, target, d, main);
  const TilingNest& sh = t.sh;
  if (int(d.spatial.size()) != sh.ns() || int(d.reduce_steps.size()) != sh.nr()) {
    return absl::InvalidArgumentError("decisions do not match the workload");
  }
  const int ns = t.ns = sh.ns();
  const int v = t.v = int(d.vector_axis);
  if (v < 0 || v >= ns) return absl::InvalidArgumentError("bad vector axis");
  if (!d.PlacementValid(sh)) {
    return absl::InvalidArgumentError(absl::StrCat("bad placement: compute location ", d.compute_at,
                                                   " (0-2), parallel loops ", d.parallel, " (1-",
                                                   ns, " at location 0, 1-", 2 * ns, " deeper)"));
  }
  t.m.resize(ns), t.t2.resize(ns), t.t3.resize(ns);
  for (int a = 0; a < ns; ++a) {
    t.m[a] = d.spatial[a].s1, t.t2[a] = d.spatial[a].s2, t.t3[a] = d.spatial[a].s3;
    if (t.m[a] < 1 || t.t2[a] < 1 || t.t3[a] < 1)
      return absl::InvalidArgumentError("tile size below 1");
  }
  ScheduleBuilder& b = t.b;
  if (absl::Status s = InlineAndFindConsumer(t); !s.ok()) return s;
  const ComputeDAG& sdag = b.state().dag();
  const Stage& L = sdag.stages[t.local];
  const Stage& C = sdag.stages[t.consumer];
  if (C.axes.size() != L.axes.size()) return absl::InvalidArgumentError("consumer shape differs");
  for (size_t a = 0; a < L.axes.size(); ++a) {
    if (C.axes[a].extent != L.axes[a].extent)
      return absl::InvalidArgumentError("consumer shape differs");
  }
  SchedulePasses(t);
  const CpuTiling::Placement place = d.EffectivePlacement(sh);
  if (absl::Status s = TileConsumer(t, C, place); !s.ok()) return s;
  if (absl::Status s = TileLocal(t, L); !s.ok()) return s;
  const std::string local_name = L.name, consumer_name = C.name;
  const std::vector<std::pair<int, std::string>> copied = PackOperands(t, sdag, L);
  for (const auto& copy : copied)
    b.CacheRead(FindStage(b.state(), local_name), copy.first, v1::MEMORY_SCOPE_LOCAL);
  if (!b.ok()) return absl::InvalidArgumentError("sketch step does not apply");
  const int local = FindStage(b.state(), local_name);
  const int consumer = FindStage(b.state(), consumer_name);
  for (const auto& copy : copied) {
    const int cs = FindStage(b.state(), copy.second);
    if (cs < 0) return absl::InvalidArgumentError("the operand copy is missing");
    b.AnnotateLoop(cs, b.state().stages()[cs].iters.back().var.get(), v1::ANNOTATION_VECTORIZE);
    b.ComputeAt(cs, local, b.IndexOf(local, t.rl.back()[0]));
  }
  // The local tile at the innermost consumer loop of its level: the fused
  // parallel loop when that loop is in it (the default: all S0 loops fused).
  const int attach = place.parallel >= (place.level + 1) * ns
                         ? 0
                         : b.IndexOf(consumer, t.cl[ns - 1][place.level]);
  if (attach < 0) return absl::InvalidArgumentError("the compute location is gone");
  b.ComputeAt(local, consumer, attach);
  if (!b.ok()) return absl::InvalidArgumentError("sketch step does not apply");
  Trace out = b.Take();
  out.sketch_id = kTilingSketchId;
  out.decisions = d.Encode();
  return out;
}

absl::StatusOr<Trace> BuildDefaultTiledSchedule(const ComputeDAG& dag, const Target& target,
                                                const CpuTiling& tiling) {
  absl::StatusOr<Trace> trace = BuildTiledSchedule(dag, target, tiling);
  if (trace.ok()) trace->is_default = true;
  return trace;
}

}  // namespace tunefarm::schedule
