// Write it yourself, chapter 07 — GPipe, solved.
//
// Every micro-batch forward first, then every micro-batch backward. While rank 1 runs micro-batch
// 0's forward, rank 0 already runs micro-batch 1's: the pipeline fills. Each rank keeps every
// micro-batch's input and output until its backward (the memory GPipe pays for the smaller
// bubble).
//
//   scripts/check-lab gpipe [your_file.cpp]
#include <torch/nn/functional/loss.h>

#include <vector>

#include "harness.hpp"

namespace {

double train_step(const lab::World& world, lab::Stage& stage, const lab::Batch& batch) {
  const int rank = world.rank();
  const bool first = rank == 0;
  const bool last = rank == world.size() - 1;
  const auto inputs = batch.inputs.chunk(stage.micro_batches);
  const auto targets = batch.targets.chunk(stage.micro_batches);
  const int micro_batches = static_cast<int>(inputs.size());
  const double rows = static_cast<double>(batch.inputs.size(0));

  // Kept from each micro-batch's forward to its backward: the stage's input (a leaf on every rank
  // but the first) and what the backward starts from (the output, or on the last rank the loss).
  std::vector<at::Tensor> stage_inputs(micro_batches), stage_outputs(micro_batches);
  double loss = 0;

  // All forwards. Tag m: the message belongs to micro-batch m.
  for (int m = 0; m < micro_batches; ++m) {
    stage_inputs[m] = inputs[m];
    if (!first) {
      stage_inputs[m] = at::empty_like(inputs[m]);
      world.recv(stage_inputs[m], rank - 1, m);
      stage_inputs[m].requires_grad_(true);
    }
    stage_outputs[m] = stage.layers->forward(stage_inputs[m]);
    if (last) {
      const double share = static_cast<double>(inputs[m].size(0)) / rows;
      stage_outputs[m] = torch::nn::functional::mse_loss(stage_outputs[m], targets[m]) * share;
      loss += stage_outputs[m].item<double>();
    } else {
      world.send(stage_outputs[m].detach(), rank + 1, m);
    }
  }

  // All backwards, in the same order on every rank (a blocking send waits for its receive).
  for (int m = 0; m < micro_batches; ++m) {
    if (last) {
      stage_outputs[m].backward();
    } else {
      at::Tensor output_grad = at::empty_like(stage_outputs[m]);
      world.recv(output_grad, rank + 1, m);
      stage_outputs[m].backward(output_grad);
    }
    if (!first) world.send(stage_inputs[m].grad(), rank - 1, m);
  }
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "gpipe", lab::PipelineReference::gpipe, train_step);
}
