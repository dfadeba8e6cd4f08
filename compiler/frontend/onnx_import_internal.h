// The pieces of ONNX import shared by onnx_import.cc (graphs, nodes, shape
// inference) and onnx_import_if.cc (If nodes).
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/op_context.h"
#include "onnx/onnx_pb.h"

namespace tunefarm::frontend::import_internal {

inline constexpr char kIf[] = "If";

// The then and else graphs of each If node, by the If's first output.
using Branches =
    std::map<std::string, std::pair<const onnx::GraphProto*, const onnx::GraphProto*>>;

// Adds to *out the names graph `g` itself defines: its initializers, its
// inputs and its nodes' outputs (not those of the graphs inside it).
void LocalNames(const onnx::GraphProto& g, std::set<std::string>* out);

// Every node whose operator this build cannot import, named in one error.
absl::Status CheckOpsSupported(const std::vector<Node>& nodes, int64_t opset);

// The nodes of graph `g` (the model's, or an If branch, whose unnamed nodes
// get `prefix`), with each If's branches recorded in *branches.
absl::Status ReadGraphNodes(const onnx::GraphProto& g, const std::string& prefix, Model* m,
                            Branches* branches, std::vector<Node>* nodes);

// Shape inference and constant folding of `nodes` in topological order: the
// nodes that remain go to the model; each If goes to InlineIf.
absl::Status ImportNodes(std::vector<Node>& nodes, const Branches& branches, ShapeContext& ctx,
                         Model* m);

// If node `n` (its branches in `branches`) imported in its place: the taken
// branch where the condition is constant, else both branches and a Where
// per output (onnx_import_if.cc).
absl::Status InlineIf(const Node& n, const Branches& branches, ShapeContext& ctx, Model* m);

}  // namespace tunefarm::frontend::import_internal
