// Write it yourself, chapter 12 — naive data parallelism.
//
// Every rank holds the whole model (the same initial weights: the course MLP is seeded) and
// trains on its own share of the global batch. After backward each rank's gradients describe its
// share only; averaging every gradient over the ranks gives every rank the gradient of the whole
// batch, so the replicas take the same optimizer step and stay equal. Replace each
// lab::unfinished(...) with the code it asks for, then check it:
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
        "take this rank's share of the global batch, rows [rank * n / P, (rank + 1) * n / P): "
        "inputs = batch.inputs.narrow(0, world_.rank() * rows, rows) with rows = "
        "batch.inputs.size(0) / world_.size(), and targets the same from batch.targets");
    auto loss = torch::nn::functional::mse_loss(model_->forward(inputs), targets);
    loss.backward();

    lab::unfinished(
        "average every gradient over the ranks: world_.all_reduce_mean(param.grad()) for each "
        "param in model_->parameters()");

    lab::unfinished(
        "return the whole batch's loss, the mean of the ranks' losses: all_reduce_mean a copy of "
        "it (at::Tensor global = loss.detach().clone(); world_.all_reduce_mean(global)) and "
        "return global.item<double>()");
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
