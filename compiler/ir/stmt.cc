#include "compiler/ir/stmt.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tunefarm::ir {

using absl::StrCat;

Stmt For(Expr var, int64_t extent, ForKind kind, Stmt body) {
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kFor;
  n->var = std::move(var);
  n->extent = extent;
  n->for_kind = kind;
  n->body = {std::move(body)};
  return n;
}

Stmt Store(int tensor, std::vector<Expr> indices, Expr value) {
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kStore;
  n->tensor = tensor;
  n->indices = std::move(indices);
  n->value = std::move(value);
  return n;
}

Stmt Seq(std::vector<Stmt> stmts) {
  if (stmts.size() == 1) return stmts[0];
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kSeq;
  n->body = std::move(stmts);
  return n;
}

Stmt IfThen(Expr cond, Stmt then_case) {
  int64_t v;
  if (IsConstInt(cond, &v) && v) return then_case;
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kIf;
  n->cond = std::move(cond);
  n->body = {std::move(then_case)};
  return n;
}

Stmt Allocate(int tensor, std::vector<int64_t> shape, bool local, Stmt body) {
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kAllocate;
  n->tensor = tensor;
  n->shape = std::move(shape);
  n->local = local;
  n->body = {std::move(body)};
  return n;
}

Stmt AllocateShared(int tensor, std::vector<int64_t> shape, Stmt body) {
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kAllocate;
  n->tensor = tensor;
  n->shape = std::move(shape);
  n->shared = true;
  n->body = {std::move(body)};
  return n;
}

Stmt Barrier() {
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kBarrier;
  return n;
}

Stmt AsyncCommit(int64_t wait, bool proxy_fence) {
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kAsyncCommit;
  n->extent = wait;
  n->proxy_fence = proxy_fence;
  return n;
}

Stmt WgmmaSync(int acc, int64_t accumulators, int64_t wait) {
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kWgmmaSync;
  n->tensor = acc;
  n->shape = {accumulators};
  n->extent = wait;
  return n;
}

Stmt Wgmma(int d, Expr d_offset, int64_t n_cols, int a, Expr a_offset,
           std::array<int64_t, 2> a_strides, bool a_mn_major, int b, Expr b_offset,
           std::array<int64_t, 2> b_strides, bool b_mn_major) {
  auto n = std::make_shared<StmtNode>(
      *Mma(d, std::move(d_offset), a, std::move(a_offset), b, std::move(b_offset)));
  n->mma_a_strides = a_strides;
  n->mma_b_strides = b_strides;
  n->mma_wgmma = true;
  n->mma_n = n_cols;
  n->mma_a_mn_major = a_mn_major;
  n->mma_b_mn_major = b_mn_major;
  return n;
}

Stmt Mma(int d, Expr d_offset, int a, Expr a_offset, int b, Expr b_offset, bool tf32) {
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kMma;
  n->tensor = d;
  n->indices = {std::move(d_offset)};
  n->mma_a = a;
  n->mma_b = b;
  n->mma_offsets = {std::move(a_offset), std::move(b_offset)};
  n->mma_tf32 = tf32;
  return n;
}

namespace {
std::shared_ptr<StmtNode> FragmentLoad(bool b, int fragment, Expr fragment_offset, int source,
                                       Expr offset, std::array<int64_t, 2> strides) {
  auto n = std::make_shared<StmtNode>();
  n->kind = StmtKind::kMma;
  n->mma_load = b ? 2 : 1;
  n->tensor = fragment;
  n->indices = {std::move(fragment_offset)};
  n->mma_a = source;
  n->mma_offsets = {std::move(offset)};
  n->mma_a_strides = strides;
  return n;
}
}  // namespace

Stmt MmaLoad(bool b, int fragment, Expr fragment_offset, int source, Expr offset,
             std::array<int64_t, 2> strides, bool tf32) {
  auto n =
      FragmentLoad(b, fragment, std::move(fragment_offset), source, std::move(offset), strides);
  n->mma_tf32 = tf32;
  return n;
}

Stmt LdmatrixLoad(bool b, int fragment, Expr fragment_offset, int source, Expr offset,
                  std::array<int64_t, 2> strides, int64_t swizzle, int64_t fragments, Expr row) {
  auto n =
      FragmentLoad(b, fragment, std::move(fragment_offset), source, std::move(offset), strides);
  n->mma_ldmatrix = true;
  n->mma_swizzle = swizzle;
  n->mma_fragments = fragments;
  n->mma_row = std::move(row);
  return n;
}

int64_t LdmatrixMatrices(const StmtNode& load) {
  return load.mma_load == 2 ? 2 * load.mma_fragments : 4;
}

bool LdmatrixTransposed(const StmtNode& load) {
  return load.mma_a_strides[load.mma_load == 2 ? 1 : 0] == 1;
}

int64_t MmaFragmentElements(bool b, bool tf32) { return (b ? 4 : 8) / (tf32 ? 2 : 1); }

int64_t MmaLoadElements(const StmtNode& load) {
  return load.mma_fragments * MmaFragmentElements(load.mma_load == 2, load.mma_tf32);
}

namespace {
// Chunks rotated together (m) and rows sharing one rotation (rows_per_step).
void SwizzleShape(int64_t row, int64_t* m, int64_t* rows_per_step) {
  const int64_t chunks = row / 8;
  *m = std::min<int64_t>(chunks, 8);
  *rows_per_step = std::max<int64_t>(1, 8 / chunks);
}
}  // namespace

int64_t SwizzledElement(int64_t u, int64_t row) {
  int64_t m, rows_per_step;
  SwizzleShape(row, &m, &rows_per_step);
  const int64_t r = u / row, c = (u % row) / 8, s = (r / rows_per_step) % m;
  return r * row + ((c / m) * m + (c % m + s) % m) * 8 + u % 8;
}

Expr SwizzledColumn(const Expr& r, const Expr& c, int64_t row) {
  int64_t m, rows_per_step;
  SwizzleShape(row, &m, &rows_per_step);
  auto I = [](int64_t v) { return IntImm(v); };
  Expr chunk = FloorDiv(c, I(8)), s = FloorMod(FloorDiv(r, I(rows_per_step)), I(m));
  return (FloorDiv(chunk, I(m)) * I(m) + FloorMod(FloorMod(chunk, I(m)) + s, I(m))) * I(8) +
         FloorMod(c, I(8));
}

bool IsBlockBound(ForKind k) {
  return k == ForKind::kBlockX || k == ForKind::kBlockY || k == ForKind::kBlockZ;
}

bool IsThreadBound(ForKind k) {
  return k == ForKind::kThreadX || k == ForKind::kThreadY || k == ForKind::kThreadZ;
}

int BindingAxis(ForKind k) {
  return IsBlockBound(k) ? int(k) - int(ForKind::kBlockX) : int(k) - int(ForKind::kThreadX);
}

const char* BindingName(ForKind k) {
  switch (k) {
    case ForKind::kBlockX:
      return "blockIdx.x";
    case ForKind::kBlockY:
      return "blockIdx.y";
    case ForKind::kBlockZ:
      return "blockIdx.z";
    case ForKind::kThreadX:
      return "threadIdx.x";
    case ForKind::kThreadY:
      return "threadIdx.y";
    case ForKind::kThreadZ:
      return "threadIdx.z";
    case ForKind::kVThread:
      return "vthread";
    default:
      return "";
  }
}

namespace {
void Print(const Stmt& s, const std::vector<std::string>* names, int indent, std::string* out) {
  std::string pad(indent * 2, ' ');
  switch (s->kind) {
    case StmtKind::kFor: {
      static const char* kKinds[] = {"for", "parallel", "vectorized", "unrolled"};
      if (s->async_copy) absl::StrAppend(out, pad, "async copy:\n");
      const char* kind = int(s->for_kind) < 4 ? kKinds[int(s->for_kind)] : "bind";
      std::string binding = int(s->for_kind) < 4 ? "" : StrCat(" (", BindingName(s->for_kind), ")");
      absl::StrAppend(out, pad, kind, " ", ToString(s->var), " in 0..", s->extent, binding,
                      ":\n");
      Print(s->body[0], names, indent + 1, out);
      break;
    }
    case StmtKind::kStore: {
      std::vector<std::string> idx;
      for (const Expr& e : s->indices) idx.push_back(ToString(e, names));
      std::string name = names ? (*names)[s->tensor] : absl::StrCat("T", s->tensor);
      absl::StrAppend(out, pad, name, "[", absl::StrJoin(idx, ", "), "] = ",
                      ToString(s->value, names), "\n");
      break;
    }
    case StmtKind::kSeq:
      for (const Stmt& b : s->body) Print(b, names, indent, out);
      break;
    case StmtKind::kIf:
      absl::StrAppend(out, pad, "if ", ToString(s->cond, names), ":\n");
      Print(s->body[0], names, indent + 1, out);
      break;
    case StmtKind::kAllocate:
      absl::StrAppend(out, pad,
                      s->shared  ? "allocate shared "
                      : s->local ? "allocate local "
                                 : "allocate ",
                      names ? (*names)[s->tensor] : absl::StrCat("T", s->tensor), "[",
                      absl::StrJoin(s->shape, ", "), "]\n");
      Print(s->body[0], names, indent, out);
      break;
    case StmtKind::kBarrier:
      absl::StrAppend(out, pad, "barrier\n");
      break;
    case StmtKind::kAsyncCommit:
      absl::StrAppend(out, pad, "async commit",
                      s->extent >= 0 ? absl::StrCat(", wait until ", s->extent, " in flight") : "",
                      s->proxy_fence ? ", proxy fence" : "", "\n");
      break;
    case StmtKind::kWgmmaSync:
      absl::StrAppend(out, pad,
                      s->extent < 0
                          ? std::string("wgmma fence")
                          : absl::StrCat("wgmma commit, wait until ", s->extent, " in flight"),
                      "\n");
      break;
    case StmtKind::kMma: {
      auto name = [&](int t) { return names ? (*names)[t] : absl::StrCat("T", t); };
      if (s->mma_load != 0) {
        absl::StrAppend(
            out, pad, s->mma_load == 1 ? "fragment A" : "fragment B",
            s->mma_tf32       ? ".tf32 "
            : s->mma_ldmatrix ? ".ldmatrix "
                              : " ",
            s->mma_swizzle ? absl::StrCat("swizzled ", s->mma_swizzle, " ") : "",
            s->mma_fragments > 1 ? absl::StrCat("x", s->mma_fragments, " ") : "", name(s->tensor),
            "[", ToString(s->indices[0], names), "] = ", name(s->mma_a), "[",
            ToString(s->mma_offsets[0], names), " : ", s->mma_a_strides[0], ", ",
            s->mma_a_strides[1], "]",
            s->mma_row.defined() ? absl::StrCat(", lane row ", ToString(s->mma_row, names)) : "",
            "\n");
        break;
      }
      absl::StrAppend(
          out, pad,
          s->mma_wgmma ? absl::StrCat("wgmma64x", s->mma_n, "x16", s->mma_a_mn_major ? ".a_mn" : "",
                                      s->mma_b_mn_major ? ".b_mn" : "", " ")
          : s->mma_tf32 ? "mma16x8x8.tf32 "
                        : "mma16x8x16 ",
          name(s->tensor), "[", ToString(s->indices[0], names), "] += ", name(s->mma_a), "[",
          ToString(s->mma_offsets[0], names),
          s->mma_wgmma ? absl::StrCat(" : ", s->mma_a_strides[0], ", ", s->mma_a_strides[1]) : "",
          "] x ", name(s->mma_b), "[", ToString(s->mma_offsets[1], names),
          s->mma_wgmma ? absl::StrCat(" : ", s->mma_b_strides[0], ", ", s->mma_b_strides[1]) : "",
          "]\n");
      break;
    }
  }
}
}  // namespace

int64_t StoreCount(const Stmt& s) {
  if (s == nullptr) return 0;
  switch (s->kind) {
    case StmtKind::kStore:
      return 1;
    case StmtKind::kBarrier:
    case StmtKind::kAsyncCommit:
    case StmtKind::kWgmmaSync:
      return 0;
    case StmtKind::kMma:
      if (s->mma_load != 0) return MmaLoadElements(*s);
      return s->mma_wgmma ? s->mma_n / 2 : 4;  // per lane
    case StmtKind::kFor:
      return s->extent * StoreCount(s->body[0]);
    default: {
      int64_t n = 0;
      for (const Stmt& b : s->body) n += StoreCount(b);
      return n;
    }
  }
}

std::string ToString(const Stmt& s, const std::vector<std::string>* names) {
  std::string out;
  Print(s, names, 0, &out);
  return out;
}

}  // namespace tunefarm::ir
