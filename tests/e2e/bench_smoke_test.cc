// tunefarm-bench still runs and writes the JSON the issue specifies. No
// timing is asserted (this machine is shared and noisy): only that every
// field is there and every number is a number.
#include <algorithm>

#include "absl/strings/match.h"
#include "device_agent/capabilities.h"
#include "gtest/gtest.h"
#include "server/search/gpu_local_measurer.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

TEST(BenchSmoke, KernelsWritesRowsWithEveryField) {
  testing::TempDir dir;
  std::string json = dir.File("bench.json");
  testing::CommandResult r =
      testing::RunCommand({testing::BinPath("tunefarm-bench"), "kernels", "--samples", "2",
                           "--threads", "1", "--only", "gemm_512", "--json", json},
                          dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "gemm_512")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "WRONG")) << r.out;
  std::string text = testing::ReadFileOrEmpty(json);
  for (const char* field :
       {"\"workload\": \"gemm_512\"", "\"threads\": 1", "\"default_gflops\": ",
        "\"sampled_best_gflops\": ", "\"onednn_gflops\": ", "\"openblas_gflops\": ",
        "\"handwritten_gflops\": null", "\"peak_gflops\": ", "\"compile_ms_median\": "}) {
    EXPECT_TRUE(absl::StrContains(text, field)) << field << " missing in\n" << text;
  }
  EXPECT_FALSE(absl::StrContains(text, "\"default_gflops\": null")) << text;
  EXPECT_FALSE(absl::StrContains(text, "\"onednn_gflops\": null")) << text;
}

// The GPU kernels bench: rows with every field on a machine with a GPU;
// elsewhere one line saying why it cannot run, exit code 1.
TEST(BenchSmoke, GpuKernelsRunOrSayWhyNot) {
  testing::TempDir dir;
  std::string json = dir.File("gpu.json");
  testing::CommandResult r =
      testing::RunCommand({testing::BinPath("tunefarm-bench"), "kernels", "--target", "cuda",
                           "--samples", "2", "--only", "gemm_1024", "--json", json},
                          dir.path());
  v1::Capabilities caps = agent::DetectCapabilities();
  absl::Status usable =
      caps.has_gpu()
          ? search::GpuLocalMeasurer::Check(*ir::Target::Parse("cuda -arch=" + caps.cuda_archs(0)))
          : absl::FailedPreconditionError("no GPU on this machine");
  if (!usable.ok()) {
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_TRUE(absl::StrContains(r.err, std::string(usable.message()))) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    GTEST_SKIP() << usable;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::string text = testing::ReadFileOrEmpty(json);
  for (const char* field :
       {"\"workload\": \"gemm_1024\"", "\"default_gflops\": ", "\"sampled_best_gflops\": ",
        "\"library_gflops\": ", "\"library\": \"cublas\""}) {
    EXPECT_TRUE(absl::StrContains(text, field)) << field << " missing in\n" << text;
  }
  EXPECT_FALSE(absl::StrContains(text, "\"default_gflops\": null")) << text;
  EXPECT_FALSE(absl::StrContains(text, "\"library_gflops\": null")) << text;
}

}  // namespace
}  // namespace tunefarm
