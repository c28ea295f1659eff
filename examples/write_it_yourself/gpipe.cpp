// Write it yourself, chapter 07 — GPipe.
//
// Every micro-batch forward first, then every micro-batch backward: while rank 1 runs
// micro-batch 0's forward, rank 0 already runs micro-batch 1's. Each rank keeps every
// micro-batch's input and output until its backward. The loops are written; the messages between
// the ranks are yours. Each lab::unfinished(...) says what must hold there; replace it with code
// that makes it hold (hints in tiers, up to the code: hints/gpipe.md), then check it:
//
//   scripts/check-lab gpipe
//
// It trains 3 steps on 2 ranks and compares the loss and every parameter with the monolith's and
// with mpp::Pipeline<Uniform<2>, GPipe<4>, Blocking<Gloo>>'s. The harness is in harness.hpp; one
// answer is in solutions/gpipe.cpp.
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

  // All forwards. Use tag m for micro-batch m's messages.
  for (int m = 0; m < micro_batches; ++m) {
    stage_inputs[m] = inputs[m];
    if (!first) {
      stage_inputs[m] = at::empty_like(inputs[m]);
      lab::unfinished(
          "micro-batch m's input comes from the previous rank (tag m) into stage_inputs[m], and "
          "this rank's backward must leave its gradient there (hints: hints/gpipe.md, 1)");
    }
    stage_outputs[m] = stage.layers->forward(stage_inputs[m]);
    if (last) {
      const double share = static_cast<double>(inputs[m].size(0)) / rows;
      stage_outputs[m] = torch::nn::functional::mse_loss(stage_outputs[m], targets[m]) * share;
      loss += stage_outputs[m].item<double>();
    } else {
      lab::unfinished(
          "the next rank waits for micro-batch m's output (tag m): its values, not this rank's "
          "graph (hints: hints/gpipe.md, 2)");
    }
  }

  // All backwards, in the same order on every rank (a blocking send waits for its receive).
  for (int m = 0; m < micro_batches; ++m) {
    if (last) {
      stage_outputs[m].backward();
    } else {
      lab::unfinished(
          "micro-batch m's backward starts from the gradient of its output, which only the next "
          "rank can compute (tag m) (hints: hints/gpipe.md, 3)");
    }
    if (!first)
      lab::unfinished(
          "the previous rank's backward of micro-batch m waits for the gradient of this rank's "
          "input (tag m) (hints: hints/gpipe.md, 4)");
  }
  return loss;
}

}  // namespace

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "gpipe", lab::PipelineReference::gpipe, train_step);
}
