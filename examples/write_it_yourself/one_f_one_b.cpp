// Write it yourself, chapter 08 — 1F1B with blocking sends.
//
// After a warm-up of forwards, each rank alternates one forward and one backward, then drains the
// backwards left: at most P micro-batches in flight instead of GPipe's M. In the steady state two
// neighbours trade messages at the same moment: rank r sends micro-batch f's activation to r + 1
// and waits for micro-batch i's gradient from it, while r + 1 sends that gradient and waits for
// the next activation. The helpers (forward, backward, the buffers) are written; the schedule's
// counts and the messages are yours. Each lab::unfinished(...) says what must hold there; replace
// it with code that makes it hold (hints/one_f_one_b.md has hints in tiers), then check it:
//
//   scripts/check-lab one_f_one_b
//
// It trains 3 steps on 2 ranks and compares the loss and every parameter with the monolith's and
// with mpp::Pipeline<Uniform<2>, OneFOneB<4>, Blocking<Gloo>>'s. A blocking send returns only once
// the peer has received: if the check stops with "send ... did not complete within ... ms", read
// chapter 08's section on the deadlock. The harness is in harness.hpp; one answer is in
// solutions/one_f_one_b.cpp.
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <vector>

#include "harness.hpp"

namespace {

// Sends `out` to `peer` and receives `in` from it, with the blocking world.send and world.recv.
// stage.both_send_first (the check's --both-send-first) asks for the send first on every rank.
// ([[maybe_unused]] only until the steady state below calls it.)
[[maybe_unused]] void exchange(const lab::World& world, const lab::Stage& stage,
                               const at::Tensor& out, int out_tag, const at::Tensor& in, int in_tag,
                               int peer) {
  lab::unfinished(
      "exchange(): `out` must reach `peer` and `in` must arrive from it, with blocking calls, in "
      "an order that cannot deadlock when `peer` runs exchange() at the same moment (hints: "
      "hints/one_f_one_b.md, 1)");
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

  int warmup = 0;
  lab::unfinished(
      "warmup: how many forwards this rank runs before its first backward, so that the last "
      "rank can start backwards at once and rank r never holds more than P - r micro-batches "
      "(hints: hints/one_f_one_b.md, 2)");
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
    if (!last)
      lab::unfinished(
          "the messages with the next rank around this backward: what must it get from this "
          "forward, and what does backward(i, output_grad) need from it? (hints: "
          "hints/one_f_one_b.md, 3)");
    backward(i, output_grad);
    if (first) continue;
    lab::unfinished(
        "the messages with the previous rank after this backward: what does it wait for from "
        "micro-batch i, and what does the next forward here need from it? The last steady "
        "iteration has no next forward (hints: hints/one_f_one_b.md, 4)");
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

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "one_f_one_b", lab::PipelineReference::one_f_one_b,
                             train_step);
}
