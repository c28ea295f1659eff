#pragma once
// Where the stages of a pipeline live: which rank holds global stage s, as local chunk c.
// Standard library only.
#include <string_view>

namespace mpp {

/// How P ranks hold P * V stages (V chunks each).
///   interleaved  stage = chunk * P + rank (Megatron's looping placement; V = 1 is the plain
///                pipeline, stage == rank)
///   v_shape      even chunks as interleaved, odd chunks in reverse: stage = chunk * P + (P - 1 -
///                rank). With V = 2, rank r holds stages r and 2P - 1 - r (ZB-V): rank P - 1 hands
///                stage P - 1's output to stage P without a message, and rank 0 holds the first
///                and the last stage.
enum class Placement { interleaved, v_shape };

/// The placement's name as messages print it.
constexpr std::string_view to_string(Placement p) {
  return p == Placement::v_shape ? "v-shape" : "interleaved";
}

/// The global stage of local `chunk` on `rank`, for `ranks` ranks.
constexpr int stage_of(Placement p, int ranks, int rank, int chunk) {
  return chunk * ranks + (p == Placement::v_shape && chunk % 2 == 1 ? ranks - 1 - rank : rank);
}

/// The rank that holds `stage`.
constexpr int rank_of(Placement p, int ranks, int stage) {
  const int chunk = stage / ranks, within = stage % ranks;
  return p == Placement::v_shape && chunk % 2 == 1 ? ranks - 1 - within : within;
}

/// The local chunk index of `stage` on its rank.
constexpr int chunk_of(Placement, int ranks, int stage) { return stage / ranks; }

}  // namespace mpp
