#pragma once
// Line plots, grouped bar charts and lane charts as SVG: the figures a schedule timeline does not
// cover (loss curves, latency against message size, memory per stage, communication overlapping
// compute). Torch-free and dependency-free like the timeline renderers, so labs, tools and the
// docs' figures all draw with the same code.
//
//   std::vector<mpp::trace::Series> s{{"train", steps, losses}};
//   std::string svg = mpp::trace::render_line_plot(s, {.title = "loss", .x_label = "step"});
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "mpp/config.hpp"
#include "mpp/schedule/render.hpp"

namespace mpp::trace {

/// One curve of a line plot (x and y of the same length), or one series of a bar chart (y only).
struct Series {
  std::string name;       ///< Legend text.
  std::vector<double> x;  ///< Empty for a bar chart.
  std::vector<double> y;  ///< One value per x (per category in a bar chart).
};

/// A labelled horizontal line across the plot: a budget, a floor, a prediction.
struct Reference {
  std::string label;  ///< Written above the line, at its left end.
  double value = 0;   ///< In the y axis's unit; a line outside the axis range is not drawn.
};

/// How render_line_plot() and render_bar_chart() draw.
struct PlotOptions {
  std::string title;        ///< Drawn above the plot.
  std::string subtitle;     ///< Drawn under the title; empty for none.
  std::string x_label;      ///< Axis title.
  std::string y_label;      ///< Axis title.
  bool log_x = false;       ///< logarithmic axes need positive values (others are skipped)
  bool log_y = false;       ///< Logarithmic y axis (positive values only, like log_x).
  bool y_from_zero = true;  ///< linear y axis starts at 0 unless the data goes below
  int width = 720;          ///< Pixels.
  int height = 380;         ///< Pixels.
  std::vector<Reference> references;  ///< Horizontal lines drawn across the plot.
};

/// One box of a lane chart: [start, end) on `lane`, drawn in `fill`, with an optional label
/// inside (shown when it fits) and a tooltip.
struct LaneSpan {
  int lane = 0;                  ///< Row index from 0 (top).
  double start = 0;              ///< In the chart's x unit.
  double end = 0;                ///< Exclusive.
  std::string label;             ///< Shown inside the box when it fits.
  std::string fill = "#4e79a7";  ///< An SVG colour.
  std::string tooltip;           ///< Shown on hover; empty for none.
};

/// A colour and what it means, for a lane chart's legend.
struct LegendEntry {
  std::string name;  ///< What the colour means.
  std::string fill;  ///< An SVG colour.
};

namespace detail {

MPP_DECL const char* palette(std::size_t i);

MPP_DECL std::string tick_label(double v, bool exponent = false);

/// A numeric axis: the data range widened to round ticks, mapped onto [pixel_low, pixel_high].
struct Axis {
  double low = 0, high = 1;
  bool log = false;
  std::vector<double> ticks;

  MPP_DECL static Axis fit(double data_low, double data_high, bool log, bool from_zero);

  MPP_DECL double map(double v, double pixel_low, double pixel_high) const;
};

inline bool usable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

MPP_DECL void text(std::string& out, double x, double y, const std::string& s,
                   const char* anchor = "start", const char* extra = "");

MPP_DECL std::string header(int width, int height, const PlotOptions& o);

MPP_DECL double top_margin(const PlotOptions& o);

/// Frame, grid lines, tick labels and axis labels of a plot area.
MPP_DECL void frame(std::string& out, const Axis& x, const Axis* y, double left, double top,
                    double right, double bottom, const PlotOptions& o);

MPP_DECL void references(std::string& out, const Axis& y, double left, double right, double top,
                         double bottom, const PlotOptions& o);

/// Width and height of a legend box for `items`.
MPP_DECL std::pair<double, double> legend_size(
    const std::vector<std::pair<std::string, std::string>>& items);

/// Draws the legend box with its top-left corner at (x, y).
MPP_DECL void legend_at(std::string& out,
                        const std::vector<std::pair<std::string, std::string>>& items, double x,
                        double y);

/// The legend in the top-right corner of the plot area (bar charts: bars leave it free).
MPP_DECL void legend(std::string& out,
                     const std::vector<std::pair<std::string, std::string>>& items, double right,
                     double top);

/// How much of the drawn data (points, and points along each segment) falls in the box.
MPP_DECL int covered(const std::vector<std::vector<std::pair<double, double>>>& lines, double x0,
                     double y0, double x1, double y1);

}  // namespace detail

/// Curves y(x), one colour per series, points marked when there are few; references as dashed
/// lines. Points that cannot be drawn on a logarithmic axis (<= 0) or are not finite are skipped.
MPP_DECL std::string render_line_plot(std::span<const Series> series, const PlotOptions& o = {});

/// Vertical bars: one group per category, one bar per series in each group (series[k].y[c] is
/// series k's value for category c), the value written above each bar; references as dashed
/// lines (a memory budget, say).
MPP_DECL std::string render_bar_chart(std::span<const std::string> categories,
                                      std::span<const Series> series, const PlotOptions& o = {});

/// Named lanes (rows) of boxes on one time axis: a measured timeline of things that are not
/// schedule actions, e.g. a backward pass in one lane and the all-reduces it launches in another.
MPP_DECL std::string render_lanes(std::span<const std::string> lanes,
                                  std::span<const LaneSpan> spans,
                                  std::span<const LegendEntry> legend = {},
                                  const PlotOptions& o = {});

/// How render_timeline() draws.
struct TimelineOptions {
  std::string title;     ///< Drawn above the timeline; empty for none.
  std::string subtitle;  ///< Drawn under the title; empty for none.
  /// The unit of the events' times, named on the time axis ("us", a measured trace, is written
  /// µs; the labs' titles say "microseconds", so the axis keeps that unit for long steps too).
  std::string unit = "us";
  double width = 960;   ///< Pixels.
  int row_height = 26;  ///< Pixels per rank row.
};

/// The kind of box an event is drawn as: "F forward", "B backward", "I input grad",
/// "W weight grad" (with ", chunk a", ", chunk b", ... when a rank runs several chunks), or
/// "transfer (send, or wait on a receive)".
MPP_DECL std::string timeline_kind(const TimedEvent& e, bool chunks);

/// One row per rank, one box per action, on a time axis with ticks and its unit: F blue,
/// B green, I light green, W purple, transfers grey; later chunks in lighter shades. The legend
/// names each kind of box drawn (timeline_kind()) and no other. Boxes and legend entries carry
/// `data-kind` / `data-legend` attributes naming their kind, for tests.
MPP_DECL std::string render_timeline(std::span<const TimedEvent> events,
                                     const TimelineOptions& o = {});

}  // namespace mpp::trace

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/trace/impl/plot.ipp"
#endif
