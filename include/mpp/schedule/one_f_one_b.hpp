#pragma once
// 1F1B (PipeDream-Flush): GPipe's bubble with at most P - r micro-batches in flight on rank r.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M>
struct OneFOneB;

/// 1F1B as a run-time choice (see `schedule_family`).
struct OneFOneBFamily {
  static constexpr std::string_view name = "OneFOneB";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"1f1b", "OneFOneB"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 1;             ///< V is always 1.
  /// The compile-time tag.
  template <int M, int V>
  using with = OneFOneB<M>;

  /// Rank r runs P-r-1 warm-up forwards, then alternates one forward and one backward, then
  /// drains. With M < P the warm-up is capped at M (it becomes fill-drain).
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 1, 6);
    if (!t.ok()) return;
    const int p = t.ranks, m = t.micro_batches;
    for (int r = 0; r < p; ++r) {
      const int warmup = (p - r - 1) < m ? (p - r - 1) : m;
      for (int mb = 0; mb < warmup; ++mb) detail::emit(t, r, Op::F, mb, 0);
      for (int i = 0; i + warmup < m; ++i) {
        detail::emit(t, r, Op::F, warmup + i, 0);
        detail::emit(t, r, Op::B, i, 0);
      }
      for (int mb = m - warmup; mb < m; ++mb) detail::emit(t, r, Op::B, mb, 0);
    }
  }
  /// Every P and M.
  static constexpr bool accepts(int, int, int) { return true; }
  /// GPipe's bubble, (P-1)/(M+P-1); rank r holds min(M, P-r) micro-batches at its peak.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    if (static_cast<long>(r.total_idle()) * (m + p - 1) !=
        static_cast<long>(p - 1) * p * r.makespan)
      return false;
    for (int rank = 0; rank < p; ++rank)
      if (r.peak_in_flight[rank] != (m < p - rank ? m : p - rank)) return false;
    return true;
  }
};

/// 1F1B (PipeDream-Flush): same bubble as GPipe, at most P - r micro-batches in flight on rank r.
template <int M>
struct OneFOneB : BuiltinSchedule<OneFOneBFamily, M, 1> {
  static_assert(M >= 1, "mpp: OneFOneB<M> needs M >= 1 micro-batch");
  static_assert(6 * M <= max_actions_per_rank,
                "mpp: OneFOneB<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
