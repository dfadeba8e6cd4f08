// Compute definitions: a workload as a small DAG of stages, each computing
// one tensor from its inputs with an expression over its axes (and, for
// reductions, its reduction axes). This is what schedules transform and what
// the float64 reference interprets.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/float16.h"
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
  // A blocked copy of tensor `packed_from` made by a layout_pack step: the
  // outer dimensions (ceil(extent / block), or the extent where block is 0)
  // in the original order, then one dimension per blocked original
  // dimension, in the order `pack_inner`. The caller packs the data (see
  // PackConstant); the kernel reads only the packed copy.
  int packed_from = -1;
  // A cache_read copy in GPU shared memory: computed at a loop of its
  // reader, it holds the box the whole thread block reads, fetched by all the
  // block's threads together (see Lower).
  bool shared = false;
  // Any cache_read copy (shared or local): it may be computed inside a stage
  // that is itself computed at another (staging a reduction's operand per
  // reduction step).
  bool cache_copy = false;
  // Held in memory in 16 bits (ComputeDAG::half: IEEE binary16 or
  // bfloat16): its values are still `type` (float32) in every expression; a
  // store rounds to nearest even, a load widens. Kernel arguments of a
  // float16 or bfloat16 workload and their shared-memory copies; CUDA
  // targets only.
  bool float16 = false;
  // A warp's mma.sync operand fragments, in each lane's registers (local):
  // written by kMma fragment loads, read by kMma products only (see
  // StmtNode::mma_load). CUDA holds them as 32-bit registers, two 16-bit
  // values or one TF32 value each.
  bool mma_fragment = false;
  std::vector<int64_t> pack_block;
  std::vector<int> pack_inner;
};

struct IterVar {
  Expr var;
  int64_t extent = 0;
};

enum class ReduceKind { kNone, kSum, kMax, kProd };

// The value a reduction of `kind` starts from: 0, -inf or 1.
double ReduceIdentity(ReduceKind kind);

struct Stage {
  std::string name;
  int output = -1;            // tensor id
  std::vector<IterVar> axes;  // one per output dimension
  std::vector<IterVar> reduce_axes;
  ReduceKind reduce = ReduceKind::kNone;
  Expr body;  // the value, or the term that is reduced
  // A cheap stage (padding, elementwise) that may be inlined into its readers.
  bool inlinable = false;
};

struct ComputeDAG {
  std::vector<TensorDecl> tensors;
  std::vector<Stage> stages;  // topological order
  std::vector<int> args;      // kernel arguments: inputs in order, then the output
  int output = -1;            // tensor id
  // The format of every tensor held in 16 bits (TensorDecl::float16): a
  // workload has one dtype.
  HalfKind half = HalfKind::kFloat16;
  // The workload's product may round its float32 factors to TF32
  // (Workload.tf32): the tensor-core sketch multiplies them with mma.sync
  // m16n8k8 tf32; other schedules compute in float32.
  bool tf32 = false;

  std::vector<std::string> TensorNames() const;
  int64_t NumElements(int tensor) const;
  // Index of the stage writing `tensor`, -1 for inputs.
  int ProducerOf(int tensor) const;
};

// The tensors `stage` reads, each once, in the order its body first loads them
// (the "operand index" of schedule steps).
std::vector<int> StageInputs(const Stage& stage);

// The packed form of a tensor (a layout_pack result): the element of the
// original tensor at `index`, as an index into the packed tensor.
std::vector<Expr> PackedIndex(const TensorDecl& packed, const std::vector<Expr>& index);

// Fills the packed tensor `packed` of `dag` from the original tensor's data
// (row-major, original shape). Elements past the original extents are zero.
std::vector<float> PackConstant(const ComputeDAG& dag, int packed,
                                const std::vector<float>& original);

// How to call the kernel built from `scheduled` (a ScheduleState's DAG): one
// KernelArgument per dag.args entry, with the packing of each argument a
// layout_pack step replaced.
::tunefarm::v1::KernelSignature SignatureOf(const ComputeDAG& scheduled);

// The kernel arguments a schedule repacked: (argument index, packed data)
// for each input of `scheduled` (a ScheduleState's DAG) that layout_pack
// replaced, packed from `inputs` (original layouts, one per kernel input).
// The other inputs are passed as they are.
std::vector<std::pair<size_t, std::vector<float>>> PackedArguments(
    const ComputeDAG& scheduled, const std::vector<std::vector<float>>& inputs);

// Bytes per element of `t` in memory (2 for float16 and bfloat16, else 4).
int64_t ElementBytes(const TensorDecl& t);
// Whether any tensor of `dag` is held in 16 bits (float16 or bfloat16).
bool HasFloat16(const ComputeDAG& dag);

// The compute DAG of a canonical workload (see Canonicalize in workload.h).
// A float16 or bfloat16 workload (every input, map input and the output of
// that dtype; mixed dtypes are refused) computes in float32 and holds its
// arguments in 16 bits.
absl::StatusOr<ComputeDAG> BuildComputeDAG(const ::tunefarm::v1::Workload& canonical);

// Readable listing of the stages, one line each.
std::string ToString(const ComputeDAG& dag);

}  // namespace tunefarm::ir
