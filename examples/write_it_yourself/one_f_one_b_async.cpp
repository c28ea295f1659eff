// Write it yourself, chapter 08 — 1F1B with asynchronous sends and receives.
//
// The same order of forwards and backwards as the blocking version, but no call waits for a peer
// unless this rank needs its data now: post every receive of the step at the start (irecv: the
// buffers' shapes are known up front) and wait each just before its micro-batch is computed;
// start every send (isend) and wait them all once, at the end of the step. With no send blocking,
// the order of sends and receives between neighbours no longer matters. Each lab::unfinished(...)
// says what must hold there; replace it with code that makes it hold (hints in tiers, up to the
// code: hints/one_f_one_b_async.md), then check it:
//
//   scripts/check-lab one_f_one_b_async
//
// It trains 3 steps on 2 ranks and compares the loss and every parameter with the monolith's and
// with mpp::Pipeline<Uniform<2>, OneFOneB<4>, Async<Gloo>>'s. The harness is in harness.hpp; one
// answer is in solutions/one_f_one_b_async.cpp.
#include <torch/nn/functional/loss.h>

#include <algorithm>
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

  std::vector<at::Tensor> stage_inputs(micro_batches), stage_outputs(micro_batches);
  std::vector<at::Tensor> output_grads(micro_batches);
  double loss = 0;

  // Every receive of the step, posted now; a Request is waited when its data is needed.
  std::vector<mpp::Request> input_arrived(micro_batches), grad_arrived(micro_batches);
  for (int m = 0; m < micro_batches; ++m) {
    if (!first) {
      stage_inputs[m] = at::empty_like(inputs[m]);
      lab::unfinished(
          "micro-batch m's input (tag m) may arrive from the previous rank at any time from now "
          "on, into stage_inputs[m], without this rank waiting here (hints: "
          "hints/one_f_one_b_async.md, 1)");
    }
    if (!last) {
      output_grads[m] = at::empty_like(inputs[m]);
      lab::unfinished(
          "the same for the gradient of micro-batch m's output, from the next rank into "
          "output_grads[m] (hints: hints/one_f_one_b_async.md, 1)");
    }
  }
  // The sends, started as soon as their tensor is ready; their tensors stay untouched (kept in
  // stage_outputs and in the inputs' .grad) until the sends are waited, at the end of the step.
  std::vector<mpp::Request> sent;

  auto forward = [&](int m) {
    if (first) {
      stage_inputs[m] = inputs[m];
    } else {
      lab::unfinished(
          "the forward below reads stage_inputs[m]: it must be there by now (hints: "
          "hints/one_f_one_b_async.md, 2)");
      stage_inputs[m].requires_grad_(true);
    }
    stage_outputs[m] = stage.layers->forward(stage_inputs[m]);
    if (last) {
      const double share = static_cast<double>(inputs[m].size(0)) / rows;
      stage_outputs[m] = torch::nn::functional::mse_loss(stage_outputs[m], targets[m]) * share;
      loss += stage_outputs[m].item<double>();
    } else {
      lab::unfinished(
          "the next rank will wait for micro-batch m's output (tag m); this rank goes on computing "
          "meanwhile (hints: hints/one_f_one_b_async.md, 3)");
    }
  };
  auto backward = [&](int m) {
    if (last) {
      stage_outputs[m].backward();
    } else {
      lab::unfinished(
          "the backward below reads output_grads[m]: it must be there by now (hints: "
          "hints/one_f_one_b_async.md, 2)");
      stage_outputs[m].backward(output_grads[m]);
    }
    if (!first)
      lab::unfinished(
          "the previous rank will wait for the gradient of micro-batch m's input (tag m); this "
          "rank goes on (hints: hints/one_f_one_b_async.md, 3)");
  };

  // 1F1B's order: warm-up forwards, then one forward and one backward, then the backwards left.
  const int warmup = std::min(world.size() - 1 - rank, micro_batches);
  for (int m = 0; m < warmup; ++m) forward(m);
  for (int i = 0; i < micro_batches - warmup; ++i) {
    forward(warmup + i);
    backward(i);
  }
  for (int b = micro_batches - warmup; b < micro_batches; ++b) backward(b);

  if (!sent.empty())
    lab::unfinished(
        "no send of this step may still be in flight when it returns: the tensors it reads die "
        "with the step (hints: hints/one_f_one_b_async.md, 4)");
  return loss;
}

}  // namespace

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "one_f_one_b_async",
                             lab::PipelineReference::one_f_one_b_async, train_step);
}
