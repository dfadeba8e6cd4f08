#include "common/float16.h"

#include <cstring>

namespace tunefarm {

uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t exponent = (x >> 23) & 0xffu;
  uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xff) {  // infinity, or a NaN kept quiet and non-zero
    return uint16_t(sign | 0x7c00u | (mantissa != 0 ? 0x200u | (mantissa >> 13) : 0u));
  }
  const int e = int(exponent) - 127 + 15;
  if (e >= 31) return uint16_t(sign | 0x7c00u);  // too large: infinity
  if (e <= 0) {
    // A subnormal (or zero): the implicit bit joins the mantissa, shifted
    // right by 14 - e; below half the smallest subnormal rounds to zero.
    if (e < -10) return sign;
    mantissa |= 0x800000u;
    const int shift = 14 - e;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = (uint32_t(e) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  // Rounding up may carry into the exponent, up to infinity: still right.
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return uint16_t(sign | half);
}

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t x;
  if (exponent == 0x1f) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    x = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    x = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do {
      mantissa <<= 1;
      ++e;
    } while ((mantissa & 0x400u) == 0);
    x = sign | (uint32_t(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToBFloat16Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu) != 0)
    return uint16_t((x >> 16) | 0x40u);  // a NaN stays a quiet NaN
  // Nearest even: add half an ulp of the kept bits, plus one where the kept
  // part is odd; a carry into the exponent (up to infinity) is right.
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

float BFloat16BitsToFloat(uint16_t h) {
  const uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::vector<uint16_t> ToHalfBits(const float* data, int64_t n, HalfKind k) {
  std::vector<uint16_t> bits(size_t(n > 0 ? n : 0));
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = ToHalfBits(data[i], k);
  return bits;
}

void FromHalfBits(const uint16_t* bits, int64_t n, HalfKind k, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = FromHalfBits(bits[i], k);
}

float RoundToTf32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u) return f;  // infinity or NaN, as it is
  // Half of the dropped part's unit added to the magnitude carries into the
  // kept bits from the halfway point up (ties away from zero); a carry out of
  // the largest finite values makes infinity.
  bits = (bits + 0x1000u) & ~0x1fffu;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace tunefarm
