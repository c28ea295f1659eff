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
