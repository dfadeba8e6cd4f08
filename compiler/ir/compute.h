// Compute definitions: a workload as a small DAG of stages, each computing
// one tensor from its inputs with an expression over its axes (and, for
// reductions, its reduction axes). This is what schedules transform and what
// the float64 reference interprets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/expr.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::ir {

struct TensorDecl {
  enum class Role { kInput, kIntermediate, kOutput };
  std::string name;
  std::vector<int64_t> shape;
  ScalarType type = ScalarType::kFloat32;
  Role role = Role::kInput;
  // Inputs that are constant at deploy time (weights, bias) may be repacked.
  bool is_constant = false;
};

struct IterVar {
  Expr var;
  int64_t extent = 0;
};

enum class ReduceKind { kNone, kSum, kMax };

struct Stage {
  std::string name;
  int output = -1;                  // tensor id
  std::vector<IterVar> axes;        // one per output dimension
  std::vector<IterVar> reduce_axes;
  ReduceKind reduce = ReduceKind::kNone;
  Expr body;                        // the value, or the term that is reduced
  // A cheap stage (padding, elementwise) that may be inlined into its readers.
  bool inlinable = false;
};

struct ComputeDAG {
  std::vector<TensorDecl> tensors;
  std::vector<Stage> stages;        // topological order
  std::vector<int> args;            // kernel arguments: inputs in order, then the output
  int output = -1;                  // tensor id

  std::vector<std::string> TensorNames() const;
  int64_t NumElements(int tensor) const;
  // Index of the stage writing `tensor`, -1 for inputs.
  int ProducerOf(int tensor) const;
};

// The compute DAG of a canonical workload (see Canonicalize in workload.h).
absl::StatusOr<ComputeDAG> BuildComputeDAG(const ::tunefarm::v1::Workload& canonical);

// Readable listing of the stages, one line each.
std::string ToString(const ComputeDAG& dag);

}  // namespace tunefarm::ir
