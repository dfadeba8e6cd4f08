#include "cli/plot.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ir/workload.h"
#include "proto/svg_chart.h"
#include "proto/tuning_curves.h"

namespace tunefarm::cli {
namespace {

constexpr int kPanelW = 460, kPanelH = 260;

}  // namespace

std::string TuningCurvesSvg(const v1::Job& job, const std::vector<v1::Record>& records) {
  const TuningCurves c = CurvesOf(job, records);
  const int rows = 1 + job.tasks_size();
  std::string svg = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' font-family='sans-serif'>\n",
      2 * kPanelW, rows * kPanelH);
  SvgChart model;
  model.title =
      absl::StrCat("job ", job.job_id(),
                   job.spec().name().empty() ? "" : absl::StrCat(" \"", job.spec().name(), "\""),
                   ": the model's time by the best so far");
  model.x_label = "minutes";
  model.y_label = "ms (once every task has a time)";
  model.points = c.model_ms;
  model.color = "#2ca02c";
  model.empty_note = "not every task has a time yet";
  model.width = 2 * kPanelW;
  model.height = kPanelH;
  absl::StrAppend(&svg, SvgChartGroup(model, 0, 0), "\n");
  for (int t = 0; t < job.tasks_size(); ++t) {
    SvgChart panel;
    panel.title = absl::StrCat("#", t + 1, " ", ir::Describe(job.tasks(t).workload()), " x",
                               job.tasks(t).weight());
    panel.y_label = "best GFLOP/s";
    panel.width = kPanelW;
    panel.height = kPanelH;
    panel.x_label = "trials";
    panel.points = c.by_trial[size_t(t)];
    panel.color = "#d62728";
    absl::StrAppend(&svg, SvgChartGroup(panel, 0, (t + 1) * kPanelH), "\n");
    panel.x_label = "minutes";
    panel.points = c.by_minute[size_t(t)];
    panel.color = "#1f77b4";
    absl::StrAppend(&svg, SvgChartGroup(panel, kPanelW, (t + 1) * kPanelH), "\n");
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tunefarm::cli
