// The device agent cross-built for aarch64 (cmake/aarch64-linux-gnu.cmake)
// and packed as a board gets it (scripts/make-agent-bundle.sh: the agent
// with its libraries and loader), run as a Jetson-like board under
// qemu-user the way docs/agent-install.md says (TUNEFARM_EMULATOR): it
// registers with a real server, reporting its triple and CPU features; a
// real x86 worker builds the aarch64 kernels of a tuning job; the agent's
// aarch64 runner checks each against the reference and times it. Timings
// under emulation mean nothing; the path is what is tested.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "absl/strings/match.h"
#include "cli/records_jsonl.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

using testing::BinPath;
using testing::CommandResult;
using testing::ServerProcess;

constexpr const char* kQemu = "/usr/bin/qemu-aarch64";
constexpr const char* kTarget = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a78";

std::string Aarch64Bin(const std::string& name) {
  return std::string(TF_AARCH64_AGENT_BIN) + "/" + name;
}

class Aarch64Agent : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kQemu, X_OK) != 0 || access(Aarch64Bin("tunefarm-agent").c_str(), X_OK) != 0 ||
        access(TF_AARCH64_AGENT_BUNDLE, R_OK) != 0) {
      TF_SKIP("no-package") << "qemu-user or the aarch64 cross-build of the agent is missing "
                               "(scripts/install-deps.sh installs the arm64 libraries)";
    }
    // The tarball as a board unpacks it.
    CommandResult unpack =
        testing::RunCommand({"/bin/tar", "-C", dir_.path(), "-xzf", TF_AARCH64_AGENT_BUNDLE},
                            dir_.path());
    ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
    bundle_ = dir_.File("tunefarm-agent");
  }

  // The aarch64 agent under qemu-user, as board `id` of key `key`.
  absl::StatusOr<std::unique_ptr<Subprocess>> StartAgent(const std::string& addr,
                                                         const std::string& key,
                                                         const std::string& id,
                                                         std::vector<std::string> extra = {}) {
    Subprocess::Options quiet;
    quiet.capture_stdout = false;
    quiet.stderr_path = dir_.File(id + ".log");
    std::vector<std::string> argv = {"/usr/bin/env",
                                     std::string("TUNEFARM_EMULATOR=") + kQemu,
                                     bundle_ + "/bin/tunefarm-agent",
                                     "--server=" + addr,
                                     "--key=" + key,
                                     "--device_id=" + id};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return Subprocess::Start(argv, quiet);
  }

  std::vector<v1::Record> JobRecords(const ServerProcess& server, int job) {
    CommandResult out = server.Cli(
        {"records", "--job=" + std::to_string(job), "--limit=1000", "--json"}, dir_.path());
    std::istringstream in(out.out);
    auto parsed = cli::ParseRecordsJsonl(in, "records --json");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? *parsed : std::vector<v1::Record>();
  }

  testing::TempDir dir_;
  std::string bundle_;  // the unpacked tarball
};

// Every library the bundled programs load comes from the bundle: the
// board's own libraries (older on JetPack) never matter.
TEST_F(Aarch64Agent, TheBundleLoadsOnlyItsOwnLibraries) {
  const std::string lib = bundle_ + "/lib";
  for (const std::string program :
       {"tunefarm-agent", "tunefarm-runner", "tunefarm-model-runner"}) {
    CommandResult list = testing::RunCommand(
        {kQemu, lib + "/ld-linux-aarch64.so.1", "--library-path", lib, "--list",
         bundle_ + "/libexec/" + program},
        dir_.path());
    ASSERT_EQ(list.exit_code, 0) << program << ": " << list.out << list.err;
    int resolved = 0;
    std::istringstream lines(list.out);
    for (std::string line; std::getline(lines, line);) {
      const size_t arrow = line.find("=> ");
      if (arrow == std::string::npos) continue;
      ++resolved;
      EXPECT_TRUE(absl::StartsWith(line.substr(arrow + 3), lib + "/")) << program << ": " << line;
    }
    EXPECT_GE(resolved, 3) << program << ": " << list.out;
  }
}

// An aarch64 agent that cannot execute its aarch64 runner (no binfmt_misc
// on an x86-64 host) stops at start, saying why and what to give, instead
// of registering and failing every trial.
TEST_F(Aarch64Agent, ARunnerThatCannotRunStopsTheAgentAtStart) {
  // Where binfmt_misc runs aarch64 programs, the runner runs directly.
  if (access("/proc/sys/fs/binfmt_misc/qemu-aarch64", F_OK) != 0) {
    CommandResult direct = testing::RunCommand(
        {kQemu, Aarch64Bin("tunefarm-agent"), "--key=k", "--insecure", "--server=127.0.0.1:1"},
        dir_.path());
    EXPECT_EQ(direct.exit_code, 2) << direct.err;
    EXPECT_EQ(testing::Occurrences(direct.err, "\n"), 1) << direct.err;
    EXPECT_TRUE(absl::StrContains(direct.err, "Exec format error")) << direct.err;
    EXPECT_TRUE(absl::StrContains(direct.err, "--runner_wrapper=qemu-aarch64")) << direct.err;
    EXPECT_TRUE(absl::StrContains(direct.err, "binfmt_misc")) << direct.err;
  }

  // A wrapper that does not run it is named too.
  CommandResult wrong = testing::RunCommand(
      {kQemu, Aarch64Bin("tunefarm-agent"), "--key=k", "--insecure", "--server=127.0.0.1:1",
       "--runner_wrapper=/bin/true"},
      dir_.path());
  EXPECT_EQ(wrong.exit_code, 2) << wrong.err;
  EXPECT_TRUE(absl::StrContains(wrong.err, "/bin/true " + Aarch64Bin("tunefarm-runner")))
      << wrong.err;
}

TEST_F(Aarch64Agent, TunesAJobAsAJetsonLikeBoard) {
  auto server = ServerProcess::Start(dir_.File("farm.db"), dir_.path());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = (*server)->address();
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir_.File("worker.log");
  auto worker = Subprocess::Start(
      {BinPath("tunefarm-worker"), "--server=" + addr, "--device_id=x86-worker", "--threads=2"},
      quiet);
  ASSERT_TRUE(worker.ok()) << worker.status();
  // qemu-user refuses seccomp filters: the emulated board runs kernels
  // only when told it may without one. The strict one (the default)
  // refuses to run them.
  auto emulated = StartAgent(addr, "jetson-emu", "orin-emu",
                             {"--seccomp_optional", (*server)->server_key_flag()});
  auto strict = StartAgent(addr, "jetson-strict", "orin-strict", {(*server)->server_key_flag()});
  ASSERT_TRUE(emulated.ok() && strict.ok());

  std::string devices;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        devices = (*server)->Cli({"devices"}, dir_.path()).out;
        return absl::StrContains(devices, "orin-emu") && absl::StrContains(devices, "orin-strict");
      },
      absl::Seconds(120)))
      << devices << testing::ReadFileOrEmpty(dir_.File("orin-emu.log"));
  for (const std::string& line : {std::string("orin-emu"), std::string("orin-strict")}) {
    const size_t at = devices.find(line);
    const std::string row = devices.substr(at, devices.find('\n', at) - at);
    EXPECT_TRUE(absl::StrContains(row, "aarch64-linux-gnu")) << row;
    EXPECT_TRUE(absl::StrContains(row, "asimd")) << row;  // from the hwcaps
    EXPECT_TRUE(absl::StrContains(row, "no GPU")) << row;
  }

  const std::string spec = dir_.File("job.json");
  testing::WriteFile(spec, R"({"name": "orin", "tasks": [
    {"workload": {"op": "OP_KIND_DENSE", "inputs": [{"shape": [8, 48]}, {"shape": [40, 48]}]}}]})");
  // x86 code for the board: refused at submit, naming what it is.
  CommandResult x86 = (*server)->Cli(
      {"submit", spec, "--target=llvm", "--device_key=jetson-emu", "--trials=8"}, dir_.path());
  EXPECT_EQ(x86.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(x86.err, "orin-emu is aarch64-linux-gnu")) << x86.err;

  CommandResult r = (*server)->Cli(
      {"submit", spec, std::string("--target=") + kTarget, "--device_key=jetson-emu", "--trials=8"},
      dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = (*server)->Cli({"submit", spec, std::string("--target=") + kTarget,
                      "--device_key=jetson-strict", "--trials=2"},
                     dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return absl::StrContains((*server)->Cli({"job", "1"}, dir_.path()).out, "succeeded") &&
               JobRecords(**server, 2).size() >= 2;
      },
      absl::Seconds(300)))
      << (*server)->Cli({"job", "1"}, dir_.path()).out
      << testing::ReadFileOrEmpty(dir_.File("orin-emu.log"))
      << testing::ReadFileOrEmpty(dir_.File("worker.log"));

  // Every aarch64 kernel ran and matched the reference on the emulated
  // board. The one failure allowed is a timeout: qemu-user runs a kernel
  // some 10-50x slower than the board would, so on a loaded machine a
  // candidate can pass its time limit there.
  const std::vector<v1::Record> emu = JobRecords(**server, 1);
  EXPECT_EQ(emu.size(), 8u);
  int ok = 0;
  for (const v1::Record& rec : emu) {
    const std::string line = cli::RecordToJsonLine(rec);
    EXPECT_TRUE(rec.status() == v1::MEASURE_STATUS_OK || rec.status() == v1::MEASURE_STATUS_TIMEOUT)
        << line;
    if (rec.status() != v1::MEASURE_STATUS_OK)
      std::printf("allowed on the emulated board: %s: %s\n",
                  v1::MeasureStatus_Name(rec.status()).c_str(), rec.error().c_str());
    EXPECT_EQ(rec.device_key(), "jetson-emu") << line;
    EXPECT_TRUE(absl::StrContains(rec.target().spec(), "aarch64")) << line;
    if (rec.status() == v1::MEASURE_STATUS_OK) {
      ++ok;
      EXPECT_GT(rec.costs_sec_size(), 0) << line;
      EXPECT_EQ(rec.fingerprint().cpu_model(), "aarch64") << line;
    }
  }
  EXPECT_GE(ok, 6) << "most candidates run well inside their time limit, even emulated";
  // Without --seccomp_optional, no code ran without the filter.
  for (const v1::Record& rec : JobRecords(**server, 2)) {
    EXPECT_EQ(rec.status(), v1::MEASURE_STATUS_RUNTIME_ERROR) << cli::RecordToJsonLine(rec);
    EXPECT_TRUE(absl::StrContains(rec.error(), "seccomp")) << cli::RecordToJsonLine(rec);
  }

  for (auto* p : {&*emulated, &*strict, &*worker}) {
    (*p)->Kill(SIGTERM);
    auto st = (*p)->Wait(absl::Seconds(30));
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(DescribeWaitStatus(*st), "exited with 0");
  }
}

}  // namespace
}  // namespace tunefarm
