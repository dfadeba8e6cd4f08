// LowerTensorCore (gpu_tensor_core.h): a tensor-core schedule's loop
// program, one rule per method of TensorCoreLowering.
#include "compiler/schedule/gpu_tensor_core.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/schedule/gpu_tensor_core_internal.h"

namespace tunefarm::schedule {
using ir::Allocate;
using ir::AllocateShared;
using ir::And;
using ir::AsyncCommit;
using ir::Barrier;
using ir::ComputeDAG;
using ir::Expr;
using ir::ExprKind;
using ir::ExprNode;
using ir::FloatImm;
using ir::FloorDiv;
using ir::FloorMod;
using ir::For;
using ir::ForKind;
using ir::IfThen;
using ir::IntImm;
using ir::LdmatrixLoad;
using ir::Load;
using ir::MapLoads;
using ir::Min;
using ir::Mma;
using ir::MmaFragmentElements;
using ir::MmaLoad;
using ir::ScalarType;
using ir::Select;
using ir::Seq;
using ir::Stage;
using ir::Stmt;
using ir::StmtNode;
using ir::Store;
using ir::Substitute;
using ir::SwizzledColumn;
using ir::Var;
using ir::VarMapEntry;
using ir::Wgmma;
using ir::WgmmaSync;
using tensor_core::AxisGroup;
using tensor_core::CeilDiv;
using tensor_core::Gemm;
using tensor_core::kAddedTensors;
using tensor_core::MatchGemm;
using tensor_core::VectorA;
using tensor_core::VectorB;
using tensor_core::VectorElements;

namespace {

// Shorter loops (16 or fewer) unrolled, longer ones serial.
ForKind UnrolledIfShort(int64_t extent) {
  return extent <= 16 ? ForKind::kUnrolled : ForKind::kSerial;
}

// A vector's element `lane` from its first column, or the first column
// itself for a single element (lane undefined).
Expr Column(const Expr& first, const Expr& lane) { return lane.defined() ? first + lane : first; }

// Buffer b's element at `at` (a place, see TensorCoreLowering::Place).
std::vector<Expr> Index(const Expr& b, std::vector<Expr> at) {
  at.insert(at.begin(), b);
  return at;
}

// LowerTensorCore's rules over one scheduled DAG and its decisions: the
// block's and thread's coordinates, the tiles' shapes and the loop
// variables the rules share, each rule a method emitting one part of the
// kernel (see Program for how they nest).
class TensorCoreLowering {
 public:
  TensorCoreLowering(const ComputeDAG& dag, absl::Span<const int64_t> decisions);

  // The whole kernel: blocks x threads over the shared tiles and the
  // accumulators, zeroed, then the K loop, then the write-back.
  Stmt Program() const;

 private:
  // One coordinate of an operand element: the matrix axis's variable, the
  // element's position (a vector's first when `lane` is defined: vec_width
  // consecutive elements, all inside or all outside) and the extent;
  // `exact` when the tiles divide the extent (nothing to guard).
  struct Coord {
    const AxisGroup* group;
    Expr at;
    int64_t extent;
    bool exact;
    Expr lane;
  };

  // The integer constant v (shorthand for the index arithmetic).
  static Expr I(int64_t v) { return IntImm(v); }

  // ---- Global memory to shared tiles ----
  Expr Operand(const Expr& factor, const Coord& x, const Coord& y) const;
  Expr AElement(const Expr& kt, Expr r, Expr c, Expr lane) const;
  Expr BElement(const Expr& kt, Expr r, Expr c, Expr lane) const;
  Stmt EachPiece(int64_t rows, int64_t cols, int64_t width, const std::string& name,
                 const std::function<Stmt(Expr, Expr, Expr, Expr)>& move, bool async = false) const;
  std::vector<Expr> Place(int64_t cols, Expr r, Expr c, Expr lane) const;
  Stmt Fill(const Expr& kt, const Expr& buf, bool async) const;
  Stmt Prefetch(const Expr& kt) const;
  Stmt Commit(const Expr& buf) const;

  // ---- Products of one staged tile ----
  Expr LdmatrixRow(bool b, int64_t matrices, bool trans, const Expr& p0, const Expr& kk0,
                   int64_t rows, int64_t ld) const;
  Stmt FragmentLoad(bool b) const;
  Stmt MmaProducts() const;
  Stmt WgmmaProducts() const;

  // ---- The K loop ----
  Stmt SingleBufferLoop(const Stmt& products) const;
  Stmt AsyncPipelineLoop(const Stmt& products) const;
  Stmt RegisterDoubleBufferLoop(const Stmt& products) const;

  // ---- Epilogue ----
  Stmt WriteBack() const;

  const ComputeDAG& dag_;
  TensorCoreTiling t_;
  Gemm g_;
  int64_t vec_width_ = 0;
  // The tensors TensorCoreDag appended: shared tiles, accumulators, each
  // thread's share of the next tiles, each warp's fragments.
  int sa_ = 0, sb_ = 0, acc_ = 0, pa_ = 0, pb_ = 0, fa_ = 0, fb_ = 0;
  int64_t BM_ = 0, BN_ = 0, BK_ = 0, T_ = 0;
  // Shape of a shared tile's buffer (see TensorCoreDag): stages x rows x row
  // length (with wgmma: stages x core-matrix rows x 8).
  std::vector<int64_t> a_shape_, b_shape_;
  bool wg_ = false;
  int64_t lda_ = 0, ldb_ = 0;
  int64_t tiles_m_ = 0, tiles_n_ = 0, k_tiles_ = 0;
  // The block and thread, the thread's warp and lane, the warp's place in
  // the block (wm_, wn_; gw_ its warpgroup), the block's batch and tile.
  Expr bx_, tx_, warp_, lane_, wm_, wn_, gw_, bb_, tm_, tn_;
  bool vec_a_ = false, vec_b_ = false, async_ = false;
  // Each tile as it moves: rows across its operand's contiguous axis.
  int64_t a_rows_ = 0, a_cols_ = 0, b_rows_ = 0, b_cols_ = 0, a_width_ = 0, b_width_ = 0;
  // The K loop's tile and its shared buffer, the k step, A's fragment.
  Expr ko_, cur_, ks_, fi_;
  // With ldmatrix B's fragments load in pairs (one .x4 for two .x2): load
  // fjp_ fills fragments b_pair_ fjp_...
  int64_t b_pair_ = 1;
  Expr fjp_;
};

TensorCoreLowering::TensorCoreLowering(const ComputeDAG& dag, absl::Span<const int64_t> decisions)
    : dag_(dag) {
  t_ = *TensorCoreTiling::Decode(decisions, dag.tf32);
  g_ = *MatchGemm(dag);
  vec_width_ = VectorElements(t_.tf32);
  sa_ = int(dag.tensors.size()) - kAddedTensors;
  sb_ = sa_ + 1;
  acc_ = sa_ + 2;
  pa_ = sa_ + 3;
  pb_ = sa_ + 4;
  fa_ = sa_ + 5;
  fb_ = sa_ + 6;
  BM_ = t_.BlockM();
  BN_ = t_.BlockN();
  BK_ = t_.BlockK();
  T_ = t_.Threads();
  a_shape_ = dag.tensors[size_t(sa_)].shape;
  b_shape_ = dag.tensors[size_t(sb_)].shape;
  wg_ = t_.wgmma != 0;
  lda_ = a_shape_[2];
  ldb_ = b_shape_[2];
  tiles_m_ = CeilDiv(g_.m.size, BM_);
  tiles_n_ = CeilDiv(g_.n.size, BN_);
  k_tiles_ = CeilDiv(g_.k.size, BK_);

  bx_ = Var("tc.block");
  tx_ = Var("tc.thread");
  warp_ = FloorDiv(tx_, I(32));
  lane_ = FloorMod(tx_, I(32));
  wm_ = FloorDiv(warp_, I(t_.warps_n));
  wn_ = FloorMod(warp_, I(t_.warps_n));
  gw_ = FloorDiv(warp_, I(4));
  bb_ = FloorDiv(bx_, I(tiles_m_ * tiles_n_));
  tm_ = FloorMod(FloorDiv(bx_, I(tiles_n_)), I(tiles_m_));
  tn_ = FloorMod(bx_, I(tiles_n_));

  vec_a_ = VectorA(g_);
  vec_b_ = VectorB(g_);
  async_ = t_.async_copy == 1 && vec_a_ && vec_b_;
  a_rows_ = g_.a_k_inner ? BM_ : BK_;
  a_cols_ = g_.a_k_inner ? BK_ : BM_;
  b_rows_ = g_.b_k_inner ? BN_ : BK_;
  b_cols_ = g_.b_k_inner ? BK_ : BN_;
  a_width_ = vec_a_ ? vec_width_ : 1;
  b_width_ = vec_b_ ? vec_width_ : 1;

  ko_ = Var("tc.k");
  cur_ = t_.stages >= 2 ? FloorMod(ko_, I(t_.stages)) : I(0);
  ks_ = Var("tc.ks");
  fi_ = Var("tc.fi");
  b_pair_ = t_.ldmatrix != 0 && t_.frags_n % 2 == 0 ? 2 : 1;
  fjp_ = Var("tc.fjp");
}

// Emits the operand's element, zero past the matrix; indices clamped so no
// lane reads out of bounds even where the guard is false.
// A guarded factor's guard (padding) is taken at a vector's first lane:
// the vector shares it (its axis is the factor's contiguous one, which
// the guard does not read), and the copy stays one guarded vector.
Expr TensorCoreLowering::Operand(const Expr& factor, const Coord& x, const Coord& y) const {
  std::vector<VarMapEntry> map, first_lane;
  Expr inside;
  for (const Coord* c : {&x, &y}) {
    const int64_t width = c->lane.defined() ? vec_width_ : 1;
    Expr at = c->exact ? c->at : Min(c->at, I(c->extent - width));
    for (const VarMapEntry& v : c->group->At(c->lane.defined() ? at + c->lane : at))
      map.push_back(v);
    for (const VarMapEntry& v : c->group->At(at)) first_lane.push_back(v);
    if (c->exact) continue;
    inside = inside.defined() ? And(inside, c->at < I(c->extent)) : c->at < I(c->extent);
  }
  for (const VarMapEntry& v : g_.batch.At(bb_)) {
    map.push_back(v);
    first_lane.push_back(v);
  }
  if (factor->kind == ExprKind::kSelect && factor->args[2]->kind == ExprKind::kFloatImm &&
      factor->args[2]->float_value == 0) {
    Expr guard = Substitute(factor->args[0], first_lane);
    return Select(inside.defined() ? And(inside, guard) : guard, Substitute(factor->args[1], map),
                  FloatImm(0));
  }
  Expr value = Substitute(factor, map);
  return inside.defined() ? Select(inside, value, FloatImm(0)) : value;
}

// Emits tile kt's element (r, c) of A as the shared buffer holds it; with
// `lane` defined, lane `lane` of the vector whose first column is c.
Expr TensorCoreLowering::AElement(const Expr& kt, Expr r, Expr c, Expr lane) const {
  Coord m{&g_.m, tm_ * I(BM_) + (g_.a_k_inner ? r : c), g_.m.size, g_.m.size % BM_ == 0, Expr()};
  Coord k{&g_.k, kt * I(BK_) + (g_.a_k_inner ? c : r), g_.k.size, g_.k.size % BK_ == 0, Expr()};
  (g_.a_k_inner ? k : m).lane = lane;
  return Operand(g_.a, m, k);
}

// Emits tile kt's element (r, c) of B, as AElement does A's.
Expr TensorCoreLowering::BElement(const Expr& kt, Expr r, Expr c, Expr lane) const {
  Coord k{&g_.k, kt * I(BK_) + (g_.b_k_inner ? c : r), g_.k.size, g_.k.size % BK_ == 0, Expr()};
  Coord n{&g_.n, tn_ * I(BN_) + (g_.b_k_inner ? r : c), g_.n.size, g_.n.size % BN_ == 0, Expr()};
  (g_.b_k_inner ? k : n).lane = lane;
  return Operand(g_.b, k, n);
}

// Emits the whole block's move of a rows x cols tile, `width` elements at a
// time: piece e*T + thread by each thread, its e-th. `move` makes the
// statement for (register index, row, first column, lane): a vector's
// element is lane `lane` from the first column (lane undefined for single
// elements); the vector is a cp.async copy when `async`.
Stmt TensorCoreLowering::EachPiece(int64_t rows, int64_t cols, int64_t width,
                                   const std::string& name,
                                   const std::function<Stmt(Expr, Expr, Expr, Expr)>& move,
                                   bool async) const {
  Expr e = Var(name), lane = Var(name + ".v");
  Expr flat = e * I(T_) + tx_;
  const int64_t per_row = cols / width, pieces = rows * per_row;
  Expr r = FloorDiv(flat, I(per_row)), c = FloorMod(flat, I(per_row)) * I(width);
  if (wg_) {  // core-matrix order: 8 rows of one 16-byte column, then the next column
    r = FloorDiv(flat, I(8 * per_row)) * I(8) + FloorMod(flat, I(8));
    c = FloorMod(FloorDiv(flat, I(8)), I(per_row)) * I(width);
  }
  Stmt body = move(e, r, c, Expr());
  if (width > 1) {
    auto vector = std::make_shared<StmtNode>(
        *For(lane, width, ForKind::kVectorized, move(e * I(width) + lane, r, c, lane)));
    vector->async_copy = async;
    body = vector;
  }
  if (pieces % T_ != 0) body = IfThen(flat < I(pieces), body);
  const int64_t n = CeilDiv(pieces, T_);
  return For(e, n, UnrolledIfShort(n), body);
}

// Where element (r, c) of a rows x cols tile lies in its buffer: row r,
// column c; with wgmma, the core matrix of 8 rows x 8 columns holding it
// (row-major over the tile's core matrices) and its place in there, as
// 16-byte row (r % 8) of that core matrix, element c % 8.
// Swizzled: row r, column c's chunk rotated (SwizzledColumn).
std::vector<Expr> TensorCoreLowering::Place(int64_t cols, Expr r, Expr c, Expr lane) const {
  if (t_.swizzle != 0) return {r, Column(SwizzledColumn(r, c, cols), lane)};
  if (!wg_) return {r, Column(c, lane)};
  Expr core = FloorDiv(r, I(8)) * I(cols / 8) + FloorDiv(c, I(8));
  return {core * I(8) + FloorMod(r, I(8)), lane.defined() ? lane : FloorMod(c, I(8))};
}

// Emits the copies of tile kt straight into shared buffer `buf` (by
// cp.async when `async`).
Stmt TensorCoreLowering::Fill(const Expr& kt, const Expr& buf, bool async) const {
  return Seq(
      {EachPiece(
           a_rows_, a_cols_, a_width_, "tc.fa",
           [&](Expr, Expr r, Expr c, Expr lane) {
             return Store(sa_, Index(buf, Place(a_cols_, r, c, lane)), AElement(kt, r, c, lane));
           },
           async),
       EachPiece(
           b_rows_, b_cols_, b_width_, "tc.fb",
           [&](Expr, Expr r, Expr c, Expr lane) {
             return Store(sb_, Index(buf, Place(b_cols_, r, c, lane)), BElement(kt, r, c, lane));
           },
           async)});
}

// Double buffering through registers: emits the loads of tile kt into each
// thread's registers (Commit stores them after the products).
Stmt TensorCoreLowering::Prefetch(const Expr& kt) const {
  return Seq(
      {EachPiece(a_rows_, a_cols_, a_width_, "tc.pa",
                 [&](Expr e, Expr r, Expr c, Expr lane) {
                   return Store(pa_, {e}, AElement(kt, r, c, lane));
                 }),
       EachPiece(b_rows_, b_cols_, b_width_, "tc.pb", [&](Expr e, Expr r, Expr c, Expr lane) {
         return Store(pb_, {e}, BElement(kt, r, c, lane));
       })});
}

// Emits the stores of the registers Prefetch filled into shared buffer `buf`.
Stmt TensorCoreLowering::Commit(const Expr& buf) const {
  return Seq(
      {EachPiece(a_rows_, a_cols_, a_width_, "tc.ca",
                 [&](Expr e, Expr r, Expr c, Expr lane) {
                   return Store(sa_, Index(buf, Place(a_cols_, r, c, lane)),
                                Load(pa_, ScalarType::kFloat32, {e}));
                 }),
       EachPiece(b_rows_, b_cols_, b_width_, "tc.cb", [&](Expr e, Expr r, Expr c, Expr lane) {
         return Store(sb_, Index(buf, Place(b_cols_, r, c, lane)),
                      Load(pb_, ScalarType::kFloat32, {e}));
       })});
}

// ldmatrix: the row this lane names (StmtNode::mma_ldmatrix) of an
// operand (A, or B if `b`) whose fragment starts at row p0 (A's m, B's
// n) and k index kk0, in a tile of `rows` rows of `ld`. Matrix j covers
// A's rows 8 (j % 2).. and k 8 (j / 2)..; B's k 8 (j % 2).. and columns
// 8 (j / 2)... Lane 8j + i names the matrix's stored row i: k 8 kb + i
// where the tile's rows run along k (transposed), else p 8 pb + i.
Expr TensorCoreLowering::LdmatrixRow(bool b, int64_t matrices, bool trans, const Expr& p0,
                                     const Expr& kk0, int64_t rows, int64_t ld) const {
  Expr j = FloorMod(FloorDiv(lane_, I(8)), I(matrices)), i = FloorMod(lane_, I(8));
  Expr pb = b ? FloorDiv(j, I(2)) : FloorMod(j, I(2));
  Expr kb = b ? FloorMod(j, I(2)) : FloorDiv(j, I(2));
  Expr p = p0 + pb * I(8), k = kk0 + kb * I(8);
  if (trans) {
    k = k + i;
  } else {
    p = p + i;
  }
  Expr r = trans ? k : p, c = trans ? p : k;
  return cur_ * I(rows * ld) + r * I(ld) + (t_.swizzle != 0 ? SwizzledColumn(r, c, ld) : c);
}

// Emits one warp's load of its fragment fi of A (or, if `b`, load fjp's
// b_pair fragments of B) for k step ks from the current shared tile: by
// ldmatrix, or element by element (MmaLoad), from the fragment's first row
// (m0, n0) and k index (k0) in the tile, with its strides.
Stmt TensorCoreLowering::FragmentLoad(bool b) const {
  Expr k0 = ks_ * I(t_.KDepth());
  if (!b) {
    Expr m0 = (wm_ * I(t_.frags_m) + fi_) * I(16);
    Expr offset = cur_ * I(a_rows_ * lda_) + (g_.a_k_inner ? m0 * I(lda_) + k0 : k0 * I(lda_) + m0);
    const std::array<int64_t, 2> strides =
        g_.a_k_inner ? std::array<int64_t, 2>{lda_, 1} : std::array<int64_t, 2>{1, lda_};
    const int64_t elems = MmaFragmentElements(false, t_.tf32);
    return t_.ldmatrix != 0
               ? LdmatrixLoad(false, fa_, fi_ * I(elems), sa_, offset, strides,
                              t_.swizzle != 0 ? lda_ : 0, 1,
                              LdmatrixRow(false, 4, !g_.a_k_inner, m0, k0, a_rows_, lda_))
               : MmaLoad(false, fa_, fi_ * I(elems), sa_, offset, strides, t_.tf32);
  }
  Expr n0 = (wn_ * I(t_.frags_n) + fjp_ * I(b_pair_)) * I(8);
  Expr offset = cur_ * I(b_rows_ * ldb_) + (g_.b_k_inner ? n0 * I(ldb_) + k0 : k0 * I(ldb_) + n0);
  const std::array<int64_t, 2> strides =
      g_.b_k_inner ? std::array<int64_t, 2>{1, ldb_} : std::array<int64_t, 2>{ldb_, 1};
  const int64_t elems = MmaFragmentElements(true, t_.tf32);
  return t_.ldmatrix != 0
             ? LdmatrixLoad(true, fb_, fjp_ * I(b_pair_ * elems), sb_, offset, strides,
                            t_.swizzle != 0 ? ldb_ : 0, b_pair_,
                            LdmatrixRow(true, 2 * b_pair_, !g_.b_k_inner, n0, k0, b_rows_, ldb_))
             : MmaLoad(true, fb_, fjp_ * I(elems), sb_, offset, strides, t_.tf32);
}

// Emits the products of the current tile by mma.sync: per k step each warp
// loads its frags_m fragments of A and frags_n of B once (into its fragment
// registers), then runs the frags_m x frags_n products on them.
Stmt TensorCoreLowering::MmaProducts() const {
  Expr fj = Var("tc.fj");
  const int64_t a_elems = MmaFragmentElements(false, t_.tf32),
                b_elems = MmaFragmentElements(true, t_.tf32);
  Stmt products = For(ks_, t_.k_steps, ForKind::kUnrolled,
                      Seq({For(fi_, t_.frags_m, ForKind::kUnrolled, FragmentLoad(false)),
                           For(fjp_, t_.frags_n / b_pair_, ForKind::kUnrolled, FragmentLoad(true)),
                           For(fi_, t_.frags_m, ForKind::kUnrolled,
                               For(fj, t_.frags_n, ForKind::kUnrolled,
                                   Mma(acc_, (fi_ * I(t_.frags_n) + fj) * I(4), fa_,
                                       fi_ * I(a_elems), fb_, fj * I(b_elems), t_.tf32)))}));
  return Allocate(fa_, dag_.tensors[size_t(fa_)].shape, /*local=*/true,
                  Allocate(fb_, dag_.tensors[size_t(fb_)].shape, /*local=*/true, products));
}

// Emits the products of the current tile by wgmma between the fences and
// waits around them.
// Warpgroup gw (warps 4gw..4gw+3) owns columns gw * 8 frags_n of
// the tile, product fi its rows 64 fi.., k step ks K 16 ks... Starts and
// {lbo, sbo} in elements of the core-matrix layout (see `Place`): in a
// K-major tile the next 8 along K are 64 elements on (lbo), the next 8
// rows 8 BK (sbo); in an M- (N-) major one the next 8 along K are 8 BM
// (8 BN) on (lbo), the next 8 along M (N) 64 (sbo).
Stmt TensorCoreLowering::WgmmaProducts() const {
  const int64_t n_inst = 8 * t_.frags_n;
  Expr m0w = fi_ * I(64), n0w = gw_ * I(n_inst), k0w = ks_ * I(16);
  Expr a_start =
      cur_ * I(BM_ * BK_) + (g_.a_k_inner ? m0w * I(BK_) + k0w * I(8) : k0w * I(BM_) + m0w * I(8));
  Expr b_start =
      cur_ * I(BN_ * BK_) + (g_.b_k_inner ? n0w * I(BK_) + k0w * I(8) : k0w * I(BN_) + n0w * I(8));
  const std::array<int64_t, 2> a_lbo_sbo =
      g_.a_k_inner ? std::array<int64_t, 2>{64, 8 * BK_} : std::array<int64_t, 2>{8 * BM_, 64};
  const std::array<int64_t, 2> b_lbo_sbo =
      g_.b_k_inner ? std::array<int64_t, 2>{64, 8 * BK_} : std::array<int64_t, 2>{8 * BN_, 64};
  Stmt product = Wgmma(acc_, fi_ * I(4 * t_.frags_n), n_inst, sa_, a_start, a_lbo_sbo,
                       !g_.a_k_inner, sb_, b_start, b_lbo_sbo, !g_.b_k_inner);
  // wgmma 2 leaves the tile's products in flight until the next tile's
  // are issued (their group waited for then).
  return Seq(
      {WgmmaSync(acc_, t_.Accumulators(), -1),
       For(ks_, t_.k_steps, ForKind::kUnrolled, For(fi_, t_.frags_m, ForKind::kUnrolled, product)),
       WgmmaSync(acc_, t_.Accumulators(), t_.wgmma == 2 ? 1 : 0)});
}

// One stage: emits the K loop that fills the single buffer between two
// barriers, then runs the products on it.
Stmt TensorCoreLowering::SingleBufferLoop(const Stmt& products) const {
  return For(ko_, k_tiles_, ForKind::kSerial,
             Seq({Barrier(), Fill(ko_, I(0), false), Barrier(), products}));
}

// cp.async with S stages: emits the prologue copies and the K loop that
// keeps tiles in flight while the products of the oldest run.
// C = S-1 tiles in flight (S-2 where wgmma 2 keeps the last tile's
// products reading their buffer): tiles 0..C-1 are copied first, one
// group each. Iteration ko copies tile ko+C into the buffer tile
// ko+C-S used (every thread finished its products on it before the
// last barrier), runs tile ko's products, and commits; waiting until
// C-1 groups are left lands tile ko+1, and the barrier makes it every
// thread's. Every iteration commits a group, empty past the last tile,
// so the count holds.
Stmt TensorCoreLowering::AsyncPipelineLoop(const Stmt& products) const {
  const int64_t S = t_.stages, C = t_.wgmma == 2 ? S - 2 : S - 1;
  std::vector<Stmt> k_seq;
  for (int64_t s = 0; s < C; ++s) {
    if (s < k_tiles_) k_seq.push_back(Fill(I(s), I(s), true));
    k_seq.push_back(s + 1 == C ? AsyncCommit(C - 1, wg_) : AsyncCommit(-1));
  }
  k_seq.push_back(Barrier());
  Expr next = ko_ + I(C);
  k_seq.push_back(For(ko_, k_tiles_, ForKind::kSerial,
                      Seq({IfThen(next < I(k_tiles_), Fill(next, FloorMod(next, I(S)), true)),
                           products, AsyncCommit(C - 1, wg_), Barrier()})));
  if (t_.wgmma == 2) k_seq.push_back(WgmmaSync(acc_, t_.Accumulators(), 0));
  return Seq(std::move(k_seq));
}

// Two stages through registers: emits the first tile's fill, then the K
// loop that loads tile ko+1 into registers before the products and stores
// it into the other buffer after them, with the registers' allocations.
// One barrier per tile: tile ko+1 goes into the buffer the products of
// tile ko-1 read (finished before the last barrier).
Stmt TensorCoreLowering::RegisterDoubleBufferLoop(const Stmt& products) const {
  Expr more = ko_ + I(1) < I(k_tiles_);
  Stmt k_loop = Seq({Fill(I(0), I(0), false), Barrier(),
                     For(ko_, k_tiles_, ForKind::kSerial,
                         Seq({IfThen(more, Prefetch(ko_ + I(1))), products,
                              IfThen(more, Commit(FloorMod(ko_ + I(1), I(2)))), Barrier()}))});
  return Allocate(pa_, {CeilDiv(a_rows_ * a_cols_ / a_width_, T_) * a_width_}, /*local=*/true,
                  Allocate(pb_, {CeilDiv(b_rows_ * b_cols_ / b_width_, T_) * b_width_},
                           /*local=*/true, k_loop));
}

// Emits the write-back: each accumulator, through the epilogue, stored
// where it lies in the output (guarded at the matrix's edges).
// Accumulator r of fragment (fi, fj) is at row lane/4 + 8 (r/2),
// column 2 (lane%4) + r%2 of the fragment.
Stmt TensorCoreLowering::WriteBack() const {
  Expr wi = Var("tc.wi"), wj = Var("tc.wj"), r = Var("tc.r");
  // With wgmma, warp w of a warpgroup holds rows 16 w.. of each product.
  Expr row =
      tm_ * I(BM_) +
      (wg_ ? wi * I(64) + FloorMod(warp_, I(4)) * I(16) : (wm_ * I(t_.frags_m) + wi) * I(16)) +
      FloorDiv(lane_, I(4)) + FloorDiv(r, I(2)) * I(8);
  Expr col = tn_ * I(BN_) + ((wg_ ? gw_ : wn_) * I(t_.frags_n) + wj) * I(8) +
             FloorMod(lane_, I(4)) * I(2) + FloorMod(r, I(2));
  Expr value = Load(acc_, ScalarType::kFloat32, {(wi * I(t_.frags_n) + wj) * I(4) + r});
  std::vector<VarMapEntry> at = g_.batch.At(bb_);
  for (const VarMapEntry& v : g_.m.At(row)) at.push_back(v);
  for (const VarMapEntry& v : g_.n.At(col)) at.push_back(v);
  std::vector<Expr> out_index;
  for (const ExprNode* axis : g_.out_axes) {
    for (const VarMapEntry& v : at) {
      if (v.var == axis) out_index.push_back(v.value);
    }
  }
  if (g_.epilogue >= 0) {
    const Stage& e = dag_.stages[size_t(g_.epilogue)];
    const int product = dag_.stages[size_t(g_.main)].output;
    Expr body = MapLoads(e.body, [&](const ExprNode& load, const std::vector<Expr>&) {
      return load.tensor == product ? value : Expr();
    });
    std::vector<VarMapEntry> map;
    for (size_t d = 0; d < e.axes.size(); ++d) map.push_back({e.axes[d].var.get(), out_index[d]});
    value = Substitute(body, map);
  }
  Stmt write =
      IfThen(And(row < I(g_.m.size), col < I(g_.n.size)), Store(dag_.output, out_index, value));
  return For(wi, t_.frags_m, ForKind::kUnrolled,
             For(wj, t_.frags_n, ForKind::kUnrolled, For(r, 4, ForKind::kUnrolled, write)));
}

Stmt TensorCoreLowering::Program() const {
  const Stmt products = wg_ ? WgmmaProducts() : MmaProducts();
  Stmt k_loop;
  if (t_.stages == 1) {
    k_loop = SingleBufferLoop(products);
  } else if (async_) {
    k_loop = AsyncPipelineLoop(products);
  } else {
    k_loop = RegisterDoubleBufferLoop(products);
  }
  Expr z = Var("tc.z");
  Stmt init = For(z, t_.Accumulators(), ForKind::kUnrolled, Store(acc_, {z}, FloatImm(0)));
  Stmt body = AllocateShared(sa_, a_shape_,
                             AllocateShared(sb_, b_shape_,
                                            Allocate(acc_, {t_.Accumulators()}, /*local=*/true,
                                                     Seq({init, k_loop, WriteBack()}))));
  return For(bx_, g_.batch.size * tiles_m_ * tiles_n_, ForKind::kBlockX,
             For(tx_, T_, ForKind::kThreadX, body));
}

}  // namespace

Stmt LowerTensorCore(const ComputeDAG& dag, absl::Span<const int64_t> decisions) {
  return TensorCoreLowering(dag, decisions).Program();
}

}  // namespace tunefarm::schedule
