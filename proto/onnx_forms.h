// How ONNX operators changed form across opsets (attributes that became
// inputs, default axes): one named rule each, read by both sides that take
// a node apart, the importer (compiler/frontend) and the board runtime's
// native operators (device_agent/runtime). A node of the model graph
// (model_graph.h) carries its model's opset; these say which form it has.
#pragma once

#include <cstdint>
#include <string_view>

namespace tunefarm::graph {

// Reduce*: the axes are input 1 (else the `axes` attribute); ReduceSum
// from opset 13, the others from 18.
inline bool ReduceAxesAreAnInput(std::string_view op, int64_t opset) {
  return opset >= (op == "ReduceSum" ? 13 : 18);
}

// Softmax, LogSoftmax: before opset 13 the input is coerced to 2-D at
// `axis` (default 1); from 13 they work along one axis (default -1).
inline bool SoftmaxCoercesTo2D(int64_t opset) { return opset < 13; }
inline int64_t SoftmaxDefaultAxis(int64_t opset) { return SoftmaxCoercesTo2D(opset) ? 1 : -1; }

// Squeeze, Unsqueeze: axes are input 1 from opset 13 (an attribute before).
inline bool SqueezeAxesAreAnInput(int64_t opset) { return opset >= 13; }

// Split: the sizes are input 1 from opset 13 (the `split` attribute before).
inline bool SplitSizesAreAnInput(int64_t opset) { return opset >= 13; }

// Slice: starts, ends, axes (and steps) are inputs from opset 10.
inline bool SliceBoundsAreInputs(int64_t opset) { return opset >= 10; }

// Clip: min and max are inputs 1 and 2 from opset 11 (attributes before).
inline bool ClipBoundsAreInputs(int64_t opset) { return opset >= 11; }

// Pad: pads (and the constant value) are inputs from opset 11.
inline bool PadsAreInputs(int64_t opset) { return opset >= 11; }

// Resize: from opset 11 the inputs are X, roi, scales, sizes and the
// coordinate transformation is an attribute; before, X and scales.
inline bool ResizeHasRoi(int64_t opset) { return opset >= 11; }

// TopK: k is input 1 from opset 10 (an attribute before); `largest` and
// `sorted` exist from 11.
inline bool TopKIsAnInput(int64_t opset) { return opset >= 10; }
inline bool TopKHasOrder(int64_t opset) { return opset >= 11; }

// ArgMax, ArgMin: `select_last_index` exists from opset 12.
inline bool ArgHasSelectLastIndex(int64_t opset) { return opset >= 12; }

// Add, Mul and the other broadcasting binary ops: before opset 7 the
// `broadcast` and `axis` attributes say how the second operand lines up.
inline bool HasLegacyBroadcast(int64_t opset) { return opset < 7; }

// Upsample: scales are an attribute before opset 9, input 1 from 9.
inline bool UpsampleScalesAreAnInput(int64_t opset) { return opset >= 9; }

}  // namespace tunefarm::graph
