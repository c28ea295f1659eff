// Write it yourself, chapter 07 — the micro-batch split, solved.
//
// The naive pipeline of chapter 06, run once per micro-batch: the batch is cut into M pieces
// that go through the pipeline one after the other. Gradients are not zeroed between them, so
// each .grad accumulates the sum over the micro-batches; weighting each micro-batch's mean loss
// by its share of the rows makes that sum the gradient of the whole batch's mean loss.
//
//   scripts/check-lab micro_batches [your_file.cpp]
#include <torch/nn/functional/loss.h>

#include "harness.hpp"

namespace {

double train_step(const lab::World& world, lab::Stage& stage, const lab::Batch& batch) {
  const int rank = world.rank();
  const bool first = rank == 0;
  const bool last = rank == world.size() - 1;
  const auto inputs = batch.inputs.chunk(stage.micro_batches);
  const auto targets = batch.targets.chunk(stage.micro_batches);
  const double rows = static_cast<double>(batch.inputs.size(0));

  double loss = 0;
  for (int m = 0; m < static_cast<int>(inputs.size()); ++m) {
    // Chapter 06's step on micro-batch m; the tag says which micro-batch a message belongs to.
    at::Tensor input = inputs[m];
    if (!first) {
      input = at::empty_like(inputs[m]);
      world.recv(input, rank - 1, m);
      input.requires_grad_(true);
    }
    at::Tensor output = stage.layers->forward(input);
    if (last) {
      // The micro-batch's mean, weighted by its share of the batch: the weighted sum over the
      // micro-batches is the batch's mean, and so is the sum of their gradients.
      const double share = static_cast<double>(inputs[m].size(0)) / rows;
      auto weighted = torch::nn::functional::mse_loss(output, targets[m]) * share;
      weighted.backward();  // adds to .grad: nothing zeroes it between micro-batches
      loss += weighted.item<double>();
    } else {
      world.send(output.detach(), rank + 1, m);
      at::Tensor output_grad = at::empty_like(output);
      world.recv(output_grad, rank + 1, m);
      output.backward(output_grad);
    }
    if (!first) world.send(input.grad(), rank - 1, m);
  }
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "micro_batches", lab::PipelineReference::gpipe,
                             train_step);
}
