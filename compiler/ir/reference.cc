#include "compiler/ir/reference.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ir/functor.h"
#include "proto/kernel_signature.h"

namespace tunefarm::ir {
namespace {

// Body evaluations below which a stage is not worth a thread (the
// interpreter does some tens of millions a second).
constexpr int64_t kWorkPerThread = 4'000'000;

struct Value {
  int64_t i = 0;
  double f = 0;
};

class Interpreter : public ExprFunctor<Value()> {
 public:
  Interpreter(const ComputeDAG& dag, std::vector<std::vector<double>>* buffers)
      : dag_(dag), buffers_(*buffers) {}

  void Bind(const ExprNode* var, int64_t v) {
    for (auto& [p, val] : env_) {
      if (p == var) {
        val = v;
        return;
      }
    }
    env_.emplace_back(var, v);
  }

  Value Eval(const Expr& e) { return Visit(e); }

 protected:
  Value VisitDefault(const Expr&) override {
    TF_CHECK(false && "no value for this node kind");
    return Value{};
  }
  Value VisitIntImm(const Expr& e) override { return Value{e->int_value, 0}; }
  Value VisitFloatImm(const Expr& e) override { return Value{0, e->float_value}; }
  Value VisitVar(const Expr& e) override {
    for (auto& [p, val] : env_) {
      if (p == e.get()) return Value{val, 0};
    }
    TF_CHECK(false && "unbound variable");
    return Value{};
  }
  Value VisitBinary(const Expr& e) override {
    const ExprNode& n = *e.get();
    Value a = Eval(n.args[0]), b = Eval(n.args[1]), r;
    if (n.type == ScalarType::kInt64) {
      switch (n.op) {
        case Op::kAdd:
          r.i = a.i + b.i;
          break;
        case Op::kSub:
          r.i = a.i - b.i;
          break;
        case Op::kMul:
          r.i = a.i * b.i;
          break;
        case Op::kFloorDiv:
          r.i = FloorDivInt(a.i, b.i);
          break;
        case Op::kFloorMod:
          r.i = FloorModInt(a.i, b.i);
          break;
        case Op::kMin:
          r.i = std::min(a.i, b.i);
          break;
        case Op::kMax:
          r.i = std::max(a.i, b.i);
          break;
        default:
          TF_CHECK(false && "bad int op");
      }
      return r;
    }
    switch (n.op) {
      case Op::kAdd:
        r.f = a.f + b.f;
        break;
      case Op::kSub:
        r.f = a.f - b.f;
        break;
      case Op::kMul:
        r.f = a.f * b.f;
        break;
      case Op::kDiv:
        r.f = a.f / b.f;
        break;
      case Op::kMin:
        r.f = std::min(a.f, b.f);
        break;
      case Op::kMax:
        r.f = std::max(a.f, b.f);
        break;
      default:
        TF_CHECK(false && "bad float op");
    }
    return r;
  }
  Value VisitCmp(const Expr& e) override {
    const ExprNode& n = *e.get();
    Value a = Eval(n.args[0]), b = Eval(n.args[1]);
    const bool isf = IsFloat(n.args[0]->type);
    const double x = isf ? a.f : double(a.i), y = isf ? b.f : double(b.i);
    const int64_t xi = a.i, yi = b.i;
    bool v = false;
    switch (n.op) {
      case Op::kLt:
        v = isf ? x < y : xi < yi;
        break;
      case Op::kLe:
        v = isf ? x <= y : xi <= yi;
        break;
      case Op::kGt:
        v = isf ? x > y : xi > yi;
        break;
      case Op::kGe:
        v = isf ? x >= y : xi >= yi;
        break;
      case Op::kEq:
        v = isf ? x == y : xi == yi;
        break;
      case Op::kNe:
        v = isf ? x != y : xi != yi;
        break;
      default:
        break;
    }
    return Value{v, 0};
  }
  Value VisitAnd(const Expr& e) override {
    return Value{Eval(e->args[0]).i && Eval(e->args[1]).i, 0};
  }
  Value VisitOr(const Expr& e) override {
    return Value{Eval(e->args[0]).i || Eval(e->args[1]).i, 0};
  }
  Value VisitNot(const Expr& e) override { return Value{!Eval(e->args[0]).i, 0}; }
  Value VisitSelect(const Expr& e) override {
    return Eval(e->args[0]).i ? Eval(e->args[1]) : Eval(e->args[2]);
  }
  Value VisitCast(const Expr& e) override {
    Value a = Eval(e->args[0]), r;
    const bool from_float = IsFloat(e->args[0]->type);
    if (IsFloat(e->type)) {
      r.f = from_float ? a.f : double(a.i);
    } else {
      r.i = from_float ? int64_t(a.f) : a.i;
    }
    return r;
  }
  Value VisitCall(const Expr& e) override {
    const double x = Eval(e->args[0]).f;
    Value r;
    switch (e->op) {
      case Op::kExp:
        r.f = std::exp(x);
        break;
      case Op::kSqrt:
        r.f = std::sqrt(x);
        break;
      case Op::kTanh:
        r.f = std::tanh(x);
        break;
      case Op::kAbs:
        r.f = std::fabs(x);
        break;
      case Op::kLog:
        r.f = std::log(x);
        break;
      default:
        break;
    }
    return r;
  }
  Value VisitLoad(const Expr& e) override {
    const std::vector<int64_t>& shape = dag_.tensors[size_t(e->tensor)].shape;
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t idx = Eval(e->args[d]).i;
      TF_CHECK(idx >= 0 && idx < shape[d]);
      flat = flat * shape[d] + idx;
    }
    return Value{0, buffers_[size_t(e->tensor)][size_t(flat)]};
  }

 public:
  // Output elements [begin, end) of `s`; its buffer is already sized.
  void RunStage(const Stage& s, int64_t begin, int64_t end) {
    std::vector<double>& out = buffers_[s.output];
    std::vector<int64_t> idx(s.axes.size(), 0);
    for (int64_t flat = begin; flat < end; ++flat) {
      int64_t rest = flat;
      for (int d = int(s.axes.size()) - 1; d >= 0; --d) {
        idx[d] = rest % s.axes[d].extent;
        rest /= s.axes[d].extent;
      }
      for (size_t d = 0; d < s.axes.size(); ++d) Bind(s.axes[d].var.get(), idx[d]);
      if (s.reduce == ReduceKind::kNone) {
        out[flat] = Eval(s.body).f;
        continue;
      }
      double acc = ReduceIdentity(s.reduce);
      Reduce(s, 0, &acc);
      out[flat] = acc;
    }
  }

 private:
  void Reduce(const Stage& s, size_t level, double* acc) {
    if (level == s.reduce_axes.size()) {
      double v = Eval(s.body).f;
      *acc = s.reduce == ReduceKind::kSum    ? *acc + v
             : s.reduce == ReduceKind::kProd ? *acc * v
                                             : std::max(*acc, v);
      return;
    }
    for (int64_t i = 0; i < s.reduce_axes[level].extent; ++i) {
      Bind(s.reduce_axes[level].var.get(), i);
      Reduce(s, level + 1, acc);
    }
  }

  const ComputeDAG& dag_;
  std::vector<std::vector<double>>& buffers_;
  std::vector<std::pair<const ExprNode*, int64_t>> env_;
};

}  // namespace

absl::StatusOr<std::vector<double>> EvaluateReference(
    const ComputeDAG& dag, const std::vector<std::vector<float>>& inputs) {
  if (inputs.size() + 1 != dag.args.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference: ", dag.args.size() - 1, " inputs expected, got ", inputs.size()));
  }
  std::vector<std::vector<double>> buffers(dag.tensors.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    int t = dag.args[i];
    if (int64_t(inputs[i].size()) != dag.NumElements(t)) {
      return absl::InvalidArgumentError(absl::StrCat("reference: input ", dag.tensors[t].name,
                                                     " has ", inputs[i].size(),
                                                     " values, expected ", dag.NumElements(t)));
    }
    buffers[t].assign(inputs[i].begin(), inputs[i].end());
  }
  // A stage's output elements are independent: big stages are split into
  // contiguous ranges, one interpreter (its own variable bindings) per
  // thread, all reading the finished buffers of earlier stages.
  const int hw = std::max(1, int(std::thread::hardware_concurrency()));
  for (const Stage& s : dag.stages) {
    const int64_t n = dag.NumElements(s.output);
    buffers[s.output].assign(n, 0);
    int64_t per_element = 1;
    for (const IterVar& r : s.reduce_axes) per_element *= r.extent;
    const int64_t threads = std::min<int64_t>({hw, n, n * per_element / kWorkPerThread + 1});
    if (threads <= 1) {
      Interpreter(dag, &buffers).RunStage(s, 0, n);
      continue;
    }
    std::vector<std::thread> pool;
    for (int64_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        Interpreter(dag, &buffers).RunStage(s, n * t / threads, n * (t + 1) / threads);
      });
    }
    for (std::thread& th : pool) th.join();
  }
  return buffers[dag.output];
}

bool InterpretReference(const ComputeDAG& dag, double flops) {
  return flops <= kMaxInterpretedFlops && dag.NumElements(dag.output) <= kMaxInterpretedOutput;
}

std::vector<std::vector<float>> RandomInputs(const ComputeDAG& dag, uint64_t seed) {
  return ::tunefarm::RandomInputs(SignatureOf(dag), seed);
}

}  // namespace tunefarm::ir
