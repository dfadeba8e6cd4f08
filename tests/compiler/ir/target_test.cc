#include "compiler/ir/target.h"

#include <random>

#include "gtest/gtest.h"

namespace tunefarm::ir {
namespace {

TEST(Target, LlvmCanonicalForm) {
  auto t = Target::Parse("llvm   -num-cores=6 -mcpu=cortex-a78 -mtriple=aarch64-linux-gnu");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToString(), "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a78 -num-cores=6");
  EXPECT_EQ(t->arch(), "aarch64");
  EXPECT_FALSE(t->is_gpu());
  // Round trip.
  EXPECT_EQ(Target::Parse(t->ToString())->ToString(), t->ToString());
  EXPECT_EQ(Target::Parse("llvm")->ToString(), "llvm -mtriple=x86_64-linux-gnu -mcpu=generic");
  auto attrs = Target::Parse("llvm -mcpu=haswell -mattr=+avx2,+fma");
  ASSERT_TRUE(attrs.ok());
  EXPECT_EQ(attrs->attrs, (std::vector<std::string>{"+avx2", "+fma"}));
  // Feature order and repeats do not make another target.
  EXPECT_EQ(Target::Parse("llvm -mcpu=haswell -mattr=+fma,+avx2,+fma")->ToString(),
            attrs->ToString());
}

// What a board must have to run a target's code, in the names boards
// report (/proc/cpuinfo, hwcaps).
TEST(Target, RequiredCpuFeaturesFromCpuAndAttrs) {
  auto need = [](const std::string& spec) { return Target::Parse(spec)->required_cpu_features(); };
  using V = std::vector<std::string>;
  EXPECT_EQ(need("llvm"), V{});
  EXPECT_EQ(need("llvm -mcpu=haswell"), (V{"avx2", "fma"}));
  EXPECT_EQ(need("llvm -mcpu=znver4"), (V{"avx2", "avx512f", "fma"}));
  EXPECT_EQ(need("llvm -mcpu=x86-64 -mattr=+avx512f"), (V{"avx2", "avx512f", "fma"}));
  EXPECT_EQ(need("llvm -mattr=+amx-tile,-avx2"), V{"amx_tile"});
  EXPECT_EQ(need("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a78"), (V{"asimddp", "asimdhp"}));
  EXPECT_EQ(need("llvm -mtriple=aarch64-linux-gnu -mcpu=carmel"), V{"asimdhp"});
  EXPECT_EQ(need("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v2"),
            (V{"asimddp", "asimdhp", "sve", "sve2"}));
  EXPECT_EQ(need("llvm -mtriple=aarch64-linux-gnu -mcpu=generic -mattr=+i8mm"), V{"i8mm"});
  EXPECT_EQ(need("cuda -arch=sm_87"), V{});
}

TEST(Target, CudaDefaultsAreMaterialised) {
  auto a = Target::Parse("cuda -arch=sm_87");
  auto b = Target::Parse("cuda -max-threads-per-block=1024 -arch=sm_87");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ToString(), b->ToString());
  EXPECT_EQ(a->ToString(),
            "cuda -arch=sm_87 -max-threads-per-block=1024 -max-shared-memory-per-block=49152 "
            "-max-registers-per-thread=255");
  EXPECT_TRUE(a->is_gpu());
  EXPECT_EQ(a->arch(), "sm_87");
}

TEST(Target, ErrorsNameTheField) {
  std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"opencl", "opencl"},
      {"llvm -mtriple=riscv64-linux-gnu", "-mtriple"},
      {"llvm -mcpu", "-name=value"},
      {"llvm -mcpu=a -mcpu=b", "twice"},
      {"llvm -num-cores=0", "-num-cores"},
      {"llvm -num-cores=abc", "-num-cores"},
      {"llvm -mattr=avx2", "-mattr"},
      {"llvm -arch=sm_80", "-arch"},
      {"cuda", "-arch"},
      {"cuda -arch=compute_80", "-arch"},
      {"cuda -arch=sm_87 -max-threads-per-block=4096", "-max-threads-per-block"},
      {"cuda -arch=sm_87 -mcpu=x", "-mcpu"},
  };
  for (const auto& [spec, expect] : cases) {
    auto t = Target::Parse(spec);
    ASSERT_FALSE(t.ok()) << spec;
    EXPECT_NE(std::string(t.status().message()).find(expect), std::string::npos)
        << spec << ": " << t.status().message();
  }
}

// Random target strings: each parses to a canonical form that parses to
// itself, or is refused with a message; never a crash.
TEST(Target, FuzzedSpecsRoundTripOrFail) {
  const std::vector<std::string> words = {
      "llvm", "cuda", "-mtriple=x86_64-linux-gnu", "-mtriple=aarch64-linux-gnu", "-mcpu=znver3",
      "-mcpu=", "-mattr=+avx2,-fma", "-mattr=+", "-num-cores=4", "-num-cores=-1", "-arch=sm_90",
      "-arch=sm_", "-max-threads-per-block=256", "=", "-", "--", "-x=y", " ", "sm_87", "\t"};
  std::mt19937 rng(3);
  int parsed = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string spec = rng() % 5 ? (rng() % 2 ? "llvm" : "cuda") : "";
    int n = rng() % 4;
    for (int j = 0; j < n; ++j) spec += " " + words[rng() % words.size()];
    if (rng() % 4 == 0 && !spec.empty()) spec[rng() % spec.size()] = static_cast<char>(rng() % 128);
    auto t = Target::Parse(spec);
    if (!t.ok()) {
      EXPECT_FALSE(t.status().message().empty());
      continue;
    }
    ++parsed;
    auto again = Target::Parse(t->ToString());
    ASSERT_TRUE(again.ok()) << spec << " -> " << t->ToString() << ": " << again.status();
    EXPECT_EQ(again->ToString(), t->ToString());
  }
  EXPECT_GT(parsed, 200);
}

}  // namespace
}  // namespace tunefarm::ir
