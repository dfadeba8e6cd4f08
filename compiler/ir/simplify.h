// Index arithmetic with loop ranges: linear forms over loop variables, their
// bounds, and the simplifications that make blocked layouts and tiled loops
// cheap (floordiv(o*16 + v, 16) -> o when 0 <= v < 16). Lowering runs this
// over every index and guard of a program.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/ir/expr.h"
#include "compiler/ir/stmt.h"

namespace tunefarm::ir {

// Loop variables (by identity) -> extent; a variable ranges over [0, extent).
using VarRanges = std::unordered_map<const ExprNode*, int64_t>;

// sum(coef * atom) + constant. An atom is a variable or an expression the form
// cannot see into (a floordiv that does not divide out, a min, a load...).
struct LinearForm {
  std::vector<std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;

  int64_t CoeffOf(const ExprNode* atom) const;
  void Add(const Expr& atom, int64_t coef);
};

LinearForm Linearize(const Expr& e, const VarRanges& ranges);
Expr FromLinear(const LinearForm& f);

// Inclusive bounds of `f`; false if an atom is unbounded.
bool Bounds(const LinearForm& f, const VarRanges& ranges, int64_t* lo, int64_t* hi);
bool Bounds(const Expr& e, const VarRanges& ranges, int64_t* lo, int64_t* hi);

// An equal index expression, simplified with the ranges.
Expr SimplifyIndex(const Expr& e, const VarRanges& ranges);
// Rewrites load indices, and comparisons the ranges decide, inside `e`.
Expr SimplifyExpr(const Expr& e, const VarRanges& ranges);
// The same program with every index and guard simplified under its loops'
// ranges; guards that always hold are dropped.
Stmt SimplifyProgram(const Stmt& s);

}  // namespace tunefarm::ir
