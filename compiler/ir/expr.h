// Scalar expressions of the tensor IR.
//
// An Expr is an immutable node behind a shared pointer; build them with the
// free functions and operators below (Halide/TVM style). Index arithmetic is
// int64; tensor values are float32 (other dtypes are carried in ScalarType
// for later). Variables compare by identity, not by name. Thread compatible:
// nodes are never mutated after construction.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tunefarm::ir {

enum class ScalarType : uint8_t { kBool, kInt64, kFloat32, kFloat64 };

enum class ExprKind : uint8_t {
  kIntImm,
  kFloatImm,
  kVar,
  kBinary,  // op in Add..Max
  kCmp,     // op in Lt..Ne, result bool
  kAnd,
  kOr,
  kNot,
  kSelect,  // args: cond, true value, false value
  kCast,
  kCall,  // op in Exp..Abs, one float argument
  kLoad,  // tensor id, args = indices
};

enum class Op : uint8_t {
  kNone,
  // binary
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kFloorMod,
  kMin,
  kMax,
  // compare
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  // unary math calls
  kExp,
  kSqrt,
  kTanh,
  kAbs,
  kLog,
};

struct ExprNode;
class Expr {
 public:
  Expr() = default;
  explicit Expr(std::shared_ptr<const ExprNode> n) : node_(std::move(n)) {}
  const ExprNode* get() const { return node_.get(); }
  const ExprNode* operator->() const { return node_.get(); }
  bool defined() const { return node_ != nullptr; }
  bool same_as(const Expr& other) const { return node_ == other.node_; }

 private:
  std::shared_ptr<const ExprNode> node_;
};

struct ExprNode {
  ExprKind kind;
  ScalarType type;
  Op op = Op::kNone;
  int64_t int_value = 0;
  double float_value = 0;
  std::string name;  // variables
  int tensor = -1;   // loads: index into the program's tensors
  std::vector<Expr> args;
};

Expr IntImm(int64_t v);
Expr FloatImm(double v, ScalarType t = ScalarType::kFloat32);
Expr BoolImm(bool v);
// A fresh variable; two calls with the same name are different variables.
Expr Var(const std::string& name, ScalarType t = ScalarType::kInt64);
Expr Binary(Op op, Expr a, Expr b);
Expr Cmp(Op op, Expr a, Expr b);
Expr And(Expr a, Expr b);
Expr Or(Expr a, Expr b);
Expr Not(Expr a);
Expr Select(Expr cond, Expr t, Expr f);
Expr Cast(ScalarType t, Expr x);
Expr Call(Op fn, Expr x);
Expr Load(int tensor, ScalarType t, std::vector<Expr> indices);

Expr Min(Expr a, Expr b);
Expr Max(Expr a, Expr b);
Expr FloorDiv(Expr a, Expr b);
Expr FloorMod(Expr a, Expr b);

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);  // float division
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator>=(Expr a, Expr b);

bool IsConstInt(const Expr& e, int64_t* value = nullptr);
// Integer floor division and modulo (rounding toward minus infinity); b != 0.
int64_t FloorDivInt(int64_t a, int64_t b);
int64_t FloorModInt(int64_t a, int64_t b);
bool IsFloat(ScalarType t);

// Human-readable form, e.g. "(i*16 + j)" or "A[n, c, (h + r), (w + s)]";
// tensor names come from `tensor_names` when given.
std::string ToString(const Expr& e, const std::vector<std::string>* tensor_names = nullptr);

// A node of the same kind, op and type as `e` with other arguments (the
// constructors above fold constants again).
Expr WithArgs(const Expr& e, std::vector<Expr> args);

// Replaces variables (by identity) with expressions.
struct VarMapEntry {
  const ExprNode* var;
  Expr value;
};
Expr Substitute(const Expr& e, const std::vector<VarMapEntry>& map);

// Whether `var` (by identity) occurs anywhere in `e`.
bool Mentions(const Expr& e, const ExprNode* var);

// Rewrites loads bottom up: `fn` gets each Load node with its (already
// rewritten) indices and returns the replacement, or an undefined Expr to
// keep the load. Nodes nothing changed under are returned as they were.
Expr MapLoads(const Expr& e,
              const std::function<Expr(const ExprNode& load, const std::vector<Expr>& args)>& fn);

// Calls `fn` on every Load node in `e`.
void VisitLoads(const Expr& e, const std::function<void(const ExprNode&)>& fn);

}  // namespace tunefarm::ir
