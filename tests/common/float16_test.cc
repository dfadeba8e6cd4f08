// Host float16 conversions against the compiler's own _Float16 (IEEE
// binary16, round to nearest even): every float16 value, and floats around
// every rounding boundary, subnormals, overflow, infinities and NaNs.
#include "common/float16.h"

#include <cmath>
#include <cstring>
#include <limits>
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

// bfloat16 against rounding worked out in double: each finite float lies
// between two bfloat16 values (its top 16 bits, and the next), and goes to
// the nearer, ties to the even one. Every bfloat16 value round-trips.
TEST(BFloat16, EveryValueRoundTripsAndFloatsRoundToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = BFloat16BitsToFloat(uint16_t(h));
    uint32_t x;
    std::memcpy(&x, &f, 4);
    ASSERT_EQ(x, h << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(f)))) << h;
      continue;
    }
    ASSERT_EQ(FloatToBFloat16Bits(f), h) << h;
  }
  std::mt19937 rng(17);
  int checked = 0;
  auto check = [&](float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if (std::isnan(f) || std::isinf(f)) return;
    const uint16_t lo = uint16_t(x >> 16), hi = uint16_t(lo + 1);
    const double dl = std::fabs(double(f) - BFloat16BitsToFloat(lo));
    const double dh = std::fabs(double(BFloat16BitsToFloat(hi)) - double(f));
    const uint16_t want = dl < dh ? lo : dh < dl ? hi : (lo & 1u) ? hi : lo;
    ASSERT_EQ(FloatToBFloat16Bits(f), want) << std::hexfloat << f;
    ++checked;
  };
  for (int i = 0; i < 200000; ++i) check(FromBits(rng()));
  for (uint32_t h = 0; h < 0x7f80; h += 7) {  // the midpoints and their neighbours
    const float mid = FromBits((h << 16) | 0x8000u);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      check(f);
      check(-f);
    }
  }
  EXPECT_GT(checked, 200000);
  EXPECT_EQ(FloatToBFloat16Bits(FromBits(0x7f7fffffu)), 0x7f80);  // the largest float: infinity
  EXPECT_EQ(RoundToHalf(1.0f + 1.0f / 512, HalfKind::kBFloat16), 1.0f);  // below half an ulp
  EXPECT_EQ(RoundToHalf(1.0f + 3.0f / 256, HalfKind::kBFloat16), 1.0f + 1.0f / 64);  // tie: even
  EXPECT_TRUE(std::isnan(RoundToHalf(std::nanf(""), HalfKind::kBFloat16)));
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(HalfQuietNaN(HalfKind::kBFloat16))));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(HalfQuietNaN(HalfKind::kFloat16))));
}

// TF32 keeps float32's exponent and 10 mantissa bits, rounding to nearest
// with ties away from zero (cvt.rna): checked against the two neighbours
// worked out in double.
TEST(Tf32, RoundsToNearestTiesAwayFromZero) {
  std::mt19937 rng(32);
  int checked = 0;
  auto check = [&](float f) {
    if (std::isnan(f) || std::isinf(f)) return;
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const float lo = FromBits(x & ~0x1fffu), hi = FromBits((x & ~0x1fffu) + 0x2000u);
    const double dl = std::fabs(double(f) - lo), dh = std::fabs(double(hi) - double(f));
    const float want = dl < dh ? lo : hi;  // a tie goes to the larger magnitude
    const float got = RoundToTf32(f);
    uint32_t g;
    std::memcpy(&g, &got, 4);
    ASSERT_EQ(g & 0x1fffu, 0u) << std::hexfloat << f;
    ASSERT_EQ(got, want) << std::hexfloat << f;
    ++checked;
  };
  for (int i = 0; i < 200000; ++i) check(FromBits(rng()));
  for (uint32_t k = 0; k < (0x7f7fffffu >> 13); k += 97) {  // the midpoints and their neighbours
    const float mid = FromBits((k << 13) | 0x1000u);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      check(f);
      check(-f);
    }
  }
  EXPECT_GT(checked, 200000);
  EXPECT_EQ(RoundToTf32(1.0f + 1.0f / 2048), 1.0f + 1.0f / 1024);  // a tie: away from zero
  EXPECT_EQ(RoundToTf32(-1.0f - 1.0f / 2048), -1.0f - 1.0f / 1024);
  EXPECT_EQ(RoundToTf32(std::nextafter(1.0f + 1.0f / 2048, 0.0f)), 1.0f);
  EXPECT_TRUE(std::isinf(RoundToTf32(FromBits(0x7f7fffffu))));  // the largest float: infinity
  EXPECT_TRUE(std::isinf(RoundToTf32(-std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(RoundToTf32(FromBits(0x7f800001u))));  // a NaN with low payload bits
}

}  // namespace
}  // namespace tunefarm
