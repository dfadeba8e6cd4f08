// The loop IR a scheduled program lowers to: loops, stores, conditionals,
// sequences and buffer allocations over the tensors of a ComputeDAG.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/expr.h"

namespace tunefarm::ir {

// kBlock*/kThread* loops are bound to the CUDA grid: each thread of the
// launch runs the body once with the loop variable set to its block or thread
// index (guarded when the extent is below the launch's). kVThread is a
// virtual thread: a serial loop inside each thread (TVM's vthread).
enum class ForKind : uint8_t {
  kSerial,
  kParallel,
  kVectorized,
  kUnrolled,
  kBlockX,
  kBlockY,
  kBlockZ,
  kThreadX,
  kThreadY,
  kThreadZ,
  kVThread,
};
// kBarrier: every thread of a GPU block waits there (__syncthreads).
// kMma: one warp's tensor-core product, or a warp's load of one operand
// fragment for it, or a warpgroup's wgmma (see StmtNode::mma_*).
// kAsyncCommit: the thread's asynchronous copies issued so far form a group
// (cp.async.commit_group); then, where `extent` >= 0, it waits until at most
// `extent` of its groups are still in flight (cp.async.wait_group), and
// with `proxy_fence` makes what landed visible to wgmma's reads
// (fence.proxy.async.shared::cta).
// kWgmmaSync: for the warpgroup's wgmma products into `tensor` (a thread's
// `shape[0]` float32 accumulators): `extent` -1 is wgmma.fence (the
// accumulators' writes so far ordered before the products); `extent` >= 0
// commits the products issued so far as a group and waits until at most
// `extent` groups are in flight (wgmma.commit_group, wgmma.wait_group), the
// accumulators of the landed groups then readable.
enum class StmtKind : uint8_t {
  kFor,
  kStore,
  kSeq,
  kIf,
  kAllocate,
  kBarrier,
  kMma,
  kAsyncCommit,
  kWgmmaSync
};

bool IsBlockBound(ForKind k);
bool IsThreadBound(ForKind k);
// 0, 1, 2 for the x, y, z of a block- or thread-bound kind.
int BindingAxis(ForKind k);
// "blockIdx.x", "threadIdx.y", "vthread", or "" for CPU kinds.
const char* BindingName(ForKind k);

struct StmtNode;
using Stmt = std::shared_ptr<const StmtNode>;

struct StmtNode {
  StmtKind kind;
  // kFor
  Expr var;
  int64_t extent = 0;
  ForKind for_kind = ForKind::kSerial;
  // kStore (multi-dimensional indices into `tensor`) and kAllocate (`tensor`)
  int tensor = -1;
  std::vector<Expr> indices;
  Expr value;
  // kIf
  Expr cond;
  // kAllocate: the buffer's shape (a region of the tensor for a stage
  // computed inside another's loop) and whether it lives on the stack (CPU)
  // or in each thread's registers (GPU), or in the GPU block's shared memory.
  // `shape` may be wider than the region in its last dimension
  // (storage_align padding); indices stay below the region's extents.
  std::vector<int64_t> shape;
  bool local = false;
  bool shared = false;
  // kMma, mma_load 0: D += A x B for one warp (mma.sync m16n8k16, float32
  // accumulate; with mma_tf32 m16n8k8). A (16x16; tf32 16x8) and B (16x8;
  // tf32 8x8) are fragments in each lane's registers (mma_fragment tensors
  // mma_a and mma_b, from flat elements mma_offsets[0] and [1]); with
  // g = l/4, c = 2 (l%4) (tf32: c = l%4), lane l holds
  //   A: (g, c), (g, c+1), (g+8, c), (g+8, c+1), (g, c+8), (g, c+9),
  //      (g+8, c+8), (g+8, c+9); tf32: (g, c), (g+8, c), (g, c+4), (g+8, c+4);
  //   B (row k, column n): (c, g), (c+1, g), (c+8, g), (c+9, g);
  //      tf32: (c, g), (c+4, g).
  // D is `tensor` (a thread's float32 registers) from flat element
  // indices[0], four per lane: rows g (elements 0, 1) and g + 8 (2, 3),
  // columns 2 (l%4) and 2 (l%4) + 1. The 32 lanes of a warp (threads
  // 32w..32w+31 of a 1-D block) run it together with equal offsets.
  // mma_load 1 (A) or 2 (B): the warp loads its lanes' fragments of that
  // operand into `tensor` (an mma_fragment tensor) from flat element
  // indices[0]: element (r, c) of the operand at flat element
  // mma_offsets[0] + r * mma_a_strides[0] + c * mma_a_strides[1] of shared
  // tensor mma_a; with mma_tf32 each value rounded to TF32 (nearest, ties
  // away from zero: cvt.rna.tf32.f32). A B load of mma_fragments 2 fills
  // two fragments, the second (elements MmaFragmentElements on) from the
  // operand's columns 8.. on (by ldmatrix only: one .x4 for two .x2).
  int mma_load = 0;
  int64_t mma_fragments = 1;
  int mma_a = -1, mma_b = -1;
  std::vector<Expr> mma_offsets;
  std::array<int64_t, 2> mma_a_strides = {0, 0}, mma_b_strides = {0, 0};
  // A 16-bit fragment load by ldmatrix (LdmatrixLoad): the layout above is
  // what it must deliver; what runs is ldmatrix.sync.aligned.m8n8 of
  // LdmatrixMatrices 8x8 matrices (.trans where LdmatrixTransposed), lane
  // 8j + i naming row i of matrix j by the flat element mma_row of mma_a,
  // the row's first of 8 contiguous 16-bit elements (16 aligned bytes).
  // Lane l receives register j of its fragment (elements 2j, 2j + 1) from
  // matrix j: row l/4, columns 2 (l%4) and 2 (l%4) + 1 (.trans: rows 2
  // (l%4) and 2 (l%4) + 1, column l/4).
  bool mma_ldmatrix = false;
  Expr mma_row;
  // An ldmatrix fragment load from a swizzled tile of rows of mma_swizzle
  // elements (0: none): the element at flat u of the layout above lies at
  // SwizzledElement(u, mma_swizzle).
  int64_t mma_swizzle = 0;
  bool mma_tf32 = false;
  // wgmma (sm_90a): D (64 x mma_n) += A (64 x 16) x B (16 x mma_n), 16-bit
  // factors, for the warpgroup (4 warps, threads 128g..128g+127) running
  // it, asynchronously until a kWgmmaSync waits for it. A and B are read
  // from shared memory through descriptors in the no-swizzle canonical
  // layouts of 16-byte core matrices (8 rows of 8 elements):
  //   K-major (mn_major false): element (i, k), i along M (N), at
  //     offset + (i % 8) * 8 + (i / 8) * sbo + (k % 8) + (k / 8) * lbo;
  //   MN-major: at offset + (i % 8) + (i / 8) * sbo + (k % 8) * 8 + (k / 8) * lbo;
  // mma_a_strides and mma_b_strides hold {lbo, sbo}, in elements. D: from
  // flat element indices[0] of `tensor`, mma_n / 2 per thread: thread
  // 32w + l of the warpgroup holds, for q < mma_n / 2, row 16w + l/4 +
  // 8 ((q % 4) / 2), column 8 (q / 4) + 2 (l % 4) + q % 2.
  bool mma_wgmma = false;
  int64_t mma_n = 0;
  bool mma_a_mn_major = false, mma_b_mn_major = false;
  // kAsyncCommit (see StmtKind).
  bool proxy_fence = false;
  // kFor (vectorized, GPU): the 16-byte copy is asynchronous (cp.async, sm_80
  // and newer): it lands in shared memory at the kAsyncCommit that waits
  // for its group, zeros where the guard is false.
  bool async_copy = false;
  // kFor, kIf, kAllocate: body[0]; kSeq: the statements in order
  std::vector<Stmt> body;
};

Stmt For(Expr var, int64_t extent, ForKind kind, Stmt body);
Stmt Store(int tensor, std::vector<Expr> indices, Expr value);
Stmt Seq(std::vector<Stmt> stmts);
Stmt IfThen(Expr cond, Stmt then_case);
Stmt Allocate(int tensor, std::vector<int64_t> shape, bool local, Stmt body);
Stmt AllocateShared(int tensor, std::vector<int64_t> shape, Stmt body);
Stmt Barrier();
// `wait` < 0: commit without waiting.
Stmt AsyncCommit(int64_t wait, bool proxy_fence = false);
// `wait` -1: wgmma.fence; else commit and wait (see kWgmmaSync).
Stmt WgmmaSync(int acc, int64_t accumulators, int64_t wait);
// One warpgroup's wgmma product (see StmtNode::mma_wgmma); strides {lbo, sbo}.
Stmt Wgmma(int d, Expr d_offset, int64_t n, int a, Expr a_offset, std::array<int64_t, 2> a_strides,
           bool a_mn_major, int b, Expr b_offset, std::array<int64_t, 2> b_strides,
           bool b_mn_major);
// One warp's mma.sync product from register fragments (mma_load 0).
Stmt Mma(int d, Expr d_offset, int a, Expr a_offset, int b, Expr b_offset, bool tf32 = false);
// One warp's load of operand A's (`b` false) or B's fragments (mma_load 1,
// 2), each lane gathering its elements.
Stmt MmaLoad(bool b, int fragment, Expr fragment_offset, int source, Expr offset,
             std::array<int64_t, 2> strides, bool tf32);
// The same by ldmatrix from a 16-bit tile (see StmtNode::mma_ldmatrix):
// `fragments` 2 loads B's fragments of columns 0-7 and 8-15; `row` is each
// lane's row address.
Stmt LdmatrixLoad(bool b, int fragment, Expr fragment_offset, int source, Expr offset,
                  std::array<int64_t, 2> strides, int64_t swizzle, int64_t fragments, Expr row);
// An ldmatrix load's 8x8 matrices (A: 4; B: 2 a fragment), and whether it
// transposes them: where the operand is stored with its m (A) or n (B)
// index contiguous (stride 1).
int64_t LdmatrixMatrices(const StmtNode& load);
bool LdmatrixTransposed(const StmtNode& load);
// Elements of one lane's fragment of A or B (mma_load's `tensor` span).
int64_t MmaFragmentElements(bool b, bool tf32);
// The elements a fragment load writes per lane: mma_fragments fragments.
int64_t MmaLoadElements(const StmtNode& load);

// Where a swizzled 16-bit tile of rows of `row` elements (a power of two,
// 8 or more) keeps its flat element u: with C = row / 8 16-byte chunks a
// row, m = min(C, 8), R = u / row, chunk c = (u % row) / 8 moves to
// (c / m) m + (c % m + s) % m within row R, where s = (R / max(1, 8 / C))
// % m. 8 consecutive rows' same chunk, and 8 consecutive chunks in row
// order, then lie in 8 distinct 16-byte bank groups.
int64_t SwizzledElement(int64_t u, int64_t row);
// The same as an expression: the stored column of column `c` of row `r`.
Expr SwizzledColumn(const Expr& r, const Expr& c, int64_t row);

std::string ToString(const Stmt& s, const std::vector<std::string>* tensor_names = nullptr);

// How many element stores `s` executes: loop extents times the stores they
// hold, each vector lane one element, every guarded store counted (an
// upper bound). A kernel's work in the units a parallel loop splits.
int64_t StoreCount(const Stmt& s);

}  // namespace tunefarm::ir
