// What a job's outcome means, with the real binaries on 127.0.0.1: a job on
// a board whose every run fails ends failed with its failures counted by
// kind and nothing of its budget spent; `resume` on a mended board measures
// the failed trials again (the default schedule first, so the job shows a
// default time and speed-up) and ends with its budget; a job is cancelled
// only by the token that submitted it or an admin.
#include <signal.h>
#include <sys/stat.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/records_jsonl.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tunefarm/v1/records.pb.h"

namespace tunefarm {
namespace {

using testing::BinPath;
using testing::CommandResult;
using testing::ServerProcess;

class JobSemantics : public ::testing::Test {
 protected:
  CommandResult Cli(std::vector<std::string> args) {
    return server_->Cli(std::move(args), dir_.path());
  }

  // `tunefarm job ID --json`, with `token_file` when given.
  v1::Job Job(int id, const std::string& token_file = "") {
    std::vector<std::string> args = {"job", std::to_string(id), "--json"};
    if (!token_file.empty()) args.insert(args.begin(), "--token_file=" + token_file);
    CommandResult r = Cli(args);
    v1::Job job;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &job).ok()) << r.out << r.err;
    return job;
  }

  std::vector<v1::Record> Records(int job) {
    CommandResult r = Cli({"records", "--job=" + std::to_string(job), "--limit=1000", "--json"});
    std::istringstream in(r.out);
    auto parsed = cli::ParseRecordsJsonl(in, "records --json");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? *parsed : std::vector<v1::Record>();
  }

  // An agent of key x86-test as board `id`; `runner` replaces its runner
  // when set. Its log is DIR/<id>.log.
  absl::StatusOr<std::unique_ptr<Subprocess>> Agent(const std::string& id,
                                                    const std::string& runner = "") {
    Subprocess::Options o;
    o.capture_stdout = false;
    o.stderr_path = dir_.File(id + ".log");
    std::vector<std::string> argv = {"/usr/bin/env"};
    if (!runner.empty()) argv.push_back("TUNEFARM_RUNNER=" + runner);
    for (const std::string& a :
         {BinPath("tunefarm-agent"), "--server=" + server_->address(),
          std::string("--key=x86-test"), "--device_id=" + id, server_->server_key_flag()}) {
      argv.push_back(a);
    }
    return Subprocess::Start(argv, o);
  }

  testing::TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(JobSemantics, ABrokenBoardFailsTheJobAndResumeMeasuresTheFailedTrialsAgain) {
  auto server =
      ServerProcess::Start(dir_.File("farm.db"), dir_.path(), {"--heartbeat_interval_ms=200"});
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  Subprocess::Options quiet;
  quiet.capture_stdout = false;
  quiet.stderr_path = dir_.File("worker.log");
  auto worker = Subprocess::Start({BinPath("tunefarm-worker"), "--server=" + server_->address(),
                                   "--device_id=worker-1", "--threads=2"},
                                  quiet);
  ASSERT_TRUE(worker.ok()) << worker.status();
  // A board whose runner fails every kernel: it answers the agent's
  // start-up check (an empty request) as the real runner does, and dies
  // on every measurement.
  const std::string broken_runner = dir_.File("broken-runner");
  testing::WriteFile(broken_runner, "#!/bin/sh\n[ -s /proc/self/fd/3 ] || exec " +
                                        BinPath("tunefarm-runner") +
                                        "\necho 'no runner on this board' >&2\nexit 1\n");
  ASSERT_EQ(chmod(broken_runner.c_str(), 0755), 0);
  auto broken = Agent("broken-1", broken_runner);
  ASSERT_TRUE(broken.ok()) << broken.status();

  testing::WriteFile(dir_.File("w.txt"), "matmul(M=16,N=16,K=16)\n");
  CommandResult r = Cli({"submit", "--workloads=" + dir_.File("w.txt"), "--target=llvm",
                         "--device_key=x86-test", "--trials=4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(
      testing::WaitFor([&] { return Job(1).state() == v1::JOB_STATE_FAILED; }, absl::Seconds(180)))
      << Cli({"job", "1"}).out << testing::ReadFileOrEmpty(dir_.File("broken-1.log"));
  v1::Job failed = Job(1);
  // Nothing ran, so nothing of the budget is spent; the job stopped after
  // twice its budget in attempts, and says what failed, by kind.
  EXPECT_EQ(failed.trials_done(), 0);
  EXPECT_EQ(failed.failed_trials(), 8);
  EXPECT_TRUE(absl::StartsWith(failed.status_message(), "all 8 trials failed: 8 runtime_error; "))
      << failed.status_message();
  EXPECT_TRUE(absl::StrContains(failed.status_message(), "`tunefarm resume 1`"))
      << failed.status_message();
  std::set<std::string> failed_schedules;
  std::string default_hash;
  for (const v1::Record& rec : Records(1)) {
    EXPECT_NE(rec.status(), v1::MEASURE_STATUS_OK);
    failed_schedules.insert(rec.schedule_hash());
    if (rec.schedule().is_default()) default_hash = rec.schedule_hash();
  }
  EXPECT_EQ(failed_schedules.size(), 8u);
  ASSERT_FALSE(default_hash.empty());

  // The board mended (another agent of the key): resume measures the
  // failed trials again, the default schedule first, and spends the budget.
  (*broken)->Kill(SIGTERM);
  ASSERT_TRUE((*broken)->Wait(absl::Seconds(30)).ok());
  auto mended = Agent("mended-1");
  ASSERT_TRUE(mended.ok()) << mended.status();
  r = Cli({"resume", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(testing::WaitFor([&] { return Job(1).state() == v1::JOB_STATE_SUCCEEDED; },
                               absl::Seconds(180)))
      << Cli({"job", "1"}).out << testing::ReadFileOrEmpty(dir_.File("mended-1.log"));
  v1::Job done = Job(1);
  EXPECT_EQ(done.trials_done(), 4) << done.status_message();
  EXPECT_TRUE(absl::StartsWith(done.status_message(), "4 trials this run"))
      << done.status_message();
  bool default_ran = false;
  for (const v1::Record& rec : Records(1)) {
    if (rec.status() != v1::MEASURE_STATUS_OK) continue;
    EXPECT_TRUE(failed_schedules.count(rec.schedule_hash())) << cli::RecordToJsonLine(rec);
    default_ran |= rec.schedule_hash() == default_hash;
  }
  EXPECT_TRUE(default_ran);
  // So the job has a default time and a speed-up.
  CommandResult table = Cli({"job", "1"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(absl::StrContains(table.out, "trials: 4 (and 8 that did not run)")) << table.out;
  // The task's row: # task weight mflops trials default_us best_us speedup ...
  std::vector<std::string> row;
  for (absl::string_view line : absl::StrSplit(table.out, '\n')) {
    if (absl::StartsWith(line, "1 ")) row = absl::StrSplit(line, ' ', absl::SkipWhitespace());
  }
  ASSERT_GE(row.size(), 8u) << table.out;
  EXPECT_NE(row[5], "-") << table.out;
  EXPECT_TRUE(absl::EndsWith(row[7], "x")) << table.out;

  for (Subprocess* p : {mended->get(), worker->get()}) {
    p->Kill(SIGTERM);
    ASSERT_TRUE(p->Wait(absl::Seconds(30)).ok());
  }
}

// Through the CLI with tokens: another submitter's cancel is refused with
// the reason; the owner's and an admin's go through.
TEST_F(JobSemantics, OnlyTheOwnerOrAnAdminCancelsAJob) {
  testing::WriteFile(dir_.File("tokens"),
                     "ci-secret submitter name=ci\nqa-secret submitter name=qa\n"
                     "ops-secret admin name=ops\n");
  for (const char* who : {"ci", "qa", "ops"}) {
    testing::WriteFile(dir_.File(absl::StrCat(who, ".token")), absl::StrCat(who, "-secret\n"));
  }
  auto server = ServerProcess::Start(dir_.File("farm.db"), dir_.path(),
                                     {"--tokens_file=" + dir_.File("tokens")});
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  auto as = [&](const std::string& who, std::vector<std::string> args) {
    args.insert(args.begin(), "--token_file=" + dir_.File(who + ".token"));
    return Cli(std::move(args));
  };
  testing::WriteFile(dir_.File("w.txt"), "matmul(M=16,N=16,K=16)\n");
  const std::vector<std::string> submit = {"submit", "--workloads=" + dir_.File("w.txt"),
                                           "--target=llvm", "--device_key=x86-test"};
  ASSERT_EQ(as("ci", submit).exit_code, 0);  // job 1
  ASSERT_EQ(as("ci", submit).exit_code, 0);  // job 2
  CommandResult denied = as("qa", {"cancel", "1"});
  EXPECT_EQ(denied.exit_code, 1) << denied.out;
  EXPECT_TRUE(absl::StrContains(denied.err,
                                "CancelJob: job 1 belongs to token 'ci'; token 'qa' may not cancel "
                                "it (its owner or an admin token may)"))
      << denied.err;
  EXPECT_NE(Job(1, dir_.File("qa.token")).state(), v1::JOB_STATE_CANCELLED);
  CommandResult own = as("ci", {"cancel", "1"});
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(own.out, "job 1 cancelled\n");
  CommandResult admin = as("ops", {"cancel", "2"});
  EXPECT_EQ(admin.exit_code, 0) << admin.err;
  EXPECT_EQ(Job(2, dir_.File("ci.token")).state(), v1::JOB_STATE_CANCELLED);
}

}  // namespace
}  // namespace tunefarm
