// A wrong naive DP for scripts/check-lab's own test: every rank trains its replica on the whole
// global batch and never all-reduces. Each replica then takes the monolith's step, so the losses
// and every parameter are right; the data was not split, which is what data parallelism is, so
// the check must fail on the rows each rank ran.
#include <torch/nn/functional/loss.h>

#include "harness.hpp"

namespace {

class Replica {
 public:
  // Wrong: the world is never used; no gradient is averaged.
  Replica(const lab::World& /*world*/, torch::nn::Sequential model) : model_(std::move(model)) {}

  double train_step(const lab::Batch& batch) {
    // Wrong: the whole batch on every rank, where each should take its share of the rows.
    auto loss = torch::nn::functional::mse_loss(model_->forward(batch.inputs), batch.targets);
    loss.backward();
    return loss.item<double>();
  }

 private:
  torch::nn::Sequential model_;
};

}  // namespace

int main(int argc, char** argv) {
  return lab::check_data_parallel<Replica>(argc, argv, "naive_dp",
                                           lab::DataParallelReference::naive_dp);
}
