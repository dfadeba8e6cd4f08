#include "compiler/ir/expr.h"

#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/ir/functor.h"

namespace tunefarm::ir {
namespace {

Expr Make(ExprNode n) { return Expr(std::make_shared<const ExprNode>(std::move(n))); }


const char* OpSymbol(Op op) {
  switch (op) {
    case Op::kAdd:
      return "+";
    case Op::kSub:
      return "-";
    case Op::kMul:
      return "*";
    case Op::kDiv:
      return "/";
    case Op::kFloorDiv:
      return "//";
    case Op::kFloorMod:
      return "%";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
    case Op::kEq:
      return "==";
    case Op::kNe:
      return "!=";
    default:
      return "?";
  }
}

const char* CallName(Op op) {
  switch (op) {
    case Op::kExp:
      return "exp";
    case Op::kSqrt:
      return "sqrt";
    case Op::kTanh:
      return "tanh";
    case Op::kAbs:
      return "abs";
    case Op::kLog:
      return "log";
    default:
      return "?";
  }
}

}  // namespace

int64_t FloorDivInt(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t FloorModInt(int64_t a, int64_t b) { return a - FloorDivInt(a, b) * b; }

bool IsFloat(ScalarType t) { return t == ScalarType::kFloat32 || t == ScalarType::kFloat64; }

bool IsConstInt(const Expr& e, int64_t* value) {
  if (!e.defined() || e->kind != ExprKind::kIntImm) return false;
  if (value) *value = e->int_value;
  return true;
}

Expr IntImm(int64_t v) {
  ExprNode n{ExprKind::kIntImm, ScalarType::kInt64};
  n.int_value = v;
  return Make(std::move(n));
}

Expr FloatImm(double v, ScalarType t) {
  ExprNode n{ExprKind::kFloatImm, t};
  n.float_value = v;
  return Make(std::move(n));
}

Expr BoolImm(bool v) {
  ExprNode n{ExprKind::kIntImm, ScalarType::kBool};
  n.int_value = v ? 1 : 0;
  return Make(std::move(n));
}

Expr Var(const std::string& name, ScalarType t) {
  ExprNode n{ExprKind::kVar, t};
  n.name = name;
  return Make(std::move(n));
}

Expr Binary(Op op, Expr a, Expr b) {
  TF_CHECK(a.defined() && b.defined());
  TF_CHECK(a->type == b->type);
  int64_t x, y;
  bool ca = IsConstInt(a, &x), cb = IsConstInt(b, &y);
  if (a->type == ScalarType::kInt64) {
    // Constant folding and the identities lowering produces most.
    if (ca && cb) {
      switch (op) {
        case Op::kAdd:
          return IntImm(x + y);
        case Op::kSub:
          return IntImm(x - y);
        case Op::kMul:
          return IntImm(x * y);
        case Op::kFloorDiv:
          if (y != 0) return IntImm(FloorDivInt(x, y));
          break;
        case Op::kFloorMod:
          if (y != 0) return IntImm(FloorModInt(x, y));
          break;
        case Op::kMin:
          return IntImm(std::min(x, y));
        case Op::kMax:
          return IntImm(std::max(x, y));
        default:
          break;
      }
    }
    if (op == Op::kAdd && ca && x == 0) return b;
    if ((op == Op::kAdd || op == Op::kSub) && cb && y == 0) return a;
    if (op == Op::kMul && ((ca && x == 0) || (cb && y == 0))) return IntImm(0);
    if (op == Op::kMul && ca && x == 1) return b;
    if ((op == Op::kMul || op == Op::kFloorDiv) && cb && y == 1) return a;
    if (op == Op::kFloorMod && cb && y == 1) return IntImm(0);
  }
  ExprNode n{ExprKind::kBinary, a->type};
  n.op = op;
  n.args = {std::move(a), std::move(b)};
  return Make(std::move(n));
}

Expr Cmp(Op op, Expr a, Expr b) {
  TF_CHECK(a->type == b->type);
  int64_t x, y;
  if (IsConstInt(a, &x) && IsConstInt(b, &y) && a->type == ScalarType::kInt64) {
    switch (op) {
      case Op::kLt:
        return BoolImm(x < y);
      case Op::kLe:
        return BoolImm(x <= y);
      case Op::kGt:
        return BoolImm(x > y);
      case Op::kGe:
        return BoolImm(x >= y);
      case Op::kEq:
        return BoolImm(x == y);
      case Op::kNe:
        return BoolImm(x != y);
      default:
        break;
    }
  }
  ExprNode n{ExprKind::kCmp, ScalarType::kBool};
  n.op = op;
  n.args = {std::move(a), std::move(b)};
  return Make(std::move(n));
}

Expr And(Expr a, Expr b) {
  int64_t v;
  if (IsConstInt(a, &v)) return v ? b : a;
  if (IsConstInt(b, &v)) return v ? a : b;
  ExprNode n{ExprKind::kAnd, ScalarType::kBool};
  n.args = {std::move(a), std::move(b)};
  return Make(std::move(n));
}

Expr Or(Expr a, Expr b) {
  int64_t v;
  if (IsConstInt(a, &v)) return v ? a : b;
  if (IsConstInt(b, &v)) return v ? b : a;
  ExprNode n{ExprKind::kOr, ScalarType::kBool};
  n.args = {std::move(a), std::move(b)};
  return Make(std::move(n));
}

Expr Not(Expr a) {
  int64_t v;
  if (IsConstInt(a, &v)) return BoolImm(!v);
  ExprNode n{ExprKind::kNot, ScalarType::kBool};
  n.args = {std::move(a)};
  return Make(std::move(n));
}

Expr Select(Expr cond, Expr t, Expr f) {
  TF_CHECK(t->type == f->type);
  int64_t v;
  if (IsConstInt(cond, &v)) return v ? t : f;
  ExprNode n{ExprKind::kSelect, t->type};
  n.args = {std::move(cond), std::move(t), std::move(f)};
  return Make(std::move(n));
}

Expr Cast(ScalarType t, Expr x) {
  if (x->type == t) return x;
  if (x->kind == ExprKind::kIntImm && IsFloat(t)) return FloatImm(double(x->int_value), t);
  if (x->kind == ExprKind::kFloatImm && IsFloat(t)) return FloatImm(x->float_value, t);
  ExprNode n{ExprKind::kCast, t};
  n.args = {std::move(x)};
  return Make(std::move(n));
}

Expr Call(Op fn, Expr x) {
  TF_CHECK(IsFloat(x->type));
  ExprNode n{ExprKind::kCall, x->type};
  n.op = fn;
  n.args = {std::move(x)};
  return Make(std::move(n));
}

Expr Load(int tensor, ScalarType t, std::vector<Expr> indices) {
  ExprNode n{ExprKind::kLoad, t};
  n.tensor = tensor;
  n.args = std::move(indices);
  return Make(std::move(n));
}

Expr Min(Expr a, Expr b) { return Binary(Op::kMin, std::move(a), std::move(b)); }
Expr Max(Expr a, Expr b) { return Binary(Op::kMax, std::move(a), std::move(b)); }
Expr FloorDiv(Expr a, Expr b) { return Binary(Op::kFloorDiv, std::move(a), std::move(b)); }
Expr FloorMod(Expr a, Expr b) { return Binary(Op::kFloorMod, std::move(a), std::move(b)); }
Expr operator+(Expr a, Expr b) { return Binary(Op::kAdd, std::move(a), std::move(b)); }
Expr operator-(Expr a, Expr b) { return Binary(Op::kSub, std::move(a), std::move(b)); }
Expr operator*(Expr a, Expr b) { return Binary(Op::kMul, std::move(a), std::move(b)); }
Expr operator/(Expr a, Expr b) { return Binary(Op::kDiv, std::move(a), std::move(b)); }
Expr operator<(Expr a, Expr b) { return Cmp(Op::kLt, std::move(a), std::move(b)); }
Expr operator<=(Expr a, Expr b) { return Cmp(Op::kLe, std::move(a), std::move(b)); }
Expr operator>=(Expr a, Expr b) { return Cmp(Op::kGe, std::move(a), std::move(b)); }

namespace {

class Printer : public ExprFunctor<std::string()> {
 public:
  explicit Printer(const std::vector<std::string>* names) : names_(names) {}

 protected:
  std::string Arg(const Expr& e, int i) { return Visit(e->args[size_t(i)]); }
  std::string VisitDefault(const Expr&) override { return "?"; }
  std::string VisitIntImm(const Expr& e) override {
    return e->type == ScalarType::kBool ? (e->int_value ? "true" : "false")
                                        : absl::StrCat(e->int_value);
  }
  std::string VisitFloatImm(const Expr& e) override { return absl::StrCat(e->float_value, "f"); }
  std::string VisitVar(const Expr& e) override { return e->name; }
  std::string VisitBinary(const Expr& e) override {
    if (e->op == Op::kMin || e->op == Op::kMax) {
      return absl::StrCat(e->op == Op::kMin ? "min(" : "max(", Arg(e, 0), ", ", Arg(e, 1), ")");
    }
    return absl::StrCat("(", Arg(e, 0), " ", OpSymbol(e->op), " ", Arg(e, 1), ")");
  }
  std::string VisitCmp(const Expr& e) override {
    return absl::StrCat("(", Arg(e, 0), " ", OpSymbol(e->op), " ", Arg(e, 1), ")");
  }
  std::string VisitAnd(const Expr& e) override {
    return absl::StrCat("(", Arg(e, 0), " && ", Arg(e, 1), ")");
  }
  std::string VisitOr(const Expr& e) override {
    return absl::StrCat("(", Arg(e, 0), " || ", Arg(e, 1), ")");
  }
  std::string VisitNot(const Expr& e) override { return absl::StrCat("!", Arg(e, 0)); }
  std::string VisitSelect(const Expr& e) override {
    return absl::StrCat("select(", Arg(e, 0), ", ", Arg(e, 1), ", ", Arg(e, 2), ")");
  }
  std::string VisitCast(const Expr& e) override { return absl::StrCat("cast(", Arg(e, 0), ")"); }
  std::string VisitCall(const Expr& e) override {
    return absl::StrCat(CallName(e->op), "(", Arg(e, 0), ")");
  }
  std::string VisitLoad(const Expr& e) override {
    std::vector<std::string> idx;
    for (const Expr& i : e->args) idx.push_back(Visit(i));
    std::string name = names_ && e->tensor >= 0 && e->tensor < int(names_->size())
                           ? (*names_)[size_t(e->tensor)]
                           : absl::StrCat("T", e->tensor);
    return absl::StrCat(name, "[", absl::StrJoin(idx, ", "), "]");
  }

 private:
  const std::vector<std::string>* names_;
};

class Substituter : public ExprMutator {
 public:
  explicit Substituter(const std::vector<VarMapEntry>& map) : map_(map) {}

 protected:
  Expr VisitVar(const Expr& e) override {
    for (const VarMapEntry& m : map_) {
      if (m.var == e.get()) return m.value;
    }
    return e;
  }

 private:
  const std::vector<VarMapEntry>& map_;
};

class LoadMapper : public ExprMutator {
 public:
  using Fn = std::function<Expr(const ExprNode& load, const std::vector<Expr>& args)>;
  explicit LoadMapper(const Fn& fn) : fn_(fn) {}

 protected:
  Expr VisitLoad(const Expr& e) override {
    if (e->args.empty()) return e;
    Expr rebuilt = ExprMutator::VisitLoad(e);  // e, or a load of the rewritten indices
    Expr r = fn_(*e.get(), rebuilt->args);
    return r.defined() ? r : rebuilt;
  }

 private:
  const Fn& fn_;
};

class MentionFinder : public ExprFunctor<bool()> {
 public:
  explicit MentionFinder(const ExprNode* var) : var_(var) {}

 protected:
  bool VisitDefault(const Expr& e) override {
    if (e.get() == var_) return true;
    for (const Expr& a : e->args) {
      if (Visit(a)) return true;
    }
    return false;
  }

 private:
  const ExprNode* var_;
};

class LoadVisitor : public ExprVisitor {
 public:
  explicit LoadVisitor(const std::function<void(const ExprNode&)>& fn) : fn_(fn) {}

 protected:
  void VisitLoad(const Expr& e) override {
    fn_(*e.get());
    ExprVisitor::VisitLoad(e);
  }

 private:
  const std::function<void(const ExprNode&)>& fn_;
};

}  // namespace

std::string ToString(const Expr& e, const std::vector<std::string>* names) {
  if (!e.defined()) return "<undef>";
  return Printer(names).Visit(e);
}

Expr WithArgs(const Expr& e, std::vector<Expr> args) {
  const ExprNode& n = *e.get();
  switch (n.kind) {
    case ExprKind::kBinary:
      return Binary(n.op, args[0], args[1]);
    case ExprKind::kCmp:
      return Cmp(n.op, args[0], args[1]);
    case ExprKind::kAnd:
      return And(args[0], args[1]);
    case ExprKind::kOr:
      return Or(args[0], args[1]);
    case ExprKind::kNot:
      return Not(args[0]);
    case ExprKind::kSelect:
      return Select(args[0], args[1], args[2]);
    case ExprKind::kCast:
      return Cast(n.type, args[0]);
    case ExprKind::kCall:
      return Call(n.op, args[0]);
    case ExprKind::kLoad:
      return Load(n.tensor, n.type, std::move(args));
    default:
      return e;
  }
}

Expr Substitute(const Expr& e, const std::vector<VarMapEntry>& map) {
  if (!e.defined()) return e;
  return Substituter(map).Visit(e);
}

Expr MapLoads(const Expr& e,
              const std::function<Expr(const ExprNode& load, const std::vector<Expr>& args)>& fn) {
  if (!e.defined()) return e;
  return LoadMapper(fn).Visit(e);
}

bool Mentions(const Expr& e, const ExprNode* var) { return MentionFinder(var).Visit(e); }

void VisitLoads(const Expr& e, const std::function<void(const ExprNode&)>& fn) {
  if (!e.defined()) return;
  LoadVisitor(fn).Visit(e);
}

}  // namespace tunefarm::ir
