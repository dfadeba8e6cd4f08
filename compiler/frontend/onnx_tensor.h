// An ONNX TensorProto (an initializer, a Constant's value, an If branch's
// initializer) read as an import Constant. Internal to the frontend.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_import.h"
#include "onnx/onnx_pb.h"  // defines ONNX_API, then includes onnx-ml.pb.h

namespace tunefarm::frontend {

// `t`'s values as floats (float, float16, bfloat16 and double) or as
// integers (every integer type and bool), in row-major order; an error
// naming `what` for external data, a value count that disagrees with the
// dimensions, or another element type.
absl::StatusOr<Constant> FromTensor(const onnx::TensorProto& t, const std::string& what);

}  // namespace tunefarm::frontend
