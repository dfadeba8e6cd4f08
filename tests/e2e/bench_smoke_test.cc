// tunefarm-bench still runs and writes the JSON the issue specifies. No
// timing is asserted (this machine is shared and noisy): only that every
// field is there and every number is a number.
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

TEST(BenchSmoke, KernelsWritesRowsWithEveryField) {
  testing::TempDir dir;
  std::string json = dir.File("bench.json");
  testing::CommandResult r = testing::RunCommand(
      {testing::BinPath("tunefarm-bench"), "kernels", "--samples", "2", "--threads", "1",
       "--only", "gemm_512", "--json", json},
      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "gemm_512")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "WRONG")) << r.out;
  std::string text = testing::ReadFileOrEmpty(json);
  for (const char* field : {"\"workload\": \"gemm_512\"", "\"threads\": 1", "\"default_gflops\": ",
                            "\"sampled_best_gflops\": ", "\"onednn_gflops\": ",
                            "\"openblas_gflops\": ", "\"handwritten_gflops\": null",
                            "\"peak_gflops\": ", "\"compile_ms_median\": "}) {
    EXPECT_TRUE(absl::StrContains(text, field)) << field << " missing in\n" << text;
  }
  EXPECT_FALSE(absl::StrContains(text, "\"default_gflops\": null")) << text;
  EXPECT_FALSE(absl::StrContains(text, "\"onednn_gflops\": null")) << text;
}

}  // namespace
}  // namespace tunefarm
