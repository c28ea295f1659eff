// Lab 07 — interleaved 1F1B: more, smaller stages per rank.
//
// Cut the model into P x V pieces instead of P and give each rank V of them, round robin (rank r
// holds pieces r, P + r, 2P + r, ...). A micro-batch now visits every rank V times, each visit V
// times shorter, so the pipeline fills and drains V times faster: the bubble relative to the
// ideal compute time drops from (P - 1) / M to (P - 1) / (V M). The price is V times as many
// messages (each one smaller), which on a fast link is nearly free and on a slow one is not, and M
// must be a multiple of P. Partitions say how many pieces: Uniform<P> cuts P x V of them here.
//
//   mpprun --nproc-per-node 2 ./interleaved [--hidden 128] [--batch 32] [--steps 20] [--timeline]
//   [--trace interleaved.json]
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <CLI/CLI.hpp>

#include <ATen/Parallel.h>

#include <cstdio>

#include "mpp/comm.hpp"
#include "mpp/pipeline.hpp"
#include "mpp/pipeline/measure.hpp"
#include "mpp/util/blas.hpp"

namespace {

constexpr int M = 8;  // micro-batches per step

struct Options {
  mpp::models::MlpConfig model;
  std::int64_t batch = 32;
  int steps = 20;
  bool timeline = false;
  std::string trace;
};

struct MeanSquaredError {
  at::Tensor operator()(const at::Tensor& out, const at::Tensor& target) const {
    return torch::nn::functional::mse_loss(out, target);
  }
};

template <class Pipe>
mpp::RunFigures train(const mpp::ProcessGroup& world, const Options& o) {
  Pipe pipe(world, mpp::MlpModel{o.model});
  torch::optim::Adam adam(pipe.parameters(), 1e-3);
  auto batch = [&](int step) { return mpp::models::make_regression_batch(o.model, o.batch, step); };
  auto figures = mpp::train_and_measure(pipe, adam, batch, MeanSquaredError{}, o.steps);
  if (figures.report) std::printf("%s\n", figures.describe().c_str());
  return figures;
}

template <int P>
void run(const mpp::ProcessGroup& world, const Options& o) {
  using Comm = mpp::Async<mpp::Gloo>;
  const auto first = train<mpp::Pipeline<mpp::Uniform<P>, mpp::OneFOneB<M>, Comm>>(world, o);
  const auto second =
      train<mpp::Pipeline<mpp::Uniform<P>, mpp::Interleaved1F1B<M, 2>, Comm>>(world, o);
  if (!second.report) return;
  const auto& a = *first.report;
  const auto& b = *second.report;
  std::printf("Interleaved 1F1B (V = 2) against plain 1F1B:\n");
  std::printf(
      "  %-22s bubble %5.1f%% (predicted %5.1f%%), %7.0f samples/s, rank 0 peak activations %s\n",
      "OneFOneB<8>", 100.0 * a.figures.bubble, 100.0 * a.predicted_measured.bubble_fraction(),
      first.samples_per_second,
      mpp::trace::format_bytes(a.figures.peak_activation_bytes[0]).c_str());
  std::printf(
      "  %-22s bubble %5.1f%% (predicted %5.1f%%), %7.0f samples/s, rank 0 peak activations %s\n",
      "Interleaved1F1B<8,2>", 100.0 * b.figures.bubble,
      100.0 * b.predicted_measured.bubble_fraction(), second.samples_per_second,
      mpp::trace::format_bytes(b.figures.peak_activation_bytes[0]).c_str());
  if (o.timeline)
    std::printf("\nInterleaved1F1B<8,2>, last step, measured (microseconds):\n%s",
                b.timeline().c_str());
  if (!o.trace.empty() && b.write_chrome_trace(o.trace))
    std::printf(
        "Chrome trace of the last Interleaved1F1B<8,2> step written to %s (open it in "
        "ui.perfetto.dev)\n",
        o.trace.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 07: interleaved 1F1B, V chunks per rank shrink the bubble"};
  Options o;
  app.add_option("--hidden", o.model.hidden, "width of the Linear layers");
  app.add_option("--layers", o.model.layers, "number of Linear layers");
  app.add_option("--batch", o.batch, "samples per step");
  app.add_option("--steps", o.steps, "timed steps");
  app.add_flag("--timeline", o.timeline, "print the last step's measured timeline");
  app.add_option("--trace", o.trace, "write the last step's Chrome trace JSON here");
  CLI11_PARSE(app, argc, argv);

  at::set_num_threads(1);
  auto world = mpp::init_process_group();
  if (world.rank() == 0)
    std::printf("%s\nlab 07: %d ranks, %d x Linear(%lld), batch %lld in %d micro-batches\n\n",
                mpp::util::blas_report(mpp::util::detect_blas(), at::get_num_threads()).c_str(),
                world.size(), o.model.layers, static_cast<long long>(o.model.hidden),
                static_cast<long long>(o.batch), M);
  switch (world.size()) {
    case 2:
      run<2>(world, o);
      break;
    case 4:
      run<4>(world, o);
      break;
    default:
      if (world.rank() == 0)
        std::fprintf(stderr, "lab 07 runs on 2 or 4 ranks: mpprun --nproc-per-node 2 ...\n");
      return 2;
  }
  return 0;
}
