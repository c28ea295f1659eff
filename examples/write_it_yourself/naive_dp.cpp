// Write it yourself, chapter 12 — naive data parallelism.
//
// Every rank holds the whole model (the same initial weights: the course MLP is seeded) and
// trains on its own share of the global batch. After backward each rank's gradients describe its
// share only; averaging every gradient over the ranks gives every rank the gradient of the whole
// batch, so the replicas take the same optimizer step and stay equal. Each lab::unfinished(...)
// says what must hold there; replace it with code that makes it hold (hints in tiers, up to the
// code: hints/naive_dp.md), then check it:
//
//   scripts/check-lab naive_dp
//
// It trains 3 steps on 2 ranks and compares the loss and every parameter with the monolith's (the
// whole global batch on one process) and with mpp::NaiveDP<Blocking<Gloo>>'s. The harness is in
// harness.hpp; one answer is in solutions/naive_dp.cpp.
#include <torch/nn/functional/loss.h>

#include "harness.hpp"

namespace {

class Replica {
 public:
  Replica(const lab::World& world, torch::nn::Sequential model)
      : world_(world), model_(std::move(model)) {}

  double train_step(const lab::Batch& batch) {
    at::Tensor inputs, targets;
    lab::unfinished(
        "inputs and targets: this rank's share of the global batch, its own rows and no other "
        "rank's, as many as every other rank has (hints: hints/naive_dp.md, 1)");
    auto loss = torch::nn::functional::mse_loss(model_->forward(inputs), targets);
    loss.backward();

    lab::unfinished(
        "before the optimizer steps, every rank's .grad must be the whole global batch's "
        "gradient (hints: hints/naive_dp.md, 2)");

    lab::unfinished(
        "return the whole global batch's loss, the same on every rank, without changing the "
        "graph's loss tensor (hints: hints/naive_dp.md, 3)");
  }

 private:
  const lab::World& world_;
  torch::nn::Sequential model_;
};

}  // namespace

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_data_parallel<Replica>(argc, argv, "naive_dp",
                                           lab::DataParallelReference::naive_dp);
}
