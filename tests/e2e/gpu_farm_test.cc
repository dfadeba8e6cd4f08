// On a machine with an NVIDIA GPU (ctest label gpu; skipped, reported as
// skipped, where there is none): a CUDA tuning job through the real farm.
// The server, a compile worker (NVRTC cubins) and a device agent with the
// GPU run as processes on 127.0.0.1; every candidate the GPU search proposes
// is built by the worker, checked against the reference and timed by the
// agent, and lands in the database; the job beats its default schedule.
#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "cli/records_jsonl.h"
#include "common/subprocess.h"
#include "device_agent/runtime/capabilities.h"
#include "gtest/gtest.h"
#include "server/search/gpu_local_measurer.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

using testing::BinPath;
using testing::CommandResult;
using testing::ServerProcess;

TEST(GpuFarm, CudaJobIsBuiltByAWorkerAndTimedByAnAgentWithTheGpu) {
  v1::Capabilities caps = agent::DetectCapabilities();
  if (!caps.has_gpu()) TF_SKIP("no-gpu") << "no GPU on this machine";
  const std::string target = "cuda -arch=" + caps.cuda_archs(0);
  if (absl::Status s = search::GpuLocalMeasurer::Check(*ir::Target::Parse(target)); !s.ok())
    TF_SKIP("gpu-unusable") << s;
  testing::TempDir dir;
  auto server =
      ServerProcess::Start(dir.File("farm.db"), dir.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = (*server)->address();
  auto cli = [&](std::vector<std::string> args) {
    return (*server)->Cli(std::move(args), dir.path());
  };
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir.File("procs.log");
  auto agent = Subprocess::Start(
      {BinPath("tunefarm-agent"), "--server=" + addr, "--key=gpu", "--device_id=g1"}, quiet);
  auto worker =
      Subprocess::Start({BinPath("tunefarm-worker"), "--server=" + addr, "--device_id=w1"}, quiet);
  ASSERT_TRUE(agent.ok() && worker.ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        CommandResult r = cli({"devices"});
        return absl::StrContains(r.out, "g1") && absl::StrContains(r.out, "w1");
      },
      absl::Seconds(60)))
      << testing::ReadFileOrEmpty(dir.File("procs.log"));
  const std::string list = dir.File("w.txt");
  testing::WriteFile(list,
                     "conv2d_nchw(N=1,C=64,H=28,W=28,K=64,R=3,S=3,pad=1)\n"
                     "matmul(M=256,N=256,K=256)\n");
  CommandResult r = cli(
      {"submit", "--workloads=" + list, "--target=" + target, "--device_key=gpu", "--trials=64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        std::string out = cli({"job", "1"}).out;
        return absl::StrContains(out, "succeeded") || absl::StrContains(out, "failed");
      },
      absl::Seconds(400)))
      << cli({"job", "1"}).out << testing::ReadFileOrEmpty(dir.File("procs.log"));
  r = cli({"job", "1"});
  ASSERT_TRUE(absl::StrContains(r.out, "succeeded")) << r.out;
  std::istringstream in(cli({"records", "--job=1", "--limit=1000", "--json"}).out);
  auto records = cli::ParseRecordsJsonl(in, "records --json");
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(records->size(), 64u);
  int ok = 0;
  std::map<std::string, double> best, def;
  for (const v1::Record& rec : *records) {
    EXPECT_NE(rec.status(), v1::MEASURE_STATUS_WRONG_RESULT) << cli::RecordToJsonLine(rec);
    EXPECT_EQ(rec.device_id(), "g1");
    if (rec.status() != v1::MEASURE_STATUS_OK) continue;
    ++ok;
    EXPECT_FALSE(rec.fingerprint().gpu_name().empty());
    EXPECT_FALSE(rec.fingerprint().cuda_toolkit().empty());
    std::vector<double> c(rec.costs_sec().begin(), rec.costs_sec().end());
    std::sort(c.begin(), c.end());
    const double t = c[c.size() / 2];
    if (rec.schedule().is_default()) def[rec.workload_key()] = t;
    if (!best.count(rec.workload_key()) || t < best[rec.workload_key()])
      best[rec.workload_key()] = t;
  }
  EXPECT_GT(ok, 32);
  ASSERT_EQ(def.size(), 2u) << "each task's default schedule is measured first";
  for (const auto& [key, t] : def) {
    EXPECT_LT(best[key], t) << key << ": the GPU search found nothing faster than the default";
  }
  (*agent)->Kill(SIGTERM);
  (*worker)->Kill(SIGTERM);
  ASSERT_TRUE((*agent)->Wait(absl::Seconds(20)).ok());
  ASSERT_TRUE((*worker)->Wait(absl::Seconds(20)).ok());
}

}  // namespace
}  // namespace tunefarm
