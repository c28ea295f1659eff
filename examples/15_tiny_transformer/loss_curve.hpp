#pragma once
// The lab's outputs besides the model: metrics.csv (written step by step), the per-rank train.log
// and the loss curve (train loss per step, validation loss at each evaluation, uniform baseline) as
// SVG, drawn by the library's mpp::trace::render_line_plot.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "mpp/trace/plot.hpp"

namespace lab {

struct MetricsRow {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  double train_loss = 0;
  std::optional<double> validation_loss;
  double samples_per_second = 0;
  double elapsed_seconds = 0;
};

inline std::string metrics_header() {
  return "step,epoch,train_loss,validation_loss,samples_per_second,elapsed_seconds";
}

inline std::string to_csv(const MetricsRow& r) {
  std::ostringstream out;
  out.precision(7);
  out << r.step << ',' << r.epoch << ',' << r.train_loss << ',';
  if (r.validation_loss) out << *r.validation_loss;
  out.precision(5);
  out << ',' << r.samples_per_second << ',' << r.elapsed_seconds;
  return out.str();
}

/// Rows of an earlier metrics.csv up to and including `last_step` (a resumed run keeps them and
/// drops what the interrupted run logged after its checkpoint).
inline std::vector<MetricsRow> read_metrics(const std::filesystem::path& path,
                                            std::int64_t last_step) {
  std::vector<MetricsRow> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string f[6];
    for (auto& field : f) std::getline(fields, field, ',');
    if (f[0].empty()) continue;
    MetricsRow r;
    r.step = std::stoll(f[0]);
    if (r.step > last_step) break;
    r.epoch = std::stoll(f[1]);
    r.train_loss = std::stod(f[2]);
    if (!f[3].empty()) r.validation_loss = std::stod(f[3]);
    r.samples_per_second = f[4].empty() ? 0 : std::stod(f[4]);
    r.elapsed_seconds = f[5].empty() ? 0 : std::stod(f[5]);
    rows.push_back(r);
  }
  return rows;
}

/// metrics.csv written as the run goes: the header and the rows kept from an earlier run at once,
/// then one row per step, flushed, so that a run stopped at any moment leaves every step it
/// finished on disk (a resumed run rewrites the file with the rows up to its checkpoint first).
class MetricsFile {
 public:
  MetricsFile(const std::filesystem::path& path, const std::vector<MetricsRow>& kept)
      : out_(path, std::ios::trunc) {
    out_ << metrics_header() << '\n';
    for (const auto& r : kept) out_ << to_csv(r) << '\n';
    out_.flush();
  }
  void append(const MetricsRow& r) { out_ << to_csv(r) << std::endl; }

 private:
  std::ofstream out_;
};

/// A loss-curve figure drawn by the library's line plot: train loss per step, validation loss
/// where it was measured, and the uniform baseline ln(vocab) the model starts from.
inline void write_loss_curve_svg(const std::filesystem::path& path,
                                 const std::vector<MetricsRow>& rows, double baseline,
                                 const std::string& title) {
  std::vector<mpp::trace::Series> series{{"train loss (per step)", {}, {}},
                                         {"validation loss (held out)", {}, {}}};
  for (const auto& r : rows) {
    series[0].x.push_back(static_cast<double>(r.step));
    series[0].y.push_back(r.train_loss);
    if (r.validation_loss) {
      series[1].x.push_back(static_cast<double>(r.step));
      series[1].y.push_back(*r.validation_loss);
    }
  }
  mpp::trace::PlotOptions options;
  options.title = title;
  options.x_label = "optimizer step";
  options.y_label = "cross-entropy (nats per character)";
  char label[64];
  std::snprintf(label, sizeof label, "uniform baseline ln(vocab) = %.3g", baseline);
  options.references.push_back({label, baseline});
  std::ofstream(path, std::ios::trunc) << mpp::trace::render_line_plot(series, options);
}

}  // namespace lab
