#pragma once
// Per-rank action tables: fixed-capacity, constexpr, the same type at compile time and run time.
#include <span>
#include <stdexcept>
#include <string>

#include "mpp/error.hpp"
#include "mpp/schedule/action.hpp"
#include "mpp/schedule/comm_semantics.hpp"
#include "mpp/schedule/limits.hpp"
#include "mpp/schedule/placement.hpp"

namespace mpp {

/// Thrown by run-time entry points when a schedule is rejected; the message names the rule
/// and the fix, like the compile-time diagnostics.
struct ScheduleError : InvalidArgument {
  using InvalidArgument::InvalidArgument;
};

/// The actions of every rank of a pipeline, compute-only (what a schedule generates) or
/// lowered (with SEND/RECV inserted for one comm semantics).
///
/// Stage <-> rank map: `placement`, interleaved unless the generator or the rows chose another
/// (init_table() sets it, and so does the first push() into a table that has none; a generator
/// with its own layout replaces it after).
struct ScheduleTable {
  int ranks = 0;            ///< P
  int micro_batches = 0;    ///< M
  int chunks_per_rank = 1;  ///< V
  /// Which rank holds which stage, as which chunk; `ranks` 0 until the table is placed.
  Placement placement{.ranks = 0};
  bool lowered = false;  ///< true once SEND/RECV are explicit (see lower())
  CommSemantics semantics = CommSemantics::buffered;  ///< what the lowering ordered for
  FixedText error{};        ///< non-empty when the generator rejected its parameters
  int length[max_ranks]{};  ///< Actions in each rank's row.
  /// Each rank's row; entries past `length[rank]` are unused.
  Action actions[max_ranks][max_actions_per_rank]{};

  /// True unless the generator rejected its parameters (then `error` says why).
  constexpr bool ok() const { return error.empty(); }
  /// Global stages, P * V.
  constexpr int stages() const { return ranks * chunks_per_rank; }
  /// The global stage of local `chunk` on `rank`.
  constexpr int stage_of(int rank, int chunk) const { return placement.stage_of(rank, chunk); }
  /// The rank that holds `stage`.
  constexpr int rank_of(int stage) const { return placement.rank_of(stage); }
  /// The local chunk index of `stage` on its rank.
  constexpr int chunk_of(int stage) const { return placement.chunk_of(stage); }
  /// The number of actions in `rank`'s row.
  constexpr int size(int rank) const { return length[rank]; }
  /// `rank`'s row, in execution order.
  constexpr std::span<const Action> rank_actions(int rank) const {
    return {actions[rank], static_cast<std::size_t>(length[rank])};
  }
  /// The action at `step` of `rank`'s row (unchecked).
  constexpr const Action& at(int rank, int step) const { return actions[rank][step]; }

  /// Appends an action to a rank's table, filling in stage (from chunk) and, for comm ops,
  /// peer (from stage). Records an error instead of overflowing.
  constexpr void push(int rank, Action a) {
    if (!ok()) return;
    if (rank < 0 || rank >= ranks) {
      error << "mpp: action for rank " << rank << " but the table has " << ranks << " ranks";
      return;
    }
    if (length[rank] >= max_actions_per_rank) {
      error << "mpp: rank " << rank
            << " needs more than mpp::max_actions_per_rank = " << max_actions_per_rank
            << " actions; lower micro-batches * chunks (M=" << micro_batches
            << ", V=" << chunks_per_rank << ")";
      return;
    }
    if (placement.ranks == 0) placement = interleaved_placement(ranks, chunks_per_rank);
    if (a.stage < 0) a.stage = stage_of(rank, a.chunk);
    if (a.peer < 0 && is_comm(a.op)) {
      const bool towards_next = a.op == Op::SEND_F || a.op == Op::RECV_B;
      const int other = towards_next ? a.stage + 1 : a.stage - 1;
      a.peer = other >= 0 && other < stages() ? rank_of(other) : ((other % ranks) + ranks) % ranks;
    }
    actions[rank][length[rank]++] = a;
  }
};

namespace detail {

/// Appends without checks: for generators and lowering, whose capacity init_table() validated.
/// `rank` and `chunk` must be in range: the stage is read from the placement unchecked.
constexpr void emit(ScheduleTable& t, int rank, Op op, int micro_batch, int chunk, int peer = -1) {
  t.actions[rank][t.length[rank]++] =
      Action{op, micro_batch, chunk, t.placement.stage_at[rank][chunk], peer};
}

/// Validates (P, M, V) against the limits and prepares an empty table. `actions_per_unit` is the
/// number of actions per (chunk, micro-batch) on one rank once lowered (6 for F/B, 7 for F/I/W).
constexpr void init_table(ScheduleTable& t, std::string_view schedule_name, int ranks,
                          int micro_batches, int chunks_per_rank, int actions_per_unit) {
  t.ranks = ranks;
  t.micro_batches = micro_batches;
  t.chunks_per_rank = chunks_per_rank;
  if (ranks < 1 || ranks > max_ranks) {
    t.error << "mpp: " << schedule_name << " needs 1 <= ranks <= mpp::max_ranks = " << max_ranks
            << " (got " << ranks << ")";
    t.ranks = ranks < 1 ? 1 : max_ranks;
  } else if (micro_batches < 1) {
    t.error << "mpp: " << schedule_name
            << " needs at least one micro-batch (got M=" << micro_batches << ")";
  } else if (chunks_per_rank < 1 || chunks_per_rank > max_chunks_per_rank) {
    t.error << "mpp: " << schedule_name
            << " needs 1 <= chunks per rank <= mpp::max_chunks_per_rank = " << max_chunks_per_rank
            << " (got V=" << chunks_per_rank << ")";
  } else if (actions_per_unit * chunks_per_rank * micro_batches > max_actions_per_rank) {
    t.error << "mpp: " << schedule_name << " with M=" << micro_batches << ", V=" << chunks_per_rank
            << " needs " << actions_per_unit * chunks_per_rank * micro_batches
            << " actions per rank once lowered, more than mpp::max_actions_per_rank = "
            << max_actions_per_rank << "; lower M or V";
  }
  if (t.ok()) t.placement = interleaved_placement(ranks, chunks_per_rank);
}

}  // namespace detail

/// True when `a` and `b` run the same rows: the same P, M, V and placement, lowered or not alike,
/// and every rank the same actions in the same order (the semantics a lowering ordered for shows
/// in the rows themselves).
constexpr bool same_rows(const ScheduleTable& a, const ScheduleTable& b) {
  if (a.ranks != b.ranks || a.micro_batches != b.micro_batches ||
      a.chunks_per_rank != b.chunks_per_rank || !(a.placement == b.placement) ||
      a.lowered != b.lowered)
    return false;
  for (int r = 0; r < a.ranks; ++r) {
    if (a.length[r] != b.length[r]) return false;
    for (int k = 0; k < a.length[r]; ++k)
      if (!(a.actions[r][k] == b.actions[r][k])) return false;
  }
  return true;
}

/// Throws ScheduleError if the table carries a generator error (run-time counterpart of the
/// verifier's `parameters` rule).
inline void throw_if_error(const ScheduleTable& t) {
  if (!t.ok()) throw ScheduleError(std::string(t.error.view()));
}

}  // namespace mpp
