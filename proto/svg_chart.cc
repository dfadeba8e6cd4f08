#include "proto/svg_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tunefarm {
namespace {

using Point = TuningCurves::Point;

// The largest n' <= n that does not split a UTF-8 sequence of `s`.
size_t CharBoundary(absl::string_view s, size_t n) {
  n = std::min(n, s.size());
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

bool BreaksAfter(char c) { return c == ' ' || c == ',' || c == '(' || c == '+'; }

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

// The chart's geometry in its own coordinates: the plot area and the
// scales of both axes.
struct Frame {
  double left, right, top, bottom;
  std::vector<double> xticks, yticks;
  double X(double x) const { return left + (right - left) * x / xticks.back(); }
  double Y(double y) const { return bottom - (bottom - top) * y / yticks.back(); }
};

void DrawAxes(const SvgChart& c, const Frame& f, std::string* out) {
  const int small = c.font_px - 1;
  for (double v : f.yticks) {
    absl::StrAppend(out, absl::StrFormat("<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' "
                                         "stroke='#e4e4e4'/>",
                                         f.left, f.Y(v), f.right, f.Y(v)));
    absl::StrAppend(out, absl::StrFormat("<text class='tick' x='%.1f' y='%.1f' "
                                         "text-anchor='end' font-size='%d'>%s</text>",
                                         f.left - 4, f.Y(v) + small / 3.0, small, Num(v)));
  }
  for (double v : f.xticks) {
    absl::StrAppend(out, absl::StrFormat("<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' "
                                         "stroke='black'/>",
                                         f.X(v), f.bottom, f.X(v), f.bottom + 4));
    absl::StrAppend(out, absl::StrFormat("<text class='tick' x='%.1f' y='%.1f' "
                                         "text-anchor='middle' font-size='%d'>%s</text>",
                                         f.X(v), f.bottom + 5 + small, small, Num(v)));
  }
  // The axes are a path: the one polyline of a chart is its curve.
  absl::StrAppend(out, absl::StrFormat("<path fill='none' stroke='black' "
                                       "d='M%.1f,%.1f V%.1f H%.1f'/>",
                                       f.left, f.top, f.bottom, f.right));
  absl::StrAppend(out, absl::StrFormat("<text x='%.1f' y='%.1f'>%s</text>", f.left, f.top - 6,
                                       SvgEscape(c.y_label)));
  absl::StrAppend(out, absl::StrFormat("<text x='%.1f' y='%d' text-anchor='end'>%s</text>", f.right,
                                       c.height - 4, SvgEscape(c.x_label)));
}

}  // namespace

std::string SvgEscape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
  }
  return out;
}

std::vector<std::string> WrapTitle(absl::string_view text, int max_chars, int max_lines) {
  std::vector<std::string> lines;
  const size_t width = size_t(std::max(max_chars, 2));
  while (!text.empty() && int(lines.size()) < max_lines) {
    if (text.size() <= width) {
      lines.emplace_back(text);
      break;
    }
    if (int(lines.size()) == max_lines - 1) {
      lines.push_back(absl::StrCat(text.substr(0, CharBoundary(text, width - 1)), "…"));
      break;
    }
    size_t cut = 0;
    for (size_t i = 1; i < width; ++i) {
      if (BreaksAfter(text[i - 1])) cut = i;
    }
    if (cut == 0) cut = CharBoundary(text, width);
    if (cut == 0) cut = width;  // one character wider than the line: cut anyway
    absl::string_view line = text.substr(0, cut);
    while (!line.empty() && line.back() == ' ') line.remove_suffix(1);
    lines.emplace_back(line);
    text.remove_prefix(cut);
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  }
  return lines;
}

std::vector<double> NiceTicks(double max, int count) {
  if (!(max > 0) || !std::isfinite(max)) max = 1;
  const double raw = max / std::max(count, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  const int n = std::max(1, int(std::ceil(max / step - 1e-9)));
  std::vector<double> ticks;
  for (int i = 0; i <= n; ++i) ticks.push_back(i * step);
  return ticks;
}

std::string SvgChartGroup(const SvgChart& c, int x, int y) {
  // Widths by a conservative mean glyph width of sans-serif text.
  const double glyph = 0.62 * c.font_px;
  const std::vector<std::string> title = WrapTitle(c.title, int((c.width - 12) / glyph), 2);
  Frame f;
  f.left = 10 + 7 * 0.6 * (c.font_px - 1);  // room for a 7-character tick label
  f.right = c.width - 18;  // room for half the last x tick's label
  f.top = 6 + int(title.size()) * (c.font_px + 3) + c.font_px + 10;
  f.bottom = c.height - 2 * c.font_px - 12;
  double xmax = 0, ymax = 0;
  for (const Point& p : c.points) xmax = std::max(xmax, p.x), ymax = std::max(ymax, p.y);
  f.xticks = NiceTicks(xmax, 5);
  f.yticks = NiceTicks(ymax, 4);
  std::string out =
      absl::StrFormat("<g transform='translate(%d,%d)' font-size='%d'><title>%s</title>", x, y,
                      c.font_px, SvgEscape(c.title));
  for (size_t i = 0; i < title.size(); ++i) {
    absl::StrAppend(&out,
                    absl::StrFormat("<text class='title' x='6' y='%d' font-weight='bold'>%s</text>",
                                    4 + int(i + 1) * (c.font_px + 3), SvgEscape(title[i])));
  }
  DrawAxes(c, f, &out);
  if (c.points.empty()) {
    absl::StrAppend(&out, absl::StrFormat("<text x='%.1f' y='%.1f' text-anchor='middle' "
                                          "fill='#888'>%s</text>",
                                          (f.left + f.right) / 2, (f.top + f.bottom) / 2,
                                          SvgEscape(c.empty_note)));
  } else {
    std::string pts;
    for (const Point& p : c.points) {
      absl::StrAppend(&pts, pts.empty() ? "" : " ",
                      absl::StrFormat("%.1f,%.1f", f.X(p.x), f.Y(p.y)));
    }
    absl::StrAppend(&out, "<polyline fill='none' stroke='", SvgEscape(c.color),
                    "' stroke-width='2' points='", pts, "'/>");
  }
  return out + "</g>";
}

std::string SvgChartElement(const SvgChart& c) {
  return absl::StrCat(absl::StrFormat("<svg xmlns='http://www.w3.org/2000/svg' width='%d' "
                                      "height='%d' font-family='sans-serif'>",
                                      c.width, c.height),
                      SvgChartGroup(c, 0, 0), "</svg>");
}

}  // namespace tunefarm
