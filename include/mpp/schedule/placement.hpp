#pragma once
// Where the stages of a pipeline live: which rank holds global stage s, and as which of its
// chunks. A placement is data, not a kind: any map in which every rank holds the same number of
// stages is one. Interleaved (looped) and V are two ready-made maps; an action table that names
// its stages (PyTorch's `7F0`) carries its own. Standard library only.
#include <span>

#include "mpp/schedule/action.hpp"
#include "mpp/schedule/limits.hpp"
#include "mpp/schedule/stage_link.hpp"

namespace mpp {

/// The stage <-> (rank, chunk) map of P ranks holding V stages each. A rank numbers its chunks in
/// the order of their stages (chunk 0 is its lowest stage), so the map is fixed by which rank
/// holds each stage. Built by interleaved_placement(), v_shape_placement() or place_stages();
/// the default is one stage on one rank.
struct Placement {
  int ranks = 1;                                   ///< P
  int chunks_per_rank = 1;                         ///< V
  int rank_of_stage[max_stages]{};                 ///< the rank holding each stage
  int chunk_of_stage[max_stages]{};                ///< that stage's chunk on its rank
  int stage_at[max_ranks][max_chunks_per_rank]{};  ///< the stage of (rank, chunk)

  /// Global stages P * V.
  constexpr int stages() const { return ranks * chunks_per_rank; }
  /// The global stage of local `chunk` on `rank`; -1 when there is no such rank or chunk.
  constexpr int stage_of(int rank, int chunk) const {
    return rank >= 0 && rank < ranks && chunk >= 0 && chunk < chunks_per_rank
               ? stage_at[rank][chunk]
               : -1;
  }
  /// The rank that holds `stage`; -1 when there is no such stage.
  constexpr int rank_of(int stage) const {
    return stage >= 0 && stage < stages() ? rank_of_stage[stage] : -1;
  }
  /// The local chunk index of `stage` on its rank; -1 when there is no such stage.
  constexpr int chunk_of(int stage) const {
    return stage >= 0 && stage < stages() ? chunk_of_stage[stage] : -1;
  }
  /// How `stage` meets the stage `step` away from it (-1: the one before, +1: the one after):
  /// an edge when there is none, the same rank when one rank holds both, a message otherwise.
  constexpr StageLink link(int stage, int step) const {
    const int other = stage + step;
    if (other < 0 || other >= stages()) return {};
    const int holder = rank_of_stage[other];
    return {holder == rank_of(stage) ? LinkKind::same_rank : LinkKind::message, other, holder,
            chunk_of_stage[other]};
  }
  /// Field by field.
  friend constexpr bool operator==(const Placement&, const Placement&) = default;
};

/// Builds the placement in which stage s lives on rank `rank_of_stage[s]` (s < its size, the
/// number of stages). Returns false, with the rule and the fix appended to `error`, unless every
/// rank 0 .. ranks - 1 holds the same number of stages, at most mpp::max_chunks_per_rank.
constexpr bool place_stages(Placement& out, int ranks, std::span<const int> rank_of_stage,
                            FixedText& error) {
  const int stages = static_cast<int>(rank_of_stage.size());
  if (ranks < 1 || ranks > max_ranks) {
    error << "mpp: a placement needs 1 <= ranks <= mpp::max_ranks = " << max_ranks << " (got "
          << ranks << ")";
    return false;
  }
  if (stages < ranks || stages % ranks != 0 || stages / ranks > max_chunks_per_rank) {
    error << "mpp: " << stages << " stages on " << ranks
          << " ranks: every rank must hold the same number of stages, at most "
             "mpp::max_chunks_per_rank = "
          << max_chunks_per_rank;
    return false;
  }
  out = Placement{};
  out.ranks = ranks;
  out.chunks_per_rank = stages / ranks;
  int held[max_ranks]{};
  for (int s = 0; s < stages; ++s) {
    const int r = rank_of_stage[static_cast<std::size_t>(s)];
    if (r < 0 || r >= ranks) {
      error << "mpp: stage " << s << " is placed on rank " << r << ", but the ranks are 0 .. "
            << ranks - 1;
      return false;
    }
    if (held[r] == out.chunks_per_rank) {
      error << "mpp: rank " << r << " holds more than " << out.chunks_per_rank << " of the "
            << stages << " stages (stage " << s
            << " is one too many); every rank must hold the same number of stages";
      return false;
    }
    out.rank_of_stage[s] = r;
    out.chunk_of_stage[s] = held[r];
    out.stage_at[r][held[r]++] = s;
  }
  return true;
}

/// Which rank a table names for each stage, collected action by action (a hand-written row or a
/// line of an action CSV names its stages), then built into a Placement. The caller reports a
/// stage seen on two ranks with where it saw it; build() reports what the whole table lacks.
struct StageSightings {
  int rank_of_stage[max_stages];  ///< the rank that named each stage, -1 for none yet
  int stages = 0;                 ///< one past the highest stage seen

  constexpr StageSightings() {
    for (int& r : rank_of_stage) r = -1;
  }
  /// The rank that named `stage` so far: -1 for none, -2 when `stage` is out of range.
  constexpr int holder(int stage) const {
    return stage >= 0 && stage < max_stages ? rank_of_stage[stage] : -2;
  }
  /// Records that `rank` holds `stage` (check holder() first).
  constexpr void see(int stage, int rank) {
    rank_of_stage[stage] = rank;
    if (stage + 1 > stages) stages = stage + 1;
  }
  /// The placement the sightings describe, or false with the rule and the fix in `error`.
  constexpr bool build(Placement& out, int ranks, FixedText& error) const {
    for (int s = 0; s < stages; ++s)
      if (rank_of_stage[s] < 0) {
        error << "mpp: stage " << s << " is named by no rank, but stage " << stages - 1
              << " is; stages run from 0 without a gap";
        return false;
      }
    return place_stages(
        out, ranks, std::span<const int>(rank_of_stage, static_cast<std::size_t>(stages)), error);
  }
};

/// Megatron's looping placement: stage c * P + r is chunk c of rank r (V = 1: stage == rank).
constexpr Placement interleaved_placement(int ranks, int chunks_per_rank) {
  Placement p{};
  if (ranks < 1 || ranks > max_ranks || chunks_per_rank < 1 ||
      chunks_per_rank > max_chunks_per_rank)
    return Placement{.ranks = 0};  // no such shape: unplaced, as the table's limits report
  p.ranks = ranks;
  p.chunks_per_rank = chunks_per_rank;
  for (int c = 0; c < chunks_per_rank; ++c)
    for (int r = 0; r < ranks; ++r) {
      const int s = c * ranks + r;
      p.rank_of_stage[s] = r;
      p.chunk_of_stage[s] = c;
      p.stage_at[r][c] = s;
    }
  return p;
}

/// The V: even chunks as interleaved, odd chunks in reverse (stage c * P + P - 1 - r). With V = 2,
/// rank r holds stages r and 2P - 1 - r (ZB-V, DualPipeV): rank P - 1 hands stage P - 1's output
/// to stage P without a message, and rank 0 holds the first and the last stage.
constexpr Placement v_shape_placement(int ranks, int chunks_per_rank) {
  Placement p{};
  if (ranks < 1 || ranks > max_ranks || chunks_per_rank < 1 ||
      chunks_per_rank > max_chunks_per_rank)
    return Placement{.ranks = 0};  // no such shape: unplaced, as the table's limits report
  p.ranks = ranks;
  p.chunks_per_rank = chunks_per_rank;
  for (int c = 0; c < chunks_per_rank; ++c)
    for (int r = 0; r < ranks; ++r) {
      const int s = c * ranks + (c % 2 == 1 ? ranks - 1 - r : r);
      p.rank_of_stage[s] = r;
      p.chunk_of_stage[s] = c;
      p.stage_at[r][c] = s;
    }
  return p;
}

/// "interleaved", "v-shape", or each rank's stages ("rank 0: 0 3, rank 1: 1 2"), for messages.
constexpr FixedText describe(const Placement& p) {
  FixedText out{};
  if (p == interleaved_placement(p.ranks, p.chunks_per_rank)) return out.append("interleaved");
  if (p == v_shape_placement(p.ranks, p.chunks_per_rank)) return out.append("v-shape");
  for (int r = 0; r < p.ranks; ++r) {
    out << (r == 0 ? "rank " : ", rank ") << r << ":";
    for (int c = 0; c < p.chunks_per_rank; ++c) out << " " << p.stage_of(r, c);
  }
  return out;
}

}  // namespace mpp
