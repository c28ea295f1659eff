// The SVG plots the docs' figures are drawn with (include/mpp/trace/plot.hpp): what each one puts
// on the page, checked on the SVG text.
#include <doctest/doctest.h>

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
