// Write it yourself, chapter 08 — 1F1B with asynchronous sends and receives, solved.
//
// The same order of forwards and backwards as the blocking version, but no call waits for a
// peer unless this rank needs its data now: every receive of the step is posted at the start
// (irecv: the buffers' shapes are known up front) and waited just before its micro-batch is
// computed; every send is started (isend) and waited once, at the end of the step. With nothing
// blocking on a send, the order of sends and receives between neighbours no longer matters.
//
//   scripts/check-lab one_f_one_b_async [your_file.cpp]
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
      input_arrived[m] = world.irecv(stage_inputs[m], rank - 1, m);
    }
    if (!last) {
      output_grads[m] = at::empty_like(inputs[m]);
      grad_arrived[m] = world.irecv(output_grads[m], rank + 1, m);
    }
  }
  // The sends, started as soon as their tensor is ready; their tensors stay untouched (kept in
  // stage_outputs and in the inputs' .grad) until the sends are waited, at the end of the step.
  std::vector<mpp::Request> sent;

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
      sent.push_back(world.isend(stage_outputs[m].detach(), rank + 1, m));
    }
  };
  auto backward = [&](int m) {
    if (last) {
      stage_outputs[m].backward();
    } else {
      grad_arrived[m].wait();
      stage_outputs[m].backward(output_grads[m]);
    }
    if (!first) sent.push_back(world.isend(stage_inputs[m].grad(), rank - 1, m));
  };

  // 1F1B's order: warm-up forwards, then one forward and one backward, then the backwards left.
  const int warmup = std::min(world.size() - 1 - rank, micro_batches);
  for (int m = 0; m < warmup; ++m) forward(m);
  for (int i = 0; i < micro_batches - warmup; ++i) {
    forward(warmup + i);
    backward(i);
  }
  for (int b = micro_batches - warmup; b < micro_batches; ++b) backward(b);

  for (auto& request : sent) request.wait();
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "one_f_one_b_async",
                             lab::PipelineReference::one_f_one_b_async, train_step);
}
