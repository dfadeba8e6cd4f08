// Dispatch on IR node kinds, one member per kind, the way TVM's ExprFunctor
// and Halide's IRVisitor/IRMutator do it: a pass is a subclass that
// overrides the kinds it treats; every other kind goes to VisitDefault. A
// new node kind is then one case here and one method where it matters, not
// an edit of every switch.
//
//   class CountLoads : public ExprVisitor {
//    public:
//     int loads = 0;
//    protected:
//     void VisitLoad(const Expr& e) override { ++loads; ExprVisitor::VisitLoad(e); }
//   };
//
// ExprFunctor<R(Args...)>: each Visit returns R (an interpreter returns a
// value, a code generator an llvm::Value*). ExprVisitor walks every node
// (arguments in order); ExprMutator rebuilds bottom up and returns a node
// none of whose arguments changed as it was. StmtFunctor/StmtVisitor do the
// same over statements (StmtVisitor also walks the expressions of a
// statement through VisitExpr, which does nothing unless overridden).
#pragma once

#include <utility>
#include <vector>

#include "compiler/ir/expr.h"
#include "compiler/ir/stmt.h"

namespace tunefarm::ir {

template <typename Signature>
class ExprFunctor;

template <typename R, typename... Args>
class ExprFunctor<R(Args...)> {
 public:
  virtual ~ExprFunctor() = default;

  R Visit(const Expr& e, Args... args) {
    switch (e->kind) {
      case ExprKind::kIntImm:
        return VisitIntImm(e, args...);
      case ExprKind::kFloatImm:
        return VisitFloatImm(e, args...);
      case ExprKind::kVar:
        return VisitVar(e, args...);
      case ExprKind::kBinary:
        return VisitBinary(e, args...);
      case ExprKind::kCmp:
        return VisitCmp(e, args...);
      case ExprKind::kAnd:
        return VisitAnd(e, args...);
      case ExprKind::kOr:
        return VisitOr(e, args...);
      case ExprKind::kNot:
        return VisitNot(e, args...);
      case ExprKind::kSelect:
        return VisitSelect(e, args...);
      case ExprKind::kCast:
        return VisitCast(e, args...);
      case ExprKind::kCall:
        return VisitCall(e, args...);
      case ExprKind::kLoad:
        return VisitLoad(e, args...);
    }
    return VisitDefault(e, args...);
  }

 protected:
  virtual R VisitDefault(const Expr& e, Args... args) = 0;
  virtual R VisitIntImm(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitFloatImm(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitVar(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitBinary(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitCmp(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitAnd(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitOr(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitNot(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitSelect(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitCast(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitCall(const Expr& e, Args... args) { return VisitDefault(e, args...); }
  virtual R VisitLoad(const Expr& e, Args... args) { return VisitDefault(e, args...); }
};

// Visits every node of an expression, a node before its arguments.
class ExprVisitor : public ExprFunctor<void()> {
 protected:
  void VisitDefault(const Expr& e) override {
    for (const Expr& a : e->args) Visit(a);
  }
};

// Rebuilds an expression bottom up (WithArgs, which folds constants again).
class ExprMutator : public ExprFunctor<Expr()> {
 protected:
  Expr VisitDefault(const Expr& e) override {
    if (e->args.empty()) return e;
    std::vector<Expr> args;
    bool changed = false;
    for (const Expr& a : e->args) {
      args.push_back(Visit(a));
      changed |= !args.back().same_as(a);
    }
    return changed ? WithArgs(e, std::move(args)) : e;
  }
};

template <typename Signature>
class StmtFunctor;

template <typename R, typename... Args>
class StmtFunctor<R(Args...)> {
 public:
  virtual ~StmtFunctor() = default;

  R Visit(const Stmt& s, Args... args) {
    switch (s->kind) {
      case StmtKind::kFor:
        return VisitFor(s, args...);
      case StmtKind::kStore:
        return VisitStore(s, args...);
      case StmtKind::kSeq:
        return VisitSeq(s, args...);
      case StmtKind::kIf:
        return VisitIf(s, args...);
      case StmtKind::kAllocate:
        return VisitAllocate(s, args...);
      case StmtKind::kBarrier:
        return VisitBarrier(s, args...);
      case StmtKind::kMma:
        return VisitMma(s, args...);
      case StmtKind::kAsyncCommit:
        return VisitAsyncCommit(s, args...);
      case StmtKind::kWgmmaSync:
        return VisitWgmmaSync(s, args...);
    }
    return VisitDefault(s, args...);
  }

 protected:
  virtual R VisitDefault(const Stmt& s, Args... args) = 0;
  virtual R VisitFor(const Stmt& s, Args... args) { return VisitDefault(s, args...); }
  virtual R VisitStore(const Stmt& s, Args... args) { return VisitDefault(s, args...); }
  virtual R VisitSeq(const Stmt& s, Args... args) { return VisitDefault(s, args...); }
  virtual R VisitIf(const Stmt& s, Args... args) { return VisitDefault(s, args...); }
  virtual R VisitAllocate(const Stmt& s, Args... args) { return VisitDefault(s, args...); }
  virtual R VisitBarrier(const Stmt& s, Args... args) { return VisitDefault(s, args...); }
  virtual R VisitMma(const Stmt& s, Args... args) { return VisitDefault(s, args...); }
  virtual R VisitAsyncCommit(const Stmt& s, Args... args) { return VisitDefault(s, args...); }
  virtual R VisitWgmmaSync(const Stmt& s, Args... args) { return VisitDefault(s, args...); }
};

// Visits every statement, a statement before its body; the expressions of
// each (loop variable, store indices and value, condition, tensor-core
// offsets and lane row) go to VisitExpr.
class StmtVisitor : public StmtFunctor<void()> {
 protected:
  virtual void VisitExpr(const Expr&) {}
  void VisitDefault(const Stmt& s) override {
    if (s->var.defined()) VisitExpr(s->var);
    for (const Expr& i : s->indices) VisitExpr(i);
    for (const Expr& o : s->mma_offsets) VisitExpr(o);
    if (s->mma_row.defined()) VisitExpr(s->mma_row);
    if (s->value.defined()) VisitExpr(s->value);
    if (s->cond.defined()) VisitExpr(s->cond);
    for (const Stmt& b : s->body) Visit(b);
  }
};

}  // namespace tunefarm::ir
