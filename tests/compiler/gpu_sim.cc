#include "tests/compiler/gpu_sim.h"

#include <array>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/float16.h"
#include "common/status_macros.h"
#include "compiler/schedule/gpu_launch.h"

namespace tunefarm::testing {

std::vector<std::pair<int, int>> MmaFragmentPlaces(bool b, bool tf32, int l) {
  const int g = l / 4, c = tf32 ? l % 4 : 2 * (l % 4);
  if (tf32) {
    if (b) return {{c, g}, {c + 4, g}};
    return {{g, c}, {g + 8, c}, {g, c + 4}, {g + 8, c + 4}};
  }
  if (b) return {{c, g}, {c + 1, g}, {c + 8, g}, {c + 9, g}};
  return {{g, c},     {g, c + 1}, {g + 8, c},     {g + 8, c + 1},
          {g, c + 8}, {g, c + 9}, {g + 8, c + 8}, {g + 8, c + 9}};
}

std::pair<int, int> MmaAccumulatorPlace(int l, int i) {
  return {l / 4 + 8 * (i / 2), (l % 4) * 2 + i % 2};
}

int LdmatrixRowLane(int matrix, int row) { return 8 * matrix + row; }

std::pair<int, int> LdmatrixPlace(bool trans, int l, int h) {
  return {trans ? 2 * (l % 4) + h : l / 4, trans ? l / 4 : 2 * (l % 4) + h};
}

std::pair<int64_t, int64_t> WgmmaAccumulatorPlace(int t, int64_t q) {
  const int w = t / 32, lane = t % 32;
  return {16 * w + lane / 4 + 8 * ((q % 4) / 2), 8 * (q / 4) + 2 * (lane % 4) + q % 2};
}

int64_t WgmmaCanonicalOffset(int64_t i, int64_t k, bool mn_major,
                             const std::array<int64_t, 2>& lbo_sbo) {
  return mn_major ? i % 8 + (i / 8) * lbo_sbo[1] + (k % 8) * 8 + (k / 8) * lbo_sbo[0]
                  : (i % 8) * 8 + (i / 8) * lbo_sbo[1] + k % 8 + (k / 8) * lbo_sbo[0];
}

namespace {

using absl::StrCat;
using ir::Expr;
using ir::ExprKind;
using ir::ExprNode;
using ir::ForKind;
using ir::Op;
using ir::Stmt;
using ir::StmtKind;

struct SharedCell {
  int64_t write_epoch = -1, read_epoch = -1;
  int writer = -1, reader = -1;  // reader -2: several threads
  int in_flight = 0;             // asynchronous copies issued into it, not yet landed
  int64_t writer_fences = 0;     // the writer's proxy fences when it wrote
  int wgmma_reading = 0;         // un-waited wgmma products reading it
};

class BlockSim {
 public:
  BlockSim(const ir::ComputeDAG& dag, const schedule::GpuLaunch& launch,
           std::map<int, std::vector<float>>* global, int64_t block_id)
      : dag_(dag), launch_(launch), global_(global) {
    threads_ = int(launch.block[0] * launch.block[1] * launch.block[2]);
    open_.resize(size_t(threads_));
    committed_.resize(size_t(threads_));
    proxy_fences_.assign(size_t(threads_), 0);
    wgmma_.resize(size_t(threads_));
    for (const ir::TensorDecl& t : dag.tensors) shapes_.push_back(t.shape);
    int64_t b[3] = {block_id % launch.grid[0], (block_id / launch.grid[0]) % launch.grid[1],
                    block_id / (launch.grid[0] * launch.grid[1])};
    for (const auto& [var, kind] : launch.bound) {
      std::vector<int64_t>& v = vars_[var];
      v.resize(threads_);
      for (int t = 0; t < threads_; ++t) {
        int64_t th[3] = {t % launch.block[0], (t / launch.block[0]) % launch.block[1],
                         t / (launch.block[0] * launch.block[1])};
        v[t] = ir::IsBlockBound(kind) ? b[ir::BindingAxis(kind)] : th[ir::BindingAxis(kind)];
      }
    }
  }

  absl::Status Run(int64_t* barriers) {
    TF_RETURN_IF_ERROR(Exec(launch_.nest, std::vector<bool>(threads_, true)));
    *barriers = epoch_;
    return absl::OkStatus();
  }

 private:
  absl::Status Exec(const Stmt& s, const std::vector<bool>& mask) {
    switch (s->kind) {
      case StmtKind::kFor: {
        if (ir::IsBlockBound(s->for_kind) || ir::IsThreadBound(s->for_kind)) {
          std::vector<bool> inner = mask;
          const std::vector<int64_t>& v = vars_.at(s->var.get());
          for (int t = 0; t < threads_; ++t) inner[t] = inner[t] && v[t] < s->extent;
          return Exec(s->body[0], inner);
        }
        if (s->for_kind == ir::ForKind::kVectorized) TF_RETURN_IF_ERROR(CheckVector(*s, mask));
        if (s->async_copy) return AsyncCopy(*s, mask);
        std::vector<int64_t>& v = vars_[s->var.get()];
        for (int64_t i = 0; i < s->extent; ++i) {
          v.assign(threads_, i);
          TF_RETURN_IF_ERROR(Exec(s->body[0], mask));
        }
        vars_.erase(s->var.get());
        return absl::OkStatus();
      }
      case StmtKind::kSeq:
        for (const Stmt& b : s->body) TF_RETURN_IF_ERROR(Exec(b, mask));
        return absl::OkStatus();
      case StmtKind::kIf: {
        std::vector<bool> inner = mask;
        for (int t = 0; t < threads_; ++t) {
          if (!inner[t]) continue;
          TF_ASSIGN_OR_RETURN(int64_t c, EvalInt(s->cond, t));
          inner[t] = c != 0;
        }
        return Exec(s->body[0], inner);
      }
      case StmtKind::kAllocate: {
        std::vector<int64_t> saved = shapes_[s->tensor];
        shapes_[s->tensor] = s->shape;
        int64_t n = 1;
        for (int64_t e : s->shape) n *= e;
        if (s->shared) {
          // One array for the block; NaN until written, so a read of an
          // element nobody fetched spoils the result.
          if (!shared_.count(s->tensor)) {
            shared_[s->tensor].assign(n, std::nanf(""));
            cells_[s->tensor].assign(n, SharedCell());
          }
          TF_RETURN_IF_ERROR(Exec(s->body[0], mask));
        } else {
          auto saved_local = std::move(local_[s->tensor]);
          local_[s->tensor].assign(threads_, std::vector<float>(n, std::nanf("")));
          TF_RETURN_IF_ERROR(Exec(s->body[0], mask));
          local_[s->tensor] = std::move(saved_local);
          if (local_[s->tensor].empty()) local_.erase(s->tensor);
        }
        shapes_[s->tensor] = saved;
        return absl::OkStatus();
      }
      case StmtKind::kBarrier:
        for (int t = 0; t < threads_; ++t) {
          if (!mask[t]) return absl::InternalError(StrCat("barrier not reached by thread ", t));
        }
        ++epoch_;
        return absl::OkStatus();
      case StmtKind::kMma:
        return s->mma_wgmma ? Wgmma(*s, mask) : Mma(*s, mask);
      case StmtKind::kWgmmaSync:
        return WgmmaSync(*s, mask);
      case StmtKind::kAsyncCommit:
        // Each thread's copies so far form a group; waiting, the oldest
        // groups land (written now, race-checked as this thread's writes).
        for (int t = 0; t < threads_; ++t) {
          if (!mask[size_t(t)]) continue;
          committed_[size_t(t)].push_back(std::move(open_[size_t(t)]));
          open_[size_t(t)].clear();
          while (s->extent >= 0 && int64_t(committed_[size_t(t)].size()) > s->extent) {
            for (const AsyncWrite& w : committed_[size_t(t)].front()) {
              --cells_[w.tensor][size_t(w.flat)].in_flight;
              TF_ASSIGN_OR_RETURN(float* p, FlatAddress(w.tensor, w.flat, t, /*write=*/true));
              *p = w.value;
            }
            committed_[size_t(t)].pop_front();
          }
          if (s->proxy_fence) ++proxy_fences_[size_t(t)];
        }
        return absl::OkStatus();
      case StmtKind::kStore:
        for (int t = 0; t < threads_; ++t) {
          if (!mask[t]) continue;
          TF_ASSIGN_OR_RETURN(double v, EvalFloat(s->value, t));
          TF_ASSIGN_OR_RETURN(float* p, Address(s->tensor, s->indices, t, /*write=*/true));
          *p =
              dag_.tensors[size_t(s->tensor)].float16 ? RoundToHalf(float(v), dag_.half) : float(v);
        }
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  // The offsets (indices[0], then mma_offsets) of a tensor-core statement
  // `s` that threads first..first+size-1 (a warp, a warpgroup: `group` i)
  // run together: nullopt where none of them runs it; an error where only
  // some do or their offsets differ.
  absl::StatusOr<std::optional<std::vector<int64_t>>> GroupOffsets(const ir::StmtNode& s,
                                                                   const std::vector<bool>& mask,
                                                                   int first, int size,
                                                                   const std::string& group,
                                                                   int i) {
    const char* what = s.mma_wgmma ? "wgmma" : s.mma_load ? "fragment load" : "mma";
    int active = 0;
    for (int l = 0; l < size; ++l) active += mask[size_t(first + l)];
    if (active == 0) return std::nullopt;
    if (active != size)
      return absl::InternalError(
          StrCat(what, " with ", active, " of ", size, " threads of ", group, " ", i));
    std::vector<int64_t> off;
    for (int l = 0; l < size; ++l) {
      std::vector<int64_t> mine;
      TF_ASSIGN_OR_RETURN(int64_t d, EvalInt(s.indices[0], first + l));
      mine.push_back(d);
      for (const Expr& e : s.mma_offsets) {
        TF_ASSIGN_OR_RETURN(int64_t v, EvalInt(e, first + l));
        mine.push_back(v);
      }
      if (l > 0 && mine != off)
        return absl::InternalError(StrCat(what, " offsets differ in ", group, " ", i));
      off = std::move(mine);
    }
    return off;
  }

  // Lane l's fragment of A or B in mma.sync's layout (MmaFragmentPlaces).
  static std::vector<std::pair<int, int>> FragmentPlaces(bool b, bool tf32, int l) {
    return MmaFragmentPlaces(b, tf32, l);
  }

  // A lane's register at element `at` of a fragment or accumulator tensor.
  absl::StatusOr<float*> Register(int tensor, int64_t at, int t) {
    auto it = local_.find(tensor);
    if (it == local_.end())
      return absl::InternalError(StrCat(dag_.tensors[size_t(tensor)].name, " is not registers"));
    std::vector<float>& regs = it->second[size_t(t)];
    if (at < 0 || at >= int64_t(regs.size()))
      return absl::OutOfRangeError(StrCat(
          "register ", at, " of ", dag_.tensors[size_t(tensor)].name, " (", regs.size(), ")"));
    return &regs[size_t(at)];
  }

  // A warp's fragment load: every lane of each warp that runs it, with the
  // same offsets; each lane reads its own elements from shared memory (so
  // races are caught) into its registers.
  absl::Status MmaLoad(const ir::StmtNode& s, const std::vector<bool>& mask) {
    if (threads_ % 32 != 0)
      return absl::InternalError(StrCat("fragment load in a block of ", threads_, " threads"));
    if (!dag_.tensors[size_t(s.tensor)].mma_fragment)
      return absl::InternalError(
          StrCat("fragment load into ", dag_.tensors[size_t(s.tensor)].name, ", not fragments"));
    const bool b = s.mma_load == 2;
    const std::array<int64_t, 2>& st = s.mma_a_strides;
    for (int w = 0; w < threads_ / 32; ++w) {
      TF_ASSIGN_OR_RETURN(auto offsets, GroupOffsets(s, mask, 32 * w, 32, "warp", w));
      if (!offsets) continue;
      const std::vector<int64_t>& off = *offsets;
      if (s.mma_swizzle != 0 && !s.mma_ldmatrix)
        return absl::InternalError("a swizzled fragment load without ldmatrix");
      if (s.mma_fragments != 1 && !(b && s.mma_ldmatrix && s.mma_fragments == 2))
        return absl::InternalError(
            StrCat("a fragment load of ", s.mma_fragments, b ? " B" : " A", " fragments"));
      // The layout the load must deliver: lane l's element e at flat
      // element want[l][e] of mma_a (fragment q of a paired B load from
      // the operand's columns 8q..).
      std::vector<std::vector<int64_t>> want(32);
      for (int l = 0; l < 32; ++l) {
        const std::vector<std::pair<int, int>> places = FragmentPlaces(b, s.mma_tf32, l);
        for (int64_t q = 0; q < s.mma_fragments; ++q) {
          for (const auto& [r, c] : places) {
            const int64_t u = off[1] + r * st[0] + (c + 8 * q) * st[1];
            want[size_t(l)].push_back(s.mma_swizzle != 0 ? ir::SwizzledElement(u, s.mma_swizzle)
                                                         : u);
          }
        }
      }
      std::vector<std::vector<int64_t>> read = want;
      if (s.mma_ldmatrix) TF_RETURN_IF_ERROR(LdmatrixReads(s, w, want, &read));
      for (int l = 0; l < 32; ++l) {
        const int t = 32 * w + l;
        for (size_t e = 0; e < read[size_t(l)].size(); ++e) {
          TF_ASSIGN_OR_RETURN(float* from, FlatAddress(s.mma_a, read[size_t(l)][e], t, false));
          TF_ASSIGN_OR_RETURN(float* to, Register(s.tensor, off[0] + int64_t(e), t));
          *to = s.mma_tf32 ? RoundToTf32(*from) : *from;
        }
      }
    }
    return absl::OkStatus();
  }

  // What warp w's ldmatrix (ir::StmtNode::mma_ldmatrix) reads: lane 8j + i
  // names row i of matrix j by its mma_row; lane l receives register j,
  // its elements 2j and 2j + 1, from matrix j's row l/4, columns 2 (l%4)
  // and 2 (l%4) + 1 (transposed: those rows, column l/4). An error where a
  // row is not 16-byte aligned or a lane would receive other elements than
  // the fragment layout's `want`.
  absl::Status LdmatrixReads(const ir::StmtNode& s, int w,
                             const std::vector<std::vector<int64_t>>& want,
                             std::vector<std::vector<int64_t>>* read) {
    if (!s.mma_row.defined()) return absl::InternalError("an ldmatrix load without lane rows");
    const int matrices = int(ir::LdmatrixMatrices(s));
    const bool trans = ir::LdmatrixTransposed(s);
    std::vector<int64_t> row(size_t(8 * matrices));  // by lane
    for (int l = 0; l < 8 * matrices; ++l) {
      TF_ASSIGN_OR_RETURN(row[size_t(l)], EvalInt(s.mma_row, 32 * w + l));
      if (row[size_t(l)] % 8 != 0)
        return absl::InternalError(StrCat("ldmatrix row of lane ", l, " in warp ", w,
                                          " at element ", row[size_t(l)], ", not 16-byte aligned"));
    }
    for (int l = 0; l < 32; ++l) {
      std::vector<int64_t>& mine = (*read)[size_t(l)];
      mine.clear();
      for (int j = 0; j < matrices; ++j) {
        for (int h = 0; h < 2; ++h) {
          const auto [r, c] = LdmatrixPlace(trans, l, h);
          mine.push_back(row[size_t(LdmatrixRowLane(j, r))] + c);
        }
      }
      if (mine != want[size_t(l)]) {
        size_t e = 0;
        while (e < mine.size() && e < want[size_t(l)].size() && mine[e] == want[size_t(l)][e]) ++e;
        return absl::InternalError(
            StrCat("ldmatrix lane rows disagree with the fragment layout: warp ", w, " lane ", l,
                   " element ", e, " reads ", e < mine.size() ? StrCat(mine[e]) : "nothing",
                   ", the layout wants ",
                   e < want[size_t(l)].size() ? StrCat(want[size_t(l)][e]) : "nothing"));
      }
    }
    return absl::OkStatus();
  }

  // A warp's m16n8k16 (tf32: m16n8k8) product from its lanes' fragments:
  // every lane of each warp that runs it, with the same offsets, updating
  // its four accumulators.
  absl::Status Mma(const ir::StmtNode& s, const std::vector<bool>& mask) {
    if (s.mma_load != 0) return MmaLoad(s, mask);
    if (threads_ % 32 != 0)
      return absl::InternalError(StrCat("mma in a block of ", threads_, " threads"));
    for (int tensor : {s.mma_a, s.mma_b}) {
      if (!dag_.tensors[size_t(tensor)].mma_fragment)
        return absl::InternalError(
            StrCat("mma reads ", dag_.tensors[size_t(tensor)].name, ", not fragments"));
    }
    const int depth = s.mma_tf32 ? 8 : 16;
    for (int w = 0; w < threads_ / 32; ++w) {
      TF_ASSIGN_OR_RETURN(auto offsets, GroupOffsets(s, mask, 32 * w, 32, "warp", w));
      if (!offsets) continue;
      const std::vector<int64_t>& off = *offsets;
      double A[16][16], B[16][8], D[16][8];
      for (int l = 0; l < 32; ++l) {
        const int t = 32 * w + l;
        for (int operand = 0; operand < 2; ++operand) {
          const std::vector<std::pair<int, int>> places =
              FragmentPlaces(operand == 1, s.mma_tf32, l);
          for (size_t e = 0; e < places.size(); ++e) {
            TF_ASSIGN_OR_RETURN(float* p, Register(operand == 0 ? s.mma_a : s.mma_b,
                                                   off[size_t(1 + operand)] + int64_t(e), t));
            (operand == 0 ? A[places[e].first][places[e].second]
                          : B[places[e].first][places[e].second]) = *p;
          }
        }
        for (int i = 0; i < 4; ++i) {
          TF_ASSIGN_OR_RETURN(float* p, Register(s.tensor, off[0] + i, t));
          const auto [r, c] = MmaAccumulatorPlace(l, i);
          D[r][c] = *p;
        }
      }
      for (int r = 0; r < 16; ++r) {
        for (int c = 0; c < 8; ++c) {
          for (int k = 0; k < depth; ++k) D[r][c] += A[r][k] * B[k][c];
        }
      }
      for (int l = 0; l < 32; ++l) {
        const int t = 32 * w + l;
        for (int i = 0; i < 4; ++i) {
          TF_ASSIGN_OR_RETURN(float* p, Register(s.tensor, off[0] + i, t));
          const auto [r, c] = MmaAccumulatorPlace(l, i);
          *p = float(D[r][c]);
        }
      }
    }
    return absl::OkStatus();
  }

  // One warpgroup's wgmma: every thread of each warpgroup that runs it, with
  // the same offsets; the factors are read from the descriptors' canonical
  // layouts (each a read by the warpgroup's first thread, which must follow
  // its writer's proxy fence, and which no thread may overwrite until the
  // product is waited for), the accumulators updated now but unreadable
  // until then.
  absl::Status Wgmma(const ir::StmtNode& s, const std::vector<bool>& mask) {
    if (threads_ % 128 != 0)
      return absl::InternalError(StrCat("wgmma in a block of ", threads_, " threads"));
    const int64_t n = s.mma_n;
    if (n < 8 || n > 256 || n % 8 != 0) return absl::InternalError(StrCat("wgmma with N ", n));
    for (int g = 0; g < threads_ / 128; ++g) {
      TF_ASSIGN_OR_RETURN(auto offsets, GroupOffsets(s, mask, 128 * g, 128, "warpgroup", g));
      if (!offsets) continue;
      const std::vector<int64_t> off = *offsets;
      for (int l = 0; l < 128; ++l) {
        const int t = 128 * g + l;
        WgmmaState& w = wgmma_[size_t(t)];
        if (w.written.count(s.tensor)) {
          return absl::InternalError(StrCat("wgmma into ", dag_.tensors[s.tensor].name,
                                            " without a wgmma fence after thread ", t,
                                            " wrote it"));
        }
      }
      // Descriptors address 16-byte units: starts and strides whole ones.
      for (int64_t v : {off[1], off[2], s.mma_a_strides[0], s.mma_a_strides[1], s.mma_b_strides[0],
                        s.mma_b_strides[1]}) {
        if (v % 8 != 0)
          return absl::InternalError(StrCat("wgmma descriptor field ", v, " not 16-byte"));
      }
      auto at = WgmmaCanonicalOffset;
      const int reader = 128 * g;
      WgmmaState& first = wgmma_[size_t(reader)];
      auto read = [&](int tensor, int64_t flat) -> absl::StatusOr<double> {
        TF_ASSIGN_OR_RETURN(float* p, FlatAddress(tensor, flat, reader, false));
        SharedCell& c = cells_[tensor][size_t(flat)];
        if (c.writer >= 0 && proxy_fences_[size_t(c.writer)] <= c.writer_fences) {
          return absl::InternalError(StrCat("wgmma reads ", dag_.tensors[tensor].name, "[", flat,
                                            "] that thread ", c.writer,
                                            " wrote with no proxy fence after"));
        }
        ++c.wgmma_reading;
        first.open_reads.push_back({tensor, flat});
        return double(*p);
      };
      std::vector<double> A(64 * 16), B(16 * size_t(n));
      for (int64_t i = 0; i < 64; ++i) {
        for (int64_t k = 0; k < 16; ++k) {
          TF_ASSIGN_OR_RETURN(A[size_t(i * 16 + k)],
                              read(s.mma_a, off[1] + at(i, k, s.mma_a_mn_major, s.mma_a_strides)));
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < 16; ++k) {
          TF_ASSIGN_OR_RETURN(B[size_t(k * n + j)],
                              read(s.mma_b, off[2] + at(j, k, s.mma_b_mn_major, s.mma_b_strides)));
        }
      }
      for (int l = 0; l < 128; ++l) {
        const int t = 128 * g + l;
        for (int64_t q = 0; q < n / 2; ++q) {
          const auto [row, col] = WgmmaAccumulatorPlace(l, q);
          // (Products chained on the same accumulators need no wait.)
          const std::vector<float>& regs = local_.at(s.tensor)[size_t(t)];
          if (off[0] + q < 0 || off[0] + q >= int64_t(regs.size()))
            return absl::OutOfRangeError(StrCat("wgmma accumulator ", off[0] + q));
          float* p = &local_.at(s.tensor)[size_t(t)][size_t(off[0] + q)];
          double acc = *p;
          for (int64_t k = 0; k < 16; ++k) acc += A[size_t(row * 16 + k)] * B[size_t(k * n + col)];
          *p = float(acc);
        }
        wgmma_[size_t(t)].written.erase(s.tensor);  // (the product's own write)
        wgmma_[size_t(t)].acc = s.tensor;
        ++wgmma_[size_t(t)].open;
      }
    }
    return absl::OkStatus();
  }

  // wgmma.fence, or commit and wait (see ir::StmtKind::kWgmmaSync).
  absl::Status WgmmaSync(const ir::StmtNode& s, const std::vector<bool>& mask) {
    for (int t = 0; t < threads_; ++t) {
      if (!mask[size_t(t)]) continue;
      WgmmaState& w = wgmma_[size_t(t)];
      if (s.extent < 0) {
        w.written.erase(s.tensor);
        continue;
      }
      if (w.open > 0) {
        w.groups.push_back(w.open);
        w.group_reads.push_back(std::move(w.open_reads));
        w.open_reads.clear();
      }
      w.open = 0;
      // A group's reads end when it is waited for.
      while (int64_t(w.groups.size()) > s.extent) {
        for (const auto& [tensor, flat] : w.group_reads.front())
          --cells_[tensor][size_t(flat)].wgmma_reading;
        w.groups.pop_front();
        w.group_reads.pop_front();
      }
    }
    return absl::OkStatus();
  }

  // An asynchronous copy: each element's value is read now and lands at the
  // commit that waits for its group. Issuing into a shared element another
  // thread reads or writes in this barrier interval is a race.
  absl::Status AsyncCopy(const ir::StmtNode& loop, const std::vector<bool>& mask) {
    const Stmt& store = loop.body[0];
    const int tensor = store->tensor;
    if (!shared_.count(tensor)) return absl::InternalError("an async copy not into shared memory");
    std::vector<int64_t>& v = vars_[loop.var.get()];
    for (int64_t i = 0; i < loop.extent; ++i) {
      v.assign(size_t(threads_), i);
      for (int t = 0; t < threads_; ++t) {
        if (!mask[size_t(t)]) continue;
        TF_ASSIGN_OR_RETURN(double value, EvalFloat(store->value, t));
        TF_ASSIGN_OR_RETURN(int64_t flat, Flat(tensor, store->indices, t));
        int64_t size = 1;
        for (int64_t e : shapes_[tensor]) size *= e;
        if (flat < 0 || flat >= size)
          return absl::OutOfRangeError(StrCat("async copy to element ", flat, " of ", size));
        SharedCell& c = cells_[tensor][size_t(flat)];
        if ((c.read_epoch == epoch_ && c.reader != t) ||
            (c.write_epoch == epoch_ && c.writer != t)) {
          return absl::InternalError(
              StrCat("shared-memory race on ", dag_.tensors[tensor].name, "[", flat, "]: thread ",
                     t, " copies into it with no barrier after another thread"));
        }
        if (c.in_flight > 0 || c.wgmma_reading > 0) {
          return absl::InternalError(StrCat("shared-memory race on ", dag_.tensors[tensor].name,
                                            "[", flat, "]: thread ", t, " copies into it while ",
                                            c.in_flight > 0
                                                ? "another copy is in flight"
                                                : "a wgmma reading it is not waited for"));
        }
        ++c.in_flight;
        const float f = dag_.tensors[size_t(tensor)].float16 ? RoundToHalf(float(value), dag_.half)
                                                             : float(value);
        open_[size_t(t)].push_back({tensor, flat, f});
      }
    }
    vars_.erase(loop.var.get());
    return absl::OkStatus();
  }

  // A vectorized loop on a GPU is one 16-byte access (schedule::Lower's
  // contract): 8 consecutive 16-bit elements or 4 floats, a store (and the
  // load it copies, where the guard lets it) starting at a multiple of that.
  absl::Status CheckVector(const ir::StmtNode& loop, const std::vector<bool>& mask) {
    const Stmt& b = loop.body[0];
    const int64_t width =
        b->kind == StmtKind::kStore && dag_.tensors[size_t(b->tensor)].float16 ? 8 : 4;
    if (loop.extent != width || b->kind != StmtKind::kStore)
      return absl::InternalError("a vectorized loop that is not 16 bytes of stores");
    Expr cond, load = b->value;
    if (load->kind == ExprKind::kSelect) cond = load->args[0], load = load->args[1];
    std::vector<int64_t>& v = vars_[loop.var.get()];
    absl::Status status;
    // Lane 0 aligned; each lane's element the first one's plus the lane, on
    // both sides.
    std::vector<int64_t> first_store(static_cast<size_t>(threads_)),
        first_load(static_cast<size_t>(threads_));
    for (int64_t lane = 0; lane < loop.extent && status.ok(); ++lane) {
      v.assign(size_t(threads_), lane);
      for (int t = 0; t < threads_ && status.ok(); ++t) {
        if (!mask[size_t(t)]) continue;
        absl::StatusOr<int64_t> at = Flat(b->tensor, b->indices, t);
        if (!at.ok()) return at.status();
        if (lane == 0) first_store[size_t(t)] = *at;
        if (*at - lane != first_store[size_t(t)] || first_store[size_t(t)] % width != 0)
          status = absl::InternalError(StrCat("vector store lane ", lane, " at ", *at));
        if (!status.ok() || load->kind != ExprKind::kLoad) continue;
        absl::StatusOr<int64_t> take = cond.defined() ? EvalInt(cond, t) : 1;
        if (take.ok() && *take == 0) continue;
        absl::StatusOr<int64_t> from = Flat(load->tensor, load->args, t);
        if (!from.ok()) return from.status();
        if (lane == 0) first_load[size_t(t)] = *from;
        if (*from - lane != first_load[size_t(t)] || first_load[size_t(t)] % width != 0)
          status = absl::InternalError(StrCat("vector load lane ", lane, " at ", *from));
      }
    }
    vars_.erase(loop.var.get());
    return status;
  }

  // The row-major element index of `idx` in `tensor`'s buffer.
  absl::StatusOr<int64_t> Flat(int tensor, const std::vector<Expr>& idx, int t) {
    const std::vector<int64_t>& shape = shapes_[tensor];
    int64_t flat = 0;
    for (size_t d = 0; d < idx.size() && d < shape.size(); ++d) {
      TF_ASSIGN_OR_RETURN(int64_t i, EvalInt(idx[d], t));
      flat = flat * shape[d] + i;
    }
    return flat;
  }

  absl::StatusOr<float*> Address(int tensor, const std::vector<Expr>& idx, int t, bool write) {
    const std::vector<int64_t>& shape = shapes_[tensor];
    if (idx.size() != shape.size())
      return absl::InternalError(StrCat(dag_.tensors[tensor].name, ": index rank"));
    int64_t flat = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      TF_ASSIGN_OR_RETURN(int64_t i, EvalInt(idx[d], t));
      if (i < 0 || i >= shape[d]) {
        return absl::OutOfRangeError(StrCat(write ? "write" : "read", " of ",
                                            dag_.tensors[tensor].name, " index ", i,
                                            " in dimension ", d, " of extent ", shape[d],
                                            " (thread ", t, ")"));
      }
      flat = flat * shape[d] + i;
    }
    return FlatAddress(tensor, flat, t, write);
  }

  // Element `flat` of `tensor` (row-major over its buffer's shape), checked
  // against the buffer's size and, in shared memory, for races.
  absl::StatusOr<float*> FlatAddress(int tensor, int64_t flat, int t, bool write) {
    int64_t size = 1;
    for (int64_t e : shapes_[tensor]) size *= e;
    if (flat < 0 || flat >= size) {
      return absl::OutOfRangeError(StrCat(write ? "write" : "read", " of ",
                                          dag_.tensors[tensor].name, " element ", flat, " of ",
                                          size, " (thread ", t, ")"));
    }
    if (auto it = shared_.find(tensor); it != shared_.end()) {
      SharedCell& c = cells_[tensor][flat];
      // An element an asynchronous copy is still writing holds no value yet:
      // on a GPU it may land at any moment until its group is waited for.
      if (c.in_flight > 0) {
        return absl::InternalError(StrCat("shared-memory race on ", dag_.tensors[tensor].name, "[",
                                          flat, "]: thread ", t, write ? " writes" : " reads",
                                          " it while an asynchronous copy into it is in flight"));
      }
      if (write && c.wgmma_reading > 0) {
        return absl::InternalError(StrCat("shared-memory race on ", dag_.tensors[tensor].name, "[",
                                          flat, "]: thread ", t,
                                          " writes it while a wgmma reading it is not waited for"));
      }
      if (write) {
        c.writer_fences = proxy_fences_[size_t(t)];
        if ((c.write_epoch == epoch_ && c.writer != t) ||
            (c.read_epoch == epoch_ && c.reader != t)) {
          return absl::InternalError(StrCat("shared-memory race on ", dag_.tensors[tensor].name,
                                            "[", flat, "]: thread ", t,
                                            " writes with no barrier after another thread"));
        }
        c.write_epoch = epoch_, c.writer = t;
      } else {
        if (c.write_epoch == epoch_ && c.writer != t) {
          return absl::InternalError(StrCat("shared-memory race on ", dag_.tensors[tensor].name,
                                            "[", flat, "]: thread ", t, " reads what thread ",
                                            c.writer, " wrote with no barrier between"));
        }
        if (c.read_epoch != epoch_) c.read_epoch = epoch_, c.reader = t;
        else if (c.reader != t) c.reader = -2;
      }
      return &it->second[flat];
    }
    if (auto it = local_.find(tensor); it != local_.end()) {
      WgmmaState& w = wgmma_[size_t(t)];
      if (tensor == w.acc && w.Pending()) {
        return absl::InternalError(StrCat("thread ", t, (write ? " writes " : " reads "),
                                          dag_.tensors[tensor].name, "[", flat,
                                          "] while a wgmma into it is not waited for"));
      }
      if (write) w.written.insert(tensor);
      return &it->second[t][flat];
    }
    auto it = global_->find(tensor);
    if (it == global_->end()) {
      return absl::InternalError(StrCat(dag_.tensors[tensor].name, " is not allocated here"));
    }
    return &it->second[flat];
  }

  absl::StatusOr<int64_t> EvalInt(const Expr& e, int t) {
    const ExprNode& n = *e.get();
    switch (n.kind) {
      case ExprKind::kIntImm:
        return n.int_value;
      case ExprKind::kVar: {
        auto it = vars_.find(e.get());
        if (it == vars_.end()) return absl::InternalError("unbound variable " + n.name);
        return it->second[t];
      }
      case ExprKind::kBinary: {
        TF_ASSIGN_OR_RETURN(int64_t a, EvalInt(n.args[0], t));
        TF_ASSIGN_OR_RETURN(int64_t b, EvalInt(n.args[1], t));
        switch (n.op) {
          case Op::kAdd:
            return a + b;
          case Op::kSub:
            return a - b;
          case Op::kMul:
            return a * b;
          case Op::kFloorDiv:
            return ir::FloorDivInt(a, b);
          case Op::kFloorMod:
            return ir::FloorModInt(a, b);
          case Op::kMin:
            return std::min(a, b);
          case Op::kMax:
            return std::max(a, b);
          default:
            break;
        }
        break;
      }
      case ExprKind::kCmp: {
        if (ir::IsFloat(n.args[0]->type)) {
          TF_ASSIGN_OR_RETURN(double a, EvalFloat(n.args[0], t));
          TF_ASSIGN_OR_RETURN(double b, EvalFloat(n.args[1], t));
          return Compare(n.op, a, b);
        }
        TF_ASSIGN_OR_RETURN(int64_t a, EvalInt(n.args[0], t));
        TF_ASSIGN_OR_RETURN(int64_t b, EvalInt(n.args[1], t));
        return Compare(n.op, double(a), double(b));
      }
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        TF_ASSIGN_OR_RETURN(int64_t a, EvalInt(n.args[0], t));
        if (n.kind == ExprKind::kAnd && !a) return 0;
        if (n.kind == ExprKind::kOr && a) return 1;
        TF_ASSIGN_OR_RETURN(int64_t b, EvalInt(n.args[1], t));
        return b != 0;
      }
      case ExprKind::kNot: {
        TF_ASSIGN_OR_RETURN(int64_t a, EvalInt(n.args[0], t));
        return !a;
      }
      case ExprKind::kSelect: {
        TF_ASSIGN_OR_RETURN(int64_t c, EvalInt(n.args[0], t));
        return EvalInt(n.args[c ? 1 : 2], t);
      }
      case ExprKind::kCast: {
        TF_ASSIGN_OR_RETURN(double v, EvalFloat(n.args[0], t));
        return int64_t(v);
      }
      default:
        break;
    }
    return absl::InternalError("integer expression not understood: " + ir::ToString(e));
  }

  static int64_t Compare(Op op, double a, double b) {
    switch (op) {
      case Op::kLt:
        return a < b;
      case Op::kLe:
        return a <= b;
      case Op::kGt:
        return a > b;
      case Op::kGe:
        return a >= b;
      case Op::kEq:
        return a == b;
      default:
        return a != b;
    }
  }

  // float32 arithmetic, as the GPU does it.
  absl::StatusOr<double> EvalFloat(const Expr& e, int t) {
    const ExprNode& n = *e.get();
    if (!ir::IsFloat(n.type)) {
      TF_ASSIGN_OR_RETURN(int64_t v, EvalInt(e, t));
      return double(v);
    }
    switch (n.kind) {
      case ExprKind::kFloatImm:
        return double(float(n.float_value));
      case ExprKind::kBinary: {
        TF_ASSIGN_OR_RETURN(double a, EvalFloat(n.args[0], t));
        TF_ASSIGN_OR_RETURN(double b, EvalFloat(n.args[1], t));
        float x = float(a), y = float(b);
        switch (n.op) {
          case Op::kAdd:
            return double(x + y);
          case Op::kSub:
            return double(x - y);
          case Op::kMul:
            return double(x * y);
          case Op::kDiv:
            return double(x / y);
          case Op::kMin:
            return double(std::fmin(x, y));
          case Op::kMax:
            return double(std::fmax(x, y));
          default:
            break;
        }
        break;
      }
      case ExprKind::kSelect: {
        TF_ASSIGN_OR_RETURN(int64_t c, EvalInt(n.args[0], t));
        return EvalFloat(n.args[c ? 1 : 2], t);
      }
      case ExprKind::kCast:
        return EvalFloat(n.args[0], t);
      case ExprKind::kCall: {
        TF_ASSIGN_OR_RETURN(double a, EvalFloat(n.args[0], t));
        float x = float(a);
        switch (n.op) {
          case Op::kExp:
            return double(std::exp(x));
          case Op::kSqrt:
            return double(std::sqrt(x));
          case Op::kTanh:
            return double(std::tanh(x));
          case Op::kAbs:
            return double(std::fabs(x));
          case Op::kLog:
            return double(std::log(x));
          default:
            break;
        }
        break;
      }
      case ExprKind::kLoad: {
        TF_ASSIGN_OR_RETURN(float* p, Address(n.tensor, n.args, t, /*write=*/false));
        return double(*p);
      }
      default:
        break;
    }
    return absl::InternalError("float expression not understood: " + ir::ToString(e));
  }

  const ir::ComputeDAG& dag_;
  const schedule::GpuLaunch& launch_;
  std::map<int, std::vector<float>>* global_;
  int threads_ = 1;
  int64_t epoch_ = 0;
  std::vector<std::vector<int64_t>> shapes_;
  std::unordered_map<const ExprNode*, std::vector<int64_t>> vars_;
  std::map<int, std::vector<float>> shared_;
  std::map<int, std::vector<SharedCell>> cells_;
  std::map<int, std::vector<std::vector<float>>> local_;
  // Per thread: asynchronous copies issued since its last commit, and its
  // committed groups still in flight, oldest first.
  struct AsyncWrite {
    int tensor;
    int64_t flat;
    float value;
  };
  std::vector<std::vector<AsyncWrite>> open_;
  std::vector<std::deque<std::vector<AsyncWrite>>> committed_;
  // Per thread: fence.proxy.async executed so far.
  std::vector<int64_t> proxy_fences_;
  // Per thread: its wgmma accumulators, products issued and not committed,
  // committed groups in flight (products each), local tensors written since
  // the last wgmma fence, and (first thread of a warpgroup) the shared
  // elements its uncommitted products and each group in flight read.
  struct WgmmaState {
    int acc = -1;
    int64_t open = 0;
    std::deque<int64_t> groups;
    std::set<int> written;
    std::vector<std::pair<int, int64_t>> open_reads;
    std::deque<std::vector<std::pair<int, int64_t>>> group_reads;
    bool Pending() const { return open > 0 || !groups.empty(); }
  };
  std::vector<WgmmaState> wgmma_;
};

}  // namespace

absl::StatusOr<std::vector<float>> SimulateGpu(const ir::ComputeDAG& dag, const ir::Stmt& program,
                                               const ir::Target& target,
                                               std::vector<std::vector<float>> args,
                                               GpuSimStats* stats) {
  TF_ASSIGN_OR_RETURN(schedule::GpuLaunchPlan plan, schedule::PlanGpuLaunches(dag, program, target));
  if (args.size() != dag.args.size()) return absl::InvalidArgumentError("argument count");
  std::map<int, std::vector<float>> global;
  for (size_t i = 0; i < args.size(); ++i) {
    if (int64_t(args[i].size()) != dag.NumElements(dag.args[i]))
      return absl::InvalidArgumentError(StrCat("argument ", i, " has the wrong size"));
    if (dag.tensors[size_t(dag.args[i])].float16) {  // as the runner uploads them
      for (float& x : args[i]) x = RoundToHalf(x, dag.half);
    }
    global[dag.args[i]] = std::move(args[i]);
  }
  for (const auto& [tensor, shape] : plan.workspace) {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    global[tensor].assign(n, std::nanf(""));
  }
  GpuSimStats local_stats;
  for (const schedule::GpuLaunch& k : plan.kernels) {
    int64_t blocks = k.grid[0] * k.grid[1] * k.grid[2];
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t barriers = 0;
      absl::Status s = BlockSim(dag, k, &global, b).Run(&barriers);
      if (!s.ok()) {
        return absl::Status(s.code(), StrCat("tf_kernel_", local_stats.kernels, " block ", b, ": ",
                                             s.message()));
      }
      if (b == 0) local_stats.barriers += barriers;
    }
    ++local_stats.kernels;
    local_stats.blocks += blocks;
    local_stats.threads_per_block =
        std::max(local_stats.threads_per_block, k.block[0] * k.block[1] * k.block[2]);
  }
  if (stats) *stats = local_stats;
  return std::move(global[dag.output]);
}

}  // namespace tunefarm::testing
