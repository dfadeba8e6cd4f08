#include "compiler/ir/random_schedule.h"

#include <algorithm>
#include <numeric>

#include "common/status_macros.h"
#include "compiler/ir/schedule.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;

int64_t Pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A split factor for an extent: usually a divisor, sometimes not.
int64_t Factor(std::mt19937_64& rng, int64_t extent) {
  if (extent <= 1) return 1;
  if (Pick(rng, 0, 3) == 0) return Pick(rng, 1, extent);
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= extent; ++d) {
    if (extent % d == 0) divisors.push_back(d);
  }
  return divisors[Pick(rng, 0, int64_t(divisors.size()) - 1)];
}

// Builds a schedule step by step on a state; the first step that does not
// apply fails the whole sketch.
class Steps {
 public:
  Steps(const ComputeDAG& dag, const Target& target) : st_(ScheduleState::Initial(dag)), target_(target) {}
  bool ok() const { return ok_; }
  const ScheduleState& state() const { return st_; }
  v1::Schedule Take() { return std::move(sched_); }

  void Add(const v1::Step& step) {
    if (!ok_) return;
    ok_ = st_.Apply(step, sched_.steps_size(), target_).ok();
    if (ok_) *sched_.add_steps() = step;
  }
  int IndexOf(int stage, const ExprNode* var) const {
    const auto& iters = st_.stages()[stage].iters;
    for (size_t i = 0; i < iters.size(); ++i) {
      if (iters[i].var.get() == var) return int(i);
    }
    return -1;
  }
  // Splits loop `var` of `stage`; returns the new loops' variables, outermost first.
  std::vector<const ExprNode*> Split(int stage, const ExprNode* var, const std::vector<int64_t>& lengths) {
    int at = IndexOf(stage, var);
    if (!ok_ || at < 0) return ok_ = false, std::vector<const ExprNode*>();
    v1::Step step;
    step.mutable_split()->set_stage(stage);
    step.mutable_split()->set_iter(at);
    for (int64_t l : lengths) step.mutable_split()->add_lengths(l);
    Add(step);
    std::vector<const ExprNode*> out;
    for (size_t k = 0; ok_ && k <= lengths.size(); ++k) out.push_back(st_.stages()[stage].iters[at + k].var.get());
    return out;
  }
  void Reorder(int stage, const std::vector<const ExprNode*>& order) {
    v1::Step step;
    step.mutable_reorder()->set_stage(stage);
    for (const ExprNode* v : order) step.mutable_reorder()->add_order(IndexOf(stage, v));
    Add(step);
  }
  void Annotate(int stage, const ExprNode* var, v1::Annotation a) {
    v1::Step step;
    step.mutable_annotate()->set_stage(stage);
    step.mutable_annotate()->set_iter(IndexOf(stage, var));
    step.mutable_annotate()->set_annotation(a);
    Add(step);
  }

 private:
  ScheduleState st_;
  const Target& target_;
  v1::Schedule sched_;
  bool ok_ = true;
};

// A factor for a tile level: a divisor of `extent` up to `limit` mostly.
int64_t TileFactor(std::mt19937_64& rng, int64_t extent, int64_t limit) {
  limit = std::max<int64_t>(1, std::min(limit, extent));
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= limit; ++d) {
    if (extent % d == 0) divisors.push_back(d);
  }
  if (Pick(rng, 0, 5) == 0) return Pick(rng, 1, limit);
  return divisors[Pick(rng, 0, int64_t(divisors.size()) - 1)];
}

// Sketch 1: multi-level tiling of the main reduction (Ansor's CPU rule).
// The reduction computes into a local tile (cache_write, or the fused
// epilogue stage as the write-back) computed at the parallel tile loop of its
// consumer; its loops are S (tile) S R S R S, the last spatial level unrolled
// with one axis vectorized, and constant operands indexed by that axis packed
// so the vector is contiguous. Tile sizes are random.
bool MultiLevelTiling(const ComputeDAG& dag, const Target& target, std::mt19937_64& rng,
                      v1::Schedule* out) {
  int main = -1;
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    if (dag.stages[i].reduce == ReduceKind::kSum && !dag.stages[i].reduce_axes.empty()) main = int(i);
  }
  if (main < 0) return false;
  Steps b(dag, target);
  // Cheap stages: inlined, except padding read by the reduction, which stays
  // a pass of its own most of the time.
  std::vector<int> passes;
  for (int i = 0; i < int(dag.stages.size()); ++i) {
    const Stage& s = dag.stages[i];
    if (!s.inlinable || s.output == dag.output) continue;
    bool feeds_main = false;
    VisitLoads(dag.stages[main].body, [&](const ExprNode& n) { feeds_main |= n.tensor == s.output; });
    if (feeds_main && Pick(rng, 0, 3) != 0) {
      passes.push_back(i);
      continue;
    }
    v1::Step step;
    step.mutable_compute_inline()->set_stage(i);
    b.Add(step);
  }
  int local = main, consumer = -1;
  if (dag.stages[main].output == dag.output) {
    v1::Step step;
    step.mutable_cache_write()->set_stage(main);
    step.mutable_cache_write()->set_scope(v1::MEMORY_SCOPE_LOCAL);
    b.Add(step);
    consumer = main + 1;
  } else {
    for (int j = main + 1; j < int(dag.stages.size()); ++j) {
      if (b.state().stages()[j].location == StageState::Location::kRoot) consumer = j;
    }
    if (consumer < 0 || dag.stages[consumer].output != dag.output) return false;
  }
  if (!b.ok()) return false;
  const ComputeDAG& sdag = b.state().dag();
  const Stage& L = sdag.stages[local];
  const Stage& C = sdag.stages[consumer];
  if (C.axes.size() != L.axes.size()) return false;
  for (size_t a = 0; a < L.axes.size(); ++a) {
    if (C.axes[a].extent != L.axes[a].extent) return false;
  }
  for (int p : passes) {
    const auto& iters = b.state().stages()[p].iters;
    std::vector<const ExprNode*> vars;
    for (const LoopIter& it : iters) vars.push_back(it.var.get());
    if (vars.size() >= 2) {
      v1::Step step;
      step.mutable_fuse()->set_stage(p);
      for (size_t k = 0; k + 1 < vars.size(); ++k) step.mutable_fuse()->add_iters(int(k));
      if (vars.size() > 2) b.Add(step);
      b.Annotate(p, b.state().stages()[p].iters[0].var.get(), v1::ANNOTATION_PARALLEL);
      b.Annotate(p, b.state().stages()[p].iters.back().var.get(), v1::ANNOTATION_VECTORIZE);
    }
  }
  // Tile sizes: per spatial axis m (S1), t2 (S2), t3 (S3, the register tile);
  // the vector axis's t3 near the vector width; accumulators <= 32 vectors.
  const int ns = int(L.axes.size());
  const int64_t lanes = target.float_lanes();
  std::vector<int> candidates;
  for (int a = 0; a < ns; ++a) {
    if (L.axes[a].extent >= 2) candidates.push_back(a);
  }
  if (candidates.empty()) return false;
  int v = candidates[Pick(rng, 0, int64_t(candidates.size()) - 1)];
  std::vector<int64_t> m(ns), t2(ns), t3(ns);
  bool register_only = Pick(rng, 0, 1) == 0;
  for (int tries = 0; tries < 20; ++tries) {
    int64_t acc = 1;
    for (int a = 0; a < ns; ++a) {
      int64_t ext = L.axes[a].extent;
      if (a == v) {
        static const int kMul[] = {1, 1, 2, 4};
        int64_t want = std::max<int64_t>(1, lanes * kMul[Pick(rng, 0, 3)] / (Pick(rng, 0, 3) == 0 ? 2 : 1));
        t3[a] = std::min(ext, want);
        acc *= (t3[a] + lanes - 1) / lanes;
      } else {
        t3[a] = TileFactor(rng, ext, 16);
        acc *= t3[a];
      }
      int64_t rest = (ext + t3[a] - 1) / t3[a];
      t2[a] = register_only ? 1 : TileFactor(rng, rest, 4);
      rest = (rest + t2[a] - 1) / t2[a];
      m[a] = register_only ? 1 : TileFactor(rng, rest, 4);
    }
    if (acc <= 28) break;
    for (int a = 0; a < ns; ++a) {
      if (a != v) t3[a] = 1;
    }
  }
  // The consumer: tiles of m*t2*t3 per axis, split like the local stage so
  // its reads of the tile are plain; outer tile loops fused and parallel.
  std::vector<std::vector<const ExprNode*>> cl(ns), ll(ns);
  for (int a = 0; a < ns; ++a) cl[a] = b.Split(consumer, C.axes[a].var.get(), {m[a], t2[a], t3[a]});
  if (!b.ok()) return false;
  std::vector<const ExprNode*> order;
  for (int level = 0; level < 4; ++level) {
    for (int a = 0; a < ns; ++a) {
      if (level == 3 && a == v) continue;
      order.push_back(cl[a][level]);
    }
  }
  order.push_back(cl[v][3]);
  b.Reorder(consumer, order);
  {
    v1::Step step;
    step.mutable_fuse()->set_stage(consumer);
    for (int a = 0; a < ns; ++a) step.mutable_fuse()->add_iters(a);
    if (ns >= 2) b.Add(step);
  }
  if (!b.ok()) return false;
  const ExprNode* fused = b.state().stages()[consumer].iters[0].var.get();
  b.Annotate(consumer, fused, v1::ANNOTATION_PARALLEL);
  if (t3[v] > 1) b.Annotate(consumer, cl[v][3], v1::ANNOTATION_VECTORIZE);
  for (int a = 0; a < ns; ++a) {
    if (a != v && t3[a] > 1 && Pick(rng, 0, 3) != 0) b.Annotate(consumer, cl[a][3], v1::ANNOTATION_UNROLL);
  }
  // The local stage: S0 S1 R0 S2 R1 S3.
  for (int a = 0; a < ns; ++a) ll[a] = b.Split(local, L.axes[a].var.get(), {m[a], t2[a], t3[a]});
  std::vector<std::vector<const ExprNode*>> rl;
  for (const IterVar& r : L.reduce_axes) {
    rl.push_back(b.Split(local, r.var.get(), {TileFactor(rng, r.extent, 8)}));
  }
  if (!b.ok()) return false;
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
  b.Reorder(local, order);
  if (t3[v] > 1) b.Annotate(local, ll[v][3], v1::ANNOTATION_VECTORIZE);
  bool unroll_tile = Pick(rng, 0, 3) != 0;
  for (int a = 0; a < ns; ++a) {
    if (a != v && t3[a] > 1 && unroll_tile) b.Annotate(local, ll[a][3], v1::ANNOTATION_UNROLL);
  }
  if (Pick(rng, 0, 1) == 0) {
    v1::Step step;
    step.mutable_pragma()->set_stage(local);
    step.mutable_pragma()->set_kind(v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP);
    static const int64_t kSteps[] = {0, 16, 64, 512};
    step.mutable_pragma()->set_value(kSteps[Pick(rng, 0, 3)]);
    b.Add(step);
  }
  // Constant operands indexed by the vector axis: blocked by the vector tile.
  if (t3[v] > 1 && Pick(rng, 0, 3) != 0) {
    std::vector<int> inputs = StageInputs(L);
    for (size_t op = 0; op < inputs.size(); ++op) {
      const TensorDecl& t = sdag.tensors[inputs[op]];
      if (!t.is_constant) continue;
      int dim = -1;
      VisitLoads(L.body, [&](const ExprNode& n) {
        if (n.tensor != inputs[op]) return;
        for (size_t d = 0; d < n.args.size(); ++d) {
          if (n.args[d].same_as(L.axes[v].var)) dim = int(d);
        }
      });
      if (dim < 0 || t.shape[dim] < t3[v]) continue;
      v1::Step step;
      auto* lp = step.mutable_layout_pack();
      lp->set_stage(local);
      lp->set_input(int(op));
      for (size_t d = 0; d < t.shape.size(); ++d) lp->add_block(int(d) == dim ? t3[v] : 0);
      b.Add(step);
    }
  }
  {
    v1::Step step;
    step.mutable_compute_at()->set_stage(local);
    step.mutable_compute_at()->set_target_stage(consumer);
    step.mutable_compute_at()->set_target_iter(0);
    b.Add(step);
  }
  if (!b.ok()) return false;
  *out = b.Take();
  out->set_sketch_id(1);
  return true;
}

}  // namespace

v1::Schedule RandomSchedule(const ComputeDAG& dag, const Target& target, std::mt19937_64& rng) {
  v1::Schedule tiled;
  if (Pick(rng, 0, 1) == 0 && MultiLevelTiling(dag, target, rng, &tiled)) return tiled;
  v1::Schedule sched;
  ScheduleState st = ScheduleState::Initial(dag);
  // Steps are tried on the state first and kept only if they apply.
  auto try_apply = [&](const v1::Step& step) {
    if (!st.Apply(step, sched.steps_size(), target).ok()) return false;
    *sched.add_steps() = step;
    return true;
  };
  for (size_t i = 0; i < dag.stages.size(); ++i) {
    const Stage& s = dag.stages[i];
    if (s.inlinable && s.output != dag.output && Pick(rng, 0, 4) != 0) {
      v1::Step step;
      step.mutable_compute_inline()->set_stage(int(i));
      try_apply(step);
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
      v1::Step step;
      auto* sp = step.mutable_split();
      sp->set_stage(stage);
      sp->set_iter(it);
      int64_t rest = extent;
      for (int l = 0; l < levels; ++l) {
        int64_t f = Factor(rng, rest);
        sp->add_lengths(f);
        rest = std::max<int64_t>(1, (rest + f - 1) / f);
      }
      try_apply(step);
    }
    n = int(st.stages()[i].iters.size());
    if (Pick(rng, 0, 2) != 0) {
      v1::Step step;
      auto* ro = step.mutable_reorder();
      ro->set_stage(stage);
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (int o : order) ro->add_order(o);
      try_apply(step);
    }
    if (n >= 2 && Pick(rng, 0, 1) == 0) {
      v1::Step step;
      auto* f = step.mutable_fuse();
      f->set_stage(stage);
      int first = int(Pick(rng, 0, n - 2));
      f->add_iters(first);
      f->add_iters(first + 1);
      try_apply(step);
    }
    n = int(st.stages()[i].iters.size());
    for (v1::Annotation a : {v1::ANNOTATION_PARALLEL, v1::ANNOTATION_VECTORIZE, v1::ANNOTATION_UNROLL}) {
      if (Pick(rng, 0, 2) == 0) continue;
      v1::Step step;
      auto* an = step.mutable_annotate();
      an->set_stage(stage);
      an->set_iter(a == v1::ANNOTATION_VECTORIZE ? n - 1 : int(Pick(rng, 0, n - 1)));
      an->set_annotation(a);
      try_apply(step);
    }
    if (Pick(rng, 0, 1) == 0) {
      v1::Step step;
      auto* p = step.mutable_pragma();
      p->set_stage(stage);
      p->set_kind(v1::PRAGMA_KIND_AUTO_UNROLL_MAX_STEP);
      static const int64_t kSteps[] = {0, 16, 64, 512};
      p->set_value(kSteps[Pick(rng, 0, 3)]);
      try_apply(step);
    }
  }
  return sched;
}

}  // namespace tunefarm::ir
