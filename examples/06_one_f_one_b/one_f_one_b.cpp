// Lab 06 — 1F1B: the same bubble as GPipe, with activation memory bounded by the stages.
//
// GPipe runs all M forwards before the first backward, so every rank holds the activations of
// all M micro-batches at the peak. 1F1B (PipeDream-Flush) starts the backward of micro-batch 0 as
// soon as the last stage has its forward: after a warm-up of P - r forwards, rank r alternates
// one forward and one backward, so it never holds more than P - r micro-batches. The fill and the
// drain are the same length as GPipe's, hence the same bubble, (P - 1) / (M + P - 1).
//
// Why blocking sends can deadlock here: in the steady state two neighbours both have something to
// send to each other (an activation forward, a gradient backward). If both call a blocking send
// first, each waits for the other to receive. The schedule library lowers the table for the comm
// policy's semantics — for Blocking<Gloo> it pairs each send with the neighbour's receive — and
// the verifier proves the result deadlock-free at compile time.
//
//   mpprun --nproc-per-node 2 ./one_f_one_b [--hidden 128] [--batch 32] [--steps 20] [--timeline]
//   [--trace 1f1b.json]
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
  const auto gpipe = train<mpp::Pipeline<mpp::Uniform<P>, mpp::GPipe<M>, Comm>>(world, o);
  const auto one_f_one_b = train<mpp::Pipeline<mpp::Uniform<P>, mpp::OneFOneB<M>, Comm>>(world, o);
  if (!one_f_one_b.report) return;
  const auto& g = *gpipe.report;
  const auto& f = *one_f_one_b.report;
  std::printf("Same bubble, less memory (rank 0 holds the most):\n");
  std::printf(
      "  GPipe<%d>:    bubble %.1f%%, rank 0 peak activations %s (%d micro-batches in flight)\n", M,
      100.0 * g.figures.bubble,
      mpp::trace::format_bytes(g.figures.peak_activation_bytes[0]).c_str(),
      g.figures.peak_in_flight[0]);
  std::printf(
      "  OneFOneB<%d>: bubble %.1f%%, rank 0 peak activations %s (%d micro-batches in flight)\n", M,
      100.0 * f.figures.bubble,
      mpp::trace::format_bytes(f.figures.peak_activation_bytes[0]).c_str(),
      f.figures.peak_in_flight[0]);
  if (o.timeline)
    std::printf("\n1F1B, last step, measured (microseconds):\n%s", f.timeline().c_str());
  if (!o.trace.empty() && f.write_chrome_trace(o.trace))
    std::printf("Chrome trace of the last 1F1B step written to %s (open it in ui.perfetto.dev)\n",
                o.trace.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 06: 1F1B, the same bubble as GPipe with less activation memory"};
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
    std::printf("%s\nlab 06: %d ranks, %d x Linear(%lld), batch %lld in %d micro-batches\n\n",
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
        std::fprintf(stderr, "lab 06 runs on 2 or 4 ranks: mpprun --nproc-per-node 2 ...\n");
      return 2;
  }
  return 0;
}
