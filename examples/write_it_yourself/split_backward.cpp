// Write it yourself, chapter 09 — the backward split into I and W (ZB-H1).
//
// A stage's backward computes two things: the gradient of its input (I), which the previous rank
// is waiting for, and the gradients of its weights (W), which nobody needs before the optimizer
// step. Split them: I computes the input's gradient alone and sends it at once; W computes the
// weights' gradients later, where ZB-H1 puts it (on rank r, r micro-batches behind its I). The
// forward, the messages and ZB-H1's order are written; I and W are yours. Each
// lab::unfinished(...) says what must hold there; replace it with code that makes it hold
// (hints/split_backward.md has hints in tiers), then check it:
//
//   scripts/check-lab split_backward
//
// It trains 3 steps on 2 ranks and compares the loss and every parameter with the monolith's and
// with mpp::Pipeline<Uniform<2>, ZeroBubbleH1<4>, Async<Gloo>>'s, and looks at the parameters'
// .grad each time the stage sends an input gradient: untouched before the first (no weight
// gradient computed yet), then changed between two input gradients exactly where ZB-H1 runs a W.
// The harness is in harness.hpp; one answer is in solutions/split_backward.cpp.
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <string>
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
  [[maybe_unused]] const std::vector<at::Tensor> params = stage.layers->parameters();

  // Kept per micro-batch from its forward to its W: its input (a leaf on the ranks after the
  // first), what its backward starts from (the output, or on the last rank the loss) with the
  // graph behind it, and the output's gradient (undefined on the last rank).
  std::vector<at::Tensor> stage_inputs(micro_batches), stage_outputs(micro_batches);
  std::vector<at::Tensor> output_grads(micro_batches);
  double loss = 0;

  // Every receive of the step, posted now; a Request is waited when its data is needed.
  std::vector<mpp::Request> input_arrived(micro_batches), grad_arrived(micro_batches);
  for (int m = 0; m < micro_batches; ++m) {
    if (!first) {
      stage_inputs[m] = at::empty_like(inputs[m]);
      input_arrived[m] = world.irecv(stage_inputs[m], rank - 1, m);
    }
    if (!last) {
      output_grads[m] = at::empty_like(inputs[m]);
      grad_arrived[m] = world.irecv(output_grads[m], rank + 1, m);
    }
  }
  // The sends, and the tensors they read, kept until they are waited at the end of the step.
  std::vector<mpp::Request> sent;
  std::vector<at::Tensor> sending;

  auto forward = [&](int m) {
    if (first) {
      stage_inputs[m] = inputs[m];
    } else {
      input_arrived[m].wait();
      stage_inputs[m].requires_grad_(true);
    }
    stage_outputs[m] = stage.layers->forward(stage_inputs[m]);
    if (last) {
      const double share = static_cast<double>(inputs[m].size(0)) / rows;
      stage_outputs[m] = torch::nn::functional::mse_loss(stage_outputs[m], targets[m]) * share;
      loss += stage_outputs[m].item<double>();
    } else {
      sending.push_back(stage_outputs[m].detach());
      sent.push_back(world.isend(sending.back(), rank + 1, m));
    }
  };
  // Starts sending micro-batch m's input gradient to the previous rank.
  // ([[maybe_unused]] only until your I calls it.)
  [[maybe_unused]] auto send_input_grad = [&](int m, const at::Tensor& input_grad) {
    sending.push_back(input_grad);
    sent.push_back(world.isend(input_grad, rank - 1, m));
  };

  // I: the input's gradient, sent at once (the first rank has nobody to send it to).
  auto input_grad = [&](int m) {
    if (!last) grad_arrived[m].wait();
    if (first) return;
    lab::unfinished(
        "I of micro-batch m: the gradient of stage_inputs[m] alone, from stage_outputs[m] and "
        "output_grads[m] (on the last rank from the loss), handed to send_input_grad(m, ...) "
        "before anything else: no parameter's gradient may be computed here, and the graph "
        "behind stage_outputs[m] must survive for W (hints: hints/split_backward.md, 1)");
  };
  // W: the parameters' gradients, later.
  auto weight_grad = [&](int m) {
    lab::unfinished(
        "W of micro-batch " + std::to_string(m) +
        ": the gradients of the stage's parameters (params) through the graph "
        "I kept, from the same output gradient, added to their .grad as backward() adds them; "
        "the graph is not needed after this (hints: hints/split_backward.md, 2)");
  };

  // ZB-H1's order: 1F1B's forwards and I's, and each W r micro-batches behind its I on rank r
  // (right after it on rank 0); the W's left run at the end.
  const int warmup = std::min(world.size() - 1 - rank, micro_batches);
  for (int m = 0; m < warmup; ++m) forward(m);
  int next_w = 0;
  for (int i = 0; i < micro_batches; ++i) {
    if (warmup + i < micro_batches) forward(warmup + i);
    input_grad(i);
    if (i >= rank) weight_grad(next_w++);
  }
  while (next_w < micro_batches) weight_grad(next_w++);

  for (auto& request : sent) request.wait();
  return loss;
}

}  // namespace

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "split_backward", lab::PipelineReference::zero_bubble_h1,
                             train_step);
}
