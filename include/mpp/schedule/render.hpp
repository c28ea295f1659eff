#pragma once
// Timelines from a list of timed events: ASCII (terminal), SVG (docs) and Chrome trace JSON
// (chrome://tracing, Perfetto). The same functions draw the verifier's prediction
// (simulate_events) and a trace measured by the executor, so the two pictures compare directly.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "mpp/schedule/cost_model.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/timed_event.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

/// The verifier's replay of `table` as timed events (compute actions, plus rendezvous transfers
/// when T_comm > 0). Throws ScheduleError if the table is unsound.
inline std::vector<TimedEvent> simulate_events(const ScheduleTable& table, CommSemantics semantics,
                                               const Costs& costs = {}) {
  int total = 0;
  for (int r = 0; r < table.ranks; ++r) total += table.length[r];
  std::vector<TimedEvent> events(static_cast<std::size_t>(2 * total + 1));
  detail::EventSink sink{events.data(), static_cast<int>(events.size()), 0};
  VerifyResult result{};
  detail::verify_into(result, table, semantics, costs, &sink);
  if (!result.ok) throw ScheduleError(std::string(result.message.view()));
  events.resize(static_cast<std::size_t>(std::min(sink.count, sink.capacity)));
  return events;
}

namespace detail {

inline int rank_count(std::span<const TimedEvent> events) {
  int ranks = 0;
  for (const TimedEvent& e : events) ranks = std::max(ranks, e.rank + 1);
  return ranks;
}

inline double time_end(std::span<const TimedEvent> events) {
  double end = 0;
  for (const TimedEvent& e : events) end = std::max(end, e.end);
  return end;
}

inline bool uses_chunks(std::span<const TimedEvent> events) {
  return std::any_of(events.begin(), events.end(), [](const TimedEvent& e) { return e.chunk > 0; });
}

/// "F3", "B12", "F3b" (chunk 1), "SF3"/"RF3" for transfers.
inline std::string event_label(const TimedEvent& e, bool chunks) {
  std::string label;
  switch (e.op) {
    case Op::SEND_F:
      label = "sf";
      break;
    case Op::RECV_F:
      label = "rf";
      break;
    case Op::SEND_B:
      label = "sb";
      break;
    case Op::RECV_B:
      label = "rb";
      break;
    default:
      label = std::string(to_string(e.op));
  }
  label += std::to_string(e.micro_batch);
  if (chunks) label += static_cast<char>('a' + e.chunk);
  return label;
}

inline std::string format_number(double v) {
  char buffer[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buffer, sizeof buffer, "%.0f", v);
  else
    std::snprintf(buffer, sizeof buffer, "%.3g", v);
  return buffer;
}

inline std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

}  // namespace detail

/// How render_ascii() draws.
struct AsciiOptions {
  /// Time cells per row; predicted timelines use one cell per cost unit if they fit.
  int max_columns = 160;
};

/// Rank rows by time cells: each action shows its label ("F3", "B0", "I2", "W1"; chunk letter
/// a, b, ... with several chunks per rank) at its first cell, '-' in the cells it goes on
/// over, '.' where the rank is idle. No action is ever left out: when several start within one
/// cell (short measured actions), each label takes the next free cell, so a crowded stretch
/// reads slightly later than it ran and a row may run past the axis.
inline std::string render_ascii(std::span<const TimedEvent> events,
                                const AsciiOptions& options = {}) {
  const int ranks = detail::rank_count(events);
  const double end = detail::time_end(events);
  if (ranks == 0 || end <= 0) return "(no events)\n";
  const bool chunks = detail::uses_chunks(events);
  bool integral = true;
  std::size_t width = 1;
  for (const TimedEvent& e : events) {
    integral = integral && e.start == std::floor(e.start) && e.end == std::floor(e.end);
    width = std::max(width, detail::event_label(e, chunks).size());
  }
  int columns = static_cast<int>(std::ceil(end));
  if (!integral || columns > options.max_columns)
    columns = std::min(options.max_columns, std::max(1, columns));
  const double cell_time = end / columns;
  const std::size_t cell = width + 1;
  std::string out;
  // Time axis: a tick every 10 cells.
  std::string axis(static_cast<std::size_t>(columns) * cell + 8, ' ');
  for (int c = 0; c < columns; c += 10) {
    const std::string tick = detail::format_number(c * cell_time);
    axis.replace(8 + static_cast<std::size_t>(c) * cell, tick.size(), tick);
  }
  axis.resize(static_cast<std::size_t>(columns) * cell + 8);
  out += axis + '\n';
  for (int r = 0; r < ranks; ++r) {
    std::vector<const TimedEvent*> mine;
    for (const TimedEvent& e : events)
      if (e.rank == r && e.end > e.start) mine.push_back(&e);
    std::stable_sort(mine.begin(), mine.end(),
                     [](const TimedEvent* a, const TimedEvent* b) { return a->start < b->start; });
    std::vector<char> labelled(static_cast<std::size_t>(columns), 0);
    std::string row(static_cast<std::size_t>(columns) * cell, '.');
    for (std::size_t i = cell - 1; i < row.size(); i += cell) row[i] = ' ';
    auto blank = [&](int c) {
      if (static_cast<std::size_t>(c) >= labelled.size()) {  // past the axis: grow the row
        labelled.resize(static_cast<std::size_t>(c) + 1, 0);
        row.resize(labelled.size() * cell, ' ');
      }
      row.replace(static_cast<std::size_t>(c) * cell, width, width, ' ');
    };
    // Blocks first ('-' after the first cell), then the labels, each at its first free cell.
    for (const TimedEvent* e : mine) {
      const int first =
          std::clamp(static_cast<int>(std::floor(e->start / cell_time + 1e-9)), 0, columns - 1);
      const int last = std::clamp(static_cast<int>(std::ceil(e->end / cell_time - 1e-9)) - 1, first,
                                  columns - 1);
      for (int c = first; c <= last; ++c) {
        if (labelled[static_cast<std::size_t>(c)]) continue;
        blank(c);
        if (c > first) row[static_cast<std::size_t>(c) * cell] = '-';
      }
    }
    int next_free = 0;
    for (const TimedEvent* e : mine) {
      int c = std::clamp(static_cast<int>(std::floor(e->start / cell_time + 1e-9)), 0, columns - 1);
      c = std::max(c, next_free);
      blank(c);
      const std::string label = detail::event_label(*e, chunks);
      row.replace(static_cast<std::size_t>(c) * cell, label.size(), label);
      labelled[static_cast<std::size_t>(c)] = 1;
      next_free = c + 1;
    }
    char head[24];
    std::snprintf(head, sizeof head, "rank %-2d ", r);
    out += head;
    out += row;
    out += '\n';
  }
  return out;
}

/// How render_svg() draws.
struct SvgOptions {
  std::string title;           ///< Drawn above the timeline; empty for none.
  std::string subtitle;        ///< Drawn under the title (the figures, say); empty for none.
  double pixels_per_unit = 0;  ///< 0: fit the timeline into ~900 px
  int row_height = 26;         ///< Pixels per rank row.
};

/// One row per rank, one box per action (F blue, B green, I light green, W purple, transfers
/// grey), labelled with the micro-batch (and chunk letter); lighter shades for later chunks.
inline std::string render_svg(std::span<const TimedEvent> events, const SvgOptions& options = {}) {
  const int ranks = std::max(1, detail::rank_count(events));
  const double end = std::max(1e-9, detail::time_end(events));
  const bool chunks = detail::uses_chunks(events);
  int max_chunk = 0;
  for (const TimedEvent& e : events) max_chunk = std::max(max_chunk, e.chunk);
  const double left = 64, top = options.title.empty() ? 12 : (options.subtitle.empty() ? 34 : 50);
  const double unit = options.pixels_per_unit > 0 ? options.pixels_per_unit : 900.0 / end;
  const double width = left + end * unit + 16, height = top + ranks * options.row_height + 34;
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "viewBox=\"0 0 %.0f %.0f\" "
                "font-family=\"Helvetica,Arial,sans-serif\" font-size=\"11\">\n",
                width, height, width, height);
  out += buf;
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!options.title.empty()) {
    std::snprintf(buf, sizeof buf,
                  "<text x=\"8\" y=\"18\" font-size=\"14\" font-weight=\"bold\">%s</text>\n",
                  detail::xml_escape(options.title).c_str());
    out += buf;
  }
  if (!options.subtitle.empty()) {
    std::snprintf(buf, sizeof buf, "<text x=\"8\" y=\"36\" fill=\"#444\">%s</text>\n",
                  detail::xml_escape(options.subtitle).c_str());
    out += buf;
  }
  for (int r = 0; r < ranks; ++r) {
    const double y = top + r * options.row_height;
    std::snprintf(buf, sizeof buf,
                  "<text x=\"8\" y=\"%.1f\">rank %d</text>\n<rect x=\"%.1f\" y=\"%.1f\" "
                  "width=\"%.1f\" height=\"%d\" "
                  "fill=\"#f1f1f1\"/>\n",
                  y + options.row_height * 0.65, r, left, y + 2, end * unit,
                  options.row_height - 4);
    out += buf;
  }
  for (const TimedEvent& e : events) {
    if (e.end <= e.start) continue;
    const char* fill = "#bab0ac";
    switch (e.op) {
      case Op::F:
        fill = "#4e79a7";
        break;
      case Op::B:
        fill = "#59a14f";
        break;
      case Op::I:
        fill = "#8cd17d";
        break;
      case Op::W:
        fill = "#b07aa1";
        break;
      default:
        break;
    }
    const double opacity = max_chunk > 0 ? 1.0 - 0.45 * e.chunk / max_chunk : 1.0;
    const double x = left + e.start * unit, w = (e.end - e.start) * unit;
    const double y = top + e.rank * options.row_height + 2;
    const std::string label = detail::event_label(e, chunks);
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
                  "fill-opacity=\"%.2f\" "
                  "stroke=\"white\" stroke-width=\"0.6\"><title>rank %d %s: stage %d, micro-batch "
                  "%d, chunk %d, "
                  "[%s, %s)</title></rect>\n",
                  x, y, w, options.row_height - 4, fill, opacity, e.rank,
                  std::string(to_string(e.op)).c_str(), e.stage, e.micro_batch, e.chunk,
                  detail::format_number(e.start).c_str(), detail::format_number(e.end).c_str());
    out += buf;
    if (w >=
        6.5 * static_cast<double>(
                  label.size() -
                  (e.op == Op::F || e.op == Op::B || e.op == Op::I || e.op == Op::W ? 1 : 2))) {
      const std::string text = is_compute(e.op) ? label.substr(1) : label;
      std::snprintf(buf, sizeof buf,
                    "<text x=\"%.2f\" y=\"%.1f\" fill=\"white\" text-anchor=\"middle\" "
                    "font-size=\"10\">%s</text>\n",
                    x + w / 2, y + options.row_height * 0.5 + 1, text.c_str());
      out += buf;
    }
  }
  // Legend.
  const double ly = top + ranks * options.row_height + 18;
  const char* names[] = {"F forward", "B backward", "I input grad", "W weight grad", "transfer"};
  const char* fills[] = {"#4e79a7", "#59a14f", "#8cd17d", "#b07aa1", "#bab0ac"};
  for (int i = 0; i < 5; ++i) {
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.0f\" y=\"%.0f\" width=\"10\" height=\"10\" fill=\"%s\"/><text "
                  "x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                  left + i * 110.0, ly - 9, fills[i], left + i * 110.0 + 14, ly, names[i]);
    out += buf;
  }
  out += "</svg>\n";
  return out;
}

/// Chrome trace event format: one complete ("X") event per action, one thread per rank.
/// `microseconds_per_unit` scales the event times (1000: one cost unit shows as 1 ms).
inline std::string render_chrome_trace(std::span<const TimedEvent> events,
                                       double microseconds_per_unit = 1000.0) {
  const bool chunks = detail::uses_chunks(events);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  char buf[384];
  bool first = true;
  for (int r = 0; r < detail::rank_count(events); ++r) {
    std::snprintf(buf, sizeof buf,
                  "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{"
                  "\"name\":\"rank %d\"}}",
                  first ? "" : ",\n", r, r);
    out += buf;
    first = false;
  }
  for (const TimedEvent& e : events) {
    std::snprintf(buf, sizeof buf,
                  "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                  "\"dur\":%.3f,"
                  "\"args\":{\"stage\":%d,\"micro_batch\":%d,\"chunk\":%d}}",
                  first ? "" : ",\n", detail::event_label(e, chunks).c_str(),
                  std::string(to_string(e.op)).c_str(), e.rank, e.start * microseconds_per_unit,
                  (e.end - e.start) * microseconds_per_unit, e.stage, e.micro_batch, e.chunk);
    out += buf;
    first = false;
  }
  out += "\n]}\n";
  return out;
}

/// "makespan 33, bubble 27.3% (idle/busy 0.375), peak in flight per rank 4 3 2 1".
inline std::string describe_figures(const VerifyResult& r) {
  if (!r.ok) return std::string(r.message.view());
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "makespan %d, bubble %.1f%% (idle/busy %.3f), peak in flight per rank", r.makespan,
                100.0 * r.bubble_fraction(), r.bubble_ratio());
  std::string out = buf;
  for (int i = 0; i < r.ranks; ++i) out += " " + std::to_string(r.peak_in_flight[i]);
  return out;
}

}  // namespace mpp
