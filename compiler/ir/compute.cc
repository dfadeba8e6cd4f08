// The compute DAG of a workload: ComputeDAG's queries, BuildComputeDAG
// (which dispatches to the operator builders of compute_conv.cc,
// compute_elementwise.cc and compute_reduce.cc and appends the epilogues)
// and the readable listing. Argument packing is in compute_pack.cc.
#include "compiler/ir/compute.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "compiler/ir/compute_internal.h"
#include "compiler/ir/map_program.h"
#include "compiler/ir/workload.h"

namespace tunefarm::ir {
namespace {

namespace v1 = ::tunefarm::v1;
using absl::StrCat;

}  // namespace

std::vector<std::string> ComputeDAG::TensorNames() const {
  std::vector<std::string> names;
  for (const TensorDecl& t : tensors) names.push_back(t.name);
  return names;
}

int64_t ComputeDAG::NumElements(int tensor) const {
  int64_t n = 1;
  for (int64_t d : tensors[tensor].shape) n *= d;
  return n;
}

int ComputeDAG::ProducerOf(int tensor) const {
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].output == tensor) return static_cast<int>(i);
  }
  return -1;
}

std::vector<int> StageInputs(const Stage& stage) {
  std::vector<int> inputs;
  VisitLoads(stage.body, [&](const ExprNode& n) {
    if (std::find(inputs.begin(), inputs.end(), n.tensor) == inputs.end())
      inputs.push_back(n.tensor);
  });
  return inputs;
}

namespace compute_internal {
namespace {

// Index of the channel dimension the bias follows.
int ChannelDim(const v1::Workload& w, size_t rank) {
  if (w.has_conv2d()) return w.conv2d().layout() == v1::DATA_LAYOUT_NHWC ? 3 : 1;
  if (w.has_pool2d()) return w.pool2d().layout() == v1::DATA_LAYOUT_NHWC ? 3 : 1;
  return static_cast<int>(rank) - 1;
}

absl::StatusOr<ComputeDAG> BuildFloatDAG(const v1::Workload& w) {
  Builder b;
  int main = -1;
  switch (w.op()) {
    case v1::OP_KIND_CONV2D:
      main = w.conv2d().winograd() != 0 ? Conv2dWinograd(b, w) : Conv2d(b, w);
      break;
    case v1::OP_KIND_CONV2D_TRANSPOSE:
      main = Conv2dTranspose(b, w);
      break;
    case v1::OP_KIND_DENSE:
    case v1::OP_KIND_MATMUL:
    case v1::OP_KIND_BATCH_MATMUL:
      main = Matmul(b, w);
      break;
    case v1::OP_KIND_POOL2D:
      main = Pool(b, w);
      break;
    case v1::OP_KIND_ELEMENTWISE:
      main = Elementwise(b, w);
      break;
    case v1::OP_KIND_SOFTMAX:
      main = Softmax(b, w);
      break;
    case v1::OP_KIND_REARRANGE:
      main = Rearrange(b, w);
      break;
    case v1::OP_KIND_REDUCE:
      main = Reduce(b, w);
      break;
    case v1::OP_KIND_NORMALIZE:
      main = Normalize(b, w);
      break;
    default:
      return absl::UnimplementedError(StrCat("op ", OpName(w.op()), " has no definition"));
  }
  if (w.epilogue_size() == 0) return b.Finish(main);

  // All epilogues in one elementwise stage reading the main result.
  std::vector<int64_t> shape = b.Shape(main);
  int ch = ChannelDim(w, shape.size());
  int bias = -1, residual = -1;
  std::vector<std::vector<int>> map_inputs;  // per epilogue: its inputs' tensors
  for (const v1::Epilogue& e : w.epilogue()) {
    if (e.kind() == v1::EPILOGUE_KIND_BIAS_ADD && bias < 0) {
      bias = b.AddInput("bias", {shape[ch]}, true);
    }
    if (e.kind() == v1::EPILOGUE_KIND_RESIDUAL_ADD && residual < 0) {
      residual = b.AddInput("residual", shape);
    }
  }
  int map_count = 0;
  for (const v1::Epilogue& e : w.epilogue()) {
    map_inputs.emplace_back();
    for (const v1::TensorSpec& t : e.map_inputs()) {
      map_inputs.back().push_back(b.AddInput(
          StrCat("map", map_count++), std::vector<int64_t>(t.shape().begin(), t.shape().end())));
    }
  }
  std::vector<IterVar> axes = b.Axes(shape, {"e0", "e1", "e2", "e3", "e4"});
  std::vector<Expr> idx;
  for (const IterVar& a : axes) idx.push_back(a.var);
  Expr v = b.Read(main, idx);
  for (int k = 0; k < w.epilogue_size(); ++k) {
    const v1::Epilogue& e = w.epilogue(k);
    if (e.kind() == v1::EPILOGUE_KIND_MAP) {
      v = MapExpr(e, v, [&](int i) {
        const v1::TensorSpec& t = e.map_inputs(i);
        std::vector<Expr> ix(size_t(t.shape_size()), I(0));
        std::vector<int> axes =
            MapInputAxes(std::vector<int64_t>(t.shape().begin(), t.shape().end()), shape);
        for (size_t d = 0; d < axes.size(); ++d)
          if (axes[d] >= 0) ix[size_t(axes[d])] = idx[d];
        return b.Read(map_inputs[size_t(k)][size_t(i)], ix);
      });
    } else if (e.kind() == v1::EPILOGUE_KIND_BIAS_ADD) {
      v = v + b.Read(bias, {axes[ch].var});
    } else if (e.kind() == v1::EPILOGUE_KIND_RESIDUAL_ADD) {
      v = v + b.Read(residual, idx);
    } else {
      v = Activation(e.kind(), v, e);
    }
  }
  return b.Finish(b.AddStage("epilogue", axes, {}, ReduceKind::kNone, v, true));
}

}  // namespace
}  // namespace compute_internal

absl::StatusOr<ComputeDAG> BuildComputeDAG(const v1::Workload& workload) {
  absl::StatusOr<CanonicalWorkload> cw = Canonicalize(workload);
  if (!cw.ok()) return cw.status();
  TF_ASSIGN_OR_RETURN(const v1::DType dtype, WorkloadDType(cw->workload));
  TF_ASSIGN_OR_RETURN(ComputeDAG dag, compute_internal::BuildFloatDAG(cw->workload));
  if (dtype == v1::DTYPE_FLOAT16 || dtype == v1::DTYPE_BFLOAT16) {
    for (int t : dag.args) dag.tensors[size_t(t)].float16 = true;
    dag.half = dtype == v1::DTYPE_BFLOAT16 ? HalfKind::kBFloat16 : HalfKind::kFloat16;
  }
  dag.tf32 = cw->workload.tf32();
  return dag;
}

double ReduceIdentity(ReduceKind kind) {
  return kind == ReduceKind::kProd  ? 1.0
         : kind == ReduceKind::kMax ? -std::numeric_limits<double>::infinity()
                                    : 0.0;
}

std::string ToString(const ComputeDAG& dag) {
  std::vector<std::string> names = dag.TensorNames();
  std::string out;
  for (const Stage& s : dag.stages) {
    std::vector<std::string> axes, red;
    for (const IterVar& a : s.axes) axes.push_back(StrCat(ToString(a.var), ":", a.extent));
    for (const IterVar& a : s.reduce_axes) red.push_back(StrCat(ToString(a.var), ":", a.extent));
    absl::StrAppend(&out, names[s.output], "[", absl::StrJoin(axes, ", "), "] = ",
                    s.reduce == ReduceKind::kSum    ? "sum"
                    : s.reduce == ReduceKind::kMax  ? "max"
                    : s.reduce == ReduceKind::kProd ? "prod"
                                                    : "",
                    red.empty() ? "" : StrCat("{", absl::StrJoin(red, ", "), "} "),
                    ToString(s.body, &names), "\n");
  }
  return out;
}

}  // namespace tunefarm::ir
