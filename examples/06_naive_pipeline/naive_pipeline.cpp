// Lab 06 — the naive pipeline: model parallelism, stop and wait.
//
// The 16 layers are cut into P stages, one per rank; each rank builds only its own layers (with
// exactly the initial weights the whole model would have). Rank 0 feeds the whole batch through
// its layers and sends the activation on; each rank waits for its input, runs, and sends on; the
// last rank computes the loss, and the gradients flow back rank by rank. At any moment only one
// rank works: with P ranks each one is busy about 1/P of the step. That is the utilisation this
// lab measures — the number every other schedule improves on.
//
//   mpprun --nproc-per-node 2 ./naive_pipeline [--hidden 128] [--batch 32] [--steps 20]
//   [--timeline] [--trace naive.json] [--svg naive.svg] [--transport gloo]
#include "../common/pipeline_lab.hpp"

namespace {

template <int P, class Backend>
void run(const mpp::Group<Backend>& world, const lab::Options& o) {
  // [quote:pipeline]
  mpp::Pipeline<mpp::Uniform<P>, mpp::Naive, mpp::Blocking<Backend>> pipe(world,
                                                                          mpp::MlpModel{o.model});
  for (const auto& piece : pipe.pieces())
    std::printf("rank %d owns layers [%d, %d)\n", world.rank(), piece.layers.begin,
                piece.layers.end);
  torch::optim::Adam adam(pipe.parameters(), 1e-3);
  auto batch = [&](int step) { return mpp::models::make_regression_batch(o.model, o.batch, step); };
  const auto figures = mpp::train_and_measure(pipe, adam, batch, lab::MeanSquaredError{}, o.steps);
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
  if (!o.svg.empty()) lab::write_svg(*figures.report, o, "Naive");
}

}  // namespace

int main(int argc, char** argv) {
  return lab::main(
      argc, argv, "lab 06", "Lab 06: the naive pipeline, one rank at work at a time",
      [](const auto& world, const auto& o, auto ranks, auto transport) {
        run<decltype(ranks)::value, typename decltype(transport)::backend>(world, o);
      },
      "as one micro-batch");
}
