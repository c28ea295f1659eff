// Write it yourself, chapter 13 — DDP's gradient hooks, solved.
//
// Naive DP waits for the whole backward before it sends a byte. Here a hook on every parameter
// starts the all-reduce of its gradient the moment autograd has computed it — the last layer's
// first — and the backward goes on computing the earlier layers meanwhile. Before the optimizer
// step, each all-reduce is waited and its average written to the parameter's .grad. (mpp::DDP
// does the same with buckets: several gradients packed into one all-reduce, fewer messages.)
//
//   scripts/check-lab ddp_hooks [your_file.cpp]
#include <torch/nn/functional/loss.h>

#include <vector>

#include "harness.hpp"

namespace {

class Replica {
 public:
  Replica(const lab::World& world, torch::nn::Sequential model)
      : world_(world), model_(std::move(model)), params_(model_->parameters()) {
    // One hook per parameter, called by autograd with the parameter's gradient as soon as it is
    // computed (before it is added to .grad).
    for (std::size_t i = 0; i < params_.size(); ++i)
      params_[i].register_hook([this, i](const at::Tensor& grad) {
        // Start averaging it now, on a copy; the backward continues while it travels.
        at::Tensor averaged = grad.detach().clone();
        in_flight_.push_back({i, averaged, world_.iall_reduce_mean(averaged)});
      });
  }
  Replica(const Replica&) = delete;  // the hooks point at this object
  Replica& operator=(const Replica&) = delete;

  double train_step(const lab::Batch& batch) {
    const std::int64_t rows = batch.inputs.size(0) / world_.size();
    const std::int64_t begin = world_.rank() * rows;
    auto loss = torch::nn::functional::mse_loss(
        model_->forward(batch.inputs.narrow(0, begin, rows)), batch.targets.narrow(0, begin, rows));
    loss.backward();  // the hooks start one all-reduce per parameter on the way

    // Before the optimizer step: every average arrived, and is where the optimizer reads it.
    for (auto& pending : in_flight_) {
      pending.request.wait();
      params_[pending.param].grad().copy_(pending.averaged);
    }
    in_flight_.clear();

    at::Tensor global_loss = loss.detach().clone();
    world_.all_reduce_mean(global_loss);
    return global_loss.item<double>();
  }

 private:
  // One gradient on its way: which parameter, the tensor being averaged, its all-reduce.
  struct InFlight {
    std::size_t param;
    at::Tensor averaged;
    mpp::Request request;
  };
  const lab::World& world_;
  torch::nn::Sequential model_;
  std::vector<at::Tensor> params_;
  std::vector<InFlight> in_flight_;
};

}  // namespace

int main(int argc, char** argv) {
  return lab::check_data_parallel<Replica>(argc, argv, "ddp_hooks",
                                           lab::DataParallelReference::ddp);
}
