// Lab 09 — gradient checkpointing (Recompute): trade compute for memory.
//
// A stage's backward needs the activations its forward produced inside the stage; with M
// micro-batches in flight that is M copies of every layer's output. Recompute<Partition> keeps
// only each stage's input: the forward runs without building the autograd graph, and right
// before a micro-batch's backward the stage runs its forward again, this time keeping the graph.
// Memory per micro-batch drops to one activation per stage; the time paid is one extra forward
// per micro-batch (about a third more compute when T_B = 2 T_F).
//
//   mpprun --nproc-per-node 2 ./recompute [--hidden 128] [--batch 32] [--steps 20] [--timeline]
//   [--trace recompute.json]
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
      train<mpp::Pipeline<mpp::Recompute<mpp::Uniform<P>>, mpp::OneFOneB<M>, Comm>>(world, o);
  if (!second.report) return;
  const auto& a = *first.report;
  const auto& b = *second.report;
  std::printf("Recompute against keeping every activation (1F1B, M = 8):\n");
  std::printf(
      "  %-22s bubble %5.1f%% (predicted %5.1f%%), %7.0f samples/s, rank 0 peak activations %s\n",
      "OneFOneB<8>", 100.0 * a.figures.bubble, 100.0 * a.predicted_measured.bubble_fraction(),
      first.samples_per_second,
      mpp::trace::format_bytes(a.figures.peak_activation_bytes[0]).c_str());
  std::printf(
      "  %-22s bubble %5.1f%% (predicted %5.1f%%), %7.0f samples/s, rank 0 peak activations %s\n",
      "Recompute + OneFOneB<8>", 100.0 * b.figures.bubble,
      100.0 * b.predicted_measured.bubble_fraction(), second.samples_per_second,
      mpp::trace::format_bytes(b.figures.peak_activation_bytes[0]).c_str());
  if (o.timeline)
    std::printf("\nRecompute + OneFOneB<8>, last step, measured (microseconds):\n%s",
                b.timeline().c_str());
  if (!o.trace.empty() && b.write_chrome_trace(o.trace))
    std::printf(
        "Chrome trace of the last Recompute + OneFOneB<8> step written to %s (open it in "
        "ui.perfetto.dev)\n",
        o.trace.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 09: gradient checkpointing, memory for compute"};
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
    std::printf("%s\nlab 09: %d ranks, %d x Linear(%lld), batch %lld in %d micro-batches\n\n",
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
        std::fprintf(stderr, "lab 09 runs on 2 or 4 ranks: mpprun --nproc-per-node 2 ...\n");
      return 2;
  }
  return 0;
}
