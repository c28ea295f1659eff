// Lab 07 — GPipe: from "batch" to "chunks".
//
// Split each batch into M micro-batches. Rank 0 pushes them through one after the other, so
// while rank 1 works on micro-batch 0, rank 0 already works on micro-batch 1: the pipeline fills,
// runs full, then drains (all forwards, then all backwards). The idle triangles at the start and
// the end — the bubble — take (P - 1) / (M + P - 1) of the step: the more micro-batches, the
// smaller it gets. The price: every rank keeps the activations of all M micro-batches until their
// backward, so activation memory grows with M. The loss is the same as the monolith's: each
// micro-batch's mean loss is weighted by its share of the batch.
//
//   mpprun --nproc-per-node 2 ./gpipe [--hidden 128] [--batch 32] [--steps 20] [--timeline]
//   [--trace gpipe.json] [--svg gpipe.svg] [--plot bubble.svg] [--transport gloo]
#include <optional>
#include <string>
#include <vector>

#include "../common/pipeline_lab.hpp"
#include "mpp/trace/plot.hpp"

namespace {

using lab::Options;

/// One row of the sweep, for the --plot figure.
struct Row {
  int micro_batches;
  double bubble, predicted, predicted_with_latency;
};

std::optional<mpp::StepReport> drawn;  // the last GPipe<8> step, on rank 0

template <int P, int M, class Backend>
void train(const mpp::Group<Backend>& world, const Options& o, std::vector<Row>& rows) {
  // [quote:train]
  mpp::Pipeline<mpp::Uniform<P>, mpp::GPipe<M>, mpp::Async<Backend>> pipe(world,
                                                                          mpp::MlpModel{o.model});
  torch::optim::Adam adam(pipe.parameters(), 1e-3);
  auto batch = [&](int step) { return mpp::models::make_regression_batch(o.model, o.batch, step); };
  const auto figures = mpp::train_and_measure(pipe, adam, batch, lab::MeanSquaredError{}, o.steps);
  // [/quote:train]
  if (!figures.report) return;
  const auto& r = *figures.report;
  rows.push_back({M, r.figures.bubble, r.predicted_unit.bubble_fraction(),
                  r.predicted_latency.bubble_fraction()});
  std::printf("  %3d | %7.1f%% | %9.1f%% | %7.1f%% | %11.0f | %12s | %d\n", M,
              100.0 * r.figures.bubble, 100.0 * r.predicted_unit.bubble_fraction(),
              100.0 * r.predicted_latency.bubble_fraction(), figures.samples_per_second,
              mpp::trace::format_bytes(r.figures.peak_activation_bytes[0]).c_str(),
              r.figures.peak_in_flight[0]);
  if (M == 8) drawn = r;  // shown after the table, which it would otherwise cut in two
}

/// --timeline, --trace and --svg of the GPipe<8> step.
void show_drawn(const Options& o) {
  if (!drawn) return;
  const auto& r = *drawn;
  if (o.timeline)
    std::printf("\nGPipe<8>, last step, measured (microseconds):\n%s\n", r.timeline().c_str());
  if (!o.trace.empty() && r.write_chrome_trace(o.trace))
    std::printf("Chrome trace of the last GPipe<8> step written to %s\n", o.trace.c_str());
  if (!o.svg.empty()) lab::write_svg(r, o, "GPipe<8>");
}

/// The bubble against M: measured, the formula's, and the verifier's from the measured costs
/// with the measured message latency.
void plot(const std::vector<Row>& rows, const Options& o, const std::string& transport, int ranks,
          const std::string& path) {
  std::vector<mpp::trace::Series> series(3);
  series[0].name = "measured";
  series[1].name = "predicted: (P - 1) / (M + P - 1)";
  series[2].name = "predicted with the measured costs and message latency";
  for (const Row& r : rows) {
    for (auto& s : series) s.x.push_back(r.micro_batches);
    series[0].y.push_back(100.0 * r.bubble);
    series[1].y.push_back(100.0 * r.predicted);
    series[2].y.push_back(100.0 * r.predicted_with_latency);
  }
  mpp::trace::PlotOptions options;
  options.title = "GPipe<M> on " + std::to_string(ranks) + " ranks over " + transport +
                  ": the bubble against the number of micro-batches";
  options.subtitle = std::to_string(o.model.layers) + " x Linear(" +
                     std::to_string(o.model.hidden) + "), batch " + std::to_string(o.batch) +
                     "; each point is the last of " + std::to_string(o.steps) +
                     " training steps; one thread per rank";
  options.x_label = "micro-batches M";
  options.y_label = "bubble (% of the step)";
  std::ofstream out(path);
  out << mpp::trace::render_line_plot(series, options);
  if (out) std::printf("the bubble against M drawn in %s\n", path.c_str());
}

std::string plot_path;  // --plot

template <int P, class Backend>
void run(const mpp::Group<Backend>& world, const Options& o) {
  if (world.rank() == 0)
    std::printf(
        "    M | bubble  | predicted  | +latency | samples/s   | rank 0 peak  | in flight\n");
  std::vector<Row> rows;
  // [quote:sweep]
  train<P, 1, Backend>(world, o, rows);
  train<P, 2, Backend>(world, o, rows);
  train<P, 4, Backend>(world, o, rows);
  train<P, 8, Backend>(world, o, rows);
  train<P, 16, Backend>(world, o, rows);
  // [/quote:sweep]
  show_drawn(o);
  if (!rows.empty() && !plot_path.empty()) plot(rows, o, std::string(Backend::name), P, plot_path);
}

}  // namespace

int main(int argc, char** argv) {
  return lab::main(
      argc, argv, "lab 07", "Lab 07: GPipe, the bubble shrinks as the micro-batches grow",
      [](const auto& world, const auto& o, auto ranks, auto transport) {
        run<decltype(ranks)::value, typename decltype(transport)::backend>(world, o);
      },
      "in M = 1, 2, 4, 8 and 16 micro-batches (--timeline, --trace and --svg show M = 8)",
      {{"--plot", &plot_path, "draw the bubble against M here (SVG)"}});
}
