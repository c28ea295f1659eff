#pragma once
// The course's model: a deep MLP of `layers` Linear(hidden, hidden) layers, ReLU between them.
// Every layer is initialised from its own generator seeded by (seed, layer index), so a rank
// that builds only layers [begin, end) gets exactly the weights the whole model would have.
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "mpp/error.hpp"

namespace mpp::models {

/// The course MLP's shape and initialisation (see the file comment).
struct MlpConfig {
  std::int64_t hidden = 128;  ///< Width of every layer (inputs and outputs).
  int layers = 16;            ///< Linear layers.
  std::uint64_t seed = 42;    ///< Seeds every layer's generator (with the layer index).
};

namespace detail {
inline std::uint64_t layer_seed(std::uint64_t seed, int layer) {
  // splitmix64 of (seed, layer): distinct, well-spread streams per layer.
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(layer) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace detail

/// Linear layer `index` of the model (same bound as torch.nn.Linear's default init).
inline torch::nn::Linear make_mlp_linear(const MlpConfig& cfg, int index) {
  if (index < 0 || index >= cfg.layers)
    throw OutOfRange("mpp: MLP layer index " + std::to_string(index) + " outside [0, " +
                     std::to_string(cfg.layers) + ")");
  torch::nn::Linear linear(cfg.hidden, cfg.hidden);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(detail::layer_seed(cfg.seed, index));
  const double bound = 1.0 / std::sqrt(static_cast<double>(cfg.hidden));
  torch::NoGradGuard no_grad;
  linear->weight.uniform_(-bound, bound, gen);
  linear->bias.uniform_(-bound, bound, gen);
  return linear;
}

/// Layers [begin, end) as one Sequential: Linear, then ReLU unless it is the model's last layer.
inline torch::nn::Sequential make_mlp_layers(const MlpConfig& cfg, int begin, int end) {
  if (begin < 0 || end > cfg.layers || begin >= end)
    throw InvalidArgument("mpp: MLP layer range [" + std::to_string(begin) + ", " +
                          std::to_string(end) + ") is empty or outside the model's " +
                          std::to_string(cfg.layers) + " layers");
  torch::nn::Sequential seq;
  for (int i = begin; i < end; ++i) {
    seq->push_back(make_mlp_linear(cfg, i));
    if (i + 1 < cfg.layers) seq->push_back(torch::nn::ReLU());
  }
  return seq;
}

/// The whole model on one process: the monolith every parallel run is compared with.
inline torch::nn::Sequential make_full_mlp(const MlpConfig& cfg) {
  return make_mlp_layers(cfg, 0, cfg.layers);
}

/// One batch of the regression task.
struct Batch {
  torch::Tensor inputs;   ///< [batch, hidden]
  torch::Tensor targets;  ///< [batch, hidden]
};

/// A deterministic regression batch for `step`: inputs x ~ N(0, 1) and targets from a fixed
/// smooth teacher, so every rank that needs the batch (first stage: x, last stage: y) can make
/// it locally and a tiny model can visibly learn it.
inline Batch make_regression_batch(const MlpConfig& cfg, std::int64_t batch_size,
                                   std::int64_t step) {
  auto teacher_gen = at::make_generator<at::CPUGeneratorImpl>(detail::layer_seed(cfg.seed, -7));
  auto data_gen = at::make_generator<at::CPUGeneratorImpl>(
      detail::layer_seed(cfg.seed ^ 0x5DEECE66Dull, static_cast<int>(step)));
  auto teacher = at::normal(0.0, 1.0 / std::sqrt(static_cast<double>(cfg.hidden)),
                            {cfg.hidden, cfg.hidden}, teacher_gen);
  auto x = at::normal(0.0, 1.0, {batch_size, cfg.hidden}, data_gen);
  auto y = torch::tanh(x.matmul(teacher));
  return {x, y};
}

}  // namespace mpp::models
