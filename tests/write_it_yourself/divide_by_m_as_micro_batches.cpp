// A wrong micro-batch split for scripts/check-lab's own test: each micro-batch's mean loss divided
// by M instead of weighted by its share of the rows. On an even split the two agree; the check's
// batch of 10 rows in 4 micro-batches (3, 3, 3, 1) is uneven, so the check must fail on the loss.
#include <torch/nn/functional/loss.h>

#include "harness.hpp"

namespace {

double train_step(const lab::World& world, lab::Stage& stage, const lab::Batch& batch) {
  const int rank = world.rank();
  const bool first = rank == 0;
  const bool last = rank == world.size() - 1;
  const auto inputs = batch.inputs.chunk(stage.micro_batches);
  const auto targets = batch.targets.chunk(stage.micro_batches);
  const int micro_batches = static_cast<int>(inputs.size());

  double loss = 0;
  for (int m = 0; m < micro_batches; ++m) {
    at::Tensor input = inputs[m];
    if (!first) {
      input = at::empty_like(inputs[m]);
      world.recv(input, rank - 1, m);
      input.requires_grad_(true);
    }
    at::Tensor output = stage.layers->forward(input);
    if (last) {
      auto divided = torch::nn::functional::mse_loss(output, targets[m]) / micro_batches;  // wrong
      divided.backward();
      loss += divided.item<double>();
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
