// A wrong DDP for scripts/check-lab's own test: a hook per parameter, as the lab asks, but the
// hooks only keep each gradient; the all-reduces start after backward() returned. The averages,
// and so every step, are right; nothing travels while backward runs, which is what DDP's hooks
// are for, so the check must fail on that.
#include <torch/nn/functional/loss.h>

#include <vector>

#include "harness.hpp"

namespace {

class Replica {
 public:
  Replica(const lab::World& world, torch::nn::Sequential model)
      : world_(world), model_(std::move(model)), params_(model_->parameters()) {
    for (std::size_t i = 0; i < params_.size(); ++i)
      params_[i].register_hook([this, i](const at::Tensor& grad) {
        ready_.push_back({i, grad.detach().clone()});
      });
  }
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  double train_step(const lab::Batch& batch) {
    const std::int64_t rows = batch.inputs.size(0) / world_.size();
    const std::int64_t begin = world_.rank() * rows;
    auto loss = torch::nn::functional::mse_loss(
        model_->forward(batch.inputs.narrow(0, begin, rows)), batch.targets.narrow(0, begin, rows));
    loss.backward();

    // Wrong: every all-reduce starts here, once backward() has returned.
    std::vector<mpp::Request> requests;
    for (auto& gradient : ready_) requests.push_back(world_.iall_reduce_mean(gradient.averaged));
    for (std::size_t k = 0; k < ready_.size(); ++k) {
      requests[k].wait();
      params_[ready_[k].param].grad().copy_(ready_[k].averaged);
    }
    ready_.clear();

    at::Tensor global_loss = loss.detach().clone();
    world_.all_reduce_mean(global_loss);
    return global_loss.item<double>();
  }

 private:
  struct Ready {
    std::size_t param;
    at::Tensor averaged;
  };
  const lab::World& world_;
  torch::nn::Sequential model_;
  std::vector<at::Tensor> params_;
  std::vector<Ready> ready_;
};

}  // namespace

int main(int argc, char** argv) {
  return lab::check_data_parallel<Replica>(argc, argv, "ddp_hooks",
                                           lab::DataParallelReference::ddp);
}
