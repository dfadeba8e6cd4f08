#include "cli/records_jsonl.h"

#include <random>
#include <sstream>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/server/test_records.h"

namespace tunefarm::cli {
namespace {

using ::tunefarm::testing::Conv2d;
using ::tunefarm::testing::MakeRecord;

TEST(RecordsJsonl, RoundTrip) {
  std::stringstream ss;
  std::vector<v1::Record> in;
  for (int i = 1; i <= 5; ++i) in.push_back(MakeRecord(Conv2d(8, 8, 8), "llvm", 1e-4 * i, i));
  for (const auto& r : in) ss << RecordToJsonLine(r) << "\n\n";  // blank lines are skipped
  auto out = ParseRecordsJsonl(ss, "mem");
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(in[i], (*out)[i]));
  }
}

TEST(RecordsJsonl, BadLineIsNamed) {
  std::stringstream ss;
  ss << RecordToJsonLine(MakeRecord(Conv2d(8, 8, 8), "llvm", 1e-4, 1)) << "\n";
  ss << "{\"status\": \"MEASURE_STATUS_OK\", \"costs_sec\": [\"fast\"]}\n";
  auto out = ParseRecordsJsonl(ss, "records.jsonl");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(std::string(out.status().message()).find("records.jsonl:2:"), std::string::npos)
      << out.status();
  std::stringstream unknown("{\"no_such_field\": 1}\n");
  EXPECT_FALSE(ParseRecordsJsonl(unknown, "x").ok());
}

// Mutated lines either parse or give an error naming the line; never a crash.
TEST(RecordsJsonl, FuzzedLinesNeverCrash) {
  std::string good = RecordToJsonLine(MakeRecord(Conv2d(8, 8, 8), "llvm", 1e-4, 1));
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":,0123456789.eE-+ abcxyz\\u\x01\xff";
  int ok = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string line = good;
    int edits = 1 + rng() % 8;
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % line.size();
      switch (rng() % 3) {
        case 0: line[pos] = alphabet[rng() % alphabet.size()]; break;
        case 1: line.erase(pos, 1 + rng() % 10); break;
        default: line.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
      }
      if (line.empty()) line = "x";
    }
    std::stringstream ss(line + "\n");
    auto out = ParseRecordsJsonl(ss, "fuzz");
    if (out.ok()) {
      // An accepted line is one record that survives its own round trip.
      ++ok;
      ASSERT_EQ(out->size(), 1u) << line;
      std::stringstream again(RecordToJsonLine(out->front()) + "\n");
      auto back = ParseRecordsJsonl(again, "again");
      ASSERT_TRUE(back.ok()) << line << ": " << back.status();
      ASSERT_EQ(back->size(), 1u);
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(out->front(), back->front()))
          << line;
    } else {
      ++rejected;
      EXPECT_EQ(std::string(out.status().message()).rfind("fuzz:1:", 0), 0u) << out.status();
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(ok, 0) << "no mutated line parsed: the round trip above was never checked";
}

}  // namespace
}  // namespace tunefarm::cli
