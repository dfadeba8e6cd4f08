// Line charts as SVG, drawn the same way by `tunefarm plot` and by the
// server's dashboard: axes from 0 with ticks at round numbers, each
// labelled; a title wrapped to two lines within the chart's width and cut
// with an ellipsis past them (the whole title is the chart's tooltip); a
// note in place of a curve that has no points. Every text is escaped.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/tuning_curves.h"

namespace tunefarm {

struct SvgChart {
  std::string title;
  std::string x_label, y_label;
  std::vector<TuningCurves::Point> points;  // x, y >= 0; joined in this order
  std::string color = "#1f77b4";
  std::string empty_note = "no data yet";
  int width = 440, height = 240;
  int font_px = 11;
};

// The chart as a group (<g>) at (x, y) of an enclosing <svg>.
std::string SvgChartGroup(const SvgChart& chart, int x, int y);
// The chart as an <svg> element of its own size, for an HTML page.
std::string SvgChartElement(const SvgChart& chart);

// `text` escaped for SVG/HTML text and quoted attribute values; control
// characters dropped.
std::string SvgEscape(absl::string_view text);

// The title's lines: `text` broken at spaces, commas and parentheses into
// lines of at most `max_chars`, at most `max_lines` of them, the last cut
// with "…" when the text does not fit.
std::vector<std::string> WrapTitle(absl::string_view text, int max_chars, int max_lines);

// Round tick values (1, 2 or 5 x 10^k apart) from 0 up to the first at or
// above `max`, about `count` steps.
std::vector<double> NiceTicks(double max, int count);

}  // namespace tunefarm
