// Write it yourself, chapter 10 — GPipe with activation recomputation.
//
// GPipe keeps every micro-batch's graph from its forward to its backward: all M of them at the
// peak. GPipe's paper keeps only each micro-batch's stage input instead, and runs the stage's
// forward again, this time with the graph, right before that micro-batch's backward: one more
// forward per micro-batch for M graphs fewer. The messages and both loops are written (chapter
// 07's GPipe); the two forwards are yours. Each lab::unfinished(...) says what must hold there;
// replace it with code that makes it hold (hints/recompute.md has hints in tiers), then check it:
//
//   scripts/check-lab recompute
//
// It trains 3 steps on 2 ranks and compares the loss and every parameter with the monolith's and
// with mpp::Pipeline<Recompute<Uniform<2>>, GPipe<4>, Blocking<Gloo>>'s, and watches the stage's
// output: each micro-batch must run forward once without a graph and once with it, the second
// right before its backward. The course's model has no dropout, so the two forwards draw no
// random numbers and compute the same output; with dropout the second would have to start from
// the generator's state of the first (chapter 10, section 1). The harness is in harness.hpp; one
// answer is in solutions/recompute.cpp.
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
  // batch's loss. Whether it builds a graph is up to the caller. ([[maybe_unused]] only until
  // your code calls it.)
  [[maybe_unused]] auto run_stage = [&](int m, const at::Tensor& x) {
    at::Tensor out = stage.layers->forward(x);
    if (!last) return out;
    const double share = static_cast<double>(inputs[m].size(0)) / rows;
    return torch::nn::functional::mse_loss(out, targets[m]) * share;
  };

  // All forwards. Tag m: the message belongs to micro-batch m.
  for (int m = 0; m < micro_batches; ++m) {
    stage_inputs[m] = inputs[m];
    if (!first) {
      stage_inputs[m] = at::empty_like(inputs[m]);
      world.recv(stage_inputs[m], rank - 1, m);
    }
    at::Tensor out;
    lab::unfinished(
        "out: micro-batch m's stage output (on the last rank its loss), computed so that nothing "
        "computed inside the stage outlives this iteration: no autograd graph may hold the "
        "layers' outputs until the backward, only stage_inputs[m] stays (hints: "
        "hints/recompute.md, 1)");
    if (last)
      loss += out.item<double>();
    else
      world.send(out, rank + 1, m);
  }

  // All backwards, in the same order on every rank (a blocking send waits for its receive).
  for (int m = 0; m < micro_batches; ++m) {
    at::Tensor output_grad;  // undefined on the last rank: its backward starts from the loss
    if (!last) {
      output_grad = at::empty_like(inputs[m]);
      world.recv(output_grad, rank + 1, m);
    }
    lab::unfinished(
        "micro-batch m's backward, whose graph the forward above did not keep: the graph must "
        "exist again, built from stage_inputs[m] right here, before the backward runs from "
        "output_grad (on the last rank from the loss); then every parameter's .grad holds its "
        "share and, on the ranks after the first, stage_inputs[m].grad() the input's gradient "
        "(hints: hints/recompute.md, 2)");
    if (!first) world.send(stage_inputs[m].grad(), rank - 1, m);
  }
  return loss;
}

}  // namespace

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "recompute", lab::PipelineReference::gpipe_recompute,
                             train_step);
}
