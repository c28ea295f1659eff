// The SVG plots the docs' figures are drawn with (include/mpp/trace/plot.hpp): what each one puts
// on the page, checked on the SVG text.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "mpp/trace/plot.hpp"

namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("line plot: one polyline per series, points marked, references and escaped names") {
  std::vector<mpp::trace::Series> series{{"train <loss>", {0, 1, 2, 3}, {4, 3, 2, 1}},
                                         {"validation", {0, 3}, {4, 1.5}}};
  mpp::trace::PlotOptions o;
  o.title = "loss";
  o.references.push_back({"floor", 0.5});
  const std::string svg = mpp::trace::render_line_plot(series, o);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(count(svg, "<polyline") == 2);
  CHECK(count(svg, "<circle") == 6);
  CHECK(count(svg, "stroke-dasharray") == 1);
  CHECK(svg.find("train &lt;loss&gt;") != std::string::npos);
  CHECK(svg.find("train <loss>") == std::string::npos);
}

TEST_CASE("line plot: a logarithmic axis ticks at powers of ten and skips points <= 0") {
  std::vector<mpp::trace::Series> series{{"one-way", {0, 4, 4096, 4194304}, {50, 50, 40, 900}}};
  mpp::trace::PlotOptions o;
  o.log_x = o.log_y = true;
  const std::string svg = mpp::trace::render_line_plot(series, o);
  CHECK(count(svg, "<circle") == 3);  // x = 0 cannot be drawn on a log axis
  CHECK(svg.find(">1e4<") != std::string::npos);
  CHECK(svg.find(">1e7<") != std::string::npos);
  CHECK(svg.find(">1000<") != std::string::npos);
}

TEST_CASE("bar chart: a bar per series and category, taller for larger values") {
  const std::vector<std::string> categories{"Uniform<1>", "Uniform<2>"};
  std::vector<mpp::trace::Series> bars{{"state", {}, {160, 80}}, {"weights", {}, {40, 20}}};
  mpp::trace::PlotOptions o;
  o.references.push_back({"24 GB", 24});
  const std::string svg = mpp::trace::render_bar_chart(categories, bars, o);
  CHECK(count(svg, "<title>Uniform<") == 0);  // category names are escaped
  CHECK(count(svg, "<title>Uniform&lt;") == 4);
  CHECK(svg.find(">24 GB<") != std::string::npos);
  // The 160 bar is twice as tall as the 80 one.
  auto height_of = [&](const std::string& title) {
    const auto at = svg.rfind("height=\"", svg.find(title));
    return std::stod(svg.substr(at + 8));
  };
  CHECK(height_of("Uniform&lt;1&gt;, state") ==
        doctest::Approx(2 * height_of("Uniform&lt;2&gt;, state")).epsilon(0.02));
}

TEST_CASE("lanes: one row per lane, boxes placed on one time axis, legend") {
  const std::vector<std::string> lanes{"compute", "all-reduce"};
  const std::vector<mpp::trace::LaneSpan> spans{{0, 0, 50, "backward", "#59a14f", ""},
                                                {1, 25, 100, "bucket 0", "#bab0ac", ""},
                                                {5, 0, 10, "no such lane", "#000", ""}};
  const std::vector<mpp::trace::LegendEntry> legend{{"backward", "#59a14f"}};
  const std::string svg = mpp::trace::render_lanes(lanes, spans, legend);
  CHECK(svg.find(">compute<") != std::string::npos);
  CHECK(svg.find(">all-reduce<") != std::string::npos);
  CHECK(svg.find("no such lane") == std::string::npos);
  CHECK(count(svg, "fill=\"#bab0ac\"") == 1);
  CHECK(count(svg, "fill=\"#59a14f\"") == 2);  // the box and its legend entry
}

namespace {

// The values of attribute `name` in `svg`, as a sorted set.
std::set<std::string> attribute_values(const std::string& svg, const std::string& name) {
  std::set<std::string> out;
  const std::string key = " " + name + "=\"";
  for (auto at = svg.find(key); at != std::string::npos; at = svg.find(key, at + 1)) {
    const auto from = at + key.size();
    out.insert(svg.substr(from, svg.find('"', from) - from));
  }
  return out;
}

// The texts of the elements with class `cls`, in order.
std::vector<std::string> texts_of_class(const std::string& svg, const std::string& cls) {
  std::vector<std::string> out;
  const std::string key = "class=\"" + cls + "\">";
  for (auto at = svg.find(key); at != std::string::npos; at = svg.find(key, at + 1)) {
    const auto from = at + key.size();
    out.push_back(svg.substr(from, svg.find('<', from) - from));
  }
  return out;
}

mpp::TimedEvent event(int rank, double start, double end, mpp::Op op, int micro_batch,
                      int chunk = 0) {
  return {rank, start, end, op, micro_batch, chunk, chunk * 2 + rank};
}

}  // namespace

TEST_CASE("plot timeline: the legend names exactly the kinds of box drawn") {
  using mpp::Op;
  SUBCASE("two chunks: F and B of chunk a and b, transfers; no I or W") {
    // What the measured Interleaved1F1B<8,2> figure draws: the chunk-b backward is not an
    // "input grad", and the chunk-b forward has its own entry.
    const std::vector<mpp::TimedEvent> events{
        event(0, 0, 100, Op::F, 0, 0),   event(0, 100, 110, Op::SEND_F, 0, 0),
        event(1, 110, 200, Op::F, 0, 0), event(1, 200, 300, Op::F, 0, 1),
        event(1, 300, 420, Op::B, 0, 1), event(1, 420, 430, Op::RECV_B, 0, 1),
        event(0, 430, 560, Op::B, 0, 0), event(0, 560, 600, Op::F, 1, 1)};
    const std::string svg = mpp::trace::render_timeline(events);
    const auto drawn = attribute_values(svg, "data-kind");
    const auto legend = attribute_values(svg, "data-legend");
    CHECK(drawn == legend);
    CHECK(legend == std::set<std::string>{"F forward, chunk a", "F forward, chunk b",
                                          "B backward, chunk a", "B backward, chunk b",
                                          "transfer (send, or wait on a receive)"});
    CHECK(svg.find("input grad") == std::string::npos);
    CHECK(svg.find("weight grad") == std::string::npos);
  }
  SUBCASE("one chunk, zero bubble: F, I, W, no transfers drawn") {
    const std::vector<mpp::TimedEvent> events{event(0, 0, 10, Op::F, 0), event(0, 10, 20, Op::I, 0),
                                              event(0, 20, 30, Op::W, 0),
                                              event(0, 30, 30, Op::SEND_B, 0)};  // empty: not drawn
    const std::string svg = mpp::trace::render_timeline(events);
    CHECK(attribute_values(svg, "data-kind") == attribute_values(svg, "data-legend"));
    CHECK(attribute_values(svg, "data-legend") ==
          std::set<std::string>{"F forward", "I input grad", "W weight grad"});
  }
}

TEST_CASE("plot timeline: a time axis with labelled ticks and its unit") {
  using mpp::Op;
  SUBCASE("microseconds") {
    const std::vector<mpp::TimedEvent> events{event(0, 0, 400, Op::F, 0),
                                              event(1, 400, 950, Op::B, 0)};
    const std::string svg = mpp::trace::render_timeline(events);
    const auto ticks = texts_of_class(svg, "tick");
    REQUIRE(ticks.size() >= 3);
    CHECK(ticks.front() == "0");
    CHECK(ticks.back() == "1000");
    CHECK(texts_of_class(svg, "axis-title") ==
          std::vector<std::string>{"time from the step's start (\xC2\xB5s)"});
  }
  SUBCASE("a long step stays in microseconds, the unit the labs' titles name") {
    const std::vector<mpp::TimedEvent> events{event(0, 0, 27500, Op::F, 0)};
    const std::string svg = mpp::trace::render_timeline(events);
    const auto ticks = texts_of_class(svg, "tick");
    REQUIRE(ticks.size() >= 3);
    CHECK(ticks.back() == "30000");
    CHECK(texts_of_class(svg, "axis-title") ==
          std::vector<std::string>{"time from the step's start (\xC2\xB5s)"});
  }
  SUBCASE("predicted timelines name their cost unit") {
    const std::vector<mpp::TimedEvent> events{event(0, 0, 3, Op::F, 0)};
    mpp::trace::TimelineOptions o;
    o.unit = "cost units";
    CHECK(texts_of_class(mpp::trace::render_timeline(events, o), "axis-title") ==
          std::vector<std::string>{"time from the step's start (cost units)"});
  }
}

TEST_CASE("line plot: the legend goes to a corner the curves leave free") {
  // Lab 03's shape: one-way time rising with size on log-log axes, the largest size top right,
  // where the legend used to be drawn over the 16 MiB point.
  std::vector<double> sizes, median, best;
  for (double b = 4; b <= 16 * 1024 * 1024; b *= 4) {
    sizes.push_back(b);
    median.push_back(b < 16384 ? 40 : b / 3000);
    best.push_back(b < 16384 ? 30 : b / 4000);
  }
  std::vector<mpp::trace::Series> series{{"median", sizes, median}, {"best", sizes, best}};
  mpp::trace::PlotOptions o;
  o.log_x = o.log_y = true;
  const std::string svg = mpp::trace::render_line_plot(series, o);
  CHECK(attribute_values(svg, "data-legend") == std::set<std::string>{"median", "best"});
  // The legend's box (the first white rect with a grey stroke) holds no data point.
  const auto box = svg.find("fill-opacity=\"0.85\" stroke=\"#ccc\"");
  REQUIRE(box != std::string::npos);
  const auto open = svg.rfind("<rect", box);
  auto number = [&](const std::string& attr) {
    return std::stod(svg.substr(svg.find(attr + "=\"", open) + attr.size() + 2));
  };
  const double x = number("x"), y = number("y"), w = number("width"), h = number("height");
  int inside = 0;
  for (auto at = svg.find("<circle cx=\""); at != std::string::npos;
       at = svg.find("<circle cx=\"", at + 1)) {
    const double cx = std::stod(svg.substr(at + 12));
    const double cy = std::stod(svg.substr(svg.find("cy=\"", at) + 4));
    inside += cx >= x && cx <= x + w && cy >= y && cy <= y + h;
  }
  CHECK(inside == 0);
}
