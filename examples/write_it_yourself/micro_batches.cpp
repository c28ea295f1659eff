// Write it yourself, chapter 07 — the micro-batch split.
//
// Chapter 06's naive pipeline, run once per micro-batch: cut the batch into stage.micro_batches
// pieces and send them through the pipeline one after the other. Nothing zeroes the gradients
// between micro-batches, so each .grad accumulates the sum over them; for that sum to be the
// gradient of the whole batch's mean loss, weight each micro-batch's mean loss by its share of
// the rows. Each lab::unfinished(...) says what must hold there; replace it with code that makes
// it hold (hints in tiers, up to the code: hints/micro_batches.md), then check it:
//
//   scripts/check-lab micro_batches
//
// It trains 3 steps on 2 ranks and compares the loss and every parameter with the monolith's and
// with mpp::Pipeline<Uniform<2>, GPipe<4>, Blocking<Gloo>>'s (GPipe computes the same sums in
// another order). The harness is in harness.hpp; one answer is in solutions/micro_batches.cpp.
#include <torch/nn/functional/loss.h>

#include <vector>

#include "harness.hpp"

namespace {

double train_step(const lab::World& world, lab::Stage& stage, const lab::Batch& batch) {
  const int rank = world.rank();
  const bool first = rank == 0;
  const bool last = rank == world.size() - 1;

  std::vector<at::Tensor> inputs, targets;
  lab::unfinished(
      "inputs and targets: the batch cut into stage.micro_batches pieces of consecutive rows, "
      "the same rows in both (hints: hints/micro_batches.md, 1)");

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
      lab::unfinished(
          "after the last micro-batch, each .grad and `loss` must be those of the whole batch's "
          "mean squared error, also when the micro-batches differ in size (hints: "
          "hints/micro_batches.md, 2)");
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

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "micro_batches", lab::PipelineReference::gpipe,
                             train_step);
}
