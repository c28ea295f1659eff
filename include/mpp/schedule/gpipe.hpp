#pragma once
// GPipe (fill-drain): every forward of the step, then every backward, in micro-batch order.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M>
struct GPipe;

namespace detail {
/// All forwards, then all backwards, in micro-batch order, on every rank.
constexpr void fill_gpipe(ScheduleTable& t) {
  for (int r = 0; r < t.ranks; ++r) {
    for (int mb = 0; mb < t.micro_batches; ++mb) emit(t, r, Op::F, mb, 0);
    for (int mb = 0; mb < t.micro_batches; ++mb) emit(t, r, Op::B, mb, 0);
  }
}
}  // namespace detail

/// GPipe as a run-time choice (see `schedule_family`).
struct GPipeFamily {
  static constexpr std::string_view name = "GPipe";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"gpipe", "GPipe"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 1;             ///< V is always 1.
  /// The compile-time tag.
  template <int M, int V>
  using with = GPipe<M>;

  /// Fills `t` for P = `ranks`, M = `micro_batches`.
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 1, 6);
    if (t.ok()) detail::fill_gpipe(t);
  }
  /// Every P and M.
  static constexpr bool accepts(int, int, int) { return true; }
  /// Bubble (P-1)/(M+P-1) of the step; every rank holds all M micro-batches at its peak.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    if (static_cast<long>(r.total_idle()) * (m + p - 1) !=
        static_cast<long>(p - 1) * p * r.makespan)
      return false;
    for (int rank = 0; rank < p; ++rank)
      if (r.peak_in_flight[rank] != m) return false;
    return true;
  }
};

/// GPipe: fill-drain over M micro-batches; peak M micro-batches in flight on every rank.
template <int M>
struct GPipe : BuiltinSchedule<GPipeFamily, M, 1> {
  static_assert(M >= 1, "mpp: GPipe<M> needs M >= 1 micro-batch");
  static_assert(6 * M <= max_actions_per_rank,
                "mpp: GPipe<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
