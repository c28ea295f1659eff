#pragma once
// The definitions of plot.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/trace/plot.hpp"

namespace mpp::trace::detail {

MPP_DECL const char* palette(std::size_t i) {
  static const char* colours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                  "#b07aa1", "#76b7b2", "#edc948", "#9c755f"};
  return colours[i % 8];
}

MPP_DECL std::string tick_label(double v, bool exponent) {
  char buf[32];
  const double a = std::fabs(v);
  if (v == 0) return "0";
  if (a >= 1e6 || a < 1e-3 || (exponent && a >= 1e4)) {
    std::snprintf(buf, sizeof buf, "%.0e", v);  // "1e+06" -> "1e6"
    std::string s = buf;
    const auto e = s.find('e');
    std::string mantissa = s.substr(0, e), power = s.substr(e + 1);
    if (power[0] == '+') power.erase(0, 1);
    while (power.size() > 1 && (power[0] == '0' || (power[0] == '-' && power[1] == '0')))
      power.erase(power[0] == '-' ? 1 : 0, 1);
    return mantissa + "e" + power;
  }
  if (a >= 100 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

Axis Axis::fit(double data_low, double data_high, bool log, bool from_zero) {
  Axis a;
  a.log = log;
  if (!(data_low <= data_high)) data_low = 0, data_high = 1;
  if (log) {
    double lo = std::floor(std::log10(data_low)), hi = std::ceil(std::log10(data_high));
    if (hi <= lo) hi = lo + 1;
    a.low = std::pow(10.0, lo);
    a.high = std::pow(10.0, hi);
    const int decades = static_cast<int>(hi - lo);
    const int every = decades > 8 ? 2 : 1;
    for (int e = static_cast<int>(lo); e <= static_cast<int>(hi); e += every)
      a.ticks.push_back(std::pow(10.0, e));
    return a;
  }
  if (from_zero && data_low > 0) data_low = 0;
  if (data_high == data_low) data_high = data_low + 1;
  const double raw_step = (data_high - data_low) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw_step)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * magnitude >= raw_step) {
      step = m * magnitude;
      break;
    }
  a.low = std::floor(data_low / step) * step;
  a.high = std::ceil(data_high / step) * step;
  for (double t = a.low; t <= a.high + step * 1e-9; t += step)
    a.ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  return a;
}

double Axis::map(double v, double pixel_low, double pixel_high) const {
  const double f = log ? (std::log10(v) - std::log10(low)) / (std::log10(high) - std::log10(low))
                       : (v - low) / (high - low);
  return pixel_low + f * (pixel_high - pixel_low);
}

MPP_DECL void text(std::string& out, double x, double y, const std::string& s, const char* anchor,
                   const char* extra) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor,
                extra);
  out += buf;
  out += mpp::detail::xml_escape(s);
  out += "</text>\n";
}

MPP_DECL std::string header(int width, int height, const PlotOptions& o) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                "viewBox=\"0 0 %d %d\" font-family=\"Helvetica,Arial,sans-serif\" "
                "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                width, height, width, height);
  out += buf;
  if (!o.title.empty())
    text(out, 8, 18, o.title, "start", " font-size=\"14\" font-weight=\"bold\"");
  if (!o.subtitle.empty()) text(out, 8, 36, o.subtitle, "start", " fill=\"#444\"");
  return out;
}

MPP_DECL double top_margin(const PlotOptions& o) {
  return o.title.empty() ? 16 : (o.subtitle.empty() ? 36 : 52);
}

MPP_DECL void frame(std::string& out, const Axis& x, const Axis* y, double left, double top,
                    double right, double bottom, const PlotOptions& o) {
  char buf[256];
  if (y) {
    for (double t : y->ticks) {
      const double py = y->map(t, bottom, top);
      std::snprintf(buf, sizeof buf,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
                    left, py, right, py);
      out += buf;
      text(out, left - 6, py + 4, tick_label(t, y->log), "end");
    }
  }
  for (double t : x.ticks) {
    const double px = x.map(t, left, right);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
                  px, top, px, bottom);
    out += buf;
    text(out, px, bottom + 15, tick_label(t, x.log), "middle");
  }
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                "stroke=\"#888\"/>\n",
                left, top, right - left, bottom - top);
  out += buf;
  if (!o.x_label.empty()) text(out, (left + right) / 2, bottom + 32, o.x_label, "middle");
  if (!o.y_label.empty()) {
    std::snprintf(buf, sizeof buf,
                  "<text x=\"14\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
                  "%.1f)\">",
                  (top + bottom) / 2, (top + bottom) / 2);
    out += buf;
    out += mpp::detail::xml_escape(o.y_label);
    out += "</text>\n";
  }
}

MPP_DECL void references(std::string& out, const Axis& y, double left, double right, double top,
                         double bottom, const PlotOptions& o) {
  char buf[256];
  for (const Reference& r : o.references) {
    if (!usable(r.value, y.log) || r.value < y.low || r.value > y.high) continue;
    const double py = y.map(r.value, bottom, top);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c0392b\" "
                  "stroke-dasharray=\"6 4\" stroke-width=\"1.5\"/>\n",
                  left, py, right, py);
    out += buf;
    text(out, left + 6, py - 4, r.label, "start",
         " fill=\"#c0392b\" paint-order=\"stroke\" stroke=\"white\" stroke-width=\"3\"");
  }
}

MPP_DECL std::pair<double, double> legend_size(
    const std::vector<std::pair<std::string, std::string>>& items) {
  std::size_t longest = 0;
  for (const auto& item : items) longest = std::max(longest, item.first.size());
  return {28 + 6.2 * static_cast<double>(longest), 16.0 * static_cast<double>(items.size()) + 6};
}

MPP_DECL void legend_at(std::string& out,
                        const std::vector<std::pair<std::string, std::string>>& items, double x,
                        double y) {
  if (items.empty()) return;
  char buf[256];
  const auto [w, h] = legend_size(items);
  std::snprintf(buf, sizeof buf,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" "
                "fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n",
                x, y, w, h);
  out += buf;
  double row = y + 4;
  for (const auto& [name, fill] : items) {
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/>\n", x + 6,
                  row, fill.c_str());
    out += buf;
    text(out, x + 22, row + 9, name, "start",
         (" data-legend=\"" + mpp::detail::xml_escape(name) + "\"").c_str());
    row += 16;
  }
}

MPP_DECL void legend(std::string& out,
                     const std::vector<std::pair<std::string, std::string>>& items, double right,
                     double top) {
  legend_at(out, items, right - legend_size(items).first - 6, top + 6);
}

MPP_DECL int covered(const std::vector<std::vector<std::pair<double, double>>>& lines, double x0,
                     double y0, double x1, double y1) {
  int n = 0;
  auto inside = [&](double x, double y) { return x >= x0 && x <= x1 && y >= y0 && y <= y1; };
  for (const auto& line : lines)
    for (std::size_t i = 0; i < line.size(); ++i) {
      n += inside(line[i].first, line[i].second) ? 4 : 0;
      if (i + 1 < line.size())
        for (int k = 1; k < 16; ++k) {
          const double f = k / 16.0;
          n += inside(line[i].first + f * (line[i + 1].first - line[i].first),
                      line[i].second + f * (line[i + 1].second - line[i].second));
        }
    }
  return n;
}

}  // namespace mpp::trace::detail

namespace mpp::trace {

MPP_DECL std::string render_line_plot(std::span<const Series> series, const PlotOptions& o) {
  double x_low = std::numeric_limits<double>::infinity(), x_high = -x_low;
  double y_low = x_low, y_high = -x_low;
  for (const Series& s : series)
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!detail::usable(s.x[i], o.log_x) || !detail::usable(s.y[i], o.log_y)) continue;
      x_low = std::min(x_low, s.x[i]);
      x_high = std::max(x_high, s.x[i]);
      y_low = std::min(y_low, s.y[i]);
      y_high = std::max(y_high, s.y[i]);
    }
  for (const Reference& r : o.references)
    if (detail::usable(r.value, o.log_y)) {
      y_low = std::min(y_low, r.value);
      y_high = std::max(y_high, r.value);
    }
  const auto x = detail::Axis::fit(x_low, x_high, o.log_x, false);
  const auto y = detail::Axis::fit(y_low, y_high, o.log_y, o.y_from_zero);
  const double left = 64, top = detail::top_margin(o), right = o.width - 28.0,
               bottom = o.height - 44.0;
  std::string out = detail::header(o.width, o.height, o);
  detail::frame(out, x, &y, left, top, right, bottom, o);
  detail::references(out, y, left, right, top, bottom, o);
  char buf[160];
  std::vector<std::pair<std::string, std::string>> items;
  std::vector<std::vector<std::pair<double, double>>> drawn_lines;  // in pixels, for the legend
  for (std::size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    const char* colour = detail::palette(k);
    std::string points;
    std::size_t drawn = 0;
    drawn_lines.emplace_back();
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!detail::usable(s.x[i], o.log_x) || !detail::usable(s.y[i], o.log_y)) continue;
      const double px = x.map(s.x[i], left, right), py = y.map(s.y[i], bottom, top);
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px, py);
      points += buf;
      drawn_lines.back().emplace_back(px, py);
      ++drawn;
    }
    out += "<polyline fill=\"none\" stroke-width=\"1.8\" stroke=\"" + std::string(colour) +
           "\" points=\"" + points + "\"><title>" + mpp::detail::xml_escape(s.name) +
           "</title></polyline>\n";
    if (drawn <= 40)
      for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
        if (!detail::usable(s.x[i], o.log_x) || !detail::usable(s.y[i], o.log_y)) continue;
        std::snprintf(buf, sizeof buf,
                      "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s, %s</title>"
                      "</circle>\n",
                      x.map(s.x[i], left, right), y.map(s.y[i], bottom, top), colour,
                      detail::tick_label(s.x[i]).c_str(), detail::tick_label(s.y[i]).c_str());
        out += buf;
      }
    if (!s.name.empty()) items.emplace_back(s.name, colour);
  }
  // The legend goes to the corner of the plot area the curves leave emptiest (top right first),
  // so that it never hides a measured point.
  if (!items.empty()) {
    const auto [w, h] = detail::legend_size(items);
    const double corners[4][2] = {{right - w - 6, top + 6},
                                  {left + 6, top + 6},
                                  {right - w - 6, bottom - h - 6},
                                  {left + 6, bottom - h - 6}};
    int best = 0, least = -1;
    for (int c = 0; c < 4; ++c) {
      const int n = detail::covered(drawn_lines, corners[c][0] - 4, corners[c][1] - 4,
                                    corners[c][0] + w + 4, corners[c][1] + h + 4);
      if (least < 0 || n < least) least = n, best = c;
    }
    detail::legend_at(out, items, corners[best][0], corners[best][1]);
  }
  out += "</svg>\n";
  return out;
}

MPP_DECL std::string render_bar_chart(std::span<const std::string> categories,
                                      std::span<const Series> series, const PlotOptions& o) {
  double y_low = 0, y_high = 0;
  for (const Series& s : series)
    for (double v : s.y)
      if (detail::usable(v, o.log_y)) {
        y_low = std::min(y_low, v);
        y_high = std::max(y_high, v);
      }
  for (const Reference& r : o.references) y_high = std::max(y_high, r.value);
  const auto y = detail::Axis::fit(y_low, y_high, o.log_y, true);
  const double left = 64, top = detail::top_margin(o) + 6, right = o.width - 28.0,
               bottom = o.height - 44.0;
  std::string out = detail::header(o.width, o.height, o);
  detail::Axis none;  // categories take the place of x ticks
  detail::frame(out, none, &y, left, top, right, bottom, o);
  const double group =
      (right - left) / static_cast<double>(std::max<std::size_t>(1, categories.size()));
  const double bar = group * 0.8 / static_cast<double>(std::max<std::size_t>(1, series.size()));
  char buf[320];
  for (std::size_t c = 0; c < categories.size(); ++c) {
    const double gx = left + group * static_cast<double>(c) + group * 0.1;
    detail::text(out, gx + group * 0.4, bottom + 15, categories[c], "middle");
    for (std::size_t k = 0; k < series.size(); ++k) {
      if (c >= series[k].y.size() || !detail::usable(series[k].y[c], o.log_y)) continue;
      const double v = series[k].y[c];
      const double y0 = y.map(o.log_y ? y.low : 0.0, bottom, top), y1 = y.map(v, bottom, top);
      const double bx = gx + bar * static_cast<double>(k);
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                    "<title>%s, %s: %s</title></rect>\n",
                    bx, std::min(y0, y1), std::max(1.0, bar - 2), std::fabs(y0 - y1),
                    detail::palette(k), mpp::detail::xml_escape(categories[c]).c_str(),
                    mpp::detail::xml_escape(series[k].name).c_str(), detail::tick_label(v).c_str());
      out += buf;
      if (bar >= 22)
        detail::text(out, bx + (bar - 2) / 2, std::min(y0, y1) - 3, detail::tick_label(v), "middle",
                     " font-size=\"10\"");
    }
  }
  detail::references(out, y, left, right, top, bottom, o);
  std::vector<std::pair<std::string, std::string>> items;
  if (series.size() > 1)
    for (std::size_t k = 0; k < series.size(); ++k)
      items.emplace_back(series[k].name, detail::palette(k));
  detail::legend(out, items, right, top);
  out += "</svg>\n";
  return out;
}

MPP_DECL std::string render_lanes(std::span<const std::string> lanes,
                                  std::span<const LaneSpan> spans,
                                  std::span<const LegendEntry> legend, const PlotOptions& o) {
  double end = 0;
  for (const LaneSpan& s : spans) end = std::max(end, s.end);
  const auto x = detail::Axis::fit(0, end > 0 ? end : 1, false, true);
  std::size_t longest = 4;
  for (const auto& l : lanes) longest = std::max(longest, l.size());
  const double row = 26, left = 12 + 6.0 * static_cast<double>(longest),
               top = detail::top_margin(o) + 4, right = o.width - 16.0;
  const double bottom = top + row * static_cast<double>(lanes.size());
  const int height = static_cast<int>(bottom) + 44 + (legend.empty() ? 0 : 18);
  std::string out = detail::header(o.width, height, o);
  char buf[512];
  for (std::size_t l = 0; l < lanes.size(); ++l) {
    const double y = top + row * static_cast<double>(l);
    detail::text(out, 8, y + row * 0.65, lanes[l]);
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f1f1f1\"/>\n",
                  left, y + 2, right - left, row - 4);
    out += buf;
  }
  detail::frame(out, x, nullptr, left, top, right, bottom, o);
  for (const LaneSpan& s : spans) {
    if (s.end <= s.start || s.lane < 0 || s.lane >= static_cast<int>(lanes.size())) continue;
    const double x0 = x.map(s.start, left, right), x1 = x.map(s.end, left, right);
    const double y = top + row * s.lane + 2;
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                  "stroke=\"white\" stroke-width=\"0.6\"><title>%s [%s, %s)</title></rect>\n",
                  x0, y, std::max(0.5, x1 - x0), row - 4, s.fill.c_str(),
                  mpp::detail::xml_escape(s.tooltip.empty() ? s.label : s.tooltip).c_str(),
                  detail::tick_label(s.start).c_str(), detail::tick_label(s.end).c_str());
    out += buf;
    if (!s.label.empty() && x1 - x0 >= 6.5 * static_cast<double>(s.label.size()) + 4)
      detail::text(out, (x0 + x1) / 2, y + row * 0.5 + 1, s.label, "middle",
                   " fill=\"white\" font-size=\"10\"");
  }
  double lx = left;
  for (const LegendEntry& e : legend) {
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>\n", lx,
                  bottom + 40, e.fill.c_str());
    out += buf;
    detail::text(out, lx + 14, bottom + 49, e.name);
    lx += 24 + 6.2 * static_cast<double>(e.name.size());
  }
  out += "</svg>\n";
  return out;
}

MPP_DECL std::string timeline_kind(const TimedEvent& e, bool chunks) {
  static const char* names[] = {"F forward", "B backward", "I input grad", "W weight grad"};
  if (!is_compute(e.op)) return "transfer (send, or wait on a receive)";
  std::string name = names[static_cast<int>(e.op)];
  if (chunks) name += std::string(", chunk ") + static_cast<char>('a' + e.chunk);
  return name;
}

MPP_DECL std::string render_timeline(std::span<const TimedEvent> events, const TimelineOptions& o) {
  int ranks = 1, max_chunk = 0;
  double end = 0;
  for (const TimedEvent& e : events) {
    ranks = std::max(ranks, e.rank + 1);
    max_chunk = std::max(max_chunk, e.chunk);
    end = std::max(end, e.end);
  }
  const bool chunks = max_chunk > 0;
  const std::string unit = o.unit == "us" ? "\xC2\xB5s" : o.unit;  // µs
  const auto axis = detail::Axis::fit(0, end > 0 ? end : 1, false, true);
  const double left = 64, top = o.title.empty() ? 12 : (o.subtitle.empty() ? 34 : 50);
  const double right = o.width - 16, row = o.row_height;
  const double bottom = top + row * ranks;
  auto px = [&](double t) { return axis.map(t, left, right); };

  // The kinds drawn, in a fixed order (F, B, I, W by chunk, then transfers), with their colours.
  struct Kind {
    std::string name, fill;
    double opacity;
    int order;
  };
  std::vector<Kind> kinds;
  auto style = [&](const TimedEvent& e) {
    static const char* fills[] = {"#4e79a7", "#59a14f", "#8cd17d", "#b07aa1"};
    Kind k{timeline_kind(e, chunks), "#bab0ac", 1.0, 1000};
    if (is_compute(e.op)) {
      k.fill = fills[static_cast<int>(e.op)];
      k.opacity = chunks ? 1.0 - 0.45 * e.chunk / max_chunk : 1.0;
      k.order = static_cast<int>(e.op) * 64 + e.chunk;
    }
    return k;
  };

  for (const TimedEvent& e : events) {
    if (e.end <= e.start) continue;
    const Kind k = style(e);
    if (std::none_of(kinds.begin(), kinds.end(), [&](const Kind& d) { return d.name == k.name; }))
      kinds.push_back(k);
  }
  std::sort(kinds.begin(), kinds.end(),
            [](const Kind& a, const Kind& b) { return a.order < b.order; });
  // The legend: one entry per kind drawn, in rows under the axis.
  std::vector<std::pair<double, double>> at;  // each entry's position
  double lx = left, ly = bottom + 54;
  for (const Kind& k : kinds) {
    const double w = 24 + 6.2 * static_cast<double>(k.name.size());
    if (lx + w > right && lx > left) lx = left, ly += 16;
    at.emplace_back(lx, ly);
    lx += w;
  }
  const double height = ly + 14;

  std::string out;
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica,Arial,sans-serif\" "
                "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                o.width, height, o.width, height);
  out += buf;
  if (!o.title.empty())
    detail::text(out, 8, 18, o.title, "start", " font-size=\"14\" font-weight=\"bold\"");
  if (!o.subtitle.empty()) detail::text(out, 8, 36, o.subtitle, "start", " fill=\"#444\"");
  for (int r = 0; r < ranks; ++r) {
    const double y = top + row * r;
    detail::text(out, 8, y + row * 0.65, "rank " + std::to_string(r));
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f1f1f1\"/>\n",
                  left, y + 2, right - left, row - 4);
    out += buf;
  }
  // The time axis: a baseline, a tick and a label at each round value, the unit in the title.
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n", left,
                bottom + 2, right, bottom + 2);
  out += buf;
  for (double t : axis.ticks) {
    const double x = axis.map(t, left, right);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n", x,
                  bottom + 2, x, bottom + 7);
    out += buf;
    detail::text(out, x, bottom + 19, detail::tick_label(t), "middle", " class=\"tick\"");
  }
  detail::text(out, (left + right) / 2, bottom + 35, "time from the step's start (" + unit + ")",
               "middle", " class=\"axis-title\"");

  for (const TimedEvent& e : events) {
    if (e.end <= e.start) continue;
    const Kind k = style(e);
    const double x0 = px(e.start), x1 = px(e.end), w = std::max(0.5, x1 - x0);
    const double y = top + row * e.rank + 2;
    const std::string label = mpp::detail::event_label(e, chunks);
    std::snprintf(
        buf, sizeof buf,
        "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
        "fill-opacity=\"%.2f\" stroke=\"white\" stroke-width=\"0.6\" data-kind=\"%s\">"
        "<title>rank %d %s: stage %d, micro-batch %d, chunk %d, [%s, %s) %s</title>"
        "</rect>\n",
        x0, y, w, row - 4, k.fill.c_str(), k.opacity, mpp::detail::xml_escape(k.name).c_str(),
        e.rank, std::string(to_string(e.op)).c_str(), e.stage, e.micro_batch, e.chunk,
        detail::tick_label(e.start).c_str(), detail::tick_label(e.end).c_str(), unit.c_str());
    out += buf;
    const std::string shown = is_compute(e.op) ? label.substr(1) : label;
    if (w >= 6.5 * static_cast<double>(shown.size()))
      detail::text(out, x0 + w / 2, y + row * 0.5 + 1, shown, "middle",
                   " fill=\"white\" font-size=\"10\"");
  }

  for (std::size_t i = 0; i < kinds.size(); ++i) {
    const Kind& k = kinds[i];
    const auto [lx, ly] = at[i];
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\" "
                  "fill-opacity=\"%.2f\"/>\n",
                  lx, ly - 9, k.fill.c_str(), k.opacity);
    out += buf;
    detail::text(out, lx + 14, ly, k.name, "start",
                 (" data-legend=\"" + mpp::detail::xml_escape(k.name) + "\"").c_str());
  }
  out += "</svg>\n";
  return out;
}

}  // namespace mpp::trace
