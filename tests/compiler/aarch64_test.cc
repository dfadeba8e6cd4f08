// aarch64 kernels built on this x86 machine and actually run, under qemu
// user-mode emulation, against the float64 reference.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "compiler/ir/compute.h"
#include "search/space/random_schedule.h"
#include "compiler/ir/workload_spec.h"
#include "gtest/gtest.h"
#include "tests/compiler/kernel_check.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

constexpr const char* kQemu = "/usr/bin/qemu-aarch64";
constexpr const char* kSysroot = "/usr/aarch64-linux-gnu";

testing::KernelRunFn QemuRunner(const std::string& dir) {
  return [dir](const std::string& so, const std::vector<std::vector<float>>& inputs,
               int64_t n_out) -> absl::StatusOr<std::vector<float>> {
    static int counter = 0;
    std::string base = absl::StrCat(dir, "/run", counter++);
    testing::WriteFile(base + ".so", so);
    std::vector<std::string> argv = {kQemu, "-L", kSysroot, testing::TestBinPath("aarch64_runner"),
                                     base + ".so", base + ".out", std::to_string(n_out)};
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string path = absl::StrCat(base, ".in", i);
      testing::WriteFile(path, std::string(reinterpret_cast<const char*>(inputs[i].data()),
                                           inputs[i].size() * 4));
      argv.push_back(path);
    }
    testing::CommandResult r = testing::RunCommand(argv, dir);
    if (r.exit_code != 0) {
      return absl::InternalError(absl::StrCat("qemu run failed (", r.exit_code, "): ", r.err));
    }
    std::string bytes = testing::ReadFileOrEmpty(base + ".out");
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
  };
}

bool QemuAvailable() {
  return access(kQemu, X_OK) == 0 && access(testing::TestBinPath("aarch64_runner").c_str(), X_OK) == 0;
}

TEST(Aarch64, KernelsRunUnderQemuAndMatchTheReference) {
  if (!QemuAvailable()) TF_SKIP("no-package") << "qemu-user or the aarch64 cross compiler is not installed";
  testing::TempDir dir;
  const std::vector<std::string> specs = {
      "conv2d_nchw(N=1,C=8,H=10,W=10,K=12,R=3,S=3,pad=1)+bias+relu",
      "depthwise_conv2d_nchw(N=1,C=12,H=9,W=9,R=3,S=3,stride=2,pad=1)+hardswish",
      "dense(M=3,N=29,K=17)+bias+silu",
      "max_pool2d_nchw(N=1,C=4,H=9,W=9,R=3,S=3,stride=2,pad=1)"};
  std::mt19937_64 rng(7);
  int runs = 0;
  for (const char* cpu : {"cortex-a78", "carmel", "neoverse-n1"}) {
    auto target = ir::Target::Parse(absl::StrCat("llvm -mtriple=aarch64-linux-gnu -mcpu=", cpu));
    ASSERT_TRUE(target.ok());
    for (const std::string& spec : specs) {
      auto w = ir::ParseWorkloadSpec(spec);
      ASSERT_TRUE(w.ok());
      // The default schedule and one random schedule of each.
      auto check = testing::CheckKernelWith(*w, nullptr, *target, rng(), 1e-4, QemuRunner(dir.path()));
      ASSERT_TRUE(check.ok()) << cpu << " " << spec << ": " << check.status();
      auto dag = ir::BuildComputeDAG(*w);
      schedule::Trace random = search::space::RandomSchedule(*dag, *target, rng);
      check = testing::CheckKernelWith(*w, &random, *target, rng(), 1e-4, QemuRunner(dir.path()));
      ASSERT_TRUE(check.ok()) << cpu << " " << spec << " " << schedule::ToProto(random).ShortDebugString()
                              << ": " << check.status();
      runs += 2;
    }
  }
  std::printf("aarch64 under qemu: %d kernels matched the reference\n", runs);
}

}  // namespace
}  // namespace tunefarm
