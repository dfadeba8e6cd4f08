// Data movers as generated kernels: a native node that only copies
// elements of its runtime inputs (Transpose, Concat, Slice, constant Pad,
// nearest Resize, Split, Expand, Gather with constant indices, ...) becomes a
// rearrange workload (v1::RearrangeAttrs) per output, found by running the
// native operator itself on probe inputs and fitting each input
// dimension's index to floor((mul * out[d] + add) / div); the fit is
// accepted only where it reproduces the operator exactly on the probes and
// on random data. A linear Resize or Upsample becomes a linear rearrange
// (RearrangeAttrs.linear), its maps derived from the coordinate mode and
// rational scales and checked against the operator on random data. What is
// not of these forms stays native (Tile's modulo, reflect Pad, DepthToSpace,
// cubic Resize).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proto/model_graph.h"
#include "tunefarm/v1/workload.pb.h"

namespace tunefarm::deploy {

// One output of a data-moving node as a kernel.
struct RearrangeStep {
  v1::Workload workload;    // OP_KIND_REARRANGE, canonical
  std::string key;          // its workload key
  std::vector<int> inputs;  // the node input each workload input binds to
  int output = 0;           // the node output it computes
};

// The operators RearrangeOf tries (the others never are data movers).
bool MayRearrange(const std::string& op);

// The rearrange kernels that compute native node `n` (opset `opset`), one
// per output, its inputs shaped `in_shapes` and, for constant inputs,
// `in_const` (nullptr for runtime values and omitted inputs); empty when
// the node is not a pure data mover of that form, or has no runtime input.
std::vector<RearrangeStep> RearrangeOf(const graph::Node& n, int64_t opset,
                                       const std::vector<std::vector<int64_t>>& in_shapes,
                                       const std::vector<const graph::Constant*>& in_const,
                                       const std::vector<std::vector<int64_t>>& out_shapes);

}  // namespace tunefarm::deploy
