// IEEE binary16 on the host: conversions to and from float, rounding to
// nearest even as the GPU's cvt.rn.f16.f32 does, with infinities, NaNs and
// subnormals. Float16 kernels take and return their tensors as floats on the
// host; these turn them into the bits the device holds and back.
#pragma once

#include <cstdint>

namespace tunefarm {

// How far a float16 output may be from a float64 reference, relative to
// max(1, |reference|): four units in the last place at 1 (the output's own
// rounding is half of one).
constexpr double kFloat16Tolerance = 4.0 / 1024;
// How far an output of a model run in float16 (`--precision fp16`) may be
// from a float64 run of the float32 model, relative to the output's largest
// |value|: each layer's input and output rounding compounds.
constexpr double kFloat16ModelTolerance = 1e-2;

uint16_t FloatToHalfBits(float f);
float HalfBitsToFloat(uint16_t h);
// The float16 value nearest `f`, as a float.
inline float RoundToFloat16(float f) { return HalfBitsToFloat(FloatToHalfBits(f)); }

}  // namespace tunefarm
