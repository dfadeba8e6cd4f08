#include "cli/flags.h"

#include <numeric>

#include "cli/command_util.h"
#include "gtest/gtest.h"

namespace tunefarm::cli {
namespace {

const FlagSpec kSpec = {{"early_stop", "device-key", "shape", "o"}, {"json"}};

TEST(Flags, DashAndUnderscoreAreOneFlag) {
  auto f = ParseFlags({"--early-stop=8", "--device_key", "orin", "x.json"}, kSpec, "submit");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Get("early_stop"), "8");
  EXPECT_EQ(f->Get("early-stop"), "8");
  EXPECT_EQ(f->Get("device-key"), "orin");
  EXPECT_TRUE(f->Has("device_key"));
  EXPECT_EQ(f->positional(), std::vector<std::string>{"x.json"});
  EXPECT_FALSE(f->Has("json"));
  EXPECT_EQ(f->Get("shape", "none"), "none");
}

TEST(Flags, RepeatedValuesSwitchesAndShortForms) {
  auto f = ParseFlags({"--shape", "a=1x2", "--json", "-o", "out.bin", "--shape=b=3"}, kSpec,
                      "build");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->All("shape"), (std::vector<std::string>{"a=1x2", "b=3"}));
  EXPECT_EQ(f->Get("shape"), "b=3");
  EXPECT_TRUE(f->Has("json"));
  EXPECT_EQ(f->Get("o"), "out.bin");
  EXPECT_FALSE(f->help());
  // --help wins over everything else on the line, errors included.
  auto h = ParseFlags({"--frobnicate", "-h", "--shape"}, kSpec, "build");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->help());
  EXPECT_FALSE(h->Has("shape"));
  // -o is "output" where the command has that flag.
  auto g = ParseFlags({"-o", "m.tfpkg"}, FlagSpec{{"output"}, {}}, "build");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->Get("output"), "m.tfpkg");
}

TEST(Flags, ErrorsNameTheFlagAndTheNearestKnownOne) {
  auto f = ParseFlags({"--early-stp=3"}, kSpec, "tune");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "tune: unknown flag --early_stp; did you mean --early_stop? (see --help)");
  f = ParseFlags({"--frobnicate"}, kSpec, "tune");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), "tune: unknown flag --frobnicate (see --help)");
  f = ParseFlags({"--shape"}, kSpec, "tune");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), "--shape needs a value");
  f = ParseFlags({"--json=yes"}, kSpec, "jobs");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), "jobs: --json takes no value");
}

// Text from other users cannot forge table rows or drive the terminal.
TEST(Printable, ControlCharactersAreEscaped) {
  EXPECT_EQ(Printable("resnet18 tune"), "resnet18 tune");
  EXPECT_EQ(Printable("a\n6  forged  succeeded\x1b[2J\t\x7f"),
            "a\\x0a6  forged  succeeded\\x1b[2J\\x09\\x7f");
  EXPECT_EQ(Printable("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 stays
}

// Shares printed as whole units add up to the whole: three equal thirds are
// 34 + 33 + 33 percent, not 33 x 3 = 99 (nor 101 from rounding each).
TEST(ApportionShares, AddUpToTheWholeByLargestRemainder) {
  EXPECT_EQ(ApportionShares({1, 1, 1}, 100), (std::vector<int64_t>{34, 33, 33}));
  // The unit left goes to the largest remainder (66.67's), a tie to the earlier part.
  EXPECT_EQ(ApportionShares({1, 2}, 100), (std::vector<int64_t>{33, 67}));
  EXPECT_EQ(ApportionShares({1, 1}, 3), (std::vector<int64_t>{2, 1}));
  // Each of six shares rounded alone (16.67% -> 17%) would give 102%.
  std::vector<int64_t> sixths = ApportionShares(std::vector<double>(6, 1.0), 100);
  EXPECT_EQ(std::accumulate(sixths.begin(), sixths.end(), int64_t{0}), 100);
  // A negative part has no share (-1); nothing positive: all 0.
  EXPECT_EQ(ApportionShares({3, -1, 1}, 100), (std::vector<int64_t>{75, -1, 25}));
  EXPECT_EQ(ApportionShares({0, -1}, 100), (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(ApportionShares({}, 100), (std::vector<int64_t>{}));
}

}  // namespace
}  // namespace tunefarm::cli
