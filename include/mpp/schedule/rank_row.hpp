#pragma once
// One rank's part of a proven schedule, as the executor runs it: its row of actions and, for each
// of its chunks, the stage the chunk holds and how that stage meets its neighbours (the batch or
// the loss at the pipeline's ends, a chunk of the same rank, or another rank). The compiler
// fills it from the lowered table (CompiledRows::rank_row); the executor reads it and asks the
// placement nothing. Standard library only.
#include <span>

#include "mpp/schedule/action.hpp"
#include "mpp/schedule/stage_link.hpp"

namespace mpp {

/// A local chunk's place in the pipeline.
struct ChunkPlace {
  int stage = 0;       ///< the global stage the chunk holds
  StageLink before{};  ///< where its forward's input comes from (Placement::link(stage, -1))
  StageLink after{};   ///< where its backward's output gradient comes from (link(stage, +1))

  /// The chunk holds stage 0: its forward's input is the user's batch.
  constexpr bool is_first() const { return before.is_edge(); }
  /// The chunk holds the last stage: its backward's root is the loss.
  constexpr bool is_last() const { return after.is_edge(); }
};

/// Everything one rank needs to know of its schedule: the proven row and where its chunks sit.
/// The spans point into the compiler's constant data (CompiledRows); nothing is copied.
struct RankRow {
  std::span<const Action> actions;     ///< what the rank runs, in order
  std::span<const ChunkPlace> chunks;  ///< its chunks (V of them), chunk 0 first
  int rank = 0;                        ///< this rank
  int ranks = 1;                       ///< P
  int stages = 1;                      ///< P * V
  int micro_batches = 1;               ///< M
  int last_stage_rank = 0;             ///< the rank that computes the loss

  /// Local chunk `c`.
  constexpr const ChunkPlace& chunk(int c) const { return chunks[static_cast<std::size_t>(c)]; }
  /// Whether this rank holds stage 0 (and takes the batch's inputs).
  constexpr bool holds_first_stage() const { return chunk(0).is_first(); }
  /// Whether this rank holds the last stage (and takes the targets).
  constexpr bool holds_last_stage() const { return last_stage_rank == rank; }
};

}  // namespace mpp
