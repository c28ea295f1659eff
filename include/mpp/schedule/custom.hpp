#pragma once
// Hand-written schedules: a table of rows (one per rank) as a schedule, `mpp::Custom<rows>`.
#include <iterator>
#include <string_view>

#include "mpp/schedule/table.hpp"

namespace mpp {

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

/// How many of the rows' actions name their stage (see actions::on_stage), and how many do not.
template <class Rows>
constexpr void rows_count_named(const Rows& rows, int& named, int& unnamed) {
  named = unnamed = 0;
  for (const auto& row : rows)
    for (const Action& a : row)
      if (!a.is_padding()) ++(a.stage >= 0 ? named : unnamed);
}

/// The placement the rows name (each action's stage on its row's rank), or false with the
/// reason in t.error.
template <class Rows>
constexpr bool placement_from_rows(ScheduleTable& t, const Rows& rows, int ranks) {
  StageSightings seen{};
  int r = 0;
  for (const auto& row : rows) {
    for (const Action& a : row) {
      if (a.is_padding()) continue;
      const int holder = seen.holder(a.stage);
      if (holder == -2) {
        t.error << "mpp: rank " << r << " names stage " << a.stage
                << ", beyond mpp::max_stages = " << max_stages;
        return false;
      }
      if (holder >= 0 && holder != r) {
        t.error << "mpp: rank " << r << " names stage " << a.stage << ", which rank " << holder
                << " names too; a stage lives on one rank";
        return false;
      }
      seen.see(a.stage, r);
    }
    ++r;
  }
  return seen.build(t.placement, ranks, t.error);
}

/// V of the rows: the map's, or stages / ranks when the rows name their stages, or the largest
/// chunk used plus one; at least 1 (a bad stage count is reported by place_stages()).
template <class Rows>
constexpr int rows_chunks_per_rank(const Rows& rows, int ranks, const Placement& map) {
  if (map.ranks > 0) return map.chunks_per_rank;
  int top = 0, chunks = 1;
  for (const auto& row : rows)
    for (const Action& a : row)
      if (!a.is_padding()) {
        top = a.stage + 1 > top ? a.stage + 1 : top;
        chunks = a.chunk + 1 > chunks ? a.chunk + 1 : chunks;
      }
  if (top == 0) return chunks;
  return ranks > 0 && top % ranks == 0 ? top / ranks : 1;
}

}  // namespace detail

/// "The rows choose": Custom's default map. The rows' chunks are interleaved, unless the rows
/// name their stages, which then give the placement.
inline constexpr Placement rows_placement{.ranks = 0};

/// Builds a table from hand-written rows (one row per rank; Action{} entries are padding).
/// Rows holding SEND/RECV actions make a lowered table for `semantics`. The placement is
/// `map` when one is given; else, if the actions name their stages (actions::on_stage, or the
/// action CSV), the one they name, with each action's chunk taken from it; else interleaved.
template <class Rows>
constexpr ScheduleTable table_from_rows(const Rows& rows, int ranks,
                                        CommSemantics semantics = CommSemantics::buffered,
                                        const Placement& map = rows_placement) {
  ScheduleTable t{};
  const int row_count = static_cast<int>(std::size(rows));
  const int m = detail::rows_max_plus_one(rows, false);
  int named = 0, unnamed = 0;
  detail::rows_count_named(rows, named, unnamed);
  const bool by_stage = named > 0 && map.ranks == 0;
  const int v = detail::rows_chunks_per_rank(rows, ranks, map);
  detail::init_table(t, "Custom", ranks, m < 1 ? 1 : m, v < 1 ? 1 : v, 1);
  if (!t.ok()) return t;
  if (row_count != ranks) {
    t.error << "mpp: the hand-written table has " << row_count << " rank rows but was asked for "
            << ranks << " ranks; write one row per rank";
    return t;
  }
  if (named > 0 && unnamed > 0) {
    t.error << "mpp: " << named << " actions of the hand-written table name their stage and "
            << unnamed << " do not; name the stage of every action (mpp::actions::on_stage) or "
            << "of none";
    return t;
  }
  if (map.ranks > 0) {
    if (map.ranks != ranks) {
      t.error << "mpp: the placement given to the hand-written table is for " << map.ranks
              << " ranks, not " << ranks;
      return t;
    }
    t.placement = map;
  } else if (by_stage && !detail::placement_from_rows(t, rows, ranks)) {
    return t;
  }
  t.lowered = detail::rows_have_comm(rows);
  t.semantics = semantics;
  int r = 0;
  for (const auto& row : rows) {
    for (Action a : row) {
      if (a.is_padding()) continue;
      if (by_stage) {
        a.chunk = t.chunk_of(a.stage);
      } else if (map.ranks > 0) {
        a.stage = -1;  // the map's stage of (rank, chunk)
      }
      t.push(r, a);
    }
    ++r;
  }
  return t;
}

/// A hand-written table is a schedule: `inline constexpr mpp::Action rows[2][4] = {...};`
/// then `mpp::Custom<rows>`. M is deduced from the largest micro-batch used; the placement and V
/// from `Map` when one is given (e.g. `inline constexpr auto map = mpp::v_shape_placement(2, 2)`),
/// else from the stages the rows name, else V is the largest chunk used plus one, interleaved.
template <const auto& Rows, CommSemantics Semantics = CommSemantics::buffered,
          const Placement& Map = rows_placement>
struct Custom {
  /// M: the largest micro-batch used, plus one.
  static constexpr int micro_batches = detail::rows_max_plus_one(Rows, false);
  static constexpr int ranks = static_cast<int>(std::size(Rows));  ///< P: the number of rows.
  /// V: from the map, or the stages named (stages / P), or the largest chunk used plus one.
  static constexpr int chunks_per_rank = detail::rows_chunks_per_rank(Rows, ranks, Map);
  static constexpr std::string_view name = "Custom";  ///< The display name.
  /// The table of the rows; its `error` says so when `ranks_asked` is not the number of rows.
  static constexpr ScheduleTable table(int ranks_asked) {
    return table_from_rows(Rows, ranks_asked, Semantics, Map);
  }
};

}  // namespace mpp
