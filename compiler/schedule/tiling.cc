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

absl::StatusOr<Trace> BuildTiledSchedule(const ComputeDAG& dag, const Target& target,
                                         const CpuTiling& d) {
  int main = TilingMainStage(dag);
  if (main < 0) return absl::InvalidArgumentError("no reduction to tile");
  const TilingNest sh = TilingNest::Of(dag);
  if (int(d.spatial.size()) != sh.ns() || int(d.reduce_steps.size()) != sh.nr()) {
    return absl::InvalidArgumentError("decisions do not match the workload");
  }
  const int ns = sh.ns();
  const int v = int(d.vector_axis);
  if (v < 0 || v >= ns) return absl::InvalidArgumentError("bad vector axis");
  if (!d.PlacementValid(sh)) {
    return absl::InvalidArgumentError(absl::StrCat("bad placement: compute location ", d.compute_at,
                                                   " (0-2), parallel loops ", d.parallel, " (1-",
                                                   ns, " at location 0, 1-", 2 * ns, " deeper)"));
  }
  std::vector<int64_t> m(ns), t2(ns), t3(ns);
  for (int a = 0; a < ns; ++a) {
    m[a] = d.spatial[a].s1, t2[a] = d.spatial[a].s2, t3[a] = d.spatial[a].s3;
    if (m[a] < 1 || t2[a] < 1 || t3[a] < 1) return absl::InvalidArgumentError("tile size below 1");
  }
  ScheduleBuilder b(dag, target);
  // Cheap stages: inlined, except padding read by the reduction, which stays
  // a pass of its own when the decision says so.
  std::vector<int> passes;
  for (int i = 0; i < int(dag.stages.size()); ++i) {
    const Stage& s = dag.stages[i];
    if (!s.inlinable || s.output == dag.output) continue;
    bool feeds_main = false;
    VisitLoads(dag.stages[main].body,
               [&](const ExprNode& n) { feeds_main |= n.tensor == s.output; });
    if (feeds_main && d.pad_pass) {
      passes.push_back(i);
      continue;
    }
    b.Add(ComputeInlineStep{i});
  }
  int local = main, consumer = -1;
  if (dag.stages[main].output == dag.output) {
    b.Add(CacheWriteStep{main, v1::MEMORY_SCOPE_LOCAL});
    consumer = main + 1;
  } else {
    for (int j = main + 1; j < int(dag.stages.size()); ++j) {
      if (b.state().stages()[j].location == StageState::Location::kRoot) consumer = j;
    }
    if (consumer < 0 || dag.stages[consumer].output != dag.output) {
      return absl::InvalidArgumentError("the reduction's consumer is not the output");
    }
  }
  if (!b.ok()) return absl::InvalidArgumentError("sketch does not apply");
  const ComputeDAG& sdag = b.state().dag();
  const Stage& L = sdag.stages[local];
  const Stage& C = sdag.stages[consumer];
  if (C.axes.size() != L.axes.size()) return absl::InvalidArgumentError("consumer shape differs");
  for (size_t a = 0; a < L.axes.size(); ++a) {
    if (C.axes[a].extent != L.axes[a].extent)
      return absl::InvalidArgumentError("consumer shape differs");
  }
  for (int p : passes) {
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
  // The consumer: tiles of m*t2*t3 per axis, split like the local stage so
  // its reads of the tile are plain; its first `parallel` outer loops (S0
  // of every axis, then S1) fused and parallel.
  const CpuTiling::Placement place = d.EffectivePlacement(sh);
  std::vector<std::vector<const ExprNode*>> cl(ns), ll(ns);
  for (int a = 0; a < ns; ++a)
    cl[a] = b.SplitLoop(consumer, C.axes[a].var.get(), {m[a], t2[a], t3[a]});
  if (!b.ok()) return absl::InvalidArgumentError("tile sizes do not apply");
  std::vector<const ExprNode*> order;
  for (int level = 0; level < 4; ++level) {
    for (int a = 0; a < ns; ++a) {
      if (level == 3 && a == v) continue;
      order.push_back(cl[a][level]);
    }
  }
  order.push_back(cl[v][3]);
  b.ReorderLoops(consumer, order);
  if (place.parallel >= 2) {
    FuseStep fuse{consumer};
    for (int j = 0; j < place.parallel; ++j) fuse.iters.push_back(j);
    b.Add(std::move(fuse));
  }
  if (!b.ok()) return absl::InvalidArgumentError("consumer tiling does not apply");
  b.AnnotateLoop(consumer, b.state().stages()[consumer].iters[0].var.get(),
                 v1::ANNOTATION_PARALLEL);
  if (t3[v] > 1) b.AnnotateLoop(consumer, cl[v][3], v1::ANNOTATION_VECTORIZE);
  for (int a = 0; a < ns; ++a) {
    if (a != v && t3[a] > 1 && d.spatial[a].unroll)
      b.AnnotateLoop(consumer, cl[a][3], v1::ANNOTATION_UNROLL);
  }
  // The local stage: S0 S1 R0 S2 R1 S3.
  for (int a = 0; a < ns; ++a)
    ll[a] = b.SplitLoop(local, L.axes[a].var.get(), {m[a], t2[a], t3[a]});
  std::vector<std::vector<const ExprNode*>> rl;
  for (int r = 0; r < sh.nr(); ++r) {
    int64_t inner = std::clamp<int64_t>(d.reduce_steps[r], 1, L.reduce_axes[r].extent);
    rl.push_back(b.SplitLoop(local, L.reduce_axes[r].var.get(), {inner}));
  }
  if (!b.ok()) return absl::InvalidArgumentError("local tiling does not apply");
  order.clear();
  for (int a = 0; a < ns; ++a) order.push_back(ll[a][0]);
  for (int a = 0; a < ns; ++a) order.push_back(ll[a][1]);
  for (auto& r : rl) order.push_back(r[0]);
  for (int a = 0; a < ns; ++a) order.push_back(ll[a][2]);
  for (auto& r : rl) order.push_back(r[1]);
  for (int a = 0; a < ns; ++a) {
    if (a != v) order.push_back(ll[a][3]);
  }
  order.push_back(ll[v][3]);
  b.ReorderLoops(local, order);
  if (t3[v] > 1) b.AnnotateLoop(local, ll[v][3], v1::ANNOTATION_VECTORIZE);
  for (int a = 0; a < ns; ++a) {
    if (a != v && t3[a] > 1 && d.unroll_tile)
      b.AnnotateLoop(local, ll[a][3], v1::ANNOTATION_UNROLL);
  }
  if (d.pragma >= 0 && d.pragma < 4) {
    b.Add(PragmaStep{local, 0, v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP, kPragmaSteps[d.pragma]});
  }
  // Operands indexed by the vector axis get a blocked layout: a constant
  // (weight) is repacked by the vector tile once, ahead of time; any other
  // input is copied per reduction step into a buffer of its tile (the
  // cache_read below), so the register tile streams contiguous rows instead
  // of rows a whole tensor row apart.
  std::vector<std::pair<int, std::string>> copied;  // operand, copy's name
  const std::string local_name = L.name, consumer_name = C.name;
  if (t3[v] > 1 && d.pack) {
    std::vector<int> inputs = StageInputs(L);
    for (size_t op = 0; op < inputs.size(); ++op) {
      const TensorDecl& t = sdag.tensors[inputs[op]];
      // The dimension the vector axis indexes, and those any spatial axis reaches.
      int dim = -1;
      std::vector<bool> spatial(t.shape.size(), false);
      VisitLoads(L.body, [&](const ExprNode& n) {
        if (n.tensor != inputs[op]) return;
        for (size_t k = 0; k < n.args.size(); ++k) {
          if (n.args[k].same_as(L.axes[v].var)) dim = int(k);
          for (const IterVar& a : L.axes)
            spatial[k] = spatial[k] || Mentions(n.args[k], a.var.get());
        }
      });
      if (dim < 0 || t.shape[dim] < t3[v]) continue;
      if (!t.is_constant) {
        if (t.role == TensorDecl::Role::kInput && dim + 1 == int(t.shape.size()) && sh.nr() > 0)
          copied.emplace_back(int(op), t.name + ".local");
        continue;
      }
      // Blocked by the vector tile, with the dimensions read only through
      // reduction axes inside it (whole), ahead of the vector block: each
      // channel vector's weights are then one sequential stream over the
      // reduction ([K/8][R][S][C][8] for an RSCK weight), which the
      // hardware prefetchers follow when the weight comes from memory.
      LayoutPackStep lp{local, int(op)};
      lp.block.assign(t.shape.size(), 0);
      lp.block[size_t(dim)] = t3[v];
      for (size_t k = 0; k < t.shape.size(); ++k) {
        if (int(k) == dim || spatial[k] || t.shape[k] == 1) continue;
        lp.block[k] = t.shape[k];
        lp.inner_dims.push_back(int(k));
      }
      lp.inner_dims.push_back(dim);
      b.Add(std::move(lp));
    }
  }
  for (const auto& copy : copied)
    b.CacheRead(FindStage(b.state(), local_name), copy.first, v1::MEMORY_SCOPE_LOCAL);
  if (!b.ok()) return absl::InvalidArgumentError("sketch step does not apply");
  local = FindStage(b.state(), local_name);
  consumer = FindStage(b.state(), consumer_name);
  for (const auto& copy : copied) {
    const int cs = FindStage(b.state(), copy.second);
    if (cs < 0) return absl::InvalidArgumentError("the operand copy is missing");
    b.AnnotateLoop(cs, b.state().stages()[cs].iters.back().var.get(), v1::ANNOTATION_VECTORIZE);
    b.ComputeAt(cs, local, b.IndexOf(local, rl.back()[0]));
  }
  // The local tile at the innermost consumer loop of its level: the fused
  // parallel loop when that loop is in it (the default: all S0 loops fused).
  const int attach =
      place.parallel >= (place.level + 1) * ns ? 0 : b.IndexOf(consumer, cl[ns - 1][place.level]);
  if (attach < 0) return absl::InvalidArgumentError("the compute location is gone");
  b.ComputeAt(local, consumer, attach);
  if (!b.ok()) return absl::InvalidArgumentError("sketch step does not apply");
  Trace out = b.Take();
  out.sketch_id = kTilingSketchId;
  out.decisions = d.Encode();
  return out;
}

}  // namespace tunefarm::schedule
