#pragma once
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "mpp/partition/errors.hpp"
#include "mpp/partition/layer_range.hpp"
#include "mpp/partition/uniform.hpp"

namespace mpp {

namespace detail {

inline std::vector<LayerRange> balanced_split(std::span<const std::int64_t> costs, int pieces) {
  const int n = static_cast<int>(costs.size());
  std::vector<std::int64_t> prefix(static_cast<std::size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  auto sum = [&](int a, int b) { return prefix[b] - prefix[a]; };

  struct Cost {
    std::int64_t worst = std::numeric_limits<std::int64_t>::max();
    double spread = std::numeric_limits<double>::infinity();  // sum of squared piece costs
    bool better_than(const Cost& o) const {
      return worst != o.worst ? worst < o.worst : spread < o.spread;
    }
    bool same_as(const Cost& o) const { return worst == o.worst && spread == o.spread; }
  };
  // best[k][i]: first i layers cut into k pieces; cut[k][i]: where the k-th piece starts.
  std::vector<std::vector<Cost>> best(static_cast<std::size_t>(pieces) + 1,
                                      std::vector<Cost>(static_cast<std::size_t>(n) + 1));
  std::vector<std::vector<int>> cut(static_cast<std::size_t>(pieces) + 1,
                                    std::vector<int>(static_cast<std::size_t>(n) + 1, -1));
  best[0][0] = {0, 0.0};
  for (int k = 1; k <= pieces; ++k) {
    for (int i = k; i <= n - (pieces - k); ++i) {
      for (int j = k - 1; j < i; ++j) {
        const Cost& prev = best[k - 1][j];
        if (prev.worst == std::numeric_limits<std::int64_t>::max()) continue;
        const std::int64_t piece = sum(j, i);
        const Cost candidate{std::max(prev.worst, piece),
                             prev.spread + static_cast<double>(piece) * static_cast<double>(piece)};
        // `>=` on j: among equal cuts take the latest start, i.e. the earlier pieces larger.
        if (candidate.better_than(best[k][i]) || candidate.same_as(best[k][i])) {
          best[k][i] = candidate;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<LayerRange> ranges(static_cast<std::size_t>(pieces));
  int end = n;
  for (int k = pieces; k >= 1; --k) {
    const int begin = cut[k][end];
    ranges[static_cast<std::size_t>(k - 1)] = {begin, end};
    end = begin;
  }
  return ranges;
}

}  // namespace detail

/// `ByParams<P>`: contiguous pieces whose parameter counts are as balanced as possible — the
/// largest piece is as small as it can be, and among those cuts the one with the most even pieces
/// wins (ties go to larger pieces first, as in Uniform). Exact dynamic programme: O(pieces ·
/// layers²), a few microseconds for the models a pipeline runs.
template <int P>
struct ByParams {
  static_assert(P >= 1, "mpp: ByParams<P> needs P >= 1 ranks");
  static constexpr int ranks = P;  ///< P, the pipeline ranks.

  /// P, whatever the chunks per rank.
  static constexpr int ranks_for(int /*chunks_per_rank*/) { return P; }
  /// `"ByParams<P>"`.
  static std::string name() { return "ByParams<" + std::to_string(P) + ">"; }

  /// The balanced layer range of each of the P * `chunks_per_rank` pieces, in model order;
  /// `layer_costs` holds each layer's parameter count. Throws PartitionError when a piece would
  /// get no layer or a count is negative.
  static std::vector<LayerRange> split(std::span<const std::int64_t> layer_costs,
                                       int chunks_per_rank) {
    const int pieces = P * chunks_per_rank;
    detail::check_enough_layers(name(), pieces, chunks_per_rank, layer_costs.size());
    for (std::size_t i = 0; i < layer_costs.size(); ++i)
      if (layer_costs[i] < 0)
        throw PartitionError("mpp: " + name() + " got a negative parameter count for layer " +
                             std::to_string(i) + "; pass each layer's number of parameters");
    return detail::balanced_split(layer_costs, pieces);
  }
};

}  // namespace mpp
