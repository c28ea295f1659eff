// Write it yourself, chapter 09 — the backward split into I and W (ZB-H1), solved.
//
// I asks autograd for one gradient only, the stage input's (torch::autograd::grad with the input
// as its only `inputs`), keeping the graph, and sends it at once: the previous rank waits for
// nothing else. W walks the same graph later for the parameters' gradients (backward with the
// parameters as `inputs`), accumulating them into .grad as backward() does, and lets the graph
// go. ZB-H1 runs each W r micro-batches behind its I on rank r, where 1F1B would idle. This W
// walks the chain of layers again to reach the weights; mpp's executor keeps each layer's output
// gradient from I, so that its W computes only the weight gradients (chapter 09, section 2).
//
//   scripts/check-lab split_backward [your_file.cpp]
#include <torch/csrc/autograd/autograd.h>
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
  const std::vector<at::Tensor> params = stage.layers->parameters();

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
  auto send_input_grad = [&](int m, const at::Tensor& input_grad) {
    sending.push_back(input_grad);
    sent.push_back(world.isend(input_grad, rank - 1, m));
  };

  // I: the input's gradient only, sent at once; the graph stays for W. The first rank has nobody
  // to send it to, and so nothing to compute.
  auto input_grad = [&](int m) {
    if (!last) grad_arrived[m].wait();
    if (first) return;
    const auto grads = torch::autograd::grad({stage_outputs[m]}, {stage_inputs[m]},
                                             {output_grads[m]}, /*retain_graph=*/true);
    send_input_grad(m, grads[0]);
  };
  // W: the parameters' gradients, accumulated into their .grad; the graph goes with it.
  auto weight_grad = [&](int m) {
    stage_outputs[m].backward(output_grads[m], /*retain_graph=*/false, /*create_graph=*/false,
                              params);
    stage_outputs[m] = at::Tensor();
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

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "split_backward", lab::PipelineReference::zero_bubble_h1,
                             train_step);
}
