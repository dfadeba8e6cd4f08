#include "cli/plot.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ir/workload.h"
#include "proto/tuning_curves.h"

namespace tunefarm::cli {
namespace {

constexpr int kPanelW = 440, kPanelH = 240, kPad = 55;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else if (c == '\'') {
      out += "&apos;";
    } else if (static_cast<unsigned char>(c) >= 0x20) {
      out += c;
    }
  }
  return out;
}

using Point = TuningCurves::Point;

// One panel at (ox, oy): axes, their labels, the title and the curve.
void Panel(std::string* svg, int ox, int oy, const std::string& title, const std::string& xlabel,
           const std::string& ylabel, const std::vector<Point>& pts, const char* color) {
  double xmax = 1e-9, ymax = 1e-9;
  for (const Point& p : pts) xmax = std::max(xmax, p.x), ymax = std::max(ymax, p.y);
  ymax *= 1.1;
  auto X = [&](double x) { return ox + kPad + (kPanelW - 2 * kPad) * x / xmax; };
  auto Y = [&](double y) { return oy + kPanelH - kPad - (kPanelH - 2 * kPad) * y / ymax; };
  absl::StrAppend(svg, absl::StrFormat("<text x='%d' y='%d' font-weight='bold'>%s</text>\n",
                                       ox + 10, oy + 20, Escape(title)));
  absl::StrAppend(svg, absl::StrFormat("<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' "
                                       "stroke='black'/>\n",
                                       X(0), Y(0), X(xmax), Y(0)));
  absl::StrAppend(svg, absl::StrFormat("<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' "
                                       "stroke='black'/>\n",
                                       X(0), Y(0), X(0), Y(ymax)));
  absl::StrAppend(svg, absl::StrFormat("<text x='%.1f' y='%.1f'>%s (max %.3g)</text>\n",
                                       X(xmax) - 150, Y(0) + 30, Escape(xlabel), xmax));
  absl::StrAppend(svg, absl::StrFormat("<text x='%.1f' y='%.1f'>%s (max %.3g)</text>\n", X(0),
                                       Y(ymax) - 6, Escape(ylabel), ymax / 1.1));
  if (pts.empty()) return;
  std::string points;
  for (const Point& p : pts)
    absl::StrAppend(&points, absl::StrFormat("%.1f,%.1f ", X(p.x), Y(p.y)));
  points.pop_back();
  absl::StrAppend(svg, absl::StrFormat("<polyline fill='none' stroke='%s' stroke-width='2' "
                                       "points='%s'/>\n",
                                       color, points));
}

}  // namespace

std::string TuningCurvesSvg(const v1::Job& job, const std::vector<v1::Record>& records) {
  const TuningCurves c = CurvesOf(job, records);
  const int rows = 1 + job.tasks_size();
  std::string svg = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' "
      "font-size='11'>\n",
      2 * kPanelW, rows * kPanelH);
  Panel(&svg, 0, 0,
        absl::StrCat("job ", job.job_id(),
                     job.spec().name().empty() ? "" : absl::StrCat(" \"", job.spec().name(), "\""),
                     ": the model's time by the best so far"),
        "minutes", "ms (tasks with a best)", c.model_ms, "#2ca02c");
  for (int t = 0; t < job.tasks_size(); ++t) {
    const std::string name = absl::StrCat("#", t + 1, " ", ir::Describe(job.tasks(t).workload()),
                                          " x", job.tasks(t).weight());
    Panel(&svg, 0, (t + 1) * kPanelH, name, "trials", "best GFLOP/s", c.by_trial[size_t(t)],
          "#d62728");
    Panel(&svg, kPanelW, (t + 1) * kPanelH, name, "minutes", "best GFLOP/s", c.by_minute[size_t(t)],
          "#1f77b4");
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tunefarm::cli
