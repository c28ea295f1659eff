// Write it yourself, chapter 08 — 1F1B with blocking sends, solved.
//
// After a warm-up of forwards (P - 1 - rank of them), each rank alternates one forward and one
// backward, then drains the backwards left. In the steady state two neighbours trade messages at
// the same moment: rank r sends micro-batch f's activation to r + 1 and waits for micro-batch b's
// gradient from it, while r + 1 sends that gradient and waits for the next activation. A blocking
// send returns only once the peer has received (Gloo's send waits for the matching receive): if
// both send first, each waits for a receive the other never reaches. Here the lower rank of each
// pair sends first and the higher one receives first. Run with --both-send-first to see the
// other order end in mpp's time-out (MPP_TIMEOUT_S sets it).
//
//   scripts/check-lab one_f_one_b [your_file.cpp]
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <vector>

#include "harness.hpp"

namespace {

// Sends `out` to `peer` and receives `in` from it, with blocking calls, in the order that cannot
// deadlock: the lower rank of the pair sends first, the higher one receives first.
void exchange(const lab::World& world, const lab::Stage& stage, const at::Tensor& out, int out_tag,
              const at::Tensor& in, int in_tag, int peer) {
  const bool send_first = stage.both_send_first || world.rank() < peer;
  if (send_first) {
    world.send(out, peer, out_tag);
    world.recv(in, peer, in_tag);
  } else {
    world.recv(in, peer, in_tag);
    world.send(out, peer, out_tag);
  }
}

double train_step(const lab::World& world, lab::Stage& stage, const lab::Batch& batch) {
  const int rank = world.rank();
  const bool first = rank == 0;
  const bool last = rank == world.size() - 1;
  const auto inputs = batch.inputs.chunk(stage.micro_batches);
  const auto targets = batch.targets.chunk(stage.micro_batches);
  const int micro_batches = static_cast<int>(inputs.size());
  const double rows = static_cast<double>(batch.inputs.size(0));

  // Per micro-batch, from its forward to its backward (as in GPipe, but at most P of them at once).
  std::vector<at::Tensor> stage_inputs(micro_batches), stage_outputs(micro_batches);
  double loss = 0;
  // Where micro-batch m's input is received (ranks after the first).
  auto input_buffer = [&](int m) -> at::Tensor& {
    stage_inputs[m] = at::empty_like(inputs[m]);
    return stage_inputs[m];
  };
  // Micro-batch m's forward, its input already received (or, on the first rank, the data).
  auto forward = [&](int m) {
    if (first)
      stage_inputs[m] = inputs[m];
    else
      stage_inputs[m].requires_grad_(true);
    stage_outputs[m] = stage.layers->forward(stage_inputs[m]);
    if (last) {
      const double share = static_cast<double>(inputs[m].size(0)) / rows;
      stage_outputs[m] = torch::nn::functional::mse_loss(stage_outputs[m], targets[m]) * share;
      loss += stage_outputs[m].item<double>();
    }
  };
  // Micro-batch m's backward, from its output's gradient (undefined on the last rank: the loss).
  auto backward = [&](int m, const at::Tensor& output_grad) {
    if (last)
      stage_outputs[m].backward();
    else
      stage_outputs[m].backward(output_grad);
  };
  auto output_grad_buffer = [&](int m) { return last ? at::Tensor() : at::empty_like(inputs[m]); };

  const int warmup = std::min(world.size() - 1 - rank, micro_batches);
  const int steady = micro_batches - warmup;

  // 1. Warm-up: forwards only (never on the last rank).
  for (int m = 0; m < warmup; ++m) {
    if (!first) world.recv(input_buffer(m), rank - 1, m);
    forward(m);
    world.send(stage_outputs[m].detach(), rank + 1, m);
  }
  // 2. Steady state: forward micro-batch f = warmup + i, backward micro-batch i.
  if (steady > 0 && !first) world.recv(input_buffer(warmup), rank - 1, warmup);
  for (int i = 0; i < steady; ++i) {
    const int f = warmup + i;
    forward(f);
    at::Tensor output_grad = output_grad_buffer(i);
    if (!last) exchange(world, stage, stage_outputs[f].detach(), f, output_grad, i, rank + 1);
    backward(i, output_grad);
    if (first) continue;
    if (i + 1 < steady)
      exchange(world, stage, stage_inputs[i].grad(), i, input_buffer(f + 1), f + 1, rank - 1);
    else
      world.send(stage_inputs[i].grad(), rank - 1, i);
  }
  // 3. Cool-down: the backwards left.
  for (int b = steady; b < micro_batches; ++b) {
    at::Tensor output_grad = output_grad_buffer(b);
    world.recv(output_grad, rank + 1, b);
    backward(b, output_grad);
    if (!first) world.send(stage_inputs[b].grad(), rank - 1, b);
  }
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "one_f_one_b", lab::PipelineReference::one_f_one_b,
                             train_step);
}
