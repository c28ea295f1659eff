#pragma once
// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): the backward split into I (input
// grad) and W (weight grad); W fills the bubbles 1F1B leaves, within 1F1B's memory.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M>
struct ZeroBubbleH1;

/// ZB-H1 as a run-time choice (see `schedule_family`).
struct ZeroBubbleH1Family {
  static constexpr std::string_view name = "ZeroBubbleH1";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"zb-h1", "zbh1", "ZeroBubbleH1"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 1;             ///< V is always 1.
  /// The compile-time tag.
  template <int M, int V>
  using with = ZeroBubbleH1<M>;

  /// The 1F1B order of F and I, with each W delayed by r steps on rank r so that it fills the
  /// bubbles 1F1B leaves; every rank then holds at most P micro-batches (1F1B's peak on rank 0).
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 1, 7);
    if (!t.ok()) return;
    const int p = t.ranks, m = t.micro_batches;
    for (int r = 0; r < p; ++r) {
      const int warmup = (p - r - 1) < m ? (p - r - 1) : m;
      int next_w = 0;
      for (int mb = 0; mb < warmup; ++mb) detail::emit(t, r, Op::F, mb, 0);
      for (int i = 0; i < m; ++i) {
        if (i + warmup < m) detail::emit(t, r, Op::F, warmup + i, 0);
        detail::emit(t, r, Op::I, i, 0);
        if (i - r >= 0) detail::emit(t, r, Op::W, next_w++, 0);
      }
      while (next_w < m) detail::emit(t, r, Op::W, next_w++, 0);
    }
  }
  /// Every P and M.
  static constexpr bool accepts(int, int, int) { return true; }
  /// With T_F = T_I = T_W each rank idles (P-1)(T_F + T_I - T_W) = P-1, a third of 1F1B's
  /// 3(P-1), once M >= P; and no rank holds more than P micro-batches (1F1B's peak).
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    if (m >= p && r.makespan != 3 * m + p - 1) return false;
    return r.max_peak_in_flight() == (m < p ? m : p);
  }
};

/// ZB-H1: backward split into I (input grad) and W (weight grad); W fills 1F1B's bubbles.
template <int M>
struct ZeroBubbleH1 : BuiltinSchedule<ZeroBubbleH1Family, M, 1> {
  static_assert(M >= 1, "mpp: ZeroBubbleH1<M> needs M >= 1 micro-batch");
  static_assert(7 * M <= max_actions_per_rank,
                "mpp: ZeroBubbleH1<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
