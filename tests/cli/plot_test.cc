#include "cli/plot.h"

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/server/test_records.h"

namespace tunefarm::cli {
namespace {

using ::tunefarm::testing::Conv2d;
using ::tunefarm::testing::Dense;

v1::Record Timed(int64_t id, const std::string& key, double sec) {
  v1::Record r;
  r.set_record_id(id);
  r.set_workload_key(key);
  r.set_timestamp_unix_ms(1'000'000 + id * 30'000);
  r.set_status(sec > 0 ? v1::MEASURE_STATUS_OK : v1::MEASURE_STATUS_COMPILE_ERROR);
  if (sec > 0) r.add_costs_sec(sec);
  return r;
}

// Characters as drawn: an entity or a UTF-8 sequence is one.
size_t Drawn(const std::string& text) {
  const std::string plain = std::regex_replace(text, std::regex("&[#a-z0-9]+;"), "e");
  size_t n = 0;
  for (unsigned char c : plain) n += (c & 0xC0) != 0x80;
  return n;
}

// The plot of a job whose second task gets its first time after the first
// task has improved: the model's curve starts there and never rises; every
// axis has numbered ticks; titles fit their panels; the job's name is text.
TEST(Plot, ModelTimeNeverRisesAxesHaveNumbersTitlesFit) {
  v1::Job job;
  job.set_job_id(3);
  job.mutable_spec()->set_name(
      "<script>alert('x')</script> & co, with a name long enough that the title of the "
      "model's panel takes a second line");
  v1::Task* conv = job.add_tasks();
  conv->set_workload_key("conv");
  *conv->mutable_workload() = Conv2d(64, 64, 56);
  conv->set_weight(1);
  conv->set_flops(2e8);
  v1::Task* dense = job.add_tasks();
  dense->set_workload_key("dense");
  *dense->mutable_workload() = Dense(16, 48, 32);
  dense->set_weight(2);
  dense->set_flops(5e4);
  const std::vector<v1::Record> records = {
      Timed(1, "conv", 2e-3),    Timed(2, "conv", 1e-3),   Timed(3, "dense", 0),
      Timed(4, "dense", 0.5e-3), Timed(5, "conv", 0.8e-3), Timed(6, "dense", 0.6e-3),
      Timed(7, "dense", 0.2e-3),
  };
  const std::string svg = TuningCurvesSvg(job, records);
  EXPECT_EQ(svg.find("<script>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co,"),
            std::string::npos)
      << svg;

  std::vector<std::vector<std::pair<double, double>>> curves;
  const std::regex poly("points='([^']*)'");
  for (std::sregex_iterator it(svg.begin(), svg.end(), poly), end; it != end; ++it) {
    curves.emplace_back();
    for (absl::string_view xy : absl::StrSplit((*it)[1].str(), ' ')) {
      std::pair<std::string, std::string> p = absl::StrSplit(xy, ',');
      double x = 0, y = 0;
      ASSERT_TRUE(absl::SimpleAtod(p.first, &x) && absl::SimpleAtod(p.second, &y)) << xy;
      curves.back().emplace_back(x, y);
    }
  }
  ASSERT_EQ(curves.size(), 5u) << svg;
  // The model's time from record 4 on, when both tasks have one; SVG's y
  // grows downwards, so a rising time would be a falling y.
  const auto& model = curves[0];
  ASSERT_EQ(model.size(), 4u) << svg;
  for (size_t i = 1; i < model.size(); ++i) {
    EXPECT_GE(model[i].second, model[i - 1].second) << "the model's time rises at point " << i;
  }
  EXPECT_GT(model.back().second, model.front().second) << "it fell from 2 ms to 1.2 ms";

  // Numbered ticks: on each of the 5 panels, at least 2 on each axis.
  const std::regex tick("<text class='tick'[^>]*>([-0-9.e+]+)</text>");
  const auto ticks =
      std::distance(std::sregex_iterator(svg.begin(), svg.end(), tick), std::sregex_iterator());
  EXPECT_GE(ticks, 5 * 4) << svg;
  EXPECT_NE(svg.find(">0</text>"), std::string::npos) << svg;

  // Title lines fit their panel (the model's 920 px wide, the tasks' 460,
  // of 11 px text at most 0.62 em a glyph), the model's long title in two
  // lines; a tooltip has each title whole.
  const std::regex title("<text class='title' x='([0-9.]+)'[^>]*>([^<]*)</text>");
  std::vector<std::string> panels = absl::StrSplit(svg, "<g ");
  ASSERT_EQ(panels.size(), 1u + 5u) << svg;
  std::vector<int> lines;
  for (size_t p = 1; p < panels.size(); ++p) {
    const double width = p == 1 ? 920 : 460;
    lines.push_back(0);
    const std::string& g = panels[p];
    for (std::sregex_iterator it(g.begin(), g.end(), title), end; it != end; ++it) {
      ++lines.back();
      const double x = std::stod((*it)[1].str());
      EXPECT_LE(x + double(Drawn((*it)[2].str())) * 0.62 * 11, width) << (*it)[2].str();
    }
  }
  EXPECT_EQ(lines, (std::vector<int>{2, 1, 1, 1, 1})) << svg;
  EXPECT_NE(svg.find("takes a second line&quot;: the model&#39;s time by the best so far</title>"),
            std::string::npos)
      << svg;
  EXPECT_NE(svg.find("<title>#1 conv2d"), std::string::npos) << svg;
}

}  // namespace
}  // namespace tunefarm::cli
