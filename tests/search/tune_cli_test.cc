// `tunefarm tune` end to end: the real binary tunes on this machine, stores
// every trial in the log database, and a second run resumes from those
// records without measuring any schedule twice.
#include <set>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/tuning_log.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

std::vector<v1::Record> AllRecords(const std::string& db) {
  server::TuningLog::Options o;
  o.path = db;
  auto log = server::TuningLog::Open(o);
  EXPECT_TRUE(log.ok()) << log.status();
  server::TuningLog::RecordQuery q;
  q.limit = 10000;
  auto r = (*log)->ListRecords(q);
  EXPECT_TRUE(r.ok());
  return *r;
}

TEST(TuneCli, StoresEveryTrialAndNeverRemeasures) {
  testing::TempDir dir;
  std::string db = dir.File("t.db");
  std::vector<std::string> cmd = {testing::BinPath("tunefarm"),
                                  "tune",
                                  "--workload",
                                  "matmul(M=32,N=48,K=16)",
                                  "--trials",
                                  "12",
                                  "--batch",
                                  "4",
                                  "--db",
                                  db};
  testing::CommandResult r = testing::RunCommand(cmd, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "default schedule")) << r.out;
  std::vector<v1::Record> first = AllRecords(db);
  ASSERT_EQ(first.size(), 12u);
  EXPECT_TRUE(first[0].schedule().is_default());
  r = testing::RunCommand(cmd, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "12 earlier records of this workload")) << r.out;
  std::vector<v1::Record> all = AllRecords(db);
  ASSERT_EQ(all.size(), 24u);
  std::set<std::string> hashes;
  for (const v1::Record& rec : all) {
    EXPECT_TRUE(hashes.insert(rec.schedule_hash()).second)
        << "measured twice: " << rec.schedule_hash();
    EXPECT_NE(rec.status(), v1::MEASURE_STATUS_WRONG_RESULT) << rec.error();
    EXPECT_FALSE(rec.fingerprint().compiler().empty());
  }
}

TEST(TuneCli, BadInputIsOneLineAndExitCode2) {
  testing::TempDir dir;
  for (std::vector<std::string> args : {
           std::vector<std::string>{"tune"},
           {"tune", "--workload", "matmul(M=4,N=4,K=4)", "--trials", "0"},
           {"tune", "--workload", "matmul(M=4,N=4,K=4)", "--strategy", "anneal"},
           {"tune", "--workload", "conv3d(N=1)"},
           {"tune", "--workload", "matmul(M=4,N=4,K=4)", "--frobnicate", "1"},
       }) {
    args.insert(args.begin(), testing::BinPath("tunefarm"));
    testing::CommandResult r = testing::RunCommand(args, dir.path());
    EXPECT_EQ(r.exit_code, 2) << args[2];
    EXPECT_TRUE(absl::StartsWith(r.err, "tunefarm: error: ")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace tunefarm
