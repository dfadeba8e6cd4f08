#include "cli/plot.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ir/workload.h"

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

struct Point {
  double x, y;
};

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

std::string TuningCurvesSvg(const v1::Job& job, const std::vector<v1::Record>& records_in) {
  std::vector<v1::Record> records = records_in;
  std::sort(records.begin(), records.end(),
            [](const v1::Record& a, const v1::Record& b) { return a.record_id() < b.record_id(); });
  const int64_t t0 = records.empty() ? 0 : records.front().timestamp_unix_ms();
  auto minutes = [&](const v1::Record& r) { return (r.timestamp_unix_ms() - t0) / 60000.0; };
  std::map<std::string, int> task_of;  // workload key -> index in job.tasks
  for (int i = 0; i < job.tasks_size(); ++i) task_of.emplace(job.tasks(i).workload_key(), i);
  std::vector<std::vector<Point>> by_trial(job.tasks_size()), by_time(job.tasks_size());
  std::vector<double> best(job.tasks_size(), 0);  // seconds, 0: none yet
  std::vector<int> trials(job.tasks_size(), 0);
  std::vector<Point> model;
  for (const v1::Record& r : records) {
    auto it = task_of.find(r.workload_key());
    if (it == task_of.end()) continue;
    const int t = it->second;
    ++trials[t];
    double mean = 0;
    for (double c : r.costs_sec()) mean += c;
    if (r.status() == v1::MEASURE_STATUS_OK && r.costs_sec_size() > 0) {
      mean /= r.costs_sec_size();
      if (best[t] == 0 || mean < best[t]) best[t] = mean;
    }
    const double gflops = best[t] > 0 ? job.tasks(t).flops() / best[t] * 1e-9 : 0;
    by_trial[t].push_back({double(trials[t]), gflops});
    by_time[t].push_back({minutes(r), gflops});
    double estimate = 0;
    for (int k = 0; k < job.tasks_size(); ++k) estimate += job.tasks(k).weight() * best[k];
    model.push_back({minutes(r), estimate * 1e3});
  }
  const int rows = 1 + job.tasks_size();
  std::string svg = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif' "
      "font-size='11'>\n",
      2 * kPanelW, rows * kPanelH);
  Panel(&svg, 0, 0,
        absl::StrCat("job ", job.job_id(),
                     job.spec().name().empty() ? "" : absl::StrCat(" \"", job.spec().name(), "\""),
                     ": the model's time by the best so far"),
        "minutes", "ms (tasks with a best)", model, "#2ca02c");
  for (int t = 0; t < job.tasks_size(); ++t) {
    const std::string name = absl::StrCat("#", t + 1, " ", ir::Describe(job.tasks(t).workload()),
                                          " x", job.tasks(t).weight());
    Panel(&svg, 0, (t + 1) * kPanelH, name, "trials", "best GFLOP/s", by_trial[t], "#d62728");
    Panel(&svg, kPanelW, (t + 1) * kPanelH, name, "minutes", "best GFLOP/s", by_time[t], "#1f77b4");
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tunefarm::cli
