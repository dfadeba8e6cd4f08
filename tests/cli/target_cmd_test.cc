// `tunefarm target`: the target string named from a board's capabilities,
// checked against the target parser (the string must parse to what it says).
#include "cli/target_cmd.h"

#include "compiler/ir/target.h"
#include "gtest/gtest.h"

namespace tunefarm::cli {
namespace {

v1::Capabilities Board(const std::string& triple, const std::string& part, int cores,
                       std::vector<std::string> features = {}) {
  v1::Capabilities c;
  c.set_triple(triple);
  c.set_cpu_part(part);
  c.set_cores(cores);
  for (const std::string& f : features) c.add_features(f);
  return c;
}

ir::Target Parsed(const SuggestedTarget& t) {
  absl::StatusOr<ir::Target> p = ir::Target::Parse(t.spec);
  EXPECT_TRUE(p.ok()) << t.spec << ": " << p.status();
  return p.ok() ? *p : ir::Target();
}

TEST(SuggestTarget, JetsonCoresByTheirPartNumbers) {
  // An Orin NX 8GB (six Cortex-A78AE) and an AGX Xavier (eight Carmel).
  auto orin = SuggestTarget(Board("aarch64-linux-gnu", "0x41:0xd42", 6), false);
  ASSERT_TRUE(orin.ok()) << orin.status();
  EXPECT_EQ(orin->spec, "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a78ae -num-cores=6");
  EXPECT_EQ(Parsed(*orin).cpu, "cortex-a78ae");
  EXPECT_EQ(Parsed(*orin).num_cores, 6);
  auto xavier = SuggestTarget(Board("aarch64-linux-gnu", "0x4E:0x004", 8), false);
  ASSERT_TRUE(xavier.ok());
  EXPECT_EQ(Parsed(*xavier).cpu, "carmel");
  EXPECT_NE(xavier->why.find("0x4E:0x004"), std::string::npos) << xavier->why;
}

TEST(SuggestTarget, AnArmCoreItCannotNameIsGenericAndSaysSo) {
  for (const std::string part : {"", "0x61:0x022"}) {
    auto t = SuggestTarget(Board("aarch64-linux-gnu", part, 4), false);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->spec, "llvm -mtriple=aarch64-linux-gnu -num-cores=4");
    EXPECT_NE(t->why.find("generic"), std::string::npos) << t->why;
  }
}

TEST(SuggestTarget, X86LevelsByFeatures) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"}, "x86-64-v4"},
      {{"sse4_2", "avx", "avx2", "fma", "avx512f"}, "x86-64-v3"},  // no BW/VL: not v4
      {{"sse4_2", "avx"}, "x86-64-v2"},
      {{}, "x86-64"}};
  for (const auto& [features, cpu] : cases) {
    auto t = SuggestTarget(Board("x86_64-linux-gnu", "", 16, features), false);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(Parsed(*t).cpu, cpu) << t->spec;
    EXPECT_EQ(Parsed(*t).num_cores, 16);
  }
  // A v4 target makes full-width AVX-512 code; v3 does not.
  EXPECT_TRUE(Parsed(*SuggestTarget(Board("x86_64-linux-gnu", "", 2, cases[0].first), false))
                  .wide_vectors());
}

TEST(SuggestTarget, GpuTargetsNeedAGpu) {
  v1::Capabilities orin = Board("aarch64-linux-gnu", "0x41:0xd42", 6);
  EXPECT_FALSE(SuggestTarget(orin, true).ok());
  orin.set_has_gpu(true);
  orin.set_gpu_name("Orin");
  orin.add_cuda_archs("sm_87");
  orin.set_gpu_shared_memory_per_block(166912);
  auto t = SuggestTarget(orin, true);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->spec, "cuda -arch=sm_87 -max-shared-memory-per-block=166912");
  EXPECT_EQ(Parsed(*t).sm, 87);
  EXPECT_EQ(Parsed(*t).max_shared_memory_per_block, 166912);
  EXPECT_FALSE(SuggestTarget(v1::Capabilities(), false).ok());  // no triple
}

}  // namespace
}  // namespace tunefarm::cli
