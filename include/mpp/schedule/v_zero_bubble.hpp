#pragma once
// V-ZB ("Pipeline Parallelism with Controllable Memory", Qi et al. 2024): the V family's member
// whose memory limit is 1F1B's -- P stage-equivalents, 2P chunk activations per rank -- spent on
// the shortest step instead of on saving memory. Two chunks per rank in a V (rank r holds stages
// r and 2P - 1 - r), the backward split into I and W.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"
#include "mpp/schedule/zero_bubble_v.hpp"

namespace mpp {

template <int M>
struct VZeroBubble;

/// V-ZB as a run-time choice (see `schedule_family`).
struct VZeroBubbleFamily {
  static constexpr std::string_view name = "VZeroBubble";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"v-zb", "vzb", "VZeroBubble"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 2;             ///< V is always 2 (the two arms of the V).
  /// The compile-time tag.
  template <int M, int V>
  using with = VZeroBubble<M>;

  /// With 2P chunk activations to spend, the V family's reordering needs no building block to
  /// hold memory down: each rank runs a forward whenever its input is there and it holds fewer
  /// than 2P chunk activations (the deeper chunk first), else its oldest ready input grad, else a
  /// pending weight grad in the gap. That is ZB-V's generator (detail::fill_zero_bubble_v): the
  /// two papers' 1F1B-memory V schedules are one schedule, and mpp generates it once.
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 2, 7);
    t.placement = Placement::v_shape;
    if (t.ok()) detail::fill_zero_bubble_v(t);
  }
  /// Every P and M.
  static constexpr bool accepts(int, int, int) { return true; }
  /// The paper's table under T_F = T_I = T_W (per chunk): activation memory P micro-batches (as
  /// 1F1B), bubble 0 -- the "almost zero" of its abstract. Here, for M >= 2P: the largest peak
  /// is exactly 2P chunk activations, and the step takes 6M + P - 1, the shortest any schedule
  /// can take (rank P - 1 waits P - 1 steps for its first input, then has 6M of work). The
  /// bubble is not exactly 0 within each rank's own step: rank 0 idles c = P - 1 steps (P even)
  /// or P - 2 (P odd; 0 for P = 1) between its first and its last action and no rank idles
  /// more, a bubble rate of c / (6M + c) by the paper's measure (1 - compute / longest rank
  /// span). With M < 2P the largest peak is 2 min(P, M).
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    if (r.max_peak_in_flight() != 2 * (m < p ? m : p)) return false;
    if (m < 2 * p) return true;
    const int c = p == 1 ? 0 : p - 1 - p % 2;
    if (r.makespan != 6 * m + p - 1 || r.span_idle(0) != c) return false;
    for (int rank = 1; rank < p; ++rank)
      if (r.span_idle(rank) > c) return false;
    return true;
  }
};

/// V-ZB: two chunks per rank in a V, split backward; 1F1B's memory, the shortest step.
template <int M>
struct VZeroBubble : BuiltinSchedule<VZeroBubbleFamily, M, 2> {
  static_assert(M >= 1, "mpp: VZeroBubble<M> needs M >= 1 micro-batch");
  static_assert(14 * M <= max_actions_per_rank,
                "mpp: VZeroBubble<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
