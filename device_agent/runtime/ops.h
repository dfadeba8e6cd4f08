// Native operators: every ONNX operator the importer keeps as a graph node,
// one entry each in the table in ops.cc, the union of the families'
// lists in ops_*.cc (the frontend's operator registry marks the same set
// native), on dense row-major tensors, for T = float (the graph runtime's path for what is not
// a compiled kernel) and T = double (the float64 reference the tests compare
// builds against). Output shapes come from the importer's shape inference;
// an operator form we do not compute (Resize cubic, MaxPool indices, ...)
// is an Unimplemented error naming the node, never a wrong result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/kernel_abi.h"
#include "proto/model_graph.h"

namespace tunefarm::runtime {

// The package format's graph (proto/model_graph.h), as the runtime runs it.
using graph::Constant;
using graph::Node;
using graph::Numel;

template <typename T>
struct OpArgs {
  const Node* node = nullptr;
  int64_t opset = 0;
  // One entry per node input: data (nullptr for an omitted input or an
  // integer constant), its shape, and the constant behind it (nullptr for a
  // runtime value) for inputs read as parameters (shapes, axes, pads).
  std::vector<const T*> in;
  std::vector<std::vector<int64_t>> in_shapes;
  std::vector<const Constant*> in_const;
  std::vector<T*> out;  // nullptr for an omitted output
  std::vector<std::vector<int64_t>> out_shapes;
  // Splits [0, n) into chunks run in parallel (nullptr: serial).
  int32_t (*parallel)(void* ctx, int64_t n, void* closure, TFParallelBody body) = nullptr;
  void* parallel_ctx = nullptr;
  // RunOp's table entry for node->op, looked up by name on the first call
  // and kept here for the next (a step runs the same node every time).
  mutable const void* resolved = nullptr;
};

// Computes args.node; an Unimplemented error naming the node for an
// operator or form the runtime does not compute.
template <typename T>
absl::Status RunOp(const OpArgs<T>& args);

// The operators RunOp computes, sorted by name.
std::vector<std::string> NativeOps();

// Operators whose output is a copy of their first input (Reshape, Flatten,
// Squeeze, Unsqueeze, Identity, Dropout): the runtime may alias them.
bool IsCopyOp(const std::string& op);
// Copy operators that compute nothing else (all but Dropout, which checks
// its training mode): a package may give their output their input's memory,
// and the runtime then skips the step.
bool IsViewOp(const std::string& op);

}  // namespace tunefarm::runtime
