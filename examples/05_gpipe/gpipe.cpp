// Lab 05 — GPipe: from "batch" to "chunks".
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
//   [--trace gpipe.json] [--svg gpipe.svg]
#include "../common/pipeline_lab.hpp"

namespace {

using lab::Options;

template <int P, int M>
void train(const mpp::ProcessGroup& world, const Options& o) {
  // [quote:train]
  mpp::Pipeline<mpp::Uniform<P>, mpp::GPipe<M>, mpp::Async<mpp::Gloo>> pipe(world,
                                                                            mpp::MlpModel{o.model});
  torch::optim::Adam adam(pipe.parameters(), 1e-3);
  auto batch = [&](int step) { return mpp::models::make_regression_batch(o.model, o.batch, step); };
  const auto figures = mpp::train_and_measure(pipe, adam, batch, lab::MeanSquaredError{}, o.steps);
  // [/quote:train]
  if (!figures.report) return;
  const auto& r = *figures.report;
  std::printf("  %3d | %7.1f%% | %9.1f%% | %11.0f | %12s | %d\n", M, 100.0 * r.figures.bubble,
              100.0 * r.predicted_unit.bubble_fraction(), figures.samples_per_second,
              mpp::trace::format_bytes(r.figures.peak_activation_bytes[0]).c_str(),
              r.figures.peak_in_flight[0]);
  if (M == 8) {
    if (o.timeline)
      std::printf("\nGPipe<8>, last step, measured (microseconds):\n%s\n", r.timeline().c_str());
    if (!o.trace.empty() && r.write_chrome_trace(o.trace))
      std::printf("Chrome trace of the last GPipe<8> step written to %s\n", o.trace.c_str());
    if (!o.svg.empty()) lab::write_svg(r, o, "GPipe<8>");
  }
}

template <int P>
void run(const mpp::ProcessGroup& world, const Options& o) {
  if (world.rank() == 0)
    std::printf("    M | bubble  | predicted  | samples/s   | rank 0 peak  | in flight\n");
  // [quote:sweep]
  train<P, 1>(world, o);
  train<P, 2>(world, o);
  train<P, 4>(world, o);
  train<P, 8>(world, o);
  train<P, 16>(world, o);
  // [/quote:sweep]
}

}  // namespace

int main(int argc, char** argv) {
  return lab::main(
      argc, argv, "lab 05", "Lab 05: GPipe, the bubble shrinks as the micro-batches grow",
      [](const auto& world, const auto& o, auto ranks) { run<decltype(ranks)::value>(world, o); },
      "in M = 1, 2, 4, 8 and 16 micro-batches (--timeline, --trace and --svg show M = 8)");
}
