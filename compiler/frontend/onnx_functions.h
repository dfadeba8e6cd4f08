// Operators the registry has no entry for but the ONNX schema defines as a
// function of other operators (NegativeLogLikelihoodLoss,
// SoftmaxCrossEntropyLoss, Celu, Shrink, ...): before import, each such
// node of the model's graph is replaced by the nodes of its function body
// (built for the node's attributes and input types where the body depends
// on them), until none is left. Operators the registry reads are never
// expanded, so a model's own kernels keep their fused forms.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h

namespace tunefarm::frontend {

// Expands the function operators of `model`'s main graph at the
// default-domain `opset`; an error names a node whose body cannot be built.
absl::Status ExpandFunctionOps(onnx::ModelProto* model, int64_t opset);

}  // namespace tunefarm::frontend
