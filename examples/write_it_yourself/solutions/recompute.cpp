// Write it yourself, chapter 10 — GPipe with activation recomputation, solved.
//
// Each micro-batch's forward runs under torch::NoGradGuard: the layers keep nothing for a
// backward, and only the stage's input is kept. Right before the micro-batch's backward the
// stage runs forward again from that input, this time building the graph, and the backward
// walks it at once: one graph is alive at a time instead of GPipe's M. The course's model has no
// dropout; with it, the second forward would have to start from the generator's state of the
// first (chapter 10's RngReplay), or it would differentiate a network that never produced the
// loss.
//
//   scripts/check-lab recompute [your_file.cpp]
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

  // All that is kept from a micro-batch's forward to its backward: the stage's input.
  std::vector<at::Tensor> stage_inputs(micro_batches);
  double loss = 0;

  // The stage run on micro-batch m's input `x`: its output, or on the last rank its share of the
  // batch's loss. Whether it builds a graph is up to the caller.
  auto run_stage = [&](int m, const at::Tensor& x) {
    at::Tensor out = stage.layers->forward(x);
    if (!last) return out;
    const double share = static_cast<double>(inputs[m].size(0)) / rows;
    return torch::nn::functional::mse_loss(out, targets[m]) * share;
  };

  // All forwards, without the graph. Tag m: the message belongs to micro-batch m.
  for (int m = 0; m < micro_batches; ++m) {
    stage_inputs[m] = inputs[m];
    if (!first) {
      stage_inputs[m] = at::empty_like(inputs[m]);
      world.recv(stage_inputs[m], rank - 1, m);
    }
    at::Tensor out;
    {
      torch::NoGradGuard no_graph;  // the layers' outputs die with this scope
      out = run_stage(m, stage_inputs[m]);
    }
    if (last)
      loss += out.item<double>();
    else
      world.send(out, rank + 1, m);
  }

  // All backwards, each micro-batch's graph rebuilt from its input right before it.
  for (int m = 0; m < micro_batches; ++m) {
    at::Tensor output_grad;  // undefined on the last rank: its backward starts from the loss
    if (!last) {
      output_grad = at::empty_like(inputs[m]);
      world.recv(output_grad, rank + 1, m);
    }
    // A leaf whose gradient the previous rank waits for (on the first rank, the data: none).
    if (!first) stage_inputs[m].requires_grad_(true);
    const at::Tensor out = run_stage(m, stage_inputs[m]);  // the same numbers, with the graph
    if (last)
      out.backward();
    else
      out.backward(output_grad);
    if (!first) world.send(stage_inputs[m].grad(), rank - 1, m);
  }
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "recompute", lab::PipelineReference::gpipe_recompute,
                             train_step);
}
