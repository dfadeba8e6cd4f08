#include "compiler/codegen/llvm_target.h"

#include "compiler/codegen/nvrtc_info.h"
#include "gtest/gtest.h"
#include "tests/testing/skip.h"

namespace tunefarm::codegen {
namespace {

absl::Status Check(const std::string& spec) {
  auto t = ir::Target::Parse(spec);
  if (!t.ok()) return t.status();
  return CheckLLVMTarget(*t);
}

TEST(LLVMTarget, KnownCpusAndFeatures) {
  EXPECT_EQ(LLVMVersion().substr(0, 3), "19.");
  EXPECT_TRUE(Check("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512").ok());
  EXPECT_TRUE(Check("llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids").ok());
  EXPECT_TRUE(Check("llvm -mtriple=x86_64-linux-gnu -mcpu=znver3 -mattr=+avx2,-avx512f").ok());
  EXPECT_TRUE(Check("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a78").ok());
  EXPECT_TRUE(Check("llvm -mtriple=aarch64-linux-gnu -mcpu=carmel").ok());
  EXPECT_TRUE(Check("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1 -mattr=+dotprod").ok());
}

TEST(LLVMTarget, UnknownCpuOrFeatureIsNamed) {
  absl::Status s = Check("llvm -mtriple=x86_64-linux-gnu -mcpu=cortex-a78");
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(std::string(s.message()).find("-mcpu='cortex-a78'"), std::string::npos) << s;
  s = Check("llvm -mtriple=aarch64-linux-gnu -mattr=+avx512f");
  EXPECT_NE(std::string(s.message()).find("avx512f"), std::string::npos) << s;
}

TEST(NvrtcInfo, ArchListMatchesBuild) {
  if (!HaveNvrtc()) TF_SKIP("no-cuda-toolkit") << "built without CUDA";
  std::vector<std::string> archs = NvrtcSupportedArchs();
  ASSERT_FALSE(archs.empty());
  for (const std::string& a : archs) EXPECT_EQ(a.rfind("sm_", 0), 0u) << a;
  EXPECT_FALSE(NvrtcVersion().empty());
}

}  // namespace
}  // namespace tunefarm::codegen
