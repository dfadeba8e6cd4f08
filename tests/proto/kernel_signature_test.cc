// The signature helpers every runtime uses to call a kernel: the one input
// generator (the same values on every machine), the packing of constants and
// the bounds checked before any buffer is made.
#include "proto/kernel_signature.h"

#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "common/float16.h"
#include "common/random_fill.h"
#include "gtest/gtest.h"

namespace tunefarm {
namespace {

// Values from an independent implementation of the splitmix64 sequence
// (Python, from the algorithm's published constants): a change of the
// generator would change every reference a board has cached.
TEST(FillUniform, GivesTheSameValuesEverywhere) {
  float v[4];
  FillUniform(1, 0, v, 4);
  EXPECT_EQ(v[0], 0.49156343936920166f);
  EXPECT_EQ(v[1], 0.9420053958892822f);
  EXPECT_EQ(v[2], -0.1112816333770752f);
  EXPECT_EQ(v[3], -0.11147069931030273f);
  FillUniform(1, 1, v, 2);
  EXPECT_EQ(v[0], 0.27655887603759766f);
  EXPECT_EQ(v[1], 0.9037550687789917f);
  FillUniform(2026, 3, v, 2);
  EXPECT_EQ(v[0], 0.5402356386184692f);
  EXPECT_EQ(v[1], -0.39708149433135986f);
}

TEST(FillUniform, StaysInRangeNeverZeroAndSpreads) {
  std::vector<float> v(200000);
  FillUniform(7, 2, v.data(), int64_t(v.size()));
  double sum = 0;
  std::set<float> distinct;
  for (float x : v) {
    ASSERT_GE(x, -1.0f);
    ASSERT_LT(x, 1.0f);
    ASSERT_NE(x, 0.0f);
    sum += x;
    distinct.insert(x);
  }
  EXPECT_LT(std::fabs(sum / double(v.size())), 0.01);
  EXPECT_GT(distinct.size(), v.size() * 9 / 10);
}

v1::KernelArgument Arg(std::vector<int64_t> shape, std::vector<int64_t> block = {},
                       std::vector<int> inner = {}) {
  v1::KernelArgument a;
  a.set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t e : shape) a.add_shape(e);
  for (int64_t b : block) a.add_pack_block(b);
  for (int d : inner) a.add_pack_inner(d);
  return a;
}

// [5, 3] blocked by 2 along dimension 0: packed [3][3][2], element (i, j)
// at [i / 2][j][i % 2], the sixth row zero.
TEST(PackArgument, BlocksADimensionAndZeroPadsTheRest) {
  v1::KernelArgument a = Arg({5, 3}, {2, 0}, {0});
  EXPECT_EQ(KernelShape(a), (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(LogicalElements(a), 15);
  EXPECT_EQ(KernelElements(a), 18);
  std::vector<float> logical(15);
  for (int i = 0; i < 15; ++i) logical[size_t(i)] = float(i + 1);
  std::vector<float> packed = PackArgument(a, logical);
  ASSERT_EQ(packed.size(), 18u);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 3; ++j) {
      float want = i < 5 ? logical[size_t(i * 3 + j)] : 0.0f;
      EXPECT_EQ(packed[size_t(((i / 2) * 3 + j) * 2 + i % 2)], want) << i << "," << j;
    }
  }
  // Not packed: passed as it is.
  EXPECT_EQ(PackArgument(Arg({5, 3}), logical), logical);
}

// Two blocked dimensions, inner order reversed: (i, j) of [4, 6] with blocks
// (2, 3) and pack_inner {1, 0} lands at [i / 2][j / 3][j % 3][i % 2].
TEST(PackArgument, FollowsTheInnerOrder) {
  v1::KernelArgument a = Arg({4, 6}, {2, 3}, {1, 0});
  EXPECT_EQ(KernelShape(a), (std::vector<int64_t>{2, 2, 3, 2}));
  std::vector<float> logical(24);
  for (int i = 0; i < 24; ++i) logical[size_t(i)] = float(i);
  std::vector<float> packed = PackArgument(a, logical);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 6; ++j) {
      size_t at = size_t((((i / 2) * 2 + j / 3) * 3 + j % 3) * 2 + i % 2);
      EXPECT_EQ(packed[at], logical[size_t(i * 6 + j)]) << i << "," << j;
    }
  }
}

TEST(CheckSignature, RefusesWhatCannotBeRunNamingTheArgument) {
  auto refused = [](const v1::KernelSignature& s, const std::string& why) {
    absl::Status st = CheckSignature(s, int64_t{1} << 28);
    EXPECT_FALSE(st.ok()) << why;
    EXPECT_TRUE(absl::StrContains(st.message(), why)) << st;
  };
  v1::KernelSignature s;
  refused(s, "no arguments");
  *s.add_args() = Arg({4, 4});
  *s.add_args() = Arg({4, 4});
  EXPECT_TRUE(CheckSignature(s, int64_t{1} << 28).ok());
  v1::KernelSignature t = s;
  t.mutable_args(1)->set_dtype(v1::DTYPE_FLOAT16);
  EXPECT_TRUE(CheckSignature(t, int64_t{1} << 28).ok());
  t.mutable_args(1)->set_dtype(v1::DTYPE_BFLOAT16);
  EXPECT_TRUE(CheckSignature(t, int64_t{1} << 28).ok());
  t.mutable_args(1)->set_dtype(v1::DTYPE_INT8);
  refused(t, "kernel argument 1: only float32, float16 and bfloat16");
  t = s;
  t.mutable_args(0)->set_shape(1, 0);
  refused(t, "kernel argument 0: bad or too large shape");
  t = s;
  t.mutable_args(0)->set_shape(0, int64_t{1} << 20);
  t.mutable_args(0)->set_shape(1, int64_t{1} << 20);
  refused(t, "too large");
  t = s;
  *t.mutable_args(0) = Arg({4, 4}, {2, 0}, {});
  refused(t, "pack_inner must name each split dimension");
  *t.mutable_args(0) = Arg({4, 4}, {2, 0}, {1});
  refused(t, "pack_inner must name each split dimension once");
  *t.mutable_args(0) = Arg({4, 4}, {2}, {0});
  refused(t, "one entry per dimension");
  // Within the bound alone, but not together.
  t = s;
  *t.mutable_args(0) = Arg({1 << 13, 1 << 14});
  *t.mutable_args(1) = Arg({1 << 13, 1 << 14});
  EXPECT_TRUE(CheckSignature(t, int64_t{1} << 28).ok());
  *t.add_args() = Arg({2});
  refused(t, "the kernel's arguments are too large");
}

TEST(RandomInputs, OnePerInputFromItsStream) {
  v1::KernelSignature s;
  *s.add_args() = Arg({3, 5});
  *s.add_args() = Arg({7});
  *s.add_args() = Arg({2, 2});  // the output: no input made
  std::vector<std::vector<float>> in = RandomInputs(s, 11);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].size(), 15u);
  EXPECT_EQ(in[1].size(), 7u);
  std::vector<float> want(7);
  FillUniform(11, 1, want.data(), 7);
  EXPECT_EQ(in[1], want);
}

// A float16 argument's inputs are the float16 values nearest the float32
// ones, never zero; the float32 arguments of the same signature are as before.
TEST(RandomInputs, Float16ArgumentsHoldFloat16Values) {
  v1::KernelSignature s;
  *s.add_args() = Arg({4096});
  *s.add_args() = Arg({4096});
  *s.add_args() = Arg({1});
  s.mutable_args(1)->set_dtype(v1::DTYPE_FLOAT16);
  std::vector<std::vector<float>> in = RandomInputs(s, 5);
  ASSERT_EQ(in.size(), 2u);
  std::vector<float> plain(4096);
  FillUniform(5, 1, plain.data(), 4096);
  int moved = 0;
  for (size_t i = 0; i < 4096; ++i) {
    EXPECT_EQ(in[1][i], RoundToFloat16(in[1][i]));
    EXPECT_NE(in[1][i], 0.0f);
    if (plain[i] != RoundToFloat16(plain[i])) {
      EXPECT_EQ(in[1][i], RoundToFloat16(plain[i]) == 0.0f ? 0.5f : RoundToFloat16(plain[i]));
      ++moved;
    }
  }
  EXPECT_GT(moved, 3000);  // a 2^-23 grid is mostly not float16
  std::vector<float> first(4096);
  FillUniform(5, 0, first.data(), 4096);
  EXPECT_EQ(in[0], first);
}

// A tf32 signature's inputs are TF32 values (13 low bits zero), so the
// kernel's products are exact; without the flag the same seed gives the
// float32 values.
TEST(RandomInputs, Tf32SignaturesHoldTf32Values) {
  v1::KernelSignature s;
  *s.add_args() = Arg({4096});
  *s.add_args() = Arg({1});
  s.set_tf32(true);
  std::vector<float> in = RandomInputs(s, 9)[0];
  std::vector<float> plain(4096);
  FillUniform(9, 0, plain.data(), 4096);
  int moved = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], 4);
    EXPECT_EQ(bits & 0x1fffu, 0u) << in[i];
    EXPECT_NE(in[i], 0.0f);
    EXPECT_EQ(in[i], RoundToTf32(plain[i]) == 0.0f ? 0.5f : RoundToTf32(plain[i]));
    moved += in[i] != plain[i];
  }
  EXPECT_GT(moved, 3000);
  s.set_tf32(false);
  EXPECT_EQ(RandomInputs(s, 9)[0], plain);
}

}  // namespace
}  // namespace tunefarm
