#pragma once
// Schedule policy tags and the `mpp::schedule` concept.
#include <concepts>
#include <iterator>
#include <string_view>

#include "mpp/schedule/generators.hpp"

namespace mpp {

/// A schedule names its knobs and generates the compute table for a number of ranks P.
template <class S>
concept schedule = requires(int ranks) {
  { S::micro_batches } -> std::convertible_to<int>;
  { S::chunks_per_rank } -> std::convertible_to<int>;
  { S::name } -> std::convertible_to<std::string_view>;
  { S::table(ranks) } -> std::same_as<ScheduleTable>;
};

/// Stop-and-wait: the whole batch is one micro-batch, forward through every stage, then back.
struct Naive {
  static constexpr int micro_batches = 1;    ///< M, micro-batches per step.
  static constexpr int chunks_per_rank = 1;  ///< V, model chunks per rank.
  /// The display name (benchmarks, mpp-schedule).
  static constexpr std::string_view name = "Naive";
  /// The same schedule as a run-time choice.
  static constexpr ScheduleSpec spec{ScheduleKind::naive, 1, 1};
  /// The compute table on `ranks` ranks; a rule it breaks is in its `error`.
  static constexpr ScheduleTable table(int ranks) { return generate(spec, ranks); }
};

/// GPipe: fill-drain over M micro-batches; peak M micro-batches in flight on every rank.
template <int M>
struct GPipe {
  static_assert(M >= 1, "mpp: GPipe<M> needs M >= 1 micro-batch");
  static_assert(6 * M <= max_actions_per_rank,
                "mpp: GPipe<M> exceeds mpp::max_actions_per_rank; lower M");
  static constexpr int micro_batches = M;    ///< M, micro-batches per step.
  static constexpr int chunks_per_rank = 1;  ///< V, model chunks per rank.
  /// The display name (benchmarks, mpp-schedule).
  static constexpr std::string_view name = "GPipe";
  /// The same schedule as a run-time choice.
  static constexpr ScheduleSpec spec{ScheduleKind::gpipe, M, 1};
  /// The compute table on `ranks` ranks; a rule it breaks is in its `error`.
  static constexpr ScheduleTable table(int ranks) { return generate(spec, ranks); }
};

/// 1F1B (PipeDream-Flush): same bubble as GPipe, at most P - r micro-batches in flight on rank r.
template <int M>
struct OneFOneB {
  static_assert(M >= 1, "mpp: OneFOneB<M> needs M >= 1 micro-batch");
  static_assert(6 * M <= max_actions_per_rank,
                "mpp: OneFOneB<M> exceeds mpp::max_actions_per_rank; lower M");
  static constexpr int micro_batches = M;    ///< M, micro-batches per step.
  static constexpr int chunks_per_rank = 1;  ///< V, model chunks per rank.
  /// The display name (benchmarks, mpp-schedule).
  static constexpr std::string_view name = "OneFOneB";
  /// The same schedule as a run-time choice.
  static constexpr ScheduleSpec spec{ScheduleKind::one_f_one_b, M, 1};
  /// The compute table on `ranks` ranks; a rule it breaks is in its `error`.
  static constexpr ScheduleTable table(int ranks) { return generate(spec, ranks); }
};

/// Megatron's interleaved 1F1B with V model chunks per rank: bubble shrinks by V.
template <int M, int V>
struct Interleaved1F1B {
  static_assert(M >= 1, "mpp: Interleaved1F1B<M, V> needs M >= 1 micro-batch");
  static_assert(
      V >= 2, "mpp: Interleaved1F1B<M, V> needs V >= 2 chunks per rank; use OneFOneB<M> for V = 1");
  static_assert(V <= max_chunks_per_rank,
                "mpp: Interleaved1F1B<M, V> needs V <= mpp::max_chunks_per_rank");
  static_assert(6 * M * V <= max_actions_per_rank,
                "mpp: Interleaved1F1B<M, V> exceeds mpp::max_actions_per_rank; lower M or V");
  static constexpr int micro_batches = M;    ///< M, micro-batches per step.
  static constexpr int chunks_per_rank = V;  ///< V, model chunks per rank.
  /// The display name (benchmarks, mpp-schedule).
  static constexpr std::string_view name = "Interleaved1F1B";
  /// The same schedule as a run-time choice.
  static constexpr ScheduleSpec spec{ScheduleKind::interleaved_1f1b, M, V};
  /// The compute table on `ranks` ranks; a rule it breaks is in its `error`.
  static constexpr ScheduleTable table(int ranks) { return generate(spec, ranks); }
};

/// ZB-H1: backward split into I (input grad) and W (weight grad); W fills 1F1B's bubbles.
template <int M>
struct ZeroBubbleH1 {
  static_assert(M >= 1, "mpp: ZeroBubbleH1<M> needs M >= 1 micro-batch");
  static_assert(7 * M <= max_actions_per_rank,
                "mpp: ZeroBubbleH1<M> exceeds mpp::max_actions_per_rank; lower M");
  static constexpr int micro_batches = M;    ///< M, micro-batches per step.
  static constexpr int chunks_per_rank = 1;  ///< V, model chunks per rank.
  /// The display name (benchmarks, mpp-schedule).
  static constexpr std::string_view name = "ZeroBubbleH1";
  /// The same schedule as a run-time choice.
  static constexpr ScheduleSpec spec{ScheduleKind::zero_bubble_h1, M, 1};
  /// The compute table on `ranks` ranks; a rule it breaks is in its `error`.
  static constexpr ScheduleTable table(int ranks) { return generate(spec, ranks); }
};

namespace detail {

template <class Rows>
constexpr int rows_max_plus_one(const Rows& rows, bool chunk) {
  int n = 0;
  for (const auto& row : rows)
    for (const Action& a : row)
      if (!a.is_padding()) {
        const int v = (chunk ? a.chunk : a.micro_batch) + 1;
        n = v > n ? v : n;
      }
  return n;
}

template <class Rows>
constexpr bool rows_have_comm(const Rows& rows) {
  for (const auto& row : rows)
    for (const Action& a : row)
      if (!a.is_padding() && is_comm(a.op)) return true;
  return false;
}

}  // namespace detail

/// Builds a table from hand-written rows (one row per rank; Action{} entries are padding).
/// Rows holding SEND/RECV actions make a lowered table for `semantics`.
template <class Rows>
constexpr ScheduleTable table_from_rows(const Rows& rows, int ranks,
                                        CommSemantics semantics = CommSemantics::buffered) {
  ScheduleTable t{};
  const int row_count = static_cast<int>(std::size(rows));
  const int m = detail::rows_max_plus_one(rows, false);
  const int v = detail::rows_max_plus_one(rows, true);
  detail::init_table(t, "Custom", ranks, m < 1 ? 1 : m, v < 1 ? 1 : v, 1);
  if (!t.ok()) return t;
  if (row_count != ranks) {
    t.error << "mpp: the hand-written table has " << row_count << " rank rows but was asked for "
            << ranks << " ranks; write one row per rank";
    return t;
  }
  t.lowered = detail::rows_have_comm(rows);
  t.semantics = semantics;
  int r = 0;
  for (const auto& row : rows) {
    for (const Action& a : row)
      if (!a.is_padding()) t.push(r, a);
    ++r;
  }
  return t;
}

/// A hand-written table is a schedule: `inline constexpr mpp::Action rows[2][4] = {...};`
/// then `mpp::Custom<rows>`. M and V are deduced from the largest micro-batch and chunk used.
template <const auto& Rows, CommSemantics Semantics = CommSemantics::buffered>
struct Custom {
  /// M: the largest micro-batch used, plus one.
  static constexpr int micro_batches = detail::rows_max_plus_one(Rows, false);
  /// V: the largest chunk used, plus one.
  static constexpr int chunks_per_rank =
      detail::rows_max_plus_one(Rows, true) < 1 ? 1 : detail::rows_max_plus_one(Rows, true);
  static constexpr int ranks = static_cast<int>(std::size(Rows));  ///< P: the number of rows.
  static constexpr std::string_view name = "Custom";               ///< The display name.
  /// The table of the rows; its `error` says so when `ranks_asked` is not the number of rows.
  static constexpr ScheduleTable table(int ranks_asked) {
    return table_from_rows(Rows, ranks_asked, Semantics);
  }
};

}  // namespace mpp
