#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mpp/partition/errors.hpp"
#include "mpp/partition/layer_range.hpp"

namespace mpp {

namespace detail {
inline void check_enough_layers(const std::string& policy, int pieces, int chunks_per_rank,
                                std::size_t layers) {
  if (chunks_per_rank < 1)
    throw PartitionError("mpp: " + policy + " needs at least one chunk per rank (got " +
                         std::to_string(chunks_per_rank) + ")");
  if (static_cast<std::size_t>(pieces) > layers)
    throw PartitionError(
        "mpp: " + policy + " cuts the model into " + std::to_string(pieces) + " pieces" +
        (chunks_per_rank > 1 ? " (" + std::to_string(pieces / chunks_per_rank) + " ranks x " +
                                   std::to_string(chunks_per_rank) + " chunks per rank)"
                             : std::string()) +
        " but the model has only " + std::to_string(layers) +
        " layers; every piece needs at least one layer: use fewer ranks or chunks, or a deeper "
        "model");
}
}  // namespace detail

/// `Uniform<P>`: layers spread evenly over P ranks (P · V stages under V chunks per rank); when
/// they do not divide, the first pieces get one layer more (so sizes differ by at most one, and the
/// earlier stages — which also hold the most in-flight activations under 1F1B — are never the
/// smaller ones by more than one layer).
template <int P>
struct Uniform {
  static_assert(P >= 1, "mpp: Uniform<P> needs P >= 1 ranks");
  static constexpr int ranks = P;  ///< P, the pipeline ranks.

  /// P, whatever the chunks per rank.
  static constexpr int ranks_for(int /*chunks_per_rank*/) { return P; }
  /// `"Uniform<P>"`.
  static std::string name() { return "Uniform<" + std::to_string(P) + ">"; }

  /// The layer range of each of the P * `chunks_per_rank` pieces, in model order, for one cost
  /// per layer in `layer_costs`. Throws PartitionError when a piece would get no layer.
  static std::vector<LayerRange> split(std::span<const std::int64_t> layer_costs,
                                       int chunks_per_rank) {
    const int pieces = P * chunks_per_rank;
    detail::check_enough_layers(name(), pieces, chunks_per_rank, layer_costs.size());
    const int layers = static_cast<int>(layer_costs.size());
    std::vector<LayerRange> ranges;
    ranges.reserve(static_cast<std::size_t>(pieces));
    int begin = 0;
    for (int i = 0; i < pieces; ++i) {
      const int size = layers / pieces + (i < layers % pieces ? 1 : 0);
      ranges.push_back({begin, begin + size});
      begin += size;
    }
    return ranges;
  }
};

}  // namespace mpp
