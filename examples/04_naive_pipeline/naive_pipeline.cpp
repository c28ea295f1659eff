// Lab 04 — the naive pipeline: model parallelism, stop and wait.
//
// The 16 layers are cut into P stages, one per rank; each rank builds only its own layers (with
// exactly the initial weights the whole model would have). Rank 0 feeds the whole batch through
// its layers and sends the activation on; each rank waits for its input, runs, and sends on; the
// last rank computes the loss, and the gradients flow back rank by rank. At any moment only one
// rank works: with P ranks each one is busy about 1/P of the step. That is the utilisation this
// lab measures — the number every other schedule improves on.
//
//   mpprun --nproc-per-node 2 ./naive_pipeline [--hidden 128] [--batch 32] [--steps 20]
//   [--timeline] [--trace naive.json]
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

template <int P>
void run(const mpp::ProcessGroup& world, const Options& o) {
  // [quote:pipeline]
  mpp::Pipeline<mpp::Uniform<P>, mpp::Naive, mpp::Blocking<mpp::Gloo>> pipe(world,
                                                                            mpp::MlpModel{o.model});
  for (const auto& piece : pipe.pieces())
    std::printf("rank %d owns layers [%d, %d)\n", world.rank(), piece.layers.begin,
                piece.layers.end);
  torch::optim::Adam adam(pipe.parameters(), 1e-3);
  auto batch = [&](int step) { return mpp::models::make_regression_batch(o.model, o.batch, step); };
  const auto figures = mpp::train_and_measure(pipe, adam, batch, MeanSquaredError{}, o.steps);
  // [/quote:pipeline]
  if (!figures.report) return;
  std::printf("\n%s\n", figures.describe().c_str());
  // [quote:utilisation]
  std::printf("Utilisation (time computing / step time):\n");
  for (int r = 0; r < P; ++r)
    std::printf("  rank %d: %.1f%%\n", r,
                100.0 * (1.0 - figures.report->figures.rank_bubble[static_cast<std::size_t>(r)]));
  std::printf("  pipeline: %.1f%% (stop-and-wait on %d ranks cannot exceed about %.0f%%)\n",
              100.0 * (1.0 - figures.report->figures.bubble), P, 100.0 / P);
  // [/quote:utilisation]
  if (o.timeline)
    std::printf("\nLast step, measured (microseconds):\n%s", figures.report->timeline().c_str());
  if (!o.trace.empty() && figures.report->write_chrome_trace(o.trace))
    std::printf("Chrome trace written to %s (open it in ui.perfetto.dev)\n", o.trace.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 04: the naive pipeline, one rank at work at a time"};
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
    std::printf("%s\nlab 04: %d ranks, %d x Linear(%lld), batch %lld\n\n",
                mpp::util::blas_report(mpp::util::detect_blas(), at::get_num_threads()).c_str(),
                world.size(), o.model.layers, static_cast<long long>(o.model.hidden),
                static_cast<long long>(o.batch));
  switch (world.size()) {
    case 2:
      run<2>(world, o);
      break;
    case 4:
      run<4>(world, o);
      break;
    default:
      if (world.rank() == 0)
        std::fprintf(stderr, "lab 04 runs on 2 or 4 ranks: mpprun --nproc-per-node 2 ...\n");
      return 2;
  }
  return 0;
}
