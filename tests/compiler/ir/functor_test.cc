// The IR's dispatch bases: a pass overrides the kinds it treats, the others
// are walked (visitor) or rebuilt only where something changed (mutator).
#include "compiler/ir/functor.h"

#include "gtest/gtest.h"

namespace tunefarm::ir {
namespace {

class LoadCounter : public ExprVisitor {
 public:
  int loads = 0, vars = 0;

 protected:
  void VisitLoad(const Expr& e) override {
    ++loads;
    ExprVisitor::VisitLoad(e);
  }
  void VisitVar(const Expr&) override { ++vars; }
};

// Doubles every float constant.
class DoubleConstants : public ExprMutator {
 protected:
  Expr VisitFloatImm(const Expr& e) override { return FloatImm(2 * e->float_value, e->type); }
};

TEST(Functor, VisitorReachesEveryNodeOnce) {
  Expr i = Var("i"), j = Var("j");
  Expr e = Select(i < j, Load(0, ScalarType::kFloat32, {i, j}) * FloatImm(3),
                  Load(1, ScalarType::kFloat32, {j}));
  LoadCounter c;
  c.Visit(e);
  EXPECT_EQ(c.loads, 2);
  EXPECT_EQ(c.vars, 5);  // i, j in the condition; i, j and j in the loads
}

TEST(Functor, MutatorRebuildsOnlyWhatChanged) {
  Expr i = Var("i");
  Expr untouched = Load(0, ScalarType::kFloat32, {i + IntImm(1)});
  Expr e = untouched + FloatImm(1.5) * Load(1, ScalarType::kFloat32, {i});
  Expr out = DoubleConstants().Visit(e);
  ASSERT_FALSE(out.same_as(e));
  EXPECT_TRUE(out->args[0].same_as(untouched));  // no constant below: the same node
  EXPECT_EQ(out->args[1]->args[0]->float_value, 3.0);
  Expr no_constants = untouched * untouched;
  EXPECT_TRUE(DoubleConstants().Visit(no_constants).same_as(no_constants));
}

class StoreCounter : public StmtVisitor {
 public:
  int stores = 0, loops = 0, exprs = 0;

 protected:
  void VisitStore(const Stmt& s) override {
    ++stores;
    StmtVisitor::VisitStore(s);
  }
  void VisitFor(const Stmt& s) override {
    ++loops;
    StmtVisitor::VisitFor(s);
  }
  void VisitExpr(const Expr&) override { ++exprs; }
};

TEST(Functor, StmtVisitorWalksBodiesAndExpressions) {
  Expr i = Var("i");
  Stmt body = Seq({Store(0, {i}, FloatImm(1)),
                   IfThen(i < IntImm(3), Store(0, {i}, FloatImm(2)))});
  Stmt loop = For(i, 8, ForKind::kSerial, body);
  StoreCounter c;
  c.Visit(loop);
  EXPECT_EQ(c.loops, 1);
  EXPECT_EQ(c.stores, 2);
  // The loop variable, two stores' index and value, the condition.
  EXPECT_EQ(c.exprs, 1 + 2 * 2 + 1);
}

}  // namespace
}  // namespace tunefarm::ir
