// The bring-up recipes of the docs, executed as written: the shell blocks
// of docs/operations.md ("Bring up a farm") and docs/agent-install.md ("A
// board under qemu") run in one bash, in order, on loopback. A block
// belongs to recipe NAME when the line before its ```sh fence is
// `<!-- recipe: NAME -->`; the block marked `<!-- recipe: NAME settings -->`
// (where the farm lives) is the one block the test replaces, with the same
// variables set to its own ports and directory. So a doc block that stops
// working fails here.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/skip.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

using testing::CommandResult;

struct Recipe {
  std::vector<std::string> settings;  // the variables the settings block assigns
  std::string script;                 // the other blocks, in order
};

// The blocks of recipe `name` in the markdown file `path`.
Recipe ReadRecipe(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  Recipe r;
  std::string line, marker;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "<!-- recipe: ")) {
      marker = std::string(absl::StripSuffix(absl::StripPrefix(line, "<!-- recipe: "), " -->"));
      continue;
    }
    if (line != "```sh" || (marker != name && marker != name + " settings")) {
      marker.clear();
      continue;
    }
    const bool settings = marker != name;
    marker.clear();
    while (std::getline(in, line) && line != "```") {
      if (!settings) {
        absl::StrAppend(&r.script, line, "\n");
      } else if (size_t eq = line.find('='); eq != std::string::npos) {
        std::string var = line.substr(0, eq);
        if (absl::StartsWith(var, "export ")) var = var.substr(7);
        r.settings.push_back(var);
      }
    }
  }
  return r;
}

// A port nothing listens on now, on 127.0.0.1 (the kernel's pick).
int PickPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

class RecipeTest : public ::testing::Test {
 protected:
  // The settings block's variables, as the test sets them.
  std::map<std::string, std::string> Settings() {
    const int grpc_port = PickPort(), http_port = PickPort();
    EXPECT_GT(grpc_port, 0);
    EXPECT_GT(http_port, 0);
    return {{"SERVER", absl::StrCat("127.0.0.1:", grpc_port)},
            {"LISTEN", absl::StrCat("127.0.0.1:", grpc_port)},
            {"HTTP", absl::StrCat("127.0.0.1:", http_port)},
            {"STATE", dir_.File("state")},
            {"SRC", TF_SOURCE_DIR},
            {"PATH", std::string(TF_BIN_DIR) + ":/usr/local/bin:/usr/bin:/bin"},
            {"BUNDLE", TF_AARCH64_AGENT_BUNDLE}};
  }

  // Runs the recipes in order in one bash; every process they start in the
  // background is stopped when it ends.
  CommandResult Run(const std::vector<Recipe>& recipes) {
    const std::map<std::string, std::string> vars = Settings();
    std::string script =
        "set -eE\n"
        "trap 'echo \"recipe: line $LINENO failed: $BASH_COMMAND\" >&2' ERR\n"
        "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
        "unset TUNEFARM_SERVER TUNEFARM_TLS_CA TUNEFARM_TOKEN_FILE\n";
    for (const Recipe& r : recipes) {
      EXPECT_FALSE(r.script.empty());
      for (const std::string& var : r.settings) {
        auto v = vars.find(var);
        EXPECT_TRUE(v != vars.end()) << "the settings block sets " << var
                                     << ", which the test does not know";
        if (v != vars.end()) absl::StrAppend(&script, "export ", var, "='", v->second, "'\n");
      }
    }
    for (const Recipe& r : recipes) absl::StrAppend(&script, r.script);
    testing::WriteFile(dir_.File("recipe.sh"), script);
    return testing::RunCommand({"/bin/bash", dir_.File("recipe.sh")}, dir_.path(),
                               absl::Seconds(600));
  }

  std::string Logs() {
    std::string all;
    for (const char* log : {"server.log", "builder-1.log", "x86-01.log", "orin-01.log"}) {
      absl::StrAppend(&all, "\n== ", log, "\n",
                      testing::ReadFileOrEmpty(dir_.File(std::string("state/") + log)));
    }
    return all;
  }

  testing::TempDir dir_;
};

const std::string kOperations = std::string(TF_SOURCE_DIR) + "/docs/operations.md";
const std::string kAgentInstall = std::string(TF_SOURCE_DIR) + "/docs/agent-install.md";

TEST_F(RecipeTest, OperationsBringsUpATlsFarmWithTokens) {
  const Recipe farm = ReadRecipe(kOperations, "farm");
  EXPECT_EQ(std::set<std::string>(farm.settings.begin(), farm.settings.end()),
            (std::set<std::string>{"SERVER", "LISTEN", "HTTP", "STATE", "SRC", "PATH"}));
  CommandResult r = Run({farm});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << Logs();
  // The job ran on the board and found a best; /metrics answered the
  // reader; after the restart the board is back and the best is still there.
  EXPECT_TRUE(absl::StrContains(r.out, "job 1 \"first\": succeeded")) << r.out;
  std::vector<std::string> bests;  // `best` before and after the restart
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (absl::StrContains(line, " ok ") && absl::StrContains(line, "dense-")) {
      bests.emplace_back(line);
    }
  }
  ASSERT_EQ(bests.size(), 2u) << r.out;
  EXPECT_EQ(bests[0], bests[1]);
  EXPECT_TRUE(absl::StrContains(r.out, "tunefarm_devices{role=\"agent\",state=\"online\"} 1"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "dashboard: http://127.0.0.1:")) << r.out;
  // SIGHUP: the new reader token and certificate, the board still there.
  EXPECT_TRUE(absl::StrContains(r.out, "event=reloaded tokens=6 added=1")) << r.out;
  EXPECT_EQ(testing::Occurrences(r.out, "x86-01 "), 3) << r.out;
  // The server signed, TLS held: nothing ran unverified.
  EXPECT_FALSE(absl::StrContains(Logs(), "event=unverified_code")) << Logs();
}

TEST_F(RecipeTest, AnAarch64BoardUnderQemuJoinsTheFarm) {
  if (access("/usr/bin/qemu-aarch64", X_OK) != 0 || access(TF_AARCH64_AGENT_BUNDLE, R_OK) != 0) {
    TF_SKIP("no-package") << "qemu-user or the aarch64 cross-build of the agent is missing "
                             "(scripts/install-deps.sh installs the arm64 libraries)";
  }
  Recipe farm = ReadRecipe(kOperations, "farm");
  const Recipe board = ReadRecipe(kAgentInstall, "qemu-board");
  EXPECT_EQ(std::set<std::string>(board.settings.begin(), board.settings.end()),
            (std::set<std::string>{"BUNDLE"}));
  CommandResult r = Run({farm, board});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << Logs();
  // Two jobs ran to their end: the x86 board's and the emulated board's,
  // whose kernels its aarch64 runner checked and timed.
  EXPECT_TRUE(absl::StrContains(r.out, "job 1 \"first\": succeeded")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "job 2 \"emulated\": succeeded")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "target: llvm -mtriple=aarch64-linux-gnu")) << r.out;
  EXPECT_TRUE(absl::StrContains(testing::ReadFileOrEmpty(dir_.File("state/orin-01.log")),
                                "status=MEASURE_STATUS_OK"))
      << Logs();
}

// The shipped flags file is one the agent takes, and the unit reads it.
TEST(ShippedUnit, TheAgentTakesItsFlagsFile) {
  const std::string flags = std::string(TF_SOURCE_DIR) + "/scripts/systemd/agent.flags";
  testing::TempDir dir;
  CommandResult r = testing::RunCommand(
      {testing::BinPath("tunefarm-agent"), "--flagfile=" + flags, "--print_capabilities"},
      dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "\"triple\"")) << r.out;
  const std::string unit = testing::ReadFileOrEmpty(std::string(TF_SOURCE_DIR) +
                                                    "/scripts/systemd/tunefarm-agent.service");
  EXPECT_TRUE(absl::StrContains(unit, "--flagfile=/etc/tunefarm/agent.flags")) << unit;
}

}  // namespace
}  // namespace tunefarm
