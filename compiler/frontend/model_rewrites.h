// Rewrites of an imported model's nodes once every shape is known. Internal
// to the frontend (onnx_import.cc runs them).
#pragma once

#include "compiler/frontend/onnx_import.h"

namespace tunefarm::frontend {

// A BatchNormalization in inference form with constant parameters that no
// producer absorbs (its input is not the only use of an anchor whose
// weights take a per-channel scale) becomes Mul and Add by per-channel
// constants, y = x * a + b: they fuse as a program into the kernel before
// them, or run as a kernel of their own in either layout, where the
// operator itself would be a native step. Runs before m->consumers is
// filled.
void RewriteLoneBatchNorms(Model* m);

// A Pad of zeros over the spatial dimensions only (constant mode, constant
// non-negative pads, N and C unpadded) whose one reader is a Conv with
// explicit pads becomes part of that Conv's pads, and the Pad is dropped:
// tf2onnx writes every TensorFlow "SAME" convolution of stride 2 as Pad
// then Conv, and the Pad would otherwise be a copy of its own (with a
// layout flip on each side in a channels-last build). Runs before
// m->consumers is filled.
void FoldPadsIntoConvs(Model* m);

}  // namespace tunefarm::frontend
