// mpp-plot: curves from columns of text files (a CSV with a header such as a lab's metrics.csv,
// or whitespace-separated columns such as a rank's train.log), drawn by the library's line plot.
//
//   mpp-plot --x step --y train_loss,validation_loss runs/l2/metrics.csv --svg loss.svg
//   mpp-plot --x 1 --y 2 logs/rank_0/train.log=rank\ 0 logs/rank_1/train.log=rank\ 1 --svg r.svg
//
// A column is named by its header (first line that is not a comment) or by its 1-based number.
// Lines starting with '#' are comments; empty fields (a validation loss measured every 25 steps)
// are skipped. Each FILE may carry a legend label after '='; with several --y columns the column
// name is added to it.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mpp/trace/plot.hpp"

namespace {

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> fields;
  if (line.find(',') != std::string::npos) {
    std::stringstream in(line);
    std::string f;
    while (std::getline(in, f, ',')) fields.push_back(f);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
  } else {
    std::stringstream in(line);
    std::string f;
    while (in >> f) fields.push_back(f);
  }
  return fields;
}

bool number(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end && *end == '\0';
}

struct Table {
  std::vector<std::string> header;  // empty when the file has none
  std::vector<std::vector<std::string>> rows;
};

Table read_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("mpp-plot: cannot read '" + path + "'");
  Table t;
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto fields = split_fields(line);
    double v = 0;
    if (first && !fields.empty() && !number(fields[0], v))
      t.header = std::move(fields);
    else
      t.rows.push_back(std::move(fields));
    first = false;
  }
  return t;
}

std::size_t column(const Table& t, const std::string& name, const std::string& path) {
  for (std::size_t i = 0; i < t.header.size(); ++i)
    if (t.header[i] == name) return i;
  double v = 0;
  if (number(name, v) && v >= 1) return static_cast<std::size_t>(v) - 1;
  throw std::runtime_error("mpp-plot: no column '" + name + "' in '" + path +
                           "'; name one of its header's columns or give a 1-based number");
}

}  // namespace

int main(int argc, char** argv) {
  std::string x_column, svg;
  std::vector<std::string> y_columns, files;
  mpp::trace::PlotOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mpp-plot: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--x")
      x_column = value();
    else if (a == "--y") {
      std::stringstream in(value());
      std::string c;
      while (std::getline(in, c, ',')) y_columns.push_back(c);
    } else if (a == "--svg")
      svg = value();
    else if (a == "--title")
      options.title = value();
    else if (a == "--subtitle")
      options.subtitle = value();
    else if (a == "--x-label")
      options.x_label = value();
    else if (a == "--y-label")
      options.y_label = value();
    else if (a == "--log-x")
      options.log_x = true;
    else if (a == "--log-y")
      options.log_y = true;
    else if (a == "-h" || a == "--help") {
      std::printf(
          "mpp-plot --x COL --y COL[,COL..] --svg OUT [--title T] [--subtitle S] [--x-label L]\n"
          "         [--y-label L] [--log-x] [--log-y] FILE[=LABEL]...\n");
      return 0;
    } else
      files.push_back(a);
  }
  if (x_column.empty() || y_columns.empty() || svg.empty() || files.empty()) {
    std::fprintf(stderr, "mpp-plot: needs --x, --y, --svg and at least one file (see --help)\n");
    return 2;
  }
  try {
    std::vector<mpp::trace::Series> series;
    for (const std::string& spec : files) {
      const auto eq = spec.find('=');
      const std::string path = spec.substr(0, eq);
      const std::string label = eq == std::string::npos ? path : spec.substr(eq + 1);
      const Table t = read_table(path);
      const std::size_t x = column(t, x_column, path);
      for (const std::string& y_name : y_columns) {
        const std::size_t y = column(t, y_name, path);
        mpp::trace::Series s;
        s.name = y_columns.size() > 1 ? label + ": " + y_name : label;
        for (const auto& row : t.rows) {
          double xv = 0, yv = 0;
          if (x < row.size() && y < row.size() && number(row[x], xv) && number(row[y], yv)) {
            s.x.push_back(xv);
            s.y.push_back(yv);
          }
        }
        series.push_back(std::move(s));
      }
    }
    std::ofstream out(svg);
    out << mpp::trace::render_line_plot(series, options);
    if (!out) throw std::runtime_error("mpp-plot: cannot write '" + svg + "'");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
