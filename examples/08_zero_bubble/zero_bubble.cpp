// Lab 08 — zero bubble (ZB-H1): split the backward in two.
//
// A backward computes two things: the gradient w.r.t. the stage's input (I), which the previous
// stage is waiting for, and the gradient w.r.t. the stage's weights (W), which nobody waits for
// until the optimizer step. ZB-H1 runs I as early as 1F1B runs B, and moves the W's into the slots
// where 1F1B idles: the bubble shrinks to about a third of 1F1B's with the same activation memory
// (the W of a micro-batch still needs its activations). The executor runs I and W as two separate
// autograd passes: I asks only for the input and every layer's output gradient, W then takes each
// layer's weight gradient from its own output gradient.
//
//   mpprun --nproc-per-node 2 ./zero_bubble [--hidden 128] [--batch 32] [--steps 20] [--timeline]
//   [--trace zb.json]
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
  const auto second = train<mpp::Pipeline<mpp::Uniform<P>, mpp::ZeroBubbleH1<M>, Comm>>(world, o);
  if (!second.report) return;
  const auto& a = *first.report;
  const auto& b = *second.report;
  std::printf("ZB-H1 against 1F1B:\n");
  std::printf(
      "  %-22s bubble %5.1f%% (predicted %5.1f%%), %7.0f samples/s, rank 0 peak activations %s\n",
      "OneFOneB<8>", 100.0 * a.figures.bubble, 100.0 * a.predicted_measured.bubble_fraction(),
      first.samples_per_second,
      mpp::trace::format_bytes(a.figures.peak_activation_bytes[0]).c_str());
  std::printf(
      "  %-22s bubble %5.1f%% (predicted %5.1f%%), %7.0f samples/s, rank 0 peak activations %s\n",
      "ZeroBubbleH1<8>", 100.0 * b.figures.bubble, 100.0 * b.predicted_measured.bubble_fraction(),
      second.samples_per_second,
      mpp::trace::format_bytes(b.figures.peak_activation_bytes[0]).c_str());
  if (o.timeline)
    std::printf("\nZeroBubbleH1<8>, last step, measured (microseconds):\n%s", b.timeline().c_str());
  if (!o.trace.empty() && b.write_chrome_trace(o.trace))
    std::printf(
        "Chrome trace of the last ZeroBubbleH1<8> step written to %s (open it in "
        "ui.perfetto.dev)\n",
        o.trace.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 08: zero-bubble ZB-H1, the weight gradients fill the bubble"};
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
    std::printf("%s\nlab 08: %d ranks, %d x Linear(%lld), batch %lld in %d micro-batches\n\n",
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
        std::fprintf(stderr, "lab 08 runs on 2 or 4 ranks: mpprun --nproc-per-node 2 ...\n");
      return 2;
  }
  return 0;
}
