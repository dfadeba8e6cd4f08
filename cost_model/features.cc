#include "cost_model/features.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "compiler/ir/functor.h"
#include "compiler/ir/simplify.h"

namespace tunefarm::cost_model {
namespace {

using ir::Expr;
using ir::ExprKind;
using ir::ExprNode;
using ir::ForKind;
using ir::Op;
using ir::Stmt;
using ir::StmtKind;

float Log(double x) { return float(std::log2(1.0 + std::max(0.0, x))); }

enum Header {
  kAdd,
  kMul,
  kDiv,
  kMinMax,
  kMath,
  kCmpSelect,
  kIntOps,
  kIterations,
  kDepth,
  kVecLen,
  kVecProduct,
  kVecInnermost,
  kUnrollProduct,
  kUnrollCount,
  kParallelProduct,
  kWorkPerParallel,
  kReduceUpdate,
  kLocalStore,
  kLocalBytes,
  kIntensity,
  kNumBuffers,
  kGpuBlocks,
  kGpuThreads,
  kGpuVThreads,
  kWorkPerThread,
  kSharedStore,
  kSharedBytes,
};
enum BufferCol {
  kKind,
  kBytes,
  kBytesPerParallel,
  kLines,
  kInnerStride,
  kVecStride,
  kReuseCount,
  kReuseIters,
  kReuseBytes,
  kAccessCount,
  kAccessedBytes,
};

struct OpCounts {
  double add = 0, mul = 0, div = 0, minmax = 0, math = 0, cmpsel = 0, intops = 0;
};

// Counts the arithmetic of an expression by kind (float adds, multiplies,
// ...; integer index arithmetic apart).
class OpCounter : public ir::ExprVisitor {
 public:
  explicit OpCounter(OpCounts* c) : c_(c) {}

 protected:
  void VisitBinary(const Expr& e) override {
    if (!ir::IsFloat(e->type)) {
      c_->intops += 1;
    } else if (e->op == Op::kAdd || e->op == Op::kSub) {
      c_->add += 1;
    } else if (e->op == Op::kMul) {
      c_->mul += 1;
    } else if (e->op == Op::kDiv) {
      c_->div += 1;
    } else if (e->op == Op::kMin || e->op == Op::kMax) {
      c_->minmax += 1;
    }
    ExprVisitor::VisitBinary(e);
  }
  void VisitCall(const Expr& e) override {
    c_->math += 1;
    ExprVisitor::VisitCall(e);
  }
  void VisitCmp(const Expr& e) override {
    (ir::IsFloat(e->args[0]->type) ? c_->cmpsel : c_->intops) += 1;
    ExprVisitor::VisitCmp(e);
  }
  void VisitSelect(const Expr& e) override {
    if (ir::IsFloat(e->type)) c_->cmpsel += 1;
    ExprVisitor::VisitSelect(e);
  }

 private:
  OpCounts* c_;
};

void CountOps(const Expr& e, OpCounts* c) {
  if (e.defined()) OpCounter(c).Visit(e);
}

struct Loop {
  Expr var;
  int64_t extent;
  ForKind kind;
};

struct Access {
  int tensor;
  std::vector<Expr> idx;
  int kind;  // 1 read, 2 write, 3 read-write
  int count;
};

// Multiply-adds of one lane in an m16n8k16 product (half that in m16n8k8).
constexpr int64_t kMmaMacsPerLane = 16 * 8 * 16 / 32;

class Extractor : public ir::StmtFunctor<void()> {
 public:
  explicit Extractor(const ir::ComputeDAG& dag) : dag_(dag) {
    for (const ir::TensorDecl& t : dag.tensors) shapes_.push_back(t.shape);
    local_.assign(dag.tensors.size(), false);
    shared_.assign(dag.tensors.size(), false);
  }

  ProgramFeatures Run(const Stmt& program) {
    Visit(program);
    return std::move(out_);
  }

 private:
  void VisitDefault(const Stmt& s) override {
    for (const Stmt& b : s->body) Visit(b);
  }
  void VisitFor(const Stmt& s) override {
    loops_.push_back({s->var, s->extent, s->for_kind});
    Visit(s->body[0]);
    loops_.pop_back();
  }
  void VisitAllocate(const Stmt& s) override {
    std::vector<int64_t> saved = shapes_[s->tensor];
    bool saved_local = local_[s->tensor], saved_shared = shared_[s->tensor];
    shapes_[s->tensor] = s->shape;
    local_[s->tensor] = s->local;
    shared_[s->tensor] = s->shared;
    const double shared_bytes =
        s->shared ? double(Elements(s->tensor) * ir::ElementBytes(dag_.tensors[size_t(s->tensor)]))
                  : 0;
    shared_bytes_ += shared_bytes;
    Visit(s->body[0]);
    shared_bytes_ -= shared_bytes;
    shapes_[s->tensor] = saved;
    local_[s->tensor] = saved_local;
    shared_[s->tensor] = saved_shared;
  }
  void VisitStore(const Stmt& s) override { Row(*s); }
  // One warp's m16n8k16 (m16n8k8) product: for each lane, kMmaMacsPerLane (half)
  // multiply-adds into its accumulators from A and B (register fragments;
  // a wgmma's in shared memory); a row for an update d += a * b run that
  // many times (the offsets as the last index of each buffer). A fragment
  // load: a row for a copy from shared memory into the fragment, run once
  // per element of the lane's fragment.
  void VisitMma(const Stmt& s) override {
    auto at = [&](int tensor, const Expr& offset) {
      std::vector<Expr> idx(shapes_[size_t(tensor)].size(), ir::IntImm(0));
      idx.back() = offset;
      return idx;
    };
    if (s->mma_load != 0) {
      ir::StmtNode copy;
      copy.kind = ir::StmtKind::kStore;
      copy.tensor = s->tensor;
      copy.indices = at(s->tensor, s->indices[0]);
      copy.value = ir::Load(s->mma_a, ir::ScalarType::kFloat32, at(s->mma_a, s->mma_offsets[0]));
      loops_.push_back({ir::Var("mma.frag"), ir::MmaLoadElements(*s), ForKind::kUnrolled});
      Row(copy);
      loops_.pop_back();
      return;
    }
    ir::StmtNode update;
    update.kind = ir::StmtKind::kStore;
    update.tensor = s->tensor;
    update.indices = at(s->tensor, s->indices[0]);
    update.value =
        ir::Load(s->tensor, ir::ScalarType::kFloat32, update.indices) +
        ir::Load(s->mma_a, ir::ScalarType::kFloat32, at(s->mma_a, s->mma_offsets[0])) *
            ir::Load(s->mma_b, ir::ScalarType::kFloat32, at(s->mma_b, s->mma_offsets[1]));
    // A warpgroup's wgmma: 64 x n x 16 over its 128 threads.
    const int64_t macs = s->mma_wgmma  ? 64 * s->mma_n * 16 / 128
                         : s->mma_tf32 ? kMmaMacsPerLane / 2
                                       : kMmaMacsPerLane;
    loops_.push_back({ir::Var("mma.mac"), macs, ForKind::kUnrolled});
    Row(update);
    loops_.pop_back();
  }

  int64_t Elements(int tensor) const {
    int64_t n = 1;
    for (int64_t d : shapes_[tensor]) n *= d;
    return n;
  }

  // Distinct elements an access touches while loops [first, end) run and the
  // loops outside stay fixed; per dimension the span of its index, capped by
  // the extent. `lines`: 64-byte lines, the last dimension taken as contiguous.
  double Span(const Access& a, size_t first, double* lines) const {
    ir::VarRanges ranges;
    std::vector<ir::VarMapEntry> fixed;
    for (size_t k = 0; k < loops_.size(); ++k) {
      if (k >= first)
        ranges[loops_[k].var.get()] = loops_[k].extent;
      else
        fixed.push_back({loops_[k].var.get(), ir::IntImm(0)});
    }
    const std::vector<int64_t>& shape = shapes_[a.tensor];
    double elements = 1, outer = 1, last = 1;
    for (size_t d = 0; d < a.idx.size(); ++d) {
      int64_t lo, hi;
      double span = double(shape[d]);
      if (ir::Bounds(ir::Substitute(a.idx[d], fixed), ranges, &lo, &hi)) {
        span = std::min<double>(span, double(hi - lo + 1));
      }
      elements *= span;
      if (d + 1 < a.idx.size())
        outer *= span;
      else
        last = span;
    }
    if (lines) *lines = outer * std::ceil(last * 4 / 64.0);
    return elements;
  }

  // Elements between consecutive iterations of `var` in the flat buffer; the
  // buffer's size when the index is not affine in it (a gather).
  double Stride(const Access& a, const ExprNode* var) const {
    const std::vector<int64_t>& shape = shapes_[a.tensor];
    double stride = 0, step = 1;
    for (int d = int(a.idx.size()) - 1; d >= 0; --d) {
      ir::LinearForm f = ir::Linearize(a.idx[d], {});
      for (const auto& [atom, coef] : f.terms) {
        if (atom.get() == var)
          stride += double(coef) * step;
        else if (ir::Mentions(atom, var))
          return double(Elements(a.tensor));
      }
      step *= double(shape[d]);
    }
    return std::fabs(stride);
  }

  // What the loops around the current statement add up to: trip counts by
  // kind, the vectorized loop's variable and the first parallel loop.
  struct LoopSummary {
    double iterations = 1, vec_product = 1, unroll_product = 1, parallel_product = 1;
    double blocks = 1, threads = 1, vthreads = 1;
    bool gpu = false;
    int unrolled = 0, vec_len = 0;
    size_t first_parallel = 0;  // loops_.size() when none is parallel
    const ExprNode* vec_var = nullptr;
  };
  // One buffer's columns and the distinct bytes it touches (the sort key).
  struct Scored {
    std::array<float, kBufferFeatures> f;
    double bytes;
  };

  // Summarizes loops_ (outermost first) as LoopSummary; reads nothing else.
  LoopSummary SummarizeLoops() const {
    LoopSummary ls;
    ls.first_parallel = loops_.size();
    for (size_t k = 0; k < loops_.size(); ++k) {
      const Loop& l = loops_[k];
      ls.iterations *= double(l.extent);
      if (l.kind == ForKind::kVectorized)
        ls.vec_product *= double(l.extent), ls.vec_len = int(l.extent), ls.vec_var = l.var.get();
      if (l.kind == ForKind::kUnrolled) ls.unroll_product *= double(l.extent), ++ls.unrolled;
      if (l.kind == ForKind::kParallel) {
        ls.parallel_product *= double(l.extent);
        if (ls.first_parallel == loops_.size()) ls.first_parallel = k;
      }
      switch (l.kind) {
        case ForKind::kBlockX:
        case ForKind::kBlockY:
        case ForKind::kBlockZ:
          ls.blocks *= double(l.extent), ls.gpu = true;
          break;
        case ForKind::kThreadX:
        case ForKind::kThreadY:
        case ForKind::kThreadZ:
          ls.threads *= double(l.extent), ls.gpu = true;
          break;
        case ForKind::kVThread:
          ls.vthreads *= double(l.extent), ls.gpu = true;
          break;
        default:
          break;
      }
    }
    return ls;
  }

  // Fills the header columns that come from the arithmetic, the loops and the
  // stored tensor's placement (all but kReduceUpdate, kNumBuffers, kIntensity).
  void LoopAndOpFeatures(const ir::StmtNode& store, const LoopSummary& ls, const OpCounts& ops,
                         FeatureRow* out) const {
    FeatureRow& row = *out;
    const double iterations = ls.iterations;
    row[kAdd] = Log(ops.add * iterations);
    row[kMul] = Log(ops.mul * iterations);
    row[kDiv] = Log(ops.div * iterations);
    row[kMinMax] = Log(ops.minmax * iterations);
    row[kMath] = Log(ops.math * iterations);
    row[kCmpSelect] = Log(ops.cmpsel * iterations);
    row[kIntOps] = Log(ops.intops * iterations);
    row[kIterations] = Log(iterations);
    row[kDepth] = float(loops_.size());
    row[kVecLen] = Log(ls.vec_len);
    row[kVecProduct] = Log(ls.vec_var ? ls.vec_product : 0);
    row[kVecInnermost] = !loops_.empty() && loops_.back().kind == ForKind::kVectorized;
    row[kUnrollProduct] = Log(ls.unrolled ? ls.unroll_product : 0);
    row[kUnrollCount] = float(ls.unrolled);
    row[kParallelProduct] = Log(ls.first_parallel < loops_.size() ? ls.parallel_product : 0);
    row[kWorkPerParallel] = Log(iterations / ls.parallel_product);
    row[kLocalStore] = local_[store.tensor];
    row[kLocalBytes] = local_[store.tensor] ? Log(double(Elements(store.tensor)) * 4) : 0;
    if (ls.gpu) {
      row[kGpuBlocks] = Log(ls.blocks);
      row[kGpuThreads] = Log(ls.threads);
      row[kGpuVThreads] = Log(ls.vthreads);
      row[kWorkPerThread] = Log(iterations / (ls.blocks * ls.threads));
    }
    row[kSharedStore] = shared_[store.tensor];
    row[kSharedBytes] = Log(shared_bytes_);
  }

  // The buffers a store touches: the stored one first (kind 2, or 3 when the
  // value also loads it), then each loaded tensor once, in first-load order.
  static std::vector<Access> Accesses(const ir::StmtNode& store) {
    std::vector<Access> accesses = {{store.tensor, store.indices, 2, 1}};
    ir::VisitLoads(store.value, [&](const ExprNode& n) {
      for (Access& a : accesses) {
        if (a.tensor == n.tensor) {
          if (a.kind == 2) a.kind = 3;
          ++a.count;
          return;
        }
      }
      accesses.push_back({n.tensor, n.args, 1, 1});
    });
    return accesses;
  }

  // One buffer's kBufferFeatures columns under the current loops;
  // `par_first`: the first loop inside the outermost parallel one (0 if none).
  Scored BufferFeatures(const Access& a, const LoopSummary& ls, size_t par_first) const {
    Scored s{};
    double lines = 0;
    s.bytes = Span(a, 0, &lines) * 4;
    s.f[kKind] = float(a.kind);
    s.f[kBytes] = Log(s.bytes);
    s.f[kBytesPerParallel] = Log(Span(a, par_first, nullptr) * 4);
    s.f[kLines] = Log(lines);
    s.f[kInnerStride] = loops_.empty() ? 0 : Log(Stride(a, loops_.back().var.get()));
    s.f[kVecStride] = ls.vec_var ? Log(Stride(a, ls.vec_var)) : 0;
    // Reuse: loops whose variable the index does not use.
    double reuse = 1;
    int innermost_reuse = -1;
    for (size_t k = 0; k < loops_.size(); ++k) {
      bool used = false;
      for (const Expr& i : a.idx) used |= ir::Mentions(i, loops_[k].var.get());
      if (!used) reuse *= double(loops_[k].extent), innermost_reuse = int(k);
    }
    s.f[kReuseCount] = Log(innermost_reuse >= 0 ? reuse : 0);
    if (innermost_reuse >= 0) {
      double dist = 1;
      for (size_t k = innermost_reuse + 1; k < loops_.size(); ++k)
        dist *= double(loops_[k].extent);
      s.f[kReuseIters] = Log(dist);
      s.f[kReuseBytes] = Log(Span(a, innermost_reuse + 1, nullptr) * 4);
    }
    s.f[kAccessCount] = float(a.count);
    // All the bytes the nest reads and writes there, reuse included (bytes
    // is the distinct ones).
    s.f[kAccessedBytes] = Log(double(a.count) * ls.iterations * 4);
    return s;
  }

  // Appends to out_ the feature row of `store` under the current loops.
  void Row(const ir::StmtNode& store) {
    FeatureRow row{};
    const LoopSummary ls = SummarizeLoops();
    OpCounts ops;
    CountOps(store.value, &ops);
    for (const Expr& i : store.indices) CountOps(i, &ops);
    LoopAndOpFeatures(store, ls, ops, &row);

    // The buffers: the stored one, and each loaded one (grouped by tensor).
    const std::vector<Access> accesses = Accesses(store);
    row[kReduceUpdate] = accesses[0].kind == 3;
    std::vector<Scored> scored;
    double total_bytes = 0;
    size_t par_first = ls.first_parallel < loops_.size() ? ls.first_parallel + 1 : 0;
    for (const Access& a : accesses) {
      scored.push_back(BufferFeatures(a, ls, par_first));
      total_bytes += scored.back().bytes;
    }
    row[kNumBuffers] = float(accesses.size());
    double flops =
        (ops.add + ops.mul + ops.div + ops.minmax + ops.math + ops.cmpsel) * ls.iterations;
    row[kIntensity] = Log(total_bytes > 0 ? flops / total_bytes : 0);
    // The stored buffer first, then the others by bytes touched.
    std::stable_sort(scored.begin() + 1, scored.end(),
                     [](const Scored& x, const Scored& y) { return x.bytes > y.bytes; });
    for (size_t b = 0; b < scored.size() && b < size_t(kBuffersPerStore); ++b) {
      std::copy(scored[b].f.begin(), scored[b].f.end(),
                row.begin() + kStoreHeader + b * kBufferFeatures);
    }
    out_.rows.push_back(row);
  }

  const ir::ComputeDAG& dag_;
  std::vector<Loop> loops_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<bool> local_, shared_;
  double shared_bytes_ = 0;  // shared memory allocated around the current statement
  ProgramFeatures out_;
};

}  // namespace

ProgramFeatures ExtractFeatures(const ir::ComputeDAG& dag, const ir::Stmt& program) {
  return Extractor(dag).Run(program);
}

const std::vector<std::string>& FeatureNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {
        "float_add_sub",    "float_mul",        "float_div",        "float_min_max",
        "float_math",       "float_cmp_select", "int_ops",          "iterations",
        "loop_depth",       "vector_len",       "vector_product",   "vector_innermost",
        "unroll_product",   "unroll_count",     "parallel_product", "work_per_parallel_iter",
        "reduction_update", "local_store",      "local_bytes",      "arith_intensity",
        "num_buffers",      "gpu_blocks",       "gpu_threads",      "gpu_vthreads",
        "work_per_thread",  "shared_store",     "shared_bytes"};
    for (int b = 0; b < kBuffersPerStore; ++b) {
      for (const char* f : {"kind", "bytes", "bytes_per_parallel_iter", "cache_lines",
                            "innermost_stride", "vector_stride", "reuse_count",
                            "reuse_distance_iters", "reuse_distance_bytes", "access_count",
                            "accessed_bytes"}) {
        n.push_back(absl::StrCat("buf", b, ".", f));
      }
    }
    return n;
  }();
  return names;
}

}  // namespace tunefarm::cost_model
