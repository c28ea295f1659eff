#pragma once
// The lab's outputs besides the model: metrics.csv, the per-rank train.log and a hand-written
// SVG loss curve (train loss per step, validation loss at each evaluation, uniform baseline).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

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

inline void write_metrics(const std::filesystem::path& path, const std::vector<MetricsRow>& rows) {
  std::ofstream out(path, std::ios::trunc);
  out << metrics_header() << '\n';
  for (const auto& r : rows) out << to_csv(r) << '\n';
}

/// A loss-curve figure: train loss (thin line), validation loss (dots joined), and the uniform
/// baseline ln(vocab) the model starts from.
inline void write_loss_curve_svg(const std::filesystem::path& path,
                                 const std::vector<MetricsRow>& rows, double baseline,
                                 const std::string& title) {
  const double width = 720, height = 420, left = 64, right = 24, top = 40, bottom = 52;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  std::int64_t max_step = 1;
  double max_loss = baseline * 1.08, min_loss = 0;
  for (const auto& r : rows) {
    max_step = std::max(max_step, r.step);
    max_loss = std::max(max_loss, r.train_loss);
  }
  max_loss = std::ceil(max_loss * 2) / 2;
  auto x = [&](double step) { return left + plot_w * step / static_cast<double>(max_step); };
  auto y = [&](double loss) {
    return top + plot_h * (1 - (loss - min_loss) / (max_loss - min_loss));
  };

  std::ostringstream svg;
  svg.precision(5);
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
      << title << "</text>\n";
  // Grid and ticks.
  for (int i = 0; i <= 5; ++i) {
    const double loss = min_loss + (max_loss - min_loss) * i / 5.0;
    svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << y(loss)
        << "\" y2=\"" << y(loss) << "\" stroke=\"#e4e4e4\"/>\n"
        << "<text x=\"" << left - 8 << "\" y=\"" << y(loss) + 4 << "\" text-anchor=\"end\">" << loss
        << "</text>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    const auto step =
        static_cast<std::int64_t>(std::llround(static_cast<double>(max_step) * i / 5.0));
    svg << "<text x=\"" << x(static_cast<double>(step)) << "\" y=\"" << top + plot_h + 18
        << "\" text-anchor=\"middle\">" << step << "</text>\n";
  }
  svg << "<line x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top << "\" y2=\""
      << top + plot_h << "\" stroke=\"black\"/>\n<line x1=\"" << left << "\" x2=\"" << left + plot_w
      << "\" y1=\"" << top + plot_h << "\" y2=\"" << top + plot_h << "\" stroke=\"black\"/>\n"
      << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 12
      << "\" text-anchor=\"middle\">optimizer step</text>\n"
      << "<text transform=\"translate(16 " << top + plot_h / 2
      << ") rotate(-90)\" text-anchor=\"middle\">cross-entropy (nats per character)</text>\n";
  // Uniform baseline.
  svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << y(baseline)
      << "\" y2=\"" << y(baseline) << "\" stroke=\"#888\" stroke-dasharray=\"6 4\"/>\n"
      << "<text x=\"" << left + plot_w - 4 << "\" y=\"" << y(baseline) - 6
      << "\" text-anchor=\"end\" fill=\"#555\">uniform baseline ln(vocab) = " << baseline
      << "</text>\n";
  // Train loss.
  svg << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" points=\"";
  for (const auto& r : rows) svg << x(static_cast<double>(r.step)) << ',' << y(r.train_loss) << ' ';
  svg << "\"/>\n";
  // Validation loss.
  svg << "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"";
  for (const auto& r : rows)
    if (r.validation_loss)
      svg << x(static_cast<double>(r.step)) << ',' << y(*r.validation_loss) << ' ';
  svg << "\"/>\n";
  for (const auto& r : rows)
    if (r.validation_loss)
      svg << "<circle cx=\"" << x(static_cast<double>(r.step)) << "\" cy=\""
          << y(*r.validation_loss) << "\" r=\"3\" fill=\"#ff7f0e\"/>\n";
  // Legend.
  const double lx = left + plot_w - 190, ly = top + 30;
  svg << "<rect x=\"" << lx - 8 << "\" y=\"" << ly - 14
      << "\" width=\"190\" height=\"44\" fill=\"white\" "
      << "stroke=\"#ccc\"/>\n"
      << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << ly - 4 << "\" y2=\""
      << ly - 4 << "\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"" << lx + 30 << "\" y=\""
      << ly << "\">train loss (per step)</text>\n"
      << "<line x1=\"" << lx << "\" x2=\"" << lx + 24 << "\" y1=\"" << ly + 16 << "\" y2=\""
      << ly + 16 << "\" stroke=\"#ff7f0e\" stroke-width=\"2\"/><text x=\"" << lx + 30 << "\" y=\""
      << ly + 20 << "\">validation loss (held out)</text>\n"
      << "</svg>\n";
  std::ofstream(path, std::ios::trunc) << svg.str();
}

}  // namespace lab
