// Write it yourself, chapter 13 — DDP's gradient hooks.
//
// Naive DP waits for the whole backward before it sends a byte. Put a hook on every parameter:
// autograd calls it with the parameter's gradient the moment it is computed (the last layer's
// first), and the hook starts the all-reduce of that gradient while the backward goes on with the
// earlier layers. Before the optimizer step, wait for each all-reduce and write its average into
// the parameter's .grad. Each lab::unfinished(...) says what must hold there; replace it with
// code that makes it hold (hints in tiers, up to the code: hints/ddp_hooks.md), then check it:
//
//   scripts/check-lab ddp_hooks
//
// It trains 3 steps on 2 ranks and compares the loss and every parameter with the monolith's and
// with mpp::DDP<Async<Gloo>>'s, and checks that each step starts all-reduces before backward()
// returns. The harness is in harness.hpp; one answer is in solutions/ddp_hooks.cpp.
#include <torch/nn/functional/loss.h>

#include <vector>

#include "harness.hpp"

namespace {

class Replica {
 public:
  Replica(const lab::World& world, torch::nn::Sequential model)
      : world_(world), model_(std::move(model)), params_(model_->parameters()) {
    lab::unfinished(
        "each parameter's gradient must start its average over the ranks the moment autograd "
        "computes it, during backward(), and stay findable in in_flight_ (hints: "
        "hints/ddp_hooks.md, 1)");
  }
  Replica(const Replica&) = delete;  // the hooks point at this object
  Replica& operator=(const Replica&) = delete;

  double train_step(const lab::Batch& batch) {
    const std::int64_t rows = batch.inputs.size(0) / world_.size();
    const std::int64_t begin = world_.rank() * rows;
    auto loss = torch::nn::functional::mse_loss(
        model_->forward(batch.inputs.narrow(0, begin, rows)), batch.targets.narrow(0, begin, rows));
    loss.backward();  // the hooks start one all-reduce per parameter on the way

    lab::unfinished(
        "when train_step returns, every parameter's .grad must hold its average over the ranks, "
        "and nothing of this step may be left for the next (hints: hints/ddp_hooks.md, 2)");

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

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_data_parallel<Replica>(argc, argv, "ddp_hooks",
                                           lab::DataParallelReference::ddp);
}
