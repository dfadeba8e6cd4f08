#include "compiler/ir/simplify.h"

#include <algorithm>
#include <set>

#include "compiler/ir/functor.h"

namespace tunefarm::ir {
namespace {


bool AtomBounds(const Expr& a, const VarRanges& ranges, int64_t* lo, int64_t* hi) {
  const ExprNode& n = *a.get();
  int64_t c;
  switch (n.kind) {
    case ExprKind::kIntImm:
      *lo = *hi = n.int_value;
      return true;
    case ExprKind::kVar: {
      auto it = ranges.find(a.get());
      if (it == ranges.end() || it->second < 1) return false;
      *lo = 0, *hi = it->second - 1;
      return true;
    }
    case ExprKind::kBinary: {
      if (n.type != ScalarType::kInt64) return false;
      if (n.op == Op::kFloorMod && IsConstInt(n.args[1], &c) && c > 0) {
        int64_t xl, xh;
        if (Bounds(n.args[0], ranges, &xl, &xh) && xl >= 0 && xh < c) {
          *lo = xl, *hi = xh;
        } else {
          *lo = 0, *hi = c - 1;
        }
        return true;
      }
      int64_t al, ah, bl, bh;
      if (n.op == Op::kFloorDiv && IsConstInt(n.args[1], &c) && c > 0) {
        if (!Bounds(n.args[0], ranges, &al, &ah)) return false;
        *lo = FloorDivInt(al, c), *hi = FloorDivInt(ah, c);
        return true;
      }
      if (n.op != Op::kMin && n.op != Op::kMax) return false;
      if (!Bounds(n.args[0], ranges, &al, &ah) || !Bounds(n.args[1], ranges, &bl, &bh))
        return false;
      if (n.op == Op::kMin)
        *lo = std::min(al, bl), *hi = std::min(ah, bh);
      else
        *lo = std::max(al, bl), *hi = std::max(ah, bh);
      return true;
    }
    default:
      return false;
  }
}

// Splits `f` into q*c + r with every coefficient of r below c in magnitude
// class (terms whose coefficient c divides go to q).
void DivideOut(const LinearForm& f, int64_t c, LinearForm* q, LinearForm* r) {
  for (const auto& [atom, coef] : f.terms) {
    if (coef % c == 0)
      q->Add(atom, coef / c);
    else
      r->Add(atom, coef);
  }
  q->constant = FloorDivInt(f.constant, c);
  r->constant = f.constant - q->constant * c;
}

}  // namespace

int64_t LinearForm::CoeffOf(const ExprNode* atom) const {
  for (const auto& [a, coef] : terms) {
    if (a.get() == atom) return coef;
  }
  return 0;
}

void LinearForm::Add(const Expr& atom, int64_t coef) {
  if (coef == 0) return;
  for (auto& t : terms) {
    if (t.first.same_as(atom)) {
      t.second += coef;
      if (t.second == 0) terms.erase(terms.begin() + (&t - terms.data()));
      return;
    }
  }
  terms.emplace_back(atom, coef);
}

LinearForm Linearize(const Expr& e, const VarRanges& ranges) {
  LinearForm f;
  const ExprNode& n = *e.get();
  int64_t c;
  if (n.kind == ExprKind::kIntImm) {
    f.constant = n.int_value;
    return f;
  }
  if (n.kind == ExprKind::kVar) {
    auto it = ranges.find(e.get());
    if (it == ranges.end() || it->second != 1) f.Add(e, 1);  // a loop of one iteration is 0
    return f;
  }
  if (n.kind == ExprKind::kBinary && n.type == ScalarType::kInt64) {
    switch (n.op) {
      case Op::kAdd:
      case Op::kSub: {
        f = Linearize(n.args[0], ranges);
        LinearForm b = Linearize(n.args[1], ranges);
        int64_t sign = n.op == Op::kAdd ? 1 : -1;
        for (const auto& [atom, coef] : b.terms) f.Add(atom, sign * coef);
        f.constant += sign * b.constant;
        return f;
      }
      case Op::kMul: {
        int side = IsConstInt(n.args[0], &c) ? 1 : IsConstInt(n.args[1], &c) ? 0 : -1;
        if (side < 0) break;
        f = Linearize(n.args[side], ranges);
        for (auto& t : f.terms) t.second *= c;
        f.constant *= c;
        if (c == 0) f = LinearForm();
        return f;
      }
      case Op::kFloorDiv:
      case Op::kFloorMod: {
        if (!IsConstInt(n.args[1], &c) || c <= 0) break;
        LinearForm q, r;
        DivideOut(Linearize(n.args[0], ranges), c, &q, &r);
        int64_t lo, hi;
        bool fits = Bounds(r, ranges, &lo, &hi) && lo >= 0 && hi < c;
        if (n.op == Op::kFloorDiv) {
          // floordiv(q*c + r, c) = q + floordiv(r, c), and floordiv(r, c) = 0 when 0 <= r < c.
          if (!fits) q.Add(FloorDiv(FromLinear(r), IntImm(c)), 1);
          return q;
        }
        if (fits) return r;  // floormod(q*c + r, c) = floormod(r, c) = r
        f.Add(FloorMod(FromLinear(r), IntImm(c)), 1);
        return f;
      }
      case Op::kMin:
      case Op::kMax: {
        // A clamp the ranges prove idle is its argument: min(x, c) with
        // x <= c, max(x, c) with x >= c.
        int64_t lo, hi;
        if (!IsConstInt(n.args[1], &c) || !Bounds(n.args[0], ranges, &lo, &hi)) break;
        if (n.op == Op::kMin ? hi <= c : lo >= c) return Linearize(n.args[0], ranges);
        break;
      }
      default:
        break;
    }
  }
  // An atom: simplify inside it.
  if (!n.args.empty()) {
    std::vector<Expr> args;
    for (const Expr& a : n.args) {
      args.push_back(a->type == ScalarType::kInt64 ? SimplifyIndex(a, ranges)
                                                   : SimplifyExpr(a, ranges));
    }
    f.Add(WithArgs(e, std::move(args)), 1);
  } else {
    f.Add(e, 1);
  }
  return f;
}

Expr FromLinear(const LinearForm& f) {
  Expr out;
  for (const auto& [atom, coef] : f.terms) {
    Expr t = coef == 1 ? atom : atom * IntImm(coef);
    out = out.defined() ? out + t : t;
  }
  if (!out.defined()) return IntImm(f.constant);
  return f.constant == 0 ? out : out + IntImm(f.constant);
}

bool Bounds(const LinearForm& f, const VarRanges& ranges, int64_t* lo, int64_t* hi) {
  int64_t l = f.constant, h = f.constant;
  for (const auto& [atom, coef] : f.terms) {
    int64_t al, ah;
    if (!AtomBounds(atom, ranges, &al, &ah)) return false;
    if (coef >= 0)
      l += coef * al, h += coef * ah;
    else
      l += coef * ah, h += coef * al;
  }
  *lo = l, *hi = h;
  return true;
}

bool Bounds(const Expr& e, const VarRanges& ranges, int64_t* lo, int64_t* hi) {
  if (e->type != ScalarType::kInt64) return false;
  return Bounds(Linearize(e, ranges), ranges, lo, hi);
}

Expr SimplifyIndex(const Expr& e, const VarRanges& ranges) {
  if (e->type != ScalarType::kInt64) return SimplifyExpr(e, ranges);
  return FromLinear(Linearize(e, ranges));
}

Expr SimplifyExpr(const Expr& e, const VarRanges& ranges) {
  if (!e.defined()) return e;
  const ExprNode& n = *e.get();
  if (n.type == ScalarType::kInt64) return SimplifyIndex(e, ranges);
  if (n.args.empty()) return e;
  if (n.kind == ExprKind::kCmp && n.args[0]->type == ScalarType::kInt64) {
    LinearForm d = Linearize(n.args[0] - n.args[1], ranges);
    int64_t lo, hi;
    if (Bounds(d, ranges, &lo, &hi)) {
      switch (n.op) {
        case Op::kLt:
          if (hi < 0) return BoolImm(true);
          if (lo >= 0) return BoolImm(false);
          break;
        case Op::kLe:
          if (hi <= 0) return BoolImm(true);
          if (lo > 0) return BoolImm(false);
          break;
        case Op::kGt:
          if (lo > 0) return BoolImm(true);
          if (hi <= 0) return BoolImm(false);
          break;
        case Op::kGe:
          if (lo >= 0) return BoolImm(true);
          if (hi < 0) return BoolImm(false);
          break;
        default:
          break;
      }
    }
  }
  std::vector<Expr> args;
  bool changed = false;
  for (const Expr& a : n.args) {
    args.push_back(SimplifyExpr(a, ranges));
    changed |= !args.back().same_as(a);
  }
  if (!changed) return e;
  return WithArgs(e, std::move(args));
}

namespace {

// A vectorized loop is split where this many elements or more lie on each
// side of every point its conditions change value, up to this many pieces.
constexpr int64_t kMinPiece = 8, kMaxPieces = 64;

// The points in (0, extent) where the comparisons of an expression change
// value as `var` runs over the loop, where every comparison that reads
// `var` reads it alone, plus or minus a constant (an NHWC concatenation's
// select chain, one comparison pair per input); `ok` false otherwise.
class CutFinder : public ExprVisitor {
 public:
  CutFinder(const ExprNode* var, int64_t extent, const VarRanges& ranges)
      : var_(var), extent_(extent), ranges_(ranges) {}
  std::set<int64_t> cuts;
  bool ok = true;

 protected:
  void VisitCmp(const Expr& e) override {
    if (!ok || e->args[0]->type != ScalarType::kInt64 || !Mentions(e, var_)) {
      return ExprVisitor::VisitCmp(e);
    }
    LinearForm d = Linearize(e->args[0] - e->args[1], ranges_);
    const int64_t coef = d.CoeffOf(var_);
    if (d.terms.size() != 1 || (coef != 1 && coef != -1)) return void(ok = false);
    // coef * v + c OP 0 first holds or fails at v = cut.
    const int64_t c = d.constant;
    int64_t cut;
    switch (e->op) {
      case Op::kLt:
      case Op::kGe:
        cut = coef == 1 ? -c : c + 1;
        break;
      case Op::kLe:
      case Op::kGt:
        cut = coef == 1 ? -c + 1 : c;
        break;
      default:
        return void(ok = false);
    }
    if (cut > 0 && cut < extent_) cuts.insert(cut);
  }

 private:
  const ExprNode* var_;
  int64_t extent_;
  const VarRanges& ranges_;
};

// The pieces of `loop` (a vectorized loop around one store) between the
// points its value's comparisons change value (CutFinder), as their
// bounds 0, cuts..., extent. Empty where there is no cut, or where a piece
// would be shorter than kMinPiece or there would be over kMaxPieces.
std::vector<int64_t> CutPoints(const StmtNode& loop, const VarRanges& outer) {
  if (loop.for_kind != ForKind::kVectorized || loop.body.size() != 1 ||
      loop.body[0]->kind != StmtKind::kStore)
    return {};
  VarRanges ranges = outer;
  ranges[loop.var.get()] = loop.extent;
  CutFinder finder(loop.var.get(), loop.extent, ranges);
  finder.Visit(loop.body[0]->value);
  const std::set<int64_t>& cuts = finder.cuts;
  if (!finder.ok || cuts.empty() || int64_t(cuts.size()) + 1 > kMaxPieces) return {};
  std::vector<int64_t> points = {0};
  points.insert(points.end(), cuts.begin(), cuts.end());
  points.push_back(loop.extent);
  for (size_t k = 1; k < points.size(); ++k)
    if (points[k] - points[k - 1] < kMinPiece) return {};
  return points;
}

// Simplifies every index and value of a program, each index within the
// ranges of the loops around it; drops branches whose condition folds false.
// A vectorized loop whose conditions change value at a few points becomes
// one loop per piece between them, each simplified with its range, so a
// select chain over the pieces folds to the one load each piece reads.
class ProgramSimplifier : public StmtFunctor<Stmt()> {
 protected:
  Stmt VisitDefault(const Stmt& s) override { return s; }
  Stmt VisitFor(const Stmt& s) override {
    if (std::vector<int64_t> points = CutPoints(*s, ranges_); !points.empty()) {
      std::vector<Stmt> pieces;
      const StmtNode& store = *s->body[0];
      for (size_t k = 1; k < points.size(); ++k) {
        Expr v = Var(s->var->name);
        const std::vector<VarMapEntry> map = {{s->var.get(), v + IntImm(points[k - 1])}};
        std::vector<Expr> idx;
        for (const Expr& i : store.indices) idx.push_back(Substitute(i, map));
        pieces.push_back(Visit(For(v, points[k] - points[k - 1], s->for_kind,
                                   Store(store.tensor, std::move(idx), Substitute(store.value, map)))));
      }
      return Seq(std::move(pieces));
    }
    ranges_[s->var.get()] = s->extent;
    Stmt body = Visit(s->body[0]);
    ranges_.erase(s->var.get());
    return For(s->var, s->extent, s->for_kind, body);
  }
  Stmt VisitStore(const Stmt& s) override {
    std::vector<Expr> idx;
    for (const Expr& i : s->indices) idx.push_back(SimplifyIndex(i, ranges_));
    return Store(s->tensor, std::move(idx), SimplifyExpr(s->value, ranges_));
  }
  Stmt VisitSeq(const Stmt& s) override {
    std::vector<Stmt> body;
    for (const Stmt& b : s->body) body.push_back(Visit(b));
    return Seq(std::move(body));
  }
  Stmt VisitIf(const Stmt& s) override {
    Expr cond = SimplifyExpr(s->cond, ranges_);
    int64_t v;
    if (IsConstInt(cond, &v) && !v) return Seq({});
    return IfThen(cond, Visit(s->body[0]));
  }
  Stmt VisitAllocate(const Stmt& s) override {
    auto n = std::make_shared<StmtNode>(*s);
    n->body = {Visit(s->body[0])};
    return n;
  }

 private:
  VarRanges ranges_;
};

}  // namespace

Stmt SimplifyProgram(const Stmt& s) { return ProgramSimplifier().Visit(s); }

}  // namespace tunefarm::ir
