// Host float16 conversions against the compiler's own _Float16 (IEEE
// binary16, round to nearest even): every float16 value, and floats around
// every rounding boundary, subnormals, overflow, infinities and NaNs.
#include "common/float16.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"

namespace tunefarm {
namespace {

uint16_t Bits(_Float16 h) {
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

float FromBits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

TEST(Float16, EveryValueRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 v;
    const uint16_t b = uint16_t(h);
    std::memcpy(&v, &b, 2);
    const float f = HalfBitsToFloat(b);
    if (std::isnan(float(v))) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(f)))) << h;
      continue;
    }
    ASSERT_EQ(f, float(v)) << "bits " << h;
    ASSERT_EQ(std::signbit(f), std::signbit(float(v))) << "bits " << h;
    ASSERT_EQ(FloatToHalfBits(f), b) << "bits " << h;
  }
}

TEST(Float16, RoundsAsTheHardwareDoes) {
  std::mt19937 rng(16);
  int checked = 0;
  auto check = [&](float f) {
    ASSERT_EQ(FloatToHalfBits(f), Bits(_Float16(f))) << std::hexfloat << f;
    ++checked;
  };
  // Each float16's neighbourhood: the value, the midpoints to the next one
  // (ties go to even) and a float either side of them.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = HalfBitsToFloat(uint16_t(h)), hi = HalfBitsToFloat(uint16_t(h + 1));
    const float mid = lo + (hi - lo) / 2;
    for (float f : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      check(f);
      check(-f);
    }
  }
  // Random bit patterns over the whole float range.
  for (int i = 0; i < 200000; ++i) check(FromBits(rng()));
  check(65519.99f);
  check(65520.0f);  // rounds to infinity
  check(1e30f);
  check(INFINITY);
  check(-INFINITY);
  check(0.0f);
  check(-0.0f);
  EXPECT_GT(checked, 400000);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);
  EXPECT_EQ(RoundToFloat16(1.0f + 1.0f / 4096), 1.0f);  // below half an ulp
  EXPECT_TRUE(std::isnan(RoundToFloat16(std::nanf(""))));
}

}  // namespace
}  // namespace tunefarm
