#pragma once
// One training step of a Pipeline on this rank, with its own model and Adam: what the pipeline
// benchmarks time.
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include "configs.hpp"
#include "mpp/comm.hpp"
#include "mpp/pipeline.hpp"

namespace mpp::bench {

/// The loss every pipeline benchmark trains with.
struct MeanSquaredError {
  at::Tensor operator()(const at::Tensor& out, const at::Tensor& target) const {
    return torch::nn::functional::mse_loss(out, target);
  }
};

/// `Pipe` over `group` training the model of a Config; call it to run one step.
template <class Pipe>
struct LibraryStep {
  LibraryStep(const Config& c, const mpp::Group<typename Pipe::comm_type::backend>& group)
      : cfg(model_of(c)),
        pipe(group, mpp::MlpModel{cfg}),
        adam(pipe.parameters(), torch::optim::AdamOptions(1e-4)) {
    const auto batch = mpp::models::make_regression_batch(cfg, c.batch, 0);
    x = pipe.is_first() ? batch.inputs : at::Tensor();
    y = pipe.is_last() ? batch.targets : at::Tensor();
  }
  void operator()() {
    adam.zero_grad();
    pipe.train_step(x, y, MeanSquaredError{});
    adam.step();
  }
  mpp::models::MlpConfig cfg;
  Pipe pipe;
  torch::optim::Adam adam;
  at::Tensor x, y;
};

}  // namespace mpp::bench
