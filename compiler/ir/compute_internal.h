// Internal to compiler/ir: the pieces compute.cc and the per-operator
// compute_*.cc files share to build a ComputeDAG. Builder appends tensors
// and stages to a DAG; each operator builder (Conv2d, Matmul, Softmax, ...)
// adds the stages of one Workload op and returns the tensor holding its
// result. Nothing outside compiler/ir includes this header; the public
// surface is compute.h (BuildComputeDAG).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/expr.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::ir::compute_internal {

namespace v1 = ::tunefarm::v1;

inline constexpr ScalarType kF32 = ScalarType::kFloat32;

// A float32 literal, an index literal, and `x` clamped into [lo, hi].
inline Expr F(double v) { return FloatImm(v, kF32); }
inline Expr I(int64_t v) { return IntImm(v); }
inline Expr Clamp(Expr x, int64_t lo, int64_t hi) { return Max(Min(std::move(x), I(hi)), I(lo)); }

// Appends tensors and stages to the DAG under construction; Finish marks
// the output and hands the DAG over.
class Builder {
 public:
  int AddTensor(const std::string& name, std::vector<int64_t> shape, TensorDecl::Role role,
                bool constant = false) {
    TensorDecl t;
    t.name = name;
    t.shape = std::move(shape);
    t.role = role;
    t.is_constant = constant;
    dag_.tensors.push_back(std::move(t));
    return static_cast<int>(dag_.tensors.size()) - 1;
  }
  int AddInput(const std::string& name, std::vector<int64_t> shape, bool constant = false) {
    int id = AddTensor(name, std::move(shape), TensorDecl::Role::kInput, constant);
    dag_.args.push_back(id);
    return id;
  }
  const std::vector<int64_t>& Shape(int t) const { return dag_.tensors[t].shape; }

  // Fresh axes named after `names` with the extents of `shape`.
  std::vector<IterVar> Axes(const std::vector<int64_t>& shape,
                            const std::vector<std::string>& names) {
    std::vector<IterVar> axes;
    for (size_t i = 0; i < shape.size(); ++i) {
      axes.push_back({Var(i < names.size() ? names[i] : absl::StrCat("i", i)), shape[i]});
    }
    return axes;
  }

  // Adds a stage producing a new intermediate tensor; returns the tensor id.
  int AddStage(const std::string& name, std::vector<IterVar> axes, std::vector<IterVar> reduce,
               ReduceKind kind, Expr body, bool inlinable) {
    std::vector<int64_t> shape;
    for (const IterVar& a : axes) shape.push_back(a.extent);
    int t = AddTensor(name, shape, TensorDecl::Role::kIntermediate);
    Stage s;
    s.name = name;
    s.output = t;
    s.axes = std::move(axes);
    s.reduce_axes = std::move(reduce);
    s.reduce = kind;
    s.body = std::move(body);
    s.inlinable = inlinable;
    dag_.stages.push_back(std::move(s));
    return t;
  }

  Expr Read(int tensor, std::vector<Expr> idx) { return Load(tensor, kF32, std::move(idx)); }

  ComputeDAG Finish(int out) {
    dag_.tensors[out].role = TensorDecl::Role::kOutput;
    dag_.tensors[out].name = "out";
    dag_.output = out;
    dag_.args.push_back(out);
    return std::move(dag_);
  }

  // A copy of `src` padded by pads[d] = {lo, hi} with `fill`; inlinable.
  int Pad(int src, const std::vector<std::pair<int64_t, int64_t>>& pads, double fill) {
    bool any = false;
    for (auto [lo, hi] : pads) any |= lo != 0 || hi != 0;
    if (!any) return src;
    const std::vector<int64_t> in = Shape(src);
    std::vector<int64_t> shape;
    for (size_t d = 0; d < in.size(); ++d) shape.push_back(in[d] + pads[d].first + pads[d].second);
    std::vector<IterVar> axes = Axes(shape, {"p0", "p1", "p2", "p3"});
    Expr inside = BoolImm(true);
    std::vector<Expr> idx;
    for (size_t d = 0; d < in.size(); ++d) {
      Expr x = axes[d].var - I(pads[d].first);
      if (pads[d].first != 0 || pads[d].second != 0) {
        inside = And(inside, And(x >= I(0), x < I(in[d])));
        x = Clamp(x, 0, in[d] - 1);  // never read out of bounds, even when not selected
      }
      idx.push_back(x);
    }
    return AddStage(absl::StrCat(dag_.tensors[src].name, "_pad"), axes, {}, ReduceKind::kNone,
                    Select(inside, Read(src, idx), F(fill)), /*inlinable=*/true);
  }

  ComputeDAG dag_;
};

// ---- operator builders: each adds the stages of `w`'s op to `b` (its
// inputs first, in kernel-argument order) and returns the result tensor ----

// compute_conv.cc: convolutions, the matmul family and pooling.
int Conv2d(Builder& b, const v1::Workload& w);
int Conv2dWinograd(Builder& b, const v1::Workload& w);
int Conv2dTranspose(Builder& b, const v1::Workload& w);
int Matmul(Builder& b, const v1::Workload& w);
int Pool(Builder& b, const v1::Workload& w);

// compute_elementwise.cc: elementwise ops, epilogue activations, map
// programs and rearrange (no reduction).
int Elementwise(Builder& b, const v1::Workload& w);
int Rearrange(Builder& b, const v1::Workload& w);
// The epilogue activation `kind` (relu, clip, sigmoid, ...) applied to `x`;
// `e` holds its attributes (clip bounds, leaky_relu's alpha).
Expr Activation(v1::EpilogueKind kind, Expr x, const v1::Epilogue& e);
// The value of a MAP epilogue's program applied to `in`; `input(k)` reads
// map input k at the current output element.
Expr MapExpr(const v1::Epilogue& e, Expr in, const std::function<Expr(int)>& input);

// compute_reduce.cc: reductions over a row (softmax, reduce, normalize).
int Softmax(Builder& b, const v1::Workload& w);
int Reduce(Builder& b, const v1::Workload& w);
int Normalize(Builder& b, const v1::Workload& w);

}  // namespace tunefarm::ir::compute_internal
