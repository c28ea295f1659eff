// Write it yourself, chapter 12 — naive data parallelism, solved.
//
// Every rank holds the whole model (the same initial weights: the course MLP is seeded) and trains
// on its own share of the global batch. After backward each rank's gradients describe its share
// only; averaging every gradient over the ranks (an all-reduce, then a division by P) gives every
// rank the gradient of the whole batch, so the replicas take the same optimizer step and stay
// equal.
//
//   scripts/check-lab naive_dp [your_file.cpp]
#include <torch/nn/functional/loss.h>

#include "harness.hpp"

namespace {

class Replica {
 public:
  Replica(const lab::World& world, torch::nn::Sequential model)
      : world_(world), model_(std::move(model)) {}

  double train_step(const lab::Batch& batch) {
    // This rank's share: rows [rank * n / P, (rank + 1) * n / P) of the global batch.
    const std::int64_t rows = batch.inputs.size(0) / world_.size();
    const std::int64_t begin = world_.rank() * rows;
    auto loss = torch::nn::functional::mse_loss(
        model_->forward(batch.inputs.narrow(0, begin, rows)), batch.targets.narrow(0, begin, rows));
    loss.backward();

    // Every gradient, averaged over the ranks: the whole batch's gradient, on every rank.
    for (auto& param : model_->parameters()) world_.all_reduce_mean(param.grad());

    // The whole batch's loss is the mean of the ranks' losses (their shares are the same size).
    at::Tensor global_loss = loss.detach().clone();
    world_.all_reduce_mean(global_loss);
    return global_loss.item<double>();
  }

 private:
  const lab::World& world_;
  torch::nn::Sequential model_;
};

}  // namespace

int main(int argc, char** argv) {
  return lab::check_data_parallel<Replica>(argc, argv, "naive_dp",
                                           lab::DataParallelReference::naive_dp);
}
