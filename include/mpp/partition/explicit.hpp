#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mpp/partition/errors.hpp"
#include "mpp/partition/layer_range.hpp"

namespace mpp {

/// `Explicit<n0, n1, ...>`: the user says how many layers each model piece gets, in model order.
/// Each size is one stage's. With an interleaved schedule of V chunks per rank the list has
/// ranks × V entries (piece c·P + r is chunk c of rank r), so Explicit<...> with N sizes runs on
/// N / V ranks.
template <int... Sizes>
struct Explicit {
  static_assert(sizeof...(Sizes) >= 1, "mpp: Explicit<n...> needs at least one stage size");
  static_assert(((Sizes >= 1) && ...),
                "mpp: Explicit<n...> gives a stage zero (or fewer) layers; every stage needs at "
                "least one layer");

  /// The number of sizes listed: the pipeline's stages (P · V).
  static constexpr int pieces = static_cast<int>(sizeof...(Sizes));
  static constexpr int total_layers = (Sizes + ...);  ///< The layers the sizes add up to.
  static constexpr int sizes[] = {Sizes...};          ///< The sizes, in model order.

  /// Ranks (P) when each rank holds `chunks_per_rank` of the listed pieces.
  static constexpr int ranks_for(int chunks_per_rank) {
    return chunks_per_rank > 0 ? pieces / chunks_per_rank : 0;
  }

  /// `"Explicit<n0,n1,...>"`.
  static std::string name() {
    std::string s = "Explicit<";
    bool first = true;
    for (int n : sizes) {
      if (!first) s += ',';
      s += std::to_string(n);
      first = false;
    }
    return s + ">";
  }

  /// The listed pieces as layer ranges. Throws PartitionError when the number of sizes is not a
  /// multiple of `chunks_per_rank` or they do not add up to the model's layers.
  static std::vector<LayerRange> split(std::span<const std::int64_t> layer_costs,
                                       int chunks_per_rank) {
    if (chunks_per_rank < 1 || pieces % chunks_per_rank != 0)
      throw PartitionError("mpp: " + name() + " lists " + std::to_string(pieces) +
                           " sizes, which is not a multiple of " + std::to_string(chunks_per_rank) +
                           " chunks per rank; list ranks x chunks sizes in model order");
    if (static_cast<std::size_t>(total_layers) != layer_costs.size())
      throw PartitionError("mpp: " + name() + " covers " + std::to_string(total_layers) +
                           " layers but the model has " + std::to_string(layer_costs.size()) +
                           "; make the sizes sum to " + std::to_string(layer_costs.size()));
    std::vector<LayerRange> ranges;
    int begin = 0;
    for (int n : sizes) {
      ranges.push_back({begin, begin + n});
      begin += n;
    }
    return ranges;
  }
};

}  // namespace mpp
