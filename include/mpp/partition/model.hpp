#pragma once
// What a partition needs to know about a model, and how a rank builds only its own pieces.
#include <torch/nn/modules/container/sequential.h>

#include <c10/core/ScalarType.h>

#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include "mpp/models/mlp.hpp"
#include "mpp/partition/concepts.hpp"
#include "mpp/partition/errors.hpp"
#include "mpp/schedule/placement.hpp"

namespace mpp {

/// A `layered_model` describes a model as a sequence of layers without building it: how many, each
/// one's parameter count (for ByParams), the per-sample shape and dtype each layer expects at its
/// input (so that a stage can check what its neighbour sends), and `build(begin, end)` that makes
/// layers [begin, end) with exactly the initial weights the whole model would have. The course MLP
/// meets it through MlpModel below.
template <class M>
concept layered_model = requires(const M& model, int layer) {
  { model.num_layers() } -> std::convertible_to<int>;
  { model.layer_parameters(layer) } -> std::convertible_to<std::int64_t>;
  { model.input_shape(layer) } -> std::convertible_to<std::vector<std::int64_t>>;
  { model.dtype() } -> std::convertible_to<c10::ScalarType>;
  { model.build(layer, layer) } -> std::same_as<torch::nn::Sequential>;
};

/// The course MLP as a layered_model: hidden×hidden Linear layers seeded per layer.
struct MlpModel {
  models::MlpConfig config;  ///< Width, depth and seed.

  /// config.layers.
  int num_layers() const { return config.layers; }
  /// hidden² weights + hidden biases, the same for every layer.
  std::int64_t layer_parameters(int /*layer*/) const {
    return config.hidden * config.hidden + config.hidden;
  }
  /// {hidden} per sample, at every layer.
  std::vector<std::int64_t> input_shape(int /*layer*/) const { return {config.hidden}; }
  /// float32.
  c10::ScalarType dtype() const { return c10::kFloat; }
  /// Layers [begin, end) with the weights the whole MLP would have (models::make_mlp_layers).
  torch::nn::Sequential build(int begin, int end) const {
    return models::make_mlp_layers(config, begin, end);
  }
};

/// Per-layer parameter counts, the input of every partition's split().
template <layered_model M>
std::vector<std::int64_t> layer_costs(const M& model) {
  std::vector<std::int64_t> costs;
  costs.reserve(static_cast<std::size_t>(model.num_layers()));
  for (int i = 0; i < model.num_layers(); ++i) costs.push_back(model.layer_parameters(i));
  return costs;
}

/// One model piece held by this rank.
struct LocalPiece {
  int piece = 0;                 ///< index in model order
  int chunk = 0;                 ///< index among this rank's chunks
  LayerRange layers;             ///< The model's layers it holds.
  torch::nn::Sequential module;  ///< Those layers, built.
};

// [quote:build_local_pieces]
/// Builds only this rank's pieces: nothing outside them is ever allocated. `placement` is the
/// schedule's (which stages this rank holds); without one, interleaved.
template <partition P, layered_model M>
std::vector<LocalPiece> build_local_pieces(const M& model, int rank, int chunks_per_rank,
                                           const Placement* placement = nullptr) {
  const int ranks = P::ranks_for(chunks_per_rank);
  const auto costs = layer_costs(model);
  const auto ranges = P::split(costs, chunks_per_rank);
  if (rank < 0 || rank >= ranks)
    throw PartitionError("mpp: rank " + std::to_string(rank) + " is not a rank of " + P::name() +
                         " (" + std::to_string(ranks) + " ranks); launch " + std::to_string(ranks) +
                         " ranks per pipeline");
  if (placement && (placement->ranks != ranks || placement->chunks_per_rank != chunks_per_rank))
    throw PartitionError("mpp: the placement is for " + std::to_string(placement->ranks) +
                         " ranks of " + std::to_string(placement->chunks_per_rank) +
                         " chunks, but " + P::name() + " cuts " + std::to_string(ranks) +
                         " ranks of " + std::to_string(chunks_per_rank) +
                         "; give the schedule's placement");
  std::vector<LocalPiece> local;
  for (int c = 0; c < chunks_per_rank; ++c) {
    const int piece = placement ? placement->stage_of(rank, c) : c * ranks + rank;
    const LayerRange r = ranges[static_cast<std::size_t>(piece)];
    local.push_back({piece, c, r, model.build(r.begin, r.end)});
  }
  return local;
}
// [/quote:build_local_pieces]

}  // namespace mpp
