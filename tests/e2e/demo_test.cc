// `make demo` (scripts/demo.sh) run as a user would, with few trials: it
// tunes for the target `tunefarm version` calls this machine's, and each
// "next" hint it prints works after the farm has stopped: a server on the
// database it leaves answers `best` for the job, and the `tune` hint
// continues the job's search from its records (the same target string).
#include <filesystem>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

using testing::BinPath;
using testing::CommandResult;
using testing::RunCommand;

// The hint line that runs `what` (e.g. "tunefarm best "), without its
// leading spaces; "" when there is none.
std::string Hint(const std::string& out, const std::string& what) {
  std::smatch m;
  std::regex line("\n  (\\S*" + what + "[^\n]*)");
  return std::regex_search(out, m, line) ? m[1].str() : "";
}

TEST(Demo, HintsWorkAfterItEndsAndTheTargetsAgree) {
  testing::TempDir dir;
  const std::string build = std::filesystem::path(BinPath("tunefarm")).parent_path().parent_path();
  const std::string run = dir.File("run");
  CommandResult demo = RunCommand({"/bin/bash", "-c",
                                   absl::StrCat("cd '", TF_SOURCE_DIR, "' && DEMO_RUN='", run,
                                                "' DEMO_TRIALS=8 scripts/demo.sh '", build, "'")},
                                  dir.path());
  ASSERT_EQ(demo.exit_code, 0) << demo.out << demo.err;
  EXPECT_TRUE(absl::StrContains(demo.out, "succeeded")) << demo.out;

  // The demo's target is the one `version` names for this machine.
  CommandResult version = RunCommand({BinPath("tunefarm"), "version"}, dir.path());
  std::smatch host;
  ASSERT_TRUE(std::regex_search(version.out, host, std::regex("host target: ([^\n]+)")))
      << version.out;
  const std::string target = host[1].str();
  EXPECT_TRUE(absl::StrContains(demo.out, "for target: " + target + "\n")) << demo.out;

  // A server on the database the hint names answers `best` as the hint asks.
  const std::string server_hint = Hint(demo.out, "tunefarm-server ");
  std::smatch db;
  ASSERT_TRUE(std::regex_search(server_hint, db, std::regex("--db=(\\S+)"))) << demo.out;
  ASSERT_TRUE(std::filesystem::exists(db[1].str())) << server_hint;
  auto server = testing::ServerProcess::Start(db[1].str(), dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string best_hint = Hint(demo.out, "tunefarm best ");
  EXPECT_TRUE(absl::StrContains(best_hint, "--target=\"" + target + "\"")) << best_hint;
  CommandResult best = (*server)->Cli({"best", "--job=1", "--target=" + target}, dir.path());
  ASSERT_EQ(best.exit_code, 0) << best.err;
  for (const char* key : {"conv2d-", "dense-"})
    EXPECT_TRUE(absl::StrContains(best.out, key)) << best.out;

  // The tune hint, run as printed (fewer trials), finds the job's records:
  // `--target=host --threads=N` is the demo's target.
  std::string tune_hint = Hint(demo.out, "tunefarm tune ");
  ASSERT_FALSE(tune_hint.empty()) << demo.out;
  tune_hint = absl::StrReplaceAll(tune_hint, {{"--trials=64", "--trials=2"}});
  CommandResult tune = RunCommand(
      {"/bin/bash", "-c", absl::StrCat("cd '", TF_SOURCE_DIR, "' && ", tune_hint)}, dir.path());
  ASSERT_EQ(tune.exit_code, 0) << tune_hint << "\n" << tune.out << tune.err;
  EXPECT_TRUE(absl::StrContains(tune.out, " on " + target + ":")) << tune.out;
  std::smatch earlier;
  ASSERT_TRUE(std::regex_search(tune.out, earlier,
                                std::regex("; ([0-9]+) earlier records of this workload")))
      << tune.out;
  EXPECT_GT(std::stoi(earlier[1].str()), 0) << tune.out;
}

}  // namespace
}  // namespace tunefarm
