#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "compiler/ir/simplify.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/schedule.h"

namespace tunefarm::schedule {

using ir::Allocate;
using ir::AllocateShared;
using ir::And;
using ir::Barrier;
using ir::BoolImm;
using ir::Bounds;
using ir::ComputeDAG;
using ir::Expr;
using ir::ExprNode;
using ir::FloatImm;
using ir::FloorDiv;
using ir::FloorMod;
using ir::For;
using ir::ForKind;
using ir::FromLinear;
using ir::IfThen;
using ir::IntImm;
using ir::IsBlockBound;
using ir::IsThreadBound;
using ir::IterVar;
using ir::LinearForm;
using ir::Linearize;
using ir::Load;
using ir::MapLoads;
using ir::Max;
using ir::Min;
using ir::ReduceIdentity;
using ir::ReduceKind;
using ir::ScalarType;
using ir::Seq;
using ir::SimplifyProgram;
using ir::Stage;
using ir::Stmt;
using ir::StmtKind;
using ir::StmtNode;
using ir::Store;
using ir::Substitute;
using ir::ToString;
using ir::Var;
using ir::VarMapEntry;
using ir::VarRanges;
using ir::VisitLoads;

namespace v1 = ::tunefarm::v1;

namespace {

// Replaces loads of `tensor` in `e` by `stage`'s body at the loaded indices.
Expr InlineInto(const Expr& e, int tensor, const Stage& stage) {
  return MapLoads(e, [&](const ExprNode& load, const std::vector<Expr>& args) {
    if (load.tensor != tensor) return Expr();
    std::vector<VarMapEntry> map;
    for (size_t d = 0; d < stage.axes.size(); ++d)
      map.push_back({stage.axes[d].var.get(), args[d]});
    return Substitute(stage.body, map);
  });
}

bool MentionsAny(const Expr& e, const std::set<const ExprNode*>& vars) {
  if (vars.count(e.get())) return true;
  for (const Expr& a : e->args) {
    if (MentionsAny(a, vars)) return true;
  }
  return false;
}

// The box of a tensor that the loops inside an attach point read:
// [lo[d], lo[d] + extent[d]) per dimension, lo in the outer loop variables.
struct Region {
  std::vector<Expr> lo;
  std::vector<int64_t> extent;
  std::vector<bool> full;         // dimension not analysed: the whole extent
  std::vector<LinearForm> outer;  // lo[d] = outer[d] + lo_const[d]
  std::vector<int64_t> lo_const;
  std::vector<bool> guard_lo, guard_hi;  // lo[d] + i may leave [0, shape[d])
};

// How a stage computed at another stores its region: one buffer dimension
// per spatial loop, in loop order; loop `iter` covers output axis `axis`
// with coefficient `coef` (mixed radix: coef = product of the finer loops).
struct LocalLayout {
  struct Dim {
    int iter;
    int axis;
    int64_t coef;
    bool outermost;  // the loop with the largest coefficient of its axis
    int64_t extent;  // shrunk to the region
  };
  std::vector<Dim> dims;
  std::vector<int64_t> Shape() const {
    std::vector<int64_t> s;
    for (const Dim& d : dims) s.push_back(d.extent);
    return s;
  }
};

// The kind each loop of a nest is emitted as. Auto-unroll: innermost
// serial loops whose extents multiply to at most `auto_unroll_max_step`.
// Unrolling is a hint, honoured only for a chain of innermost loops (all
// unrolled or vectorized inside it) and never beyond kMaxUnrolledCopies
// copies of the body: unrolling a loop that holds a loop nest multiplies
// code size (and LLVM's compile time) without helping the inner loops.
std::vector<ForKind> LoopKinds(const std::vector<LoopIter>& iters, int64_t auto_unroll_max_step) {
  std::vector<ForKind> kinds;
  for (const LoopIter& it : iters) kinds.push_back(it.kind);
  if (auto_unroll_max_step > 0) {
    int64_t product = 1;
    for (int k = int(iters.size()) - 1; k >= 0; --k) {
      product *= iters[k].extent;
      if (product > auto_unroll_max_step) break;
      if (kinds[k] == ForKind::kSerial) kinds[k] = ForKind::kUnrolled;
    }
  }
  int64_t copies = 1;
  bool innermost_chain = true;
  for (int k = int(iters.size()) - 1; k >= 0; --k) {
    if (kinds[k] == ForKind::kUnrolled) {
      if (!innermost_chain || copies * iters[k].extent > kMaxUnrolledCopies) {
        kinds[k] = ForKind::kSerial;
      } else {
        copies *= iters[k].extent;
      }
    }
    innermost_chain =
        innermost_chain && (kinds[k] == ForKind::kUnrolled || kinds[k] == ForKind::kVectorized);
  }
  return kinds;
}

class Lowerer {
 public:
  explicit Lowerer(const ScheduleState& state) : state_(state), dag_(state.dag()) {
    for (const Stage& s : dag_.stages) bodies_.push_back(s.body);
    for (size_t i = 0; i < dag_.stages.size(); ++i) {
      if (state_.stages()[i].location != StageState::Location::kInline) continue;
      Stage inlined = dag_.stages[i];
      inlined.body = bodies_[i];
      for (size_t j = i + 1; j < dag_.stages.size(); ++j) {
        bodies_[j] = InlineInto(bodies_[j], inlined.output, inlined);
      }
    }
  }

  Stmt Run() {
    std::vector<Stmt> nests;
    std::vector<int> allocs;
    for (size_t i = 0; i < dag_.stages.size(); ++i) {
      if (state_.stages()[i].location != StageState::Location::kRoot) continue;
      const Stage& s = dag_.stages[i];
      if (s.output != dag_.output) allocs.push_back(s.output);
      thread_loops_.clear();
      for (const LoopIter& it : state_.stages()[i].iters) {
        if (IsThreadBound(it.kind)) thread_loops_.push_back({it.var, it.extent});
      }
      // threadIdx.x varies fastest in the block's linear thread index.
      std::sort(thread_loops_.begin(), thread_loops_.end(), [&](const auto& a, const auto& b) {
        return KindOf(i, a.first) < KindOf(i, b.first);
      });
      Nest(int(i), nullptr, nullptr, &nests);
    }
    Stmt program = Seq(nests);
    for (auto it = allocs.rbegin(); it != allocs.rend(); ++it) {
      program = Allocate(*it, dag_.tensors[*it].shape, false, program);
    }
    return SimplifyProgram(program);
  }

 private:
  static constexpr int64_t kMaxStackBytes = 64 * 1024;

  // The region of `tensor` read by loads in `value` inside loops iters[k+1..].
  // `block_wide`: the region the whole GPU thread block reads (its
  // thread-bound loops, wherever they are, count as inner loops).
  Region InferRegion(int tensor, const Expr& value, const std::vector<LoopIter>& iters, int k,
                     bool block_wide = false) {
    const std::vector<int64_t>& shape = dag_.tensors[tensor].shape;
    size_t nd = shape.size();
    VarRanges ranges;
    std::set<const ExprNode*> inner;
    if (block_wide) {
      ranges = enclosing_ranges_;
      for (const auto& [var, extent] : thread_loops_) inner.insert(var.get());
    }
    for (size_t t = 0; t < iters.size(); ++t) {
      ranges[iters[t].var.get()] = iters[t].extent;
      if (int(t) > k) inner.insert(iters[t].var.get());
    }
    std::vector<std::vector<Expr>> loads;
    VisitLoads(value, [&](const ExprNode& n) {
      if (n.tensor == tensor) loads.push_back(n.args);
    });
    Region r;
    r.lo.resize(nd);
    r.extent.resize(nd);
    r.full.assign(nd, false);
    r.outer.resize(nd);
    r.lo_const.assign(nd, 0);
    r.guard_lo.assign(nd, true);
    r.guard_hi.assign(nd, true);
    for (size_t d = 0; d < nd; ++d) {
      bool ok = !loads.empty();
      std::string key;
      int64_t lo = 0, hi = 0;
      for (size_t l = 0; l < loads.size() && ok; ++l) {
        LinearForm f = Linearize(loads[l][d], ranges);
        LinearForm out, in;
        for (const auto& [atom, coef] : f.terms)
          (MentionsAny(atom, inner) ? in : out).Add(atom, coef);
        int64_t il, ih;
        if (!Bounds(in, ranges, &il, &ih)) {
          ok = false;
          break;
        }
        std::string k2 = ToString(FromLinear(out));
        if (l == 0) {
          key = k2;
          r.outer[d] = out;
          lo = f.constant + il, hi = f.constant + ih;
        } else if (k2 != key) {
          ok = false;
        } else {
          lo = std::min(lo, f.constant + il), hi = std::max(hi, f.constant + ih);
        }
      }
      if (!ok) {
        r.full[d] = true;
        r.lo[d] = IntImm(0);
        r.extent[d] = shape[d];
        r.guard_lo[d] = r.guard_hi[d] = false;
        continue;
      }
      r.lo_const[d] = lo;
      r.outer[d].constant = lo;
      r.lo[d] = FromLinear(r.outer[d]);
      r.extent[d] = hi - lo + 1;
      int64_t lmin, lmax;
      if (Bounds(r.outer[d], ranges, &lmin, &lmax)) {
        r.guard_lo[d] = lmin < 0;
        r.guard_hi[d] = lmax + r.extent[d] > shape[d];
      }
    }
    return r;
  }

  LocalLayout Layout(int stage, const Region& region) {
    const StageState& st = state_.stages()[stage];
    const Stage& s = dag_.stages[stage];
    LocalLayout layout;
    std::vector<LinearForm> forms;
    for (size_t d = 0; d < s.axes.size(); ++d) forms.push_back(Linearize(st.axis_values[d], {}));
    for (size_t t = 0; t < st.iters.size(); ++t) {
      const LoopIter& it = st.iters[t];
      if (it.reduce) continue;
      LocalLayout::Dim dim{int(t), -1, 0, false, it.extent};
      // A loop of one iteration (a split by 1) shares its coefficient with
      // the next loop out; it is always 0 and takes no part in the radix.
      if (it.extent > 1) {
        for (size_t d = 0; d < forms.size(); ++d) {
          int64_t c = forms[d].CoeffOf(it.var.get());
          if (c > 0) dim.axis = int(d), dim.coef = c;
        }
      }
      if (dim.axis >= 0) {
        int64_t ext = region.extent[dim.axis];
        dim.extent = std::min(it.extent, (ext + dim.coef - 1) / dim.coef);
        int64_t largest = 0;
        for (const auto& [atom, coef] : forms[dim.axis].terms) {
          for (const LoopIter& other : st.iters) {
            if (other.var.same_as(atom) && other.extent > 1) largest = std::max(largest, coef);
          }
        }
        dim.outermost = dim.coef == largest;
      }
      layout.dims.push_back(dim);
    }
    return layout;
  }

  // Loads of `tensor` in `value` rewritten to the local buffer's coordinates.
  Expr RewriteLoads(const Expr& value, int tensor, const Region& region, const LocalLayout& layout,
                    const VarRanges& ranges) {
    const StageState& producer = state_.stages()[dag_.ProducerOf(tensor)];
    return MapLoads(value, [&](const ExprNode& load, const std::vector<Expr>& args) {
      if (load.tensor != tensor) return Expr();
      std::vector<Expr> rel(args.size());
      for (size_t d = 0; d < args.size(); ++d) {
        if (region.full[d]) {
          rel[d] = args[d];
          continue;
        }
        LinearForm f = Linearize(args[d], ranges);
        for (const auto& [atom, coef] : region.outer[d].terms) f.Add(atom, -coef);
        f.constant -= region.lo_const[d];
        rel[d] = FromLinear(f);
      }
      std::vector<Expr> idx;
      for (const LocalLayout::Dim& dim : layout.dims) {
        if (dim.axis < 0) {
          idx.push_back(IntImm(0));
          continue;
        }
        Expr c = FloorDiv(rel[dim.axis], IntImm(dim.coef));
        idx.push_back(dim.outermost ? c : FloorMod(c, IntImm(producer.iters[dim.iter].extent)));
      }
      return Load(tensor, load.type, std::move(idx));
    });
  }

  ForKind KindOf(size_t stage, const Expr& var) const {
    for (const LoopIter& it : state_.stages()[stage].iters) {
      if (it.var.same_as(var)) return it.kind;
    }
    return ForKind::kSerial;
  }

  // The shape of a shared-memory box: the region's extents, the last one
  // widened so that dimension `align_dim` has a stride of factor*k + offset.
  std::vector<int64_t> SharedShape(int stage, const Region& region) {
    std::vector<int64_t> shape = region.extent;
    const StageState& st = state_.stages()[stage];
    if (st.align_dim < 0 || st.align_dim + 1 >= int(shape.size())) return shape;
    int64_t mid = 1;
    for (size_t d = st.align_dim + 1; d + 1 < shape.size(); ++d) mid *= shape[d];
    for (int64_t last = shape.back(); last < shape.back() + 1024; ++last) {
      if ((mid * last) % st.align_factor == st.align_offset) {
        shape.back() = last;
        break;
      }
    }
    return shape;
  }

  // All the block's threads copy the box of the shared stage's output:
  // element e (row-major in the box) by linear thread e mod (block size).
  Stmt CooperativeFetch(int stage, const Region& region) {
    const Stage& s = dag_.stages[stage];
    int64_t total = 1;
    for (int64_t e : region.extent) total *= e;
    Expr tid = IntImm(0);
    int64_t threads = 1;
    for (const auto& [var, extent] : thread_loops_) {
      tid = tid + var * IntImm(threads);
      threads *= extent;
    }
    Expr it = Var(s.name + ".fetch");
    Expr e = it * IntImm(threads) + tid;
    int64_t iterations = (total + threads - 1) / threads;
    Expr cond = total % threads != 0 ? e < IntImm(total) : BoolImm(true);
    std::vector<VarMapEntry> map;
    std::vector<Expr> idx;
    int64_t inner = total;
    for (size_t d = 0; d < s.axes.size(); ++d) {
      inner /= region.extent[d];
      Expr c = FloorDiv(e, IntImm(inner));
      if (d > 0) c = FloorMod(c, IntImm(region.extent[d]));
      idx.push_back(c);
      Expr at = region.lo[d] + c;
      if (region.guard_lo[d]) cond = And(cond, at >= IntImm(0));
      if (region.guard_hi[d]) cond = And(cond, at < IntImm(s.axes[d].extent));
      map.push_back({s.axes[d].var.get(), at});
    }
    Stmt store = IfThen(cond, Store(s.output, idx, Substitute(bodies_[stage], map)));
    return For(it, iterations, iterations <= 8 ? ForKind::kUnrolled : ForKind::kSerial, store);
  }

  // Loads of a shared box's tensor in `value`, rewritten to box coordinates.
  Expr RewriteBoxLoads(const Expr& value, int tensor, const Region& region,
                       const VarRanges& ranges) {
    return MapLoads(value, [&](const ExprNode& load, const std::vector<Expr>& args) {
      if (load.tensor != tensor) return Expr();
      std::vector<Expr> idx(args.size());
      for (size_t d = 0; d < args.size(); ++d) {
        if (region.full[d]) {
          idx[d] = args[d];
          continue;
        }
        LinearForm f = Linearize(args[d], ranges);
        for (const auto& [atom, coef] : region.outer[d].terms) {
          // Atoms rebuilt by Linearize are equal in form, not in identity.
          std::string key = ToString(atom);
          bool done = false;
          for (auto& [a2, c2] : f.terms) {
            if (c2 == coef && ToString(a2) == key) {
              f.Add(a2, -coef);
              done = true;
              break;
            }
          }
          if (!done) f.Add(atom, -coef);
        }
        f.constant -= region.lo_const[d];
        idx[d] = FromLinear(f);
      }
      return Load(tensor, load.type, std::move(idx));
    });
  }

  // Whether `s` reads a GPU shared-memory tensor anywhere.
  bool LoadsShared(const Stmt& s) const {
    bool found = false;
    auto check = [&](const Expr& e) {
      if (!e.defined()) return;
      VisitLoads(e, [&](const ExprNode& n) { found = found || dag_.tensors[n.tensor].shared; });
    };
    check(s->value);
    check(s->cond);
    for (const Expr& i : s->indices) check(i);
    for (const Stmt& b : s->body) found = found || LoadsShared(b);
    return found;
  }

  // A stage computed at a loop of another: its region, nest and buffer.
  struct Attached {
    int stage;
    int pos;  // the loop it is computed at
    Region region;
    LocalLayout layout;
    std::vector<Stmt> nest;
    bool shared = false;
    std::vector<int64_t> shared_shape;
  };

  // The stages computed at the loops `iters` of `stage` (with `ranges`),
  // lowered; `value`, the stage's body, rewritten to read their buffers.
  std::vector<Attached> LowerAttached(int stage, const std::vector<LoopIter>& iters,
                                      const VarRanges& ranges, Expr* value) {
    std::vector<Attached> attached;
    for (size_t j = 0; j < dag_.stages.size(); ++j) {
      const StageState& pj = state_.stages()[j];
      if (pj.location != StageState::Location::kAt || pj.attach_stage != stage) continue;
      int pos = -1;
      for (size_t t = 0; t < iters.size(); ++t) {
        if (iters[t].var.same_as(pj.attach_var)) pos = int(t);
      }
      Attached a{int(j), pos, {}, {}, {}, false, {}};
      int tensor = dag_.stages[j].output;
      // The loops around the attach point, for stages nested further in.
      VarRanges saved = enclosing_ranges_;
      for (int t = 0; t <= pos; ++t) enclosing_ranges_[iters[t].var.get()] = iters[t].extent;
      if (state_.is_gpu() && dag_.tensors[tensor].shared) {
        a.shared = true;
        a.region = InferRegion(tensor, *value, iters, pos, /*block_wide=*/true);
        a.shared_shape = SharedShape(int(j), a.region);
        a.nest.push_back(CooperativeFetch(int(j), a.region));
        VarRanges all = enclosing_ranges_;
        for (const LoopIter& it : iters) all[it.var.get()] = it.extent;
        *value = RewriteBoxLoads(*value, tensor, a.region, all);
      } else {
        a.region = InferRegion(tensor, *value, iters, pos);
        a.layout = Layout(int(j), a.region);
        Nest(int(j), &a.region, &a.layout, &a.nest);
        *value = RewriteLoads(*value, tensor, a.region, a.layout, ranges);
      }
      enclosing_ranges_ = saved;
      attached.push_back(std::move(a));
    }
    return attached;
  }

  // A shared fetch that reads no shared memory: such fetches at one loop
  // may share barriers (WrapAttached) or be double-buffered together.
  bool IndependentFetch(const Attached& a) const { return a.shared && !LoadsShared(a.nest[0]); }

  // `body` inside the buffers and nests of the stages attached at loop
  // `pos` (-1: outside every loop).
  Stmt WrapAttached(const std::vector<Attached>& attached, int pos, Stmt body) const {
    for (auto it = attached.rbegin(); it != attached.rend(); ++it) {
      if (it->pos != pos) continue;
      if (it->shared) {
        // Shared fetches attached here one after another, none reading
        // shared memory, share their barriers: the first keeps each fetch
        // from overwriting what other threads still read in the previous
        // iteration; the second makes the boxes visible before anyone
        // reads them. (Each writes only its own box.)
        auto first = it;
        if (IndependentFetch(*it)) {
          while (std::next(first) != attached.rend() && std::next(first)->pos == pos &&
                 IndependentFetch(*std::next(first)))
            ++first;
        }
        std::vector<Stmt> seq = {Barrier()};
        for (auto f = first;; --f) {
          seq.push_back(f->nest[0]);
          if (f == it) break;
        }
        seq.push_back(Barrier());
        seq.push_back(body);
        body = Seq(std::move(seq));
        for (auto f = it;; ++f) {
          body = AllocateShared(dag_.stages[f->stage].output, f->shared_shape, body);
          if (f == first) break;
        }
        it = first;
        continue;
      }
      int tensor = dag_.stages[it->stage].output;
      std::vector<Stmt> seq = it->nest;
      seq.push_back(body);
      std::vector<int64_t> shape = it->layout.Shape();
      int64_t bytes = 4;
      for (int64_t e : shape) bytes *= e;
      // On a GPU a stage computed at another is a per-thread array.
      body = Allocate(tensor, shape, bytes <= kMaxStackBytes || state_.is_gpu(), Seq(seq));
    }
    return body;
  }

  // Loop `it` (at `pos`, of `kind`) over `body`, its shared fetches
  // double-buffered where it is so annotated and they allow it (only shared
  // fetches attached there, none reading shared memory, at least two
  // iterations); nullptr otherwise. Each buffer gains a leading dimension
  // of 2: iteration v computes on buffer v % 2, then fetches iteration
  // v+1's tiles into the other (the last iteration fetches its own again:
  // branch-free, so their global loads may be issued before the products),
  // then crosses the one barrier; the first tiles are fetched before the
  // loop.
  Stmt DoubleBuffered(const std::vector<Attached>& attached, int pos, const LoopIter& it,
                      ForKind kind, const Stmt& body) const {
    if (!state_.is_gpu() || !it.double_buffer || it.extent < 2 || IsThreadBound(kind) ||
        IsBlockBound(kind))
      return nullptr;
    std::vector<const Attached*> here;
    for (const Attached& a : attached) {
      if (a.pos != pos) continue;
      if (!IndependentFetch(a)) return nullptr;
      here.push_back(&a);
    }
    if (here.empty()) return nullptr;
    std::set<int> buffers;
    for (const Attached* a : here) buffers.insert(dag_.stages[a->stage].output);
    const Expr v = it.var;
    auto fetches = [&](const Expr& at, const Expr& buffer) {
      std::vector<Stmt> seq;
      for (const Attached* a : here)
        seq.push_back(WithBuffer(a->nest[0], buffers, buffer, {{v.get(), at}}));
      return seq;
    };
    std::vector<Stmt> loop = {WithBuffer(body, buffers, FloorMod(v, IntImm(2)), {})};
    for (Stmt& f :
         fetches(Min(v + IntImm(1), IntImm(it.extent - 1)), FloorMod(v + IntImm(1), IntImm(2))))
      loop.push_back(std::move(f));
    loop.push_back(Barrier());
    std::vector<Stmt> seq = fetches(IntImm(0), IntImm(0));
    seq.push_back(Barrier());
    seq.push_back(For(v, it.extent, kind, Seq(std::move(loop))));
    Stmt out = Seq(std::move(seq));
    for (auto a = here.rbegin(); a != here.rend(); ++a) {
      std::vector<int64_t> shape = (*a)->shared_shape;
      shape.insert(shape.begin(), 2);
      out = AllocateShared(dag_.stages[(*a)->stage].output, shape, out);
    }
    return out;
  }

  // `s` with `buffer` as a new leading index of every access to a tensor
  // of `buffers`, and `map` substituted.
  static Stmt WithBuffer(const Stmt& s, const std::set<int>& buffers, const Expr& buffer,
                         const std::vector<VarMapEntry>& map) {
    auto expr = [&](const Expr& e) -> Expr {
      if (!e.defined()) return e;
      Expr out = MapLoads(e, [&](const ExprNode& load, const std::vector<Expr>& args) {
        if (!buffers.count(load.tensor)) return Expr();
        std::vector<Expr> idx = {buffer};
        idx.insert(idx.end(), args.begin(), args.end());
        return Load(load.tensor, load.type, std::move(idx));
      });
      return map.empty() ? out : Substitute(out, map);
    };
    auto n = std::make_shared<StmtNode>(*s);
    n->value = expr(n->value);
    n->cond = expr(n->cond);
    for (Expr& i : n->indices) i = expr(i);
    if (n->kind == StmtKind::kStore && buffers.count(n->tensor))
      n->indices.insert(n->indices.begin(), buffer);
    for (Stmt& b : n->body) b = WithBuffer(b, buffers, buffer, map);
    return n;
  }

  // Appends the loop nest(s) of `stage` to `out`. For a stage computed at
  // another, `region` is the box it computes and `layout` its buffer.
  void Nest(int stage, const Region* region, const LocalLayout* layout, std::vector<Stmt>* out) {
    const StageState& st = state_.stages()[stage];
    const Stage& s = dag_.stages[stage];
    size_t ns = s.axes.size();
    std::vector<LoopIter> iters = st.iters;
    if (layout != nullptr) {
      for (const LocalLayout::Dim& d : layout->dims) iters[d.iter].extent = d.extent;
    }
    VarRanges ranges;
    for (const LoopIter& it : iters) ranges[it.var.get()] = it.extent;

    std::vector<VarMapEntry> map;
    std::vector<Expr> out_idx;
    std::vector<int64_t> out_shape;
    Expr spatial_guards = BoolImm(true);
    for (size_t d = 0; d < st.axis_values.size(); ++d) {
      const IterVar& a = d < ns ? s.axes[d] : s.reduce_axes[d - ns];
      Expr v = st.axis_values[d];
      if (region != nullptr && d < ns) {
        int64_t lo, hi;
        if (!Bounds(v, ranges, &lo, &hi) || hi >= region->extent[d]) {
          spatial_guards = And(spatial_guards, v < IntImm(region->extent[d]));
        }
        v = region->lo[d] + v;
        if (region->guard_lo[d]) spatial_guards = And(spatial_guards, v >= IntImm(0));
        if (region->guard_hi[d]) spatial_guards = And(spatial_guards, v < IntImm(a.extent));
      }
      map.push_back({a.var.get(), v});
      if (d < ns && region == nullptr) out_idx.push_back(v), out_shape.push_back(a.extent);
    }
    if (layout != nullptr) {
      for (const LocalLayout::Dim& d : layout->dims) {
        out_idx.push_back(iters[d.iter].var);
        out_shape.push_back(d.extent);
      }
    }
    Expr value = Substitute(bodies_[stage], map);

    // Stages computed inside this one's loops: their regions, nests and buffers.
    const std::vector<Attached> attached = LowerAttached(stage, iters, ranges, &value);

    Expr all_guards = spatial_guards;
    for (const StageState::Guard& g : st.guards) {
      all_guards = And(all_guards, g.cond);
      if (!g.reduce) spatial_guards = And(spatial_guards, g.cond);
    }
    Stmt inner;
    Stmt init;
    int first_reduce = -1;
    if (s.reduce == ReduceKind::kNone) {
      inner = IfThen(all_guards, Store(s.output, out_idx, value));
    } else {
      Expr cur = Load(s.output, ScalarType::kFloat32, out_idx);
      Expr next = s.reduce == ReduceKind::kSum    ? cur + value
                  : s.reduce == ReduceKind::kProd ? cur * value
                                                  : Max(cur, value);
      inner = IfThen(all_guards, Store(s.output, out_idx, next));
      Expr init_value = FloatImm(ReduceIdentity(s.reduce));
      // The initialisation can sit just outside the reduction loops when every
      // reduction loop is inside every spatial loop; otherwise it gets its own nest.
      int last_spatial = -1;
      for (size_t k = 0; k < iters.size(); ++k) {
        if (iters[k].reduce && first_reduce < 0) first_reduce = int(k);
        if (!iters[k].reduce) last_spatial = int(k);
      }
      if (first_reduce > last_spatial) {
        init = IfThen(spatial_guards, Store(s.output, out_idx, init_value));
      } else {
        init_value_ = init_value;  // a nest of its own, built below with the final loop kinds
        first_reduce = -1;
      }
    }
    const std::vector<ForKind> kinds = LoopKinds(iters, st.auto_unroll_max_step);
    if (init_value_.defined()) {
      // The initialisation runs over the stage's spatial loops (same order,
      // same annotations, fresh variables) before the reduction nest.
      std::vector<VarMapEntry> fresh;
      for (const LoopIter& it : iters) {
        if (!it.reduce) fresh.push_back({it.var.get(), Var(it.var->name + ".init")});
      }
      std::vector<Expr> idx;
      for (const Expr& e : out_idx) idx.push_back(Substitute(e, fresh));
      Stmt init_nest = IfThen(Substitute(spatial_guards, fresh), Store(s.output, idx, init_value_));
      size_t f = fresh.size();
      for (int k = int(iters.size()) - 1; k >= 0; --k) {
        if (iters[k].reduce) continue;
        init_nest = For(fresh[--f].value, iters[k].extent, kinds[k], init_nest);
      }
      out->push_back(init_nest);
      init_value_ = Expr();
    }
    for (int k = int(iters.size()) - 1; k >= 0; --k) {
      if (Stmt db = DoubleBuffered(attached, k, iters[k], kinds[k], inner); db != nullptr) {
        inner = db;
      } else {
        inner = WrapAttached(attached, k, inner);
        inner = For(iters[k].var, iters[k].extent, kinds[k], inner);
      }
      if (k == first_reduce) inner = Seq({init, inner});
    }
    out->push_back(WrapAttached(attached, -1, inner));
  }

  const ScheduleState& state_;
  const ComputeDAG& dag_;
  std::vector<Expr> bodies_;  // with inlined producers substituted
  Expr init_value_;           // the pending initialisation nest's value
  // GPU: the thread-bound loops of the root stage being lowered (x, y, z),
  // and the ranges of the loops around the stage being nested.
  std::vector<std::pair<Expr, int64_t>> thread_loops_;
  VarRanges enclosing_ranges_;
};

}  // namespace

Stmt Lower(const ScheduleState& state) {
  if (!state.tensor_core().empty()) return LowerTensorCore(state.dag(), state.tensor_core());
  return Lowerer(state).Run();
}

}  // namespace tunefarm::schedule
