// Write it yourself, chapter 06 — the naive pipeline (stop and wait).
//
// Each rank holds a few consecutive layers of the course MLP (stage.layers, with the whole
// model's initial weights). Write one training step: the whole batch forward rank by rank, the
// loss on the last rank, its gradient back rank by rank. Each lab::unfinished(...) below marks a
// part to write and says what must hold there: replace the call with code that makes it hold
// (hints in tiers, up to the code: hints/naive_pipeline.md). Then check it:
//
//   scripts/check-lab naive_pipeline
//
// It trains 3 steps on 2 ranks and compares the loss and every parameter with the monolith's and
// with mpp::Pipeline<Uniform<2>, Naive, Blocking<Gloo>>'s. The model, the data and the optimizer
// are in harness.hpp; one answer is in solutions/naive_pipeline.cpp.
#include <torch/nn/functional/loss.h>

#include <limits>

#include "harness.hpp"

namespace {

double train_step(const lab::World& world, lab::Stage& stage, const lab::Batch& batch) {
  const int rank = world.rank();
  const bool first = rank == 0;
  const bool last = rank == world.size() - 1;

  // Forward. The first rank starts from the batch; the others from what the previous rank sent,
  // a leaf of this rank's graph whose gradient will be sent back.
  at::Tensor input = batch.inputs;
  if (!first) {
    input = at::empty_like(batch.inputs);
    lab::unfinished(
        "the input is what the previous rank's forward produced (world.recv fills a tensor), and "
        "the backward must compute its gradient, which the previous rank will need (hints: "
        "hints/naive_pipeline.md, 1)");
  }
  at::Tensor output = stage.layers->forward(input);

  // The last rank computes the loss and starts the backward; the others hand their output on and
  // wait for its gradient.
  double loss = std::numeric_limits<double>::quiet_NaN();
  if (last) {
    auto mse = torch::nn::functional::mse_loss(output, batch.targets);
    mse.backward();
    loss = mse.item<double>();
  } else {
    lab::unfinished(
        "the next rank's forward starts from this output's values (world.send), and this rank's "
        "backward starts from the gradient of its output, which only the next rank can compute "
        "(hints: hints/naive_pipeline.md, 2)");
  }

  // Backward: the gradient of this rank's input goes back to the previous rank.
  if (!first)
    lab::unfinished(
        "the previous rank's backward waits for the gradient of this rank's input (hints: "
        "hints/naive_pipeline.md, 3)");
  return loss;
}

}  // namespace

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "naive_pipeline", lab::PipelineReference::naive,
                             train_step);
}
