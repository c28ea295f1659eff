#pragma once
// The proof, kept: what the compiler generated, lowered and verified for one schedule on P ranks
// under one comm policy, stored as constant data of exactly its size (every rank's row, one
// after the other) with the verifier's figures. A Pipeline runs these rows; nothing about a
// compile-time schedule is generated or verified again when the program runs.
#include <array>
#include <span>

#include "mpp/schedule/concepts.hpp"
#include "mpp/schedule/plan.hpp"
#include "mpp/schedule/rank_row.hpp"

namespace mpp {

namespace detail {
/// The table of `Sched` on `ranks` ranks lowered for `Comm`'s semantics (constant-evaluated).
template <schedule Sched, class Comm>
constexpr ScheduleTable lowered_table(int ranks) {
  ScheduleTable compute{};
  table_into<Sched>(compute, ranks);
  ScheduleTable lowered{};
  lower_into(lowered, compute, Comm::semantics, Costs{});
  return lowered;
}
}  // namespace detail

/// Every rank's lowered row of schedule `Sched` on `P` ranks under comm policy `Comm`, and what
/// the verifier proved of it, all computed by the compiler. Use it after `sound<figures>` holds
/// (Pipeline static_asserts that first).
template <schedule Sched, class Comm, int P>
requires detail::has_comm_semantics<Comm> &&(P >= 1 && P <= max_ranks) struct CompiledRows {
  /// The verifier's result: soundness and the figures at unit costs.
  static constexpr VerifyResult figures = verify<Sched, Comm>(P);

  /// Where each rank's row starts in `actions`; offsets[P] is the total.
  static constexpr std::array<int, P + 1> offsets = [] {
    const ScheduleTable lowered = detail::lowered_table<Sched, Comm>(P);
    std::array<int, P + 1> out{};
    for (int r = 0; r < P; ++r) out[r + 1] = out[r] + (lowered.ok() ? lowered.length[r] : 0);
    return out;
  }();

  /// All ranks' rows, rank 0's first: exactly the actions the ranks run, no padding.
  static constexpr std::array<Action, offsets[P]> actions = [] {
    const ScheduleTable lowered = detail::lowered_table<Sched, Comm>(P);
    std::array<Action, offsets[P]> out{};
    int k = 0;
    for (int r = 0; r < P; ++r)
      for (int i = 0; i < offsets[r + 1] - offsets[r]; ++i) out[k++] = lowered.actions[r][i];
    return out;
  }();

  /// Which rank holds which stage (the schedule's placement).
  static constexpr Placement placement = detail::lowered_table<Sched, Comm>(P).placement;

  /// Whether any rank splits a backward into input-gradient (I) and weight-gradient (W) parts.
  static constexpr bool split_backward = [] {
    for (const Action& a : actions)
      if (a.op == Op::I || a.op == Op::W) return true;
    return false;
  }();

  /// What `rank` runs, in order.
  static constexpr std::span<const Action> row(int rank) {
    return {actions.data() + offsets[rank],
            static_cast<std::size_t>(offsets[rank + 1] - offsets[rank])};
  }

  /// Chunks per rank (V).
  static constexpr int chunks_per_rank = placement.chunks_per_rank;

  /// Every rank's chunks, rank 0's first: the stage each holds and how it meets its neighbours.
  static constexpr std::array<ChunkPlace, P* chunks_per_rank> places = [] {
    std::array<ChunkPlace, P * chunks_per_rank> out{};
    for (int r = 0; r < P; ++r)
      for (int c = 0; c < chunks_per_rank; ++c) {
        const int stage = placement.stage_of(r, c);
        out[static_cast<std::size_t>(r * chunks_per_rank + c)] = {stage, placement.link(stage, -1),
                                                                  placement.link(stage, +1)};
      }
    return out;
  }();

  /// Everything `rank` runs and needs to know of the schedule: its row, its chunks, P, M.
  static constexpr RankRow rank_row(int rank) {
    return {row(rank),
            {places.data() + rank * chunks_per_rank, static_cast<std::size_t>(chunks_per_rank)},
            rank,
            P,
            P * chunks_per_rank,
            Sched::micro_batches,
            placement.rank_of(P * chunks_per_rank - 1)};
  }
};

}  // namespace mpp
