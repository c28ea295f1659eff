// Write it yourself, chapter 06 — the naive pipeline (stop and wait), solved.
//
// Each rank holds a few consecutive layers (stage.layers). The whole batch goes forward rank by
// rank, then the gradient comes back rank by rank; at any moment one rank works and the others
// wait in a receive.
//
//   scripts/check-lab naive_pipeline [your_file.cpp]
#include <torch/nn/functional/loss.h>

#include <limits>

#include "harness.hpp"

namespace {

double train_step(const lab::World& world, lab::Stage& stage, const lab::Batch& batch) {
  const int rank = world.rank();
  const bool first = rank == 0;
  const bool last = rank == world.size() - 1;

  // Forward. The first rank starts from the batch; the others from what the previous rank sent,
  // a leaf of this rank's graph whose gradient we will send back.
  at::Tensor input = batch.inputs;
  if (!first) {
    input = at::empty_like(batch.inputs);
    world.recv(input, rank - 1);
    input.requires_grad_(true);
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
    world.send(output.detach(), rank + 1);
    at::Tensor output_grad = at::empty_like(output);
    world.recv(output_grad, rank + 1);
    output.backward(output_grad);
  }

  // Backward: the gradient of this rank's input goes back to the previous rank.
  if (!first) world.send(input.grad(), rank - 1);
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "naive_pipeline", lab::PipelineReference::naive,
                             train_step);
}
