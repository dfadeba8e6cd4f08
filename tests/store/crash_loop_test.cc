// A writer process is SIGKILLed again and again in the middle of committing
// batches. Afterwards the database must pass PRAGMA integrity_check and hold
// every record whose commit was acknowledged.
#include <signal.h>
#include <sqlite3.h>

#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "search/store_canon.h"
#include "store/tuning_log.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm::server {
namespace {

constexpr int kKills = 60;
constexpr int kBatch = 25;

std::string IntegrityCheck(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return "cannot open";
  sqlite3_stmt* st = nullptr;
  std::string result;
  sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    result += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return result;
}

TEST(CrashLoop, AcknowledgedRecordsSurviveSigkill) {
  testing::TempDir dir;
  std::string db = dir.File("crash.db");
  std::mt19937 rng(12345);
  std::set<int64_t> acked;
  int kills_mid_run = 0;
  for (int k = 0; k < kKills; ++k) {
    int64_t first = int64_t{k + 1} * 1000000;  // salts never repeat across runs
    auto child = Subprocess::Start({testing::TestBinPath("tuning_log_writer"), db,
                                    std::to_string(first), std::to_string(kBatch)});
    ASSERT_TRUE(child.ok()) << child.status();
    int want = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int a = 0; a < want; ++a) {
      std::string line;
      absl::Status s = (*child)->ReadLine(&line, absl::Seconds(60));
      ASSERT_TRUE(s.ok()) << "writer stopped acknowledging: " << s;
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      ASSERT_EQ(parts.size(), 3u) << line;
      int64_t start = 0, n = 0;
      ASSERT_TRUE(absl::SimpleAtoi(parts[1], &start) && absl::SimpleAtoi(parts[2], &n));
      for (int64_t i = 0; i < n; ++i) acked.insert(start + i);
    }
    // Kill while it is busy with the next batch.
    (*child)->Kill(SIGKILL);
    auto status = (*child)->Wait(absl::Seconds(30));
    ASSERT_TRUE(status.ok());
    if (DescribeWaitStatus(*status) == "killed by signal 9") ++kills_mid_run;
  }
  EXPECT_EQ(kills_mid_run, kKills);
  EXPECT_EQ(IntegrityCheck(db), "ok");

  store::TuningLog::Options o;
  o.canon = search::CompilerCanon();
  o.path = db;
  auto log = store::TuningLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  std::set<int64_t> found;
  store::TuningLog::RecordQuery q;
  q.limit = 5000;
  while (true) {
    auto page = (*log)->ListRecords(q);
    ASSERT_TRUE(page.ok()) << page.status();
    if (page->empty()) break;
    for (const auto& r : *page) found.insert(r.schedule().steps(0).split().lengths(0));
    q.after_record_id = page->back().record_id();
  }
  int64_t missing = 0;
  for (int64_t s : acked) missing += found.count(s) == 0;
  std::printf("crash loop: %d kills, %zu records acknowledged, %zu found, %lld missing\n", kKills,
              acked.size(), found.size(), static_cast<long long>(missing));
  EXPECT_EQ(missing, 0);
  EXPECT_GE(found.size(), acked.size());
  // Whatever is there beyond the acknowledged records is whole batches that
  // committed just before the kill, never part of one.
  EXPECT_EQ(found.size() % kBatch, 0u);
}

}  // namespace
}  // namespace tunefarm::server
