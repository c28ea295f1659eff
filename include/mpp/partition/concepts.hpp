#pragma once
// The partition policy family: which layers each pipeline stage owns.
#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mpp/partition/layer_range.hpp"

namespace mpp {

/// A partition is a tag type. Its knobs are static constexpr members; its one operation is
/// `split(layer_costs, chunks_per_rank)`, which returns one LayerRange per model piece in model
/// order (ranks × chunks_per_rank pieces, one per stage; piece c·P + r is chunk c of rank r).
/// `layer_costs` holds one number per layer (its parameter count), so that ByParams can balance
/// them and every policy knows how many layers there are without anyone materialising the model.
template <class P>
concept partition = requires(std::span<const std::int64_t> layer_costs, int chunks_per_rank) {
  { P::ranks_for(chunks_per_rank) } -> std::convertible_to<int>;
  { P::split(layer_costs, chunks_per_rank) } -> std::same_as<std::vector<LayerRange>>;
  { P::name() } -> std::convertible_to<std::string>;
};

namespace detail {
template <class P>
concept has_recompute_knob = requires {
  { P::recompute } -> std::convertible_to<bool>;
};
template <class P>
concept has_segments_knob = requires {
  { P::segments } -> std::convertible_to<int>;
};
}  // namespace detail

/// Whether a stage policy asks for gradient checkpointing (see Recompute).
template <partition P>
inline constexpr bool recomputes_v = [] {
  if constexpr (detail::has_recompute_knob<P>)
    return static_cast<bool>(P::recompute);
  else
    return false;
}();

/// How many segments each stage is recomputed in (see Recompute); 1 when it is not recomputed.
template <partition P>
inline constexpr int recompute_segments_v = [] {
  if constexpr (detail::has_segments_knob<P>)
    return static_cast<int>(P::segments);
  else
    return 1;
}();

}  // namespace mpp
