// The 16-bit float formats on the host: IEEE binary16 (float16) and
// bfloat16 (float32's top 16 bits), conversions to and from float rounding
// to nearest even as the GPU's cvt.rn.f16.f32 and cvt.rn.bf16.f32 do, with
// infinities, NaNs and subnormals. 16-bit kernels take and return their
// tensors as floats on the host; these turn them into the bits the device
// holds and back.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tunefarm {

// How far a float16 output may be from a float64 reference, relative to
// max(1, |reference|): four units in the last place at 1 (the output's own
// rounding is half of one).
constexpr double kFloat16Tolerance = 4.0 / 1024;
// How far an output of a model run in float16 (`--precision fp16`) may be
// from a float64 run of the float32 model, relative to the output's largest
// |value|: each layer's input and output rounding compounds.
constexpr double kFloat16ModelTolerance = 1e-2;

// Likewise for bfloat16 (8 bits of mantissa: an ulp at 1 is 1/128), and
// for a model run in it.
constexpr double kBFloat16Tolerance = 4.0 / 128;
constexpr double kBFloat16ModelTolerance = 6e-2;
// How far an output of a model whose products run in TF32
// (`--precision tf32`) may be from a float64 run of the float32 model,
// relative to the output's largest |value|: each product's factors keep 10
// of their 23 mantissa bits.
constexpr double kTf32ModelTolerance = 5e-3;

uint16_t FloatToHalfBits(float f);
float HalfBitsToFloat(uint16_t h);
// The float16 value nearest `f`, as a float.
inline float RoundToFloat16(float f) { return HalfBitsToFloat(FloatToHalfBits(f)); }

uint16_t FloatToBFloat16Bits(float f);
float BFloat16BitsToFloat(uint16_t h);

// Which 16-bit format a tensor is held in.
enum class HalfKind : uint8_t { kFloat16, kBFloat16 };
inline uint16_t ToHalfBits(float f, HalfKind k) {
  return k == HalfKind::kBFloat16 ? FloatToBFloat16Bits(f) : FloatToHalfBits(f);
}
inline float FromHalfBits(uint16_t h, HalfKind k) {
  return k == HalfKind::kBFloat16 ? BFloat16BitsToFloat(h) : HalfBitsToFloat(h);
}
// `n` floats as values of format `k` (the bits the device holds), and
// `n` such values back into floats.
std::vector<uint16_t> ToHalfBits(const float* data, int64_t n, HalfKind k);
void FromHalfBits(const uint16_t* bits, int64_t n, HalfKind k, float* out);
// The value of format `k` nearest `f`, as a float.
inline float RoundToHalf(float f, HalfKind k) { return FromHalfBits(ToHalfBits(f, k), k); }
inline double HalfTolerance(HalfKind k) {
  return k == HalfKind::kBFloat16 ? kBFloat16Tolerance : kFloat16Tolerance;
}
inline double HalfModelTolerance(HalfKind k) {
  return k == HalfKind::kBFloat16 ? kBFloat16ModelTolerance : kFloat16ModelTolerance;
}
// A float32 model's, run as built (only the order of sums differs).
constexpr double kFloat32ModelTolerance = 1e-4;
// The tolerance of a model run in 16 bits of format `*half`, with TF32
// products (`tf32`), or in float32.
inline double ModelTolerance(std::optional<HalfKind> half, bool tf32) {
  return half ? HalfModelTolerance(*half) : tf32 ? kTf32ModelTolerance : kFloat32ModelTolerance;
}
// `f` rounded to TF32 (float32's exponent, 10 mantissa bits) to nearest,
// ties away from zero, as the GPU's cvt.rna.tf32.f32 does; still a float
// (its 13 low bits zero). Infinities stay, NaN stays NaN.
float RoundToTf32(float f);

// A quiet NaN of format `k` (what an unwritten output holds).
inline uint16_t HalfQuietNaN(HalfKind k) { return k == HalfKind::kBFloat16 ? 0x7fc0 : 0x7e00; }

}  // namespace tunefarm
