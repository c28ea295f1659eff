#pragma once
// ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", section 2.2 and Table 2): the backward
// split into I (input grad) and W (weight grad), with more forwards in the warm-up than 1F1B and
// the weight grads of the tail moved to the end, so that every rank computes without a pause
// from its first action to its last -- at the price of up to 2P - 1 micro-batches in flight,
// about twice 1F1B's activation memory.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M>
struct ZeroBubbleH2;

namespace detail {

/// The generator's scratch (unit costs: every F, I and W takes one step).
struct ZeroBubbleH2State {
  static constexpr int max_micro_batches = max_actions_per_rank / 7;  // F, I, W and four comm ops
  int forward_end[max_ranks][max_micro_batches];     // step + 1 when F(rank, mb) is done
  int input_grad_end[max_ranks][max_micro_batches];  // step + 1 when I(rank, mb) is done
  int next_forward[max_ranks], next_input_grad[max_ranks], next_weight_grad[max_ranks];
};

/// Lists each rank's actions by replaying the pipeline at unit costs, one step at a time. A free
/// rank runs, in this order of preference: the input grad (I) of its oldest micro-batch whose
/// output grad is there (I is on the critical path: the ranks above wait for it); else the next
/// forward, while it holds fewer than 2P - 1 micro-batches; else the oldest pending weight grad
/// (W), which has no one waiting for it. Rank 0's first I can start only after 2P - 1 steps (its
/// micro-batch goes down the pipeline and its gradient back up), so 2P - 1 forwards are what it
/// takes to leave no gap: with M >= 2P - 1 every rank then works from its first step to its last
/// (the static grid proves it for every P <= 8).
constexpr void fill_zero_bubble_h2(ScheduleTable& t) {
  with_state<ZeroBubbleH2State>([&](ZeroBubbleH2State& st) {
    const int p = t.ranks, m = t.micro_batches, cap = 2 * p - 1;
    int remaining = 3 * p * m;
    // Every step some rank runs (the greedy never stalls), so 3PM steps bound the replay; the
    // bound only guards the loop.
    for (int step = 0; remaining > 0 && step <= 3 * p * m; ++step) {
      for (int r = 0; r < p; ++r) {
        const auto done_by = [&](int end) { return end != 0 && end <= step; };  // end: step + 1
        const int i = st.next_input_grad[r], f = st.next_forward[r];
        if (i < m && done_by(st.forward_end[r][i]) &&
            (r == p - 1 || done_by(st.input_grad_end[r + 1][i]))) {
          st.input_grad_end[r][i] = step + 1;
          ++st.next_input_grad[r];
          emit(t, r, Op::I, i, 0);
        } else if (f < m && f - st.next_weight_grad[r] < cap &&
                   (r == 0 || done_by(st.forward_end[r - 1][f]))) {
          st.forward_end[r][f] = step + 1;
          ++st.next_forward[r];
          emit(t, r, Op::F, f, 0);
        } else if (st.next_weight_grad[r] < st.next_input_grad[r]) {
          emit(t, r, Op::W, st.next_weight_grad[r]++, 0);
        } else {
          continue;  // idle this step
        }
        --remaining;
      }
    }
    if (remaining > 0) t.error << "mpp: ZeroBubbleH2's generator stalled; this is a bug in mpp";
    return 0;
  });
}

}  // namespace detail

/// ZB-H2 as a run-time choice (see `schedule_family`).
struct ZeroBubbleH2Family {
  static constexpr std::string_view name = "ZeroBubbleH2";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"zb-h2", "zbh2", "ZeroBubbleH2"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 1;             ///< V is always 1.
  /// The compile-time tag.
  template <int M, int V>
  using with = ZeroBubbleH2<M>;

  /// Fills `t` for P = `ranks`, M = `micro_batches` (V = 1).
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 1, 7);
    if (t.ok()) detail::fill_zero_bubble_h2(t);
  }
  /// Every P and M (below M = 2P - 1 the warm-up cannot be filled; see matches_literature).
  static constexpr bool accepts(int, int, int) { return true; }
  /// Table 2 of the paper, with T_F = T_I = T_W: a bubble of (P-1)(T_F + T_I - 2 T_W) = 0 and a
  /// peak of 2P - 1 micro-batches. Here, for M >= 2P - 1: no rank idles between its first and
  /// its last action (span_idle 0: the parallelogram, whose idle triangles are filled by the
  /// neighbouring steps when the optimizer step does not synchronise the ranks), the step takes
  /// 3M + P - 1 (rank P - 1 starts P - 1 forwards late), and every rank holds 2P - 1
  /// micro-batches at its peak (1F1B: P - r on rank r). With fewer micro-batches rank 0 lacks
  /// 2P - 1 - M forwards to fill its warm-up and idles that long; every rank holds all M; the
  /// step takes 3M + P - 1 for M >= P and 2M + 2P - 1 (one micro-batch down and back, then
  /// rank 0's M input grads and M weight grads) below.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    const int fill = 2 * p - 1;
    if (r.makespan != (m >= p ? 3 * m + p - 1 : 2 * m + 2 * p - 1)) return false;
    if (r.span_idle(0) != (m >= fill ? 0 : fill - m)) return false;
    for (int rank = 0; rank < p; ++rank) {
      if (r.span_idle(rank) > r.span_idle(0)) return false;
      if (r.peak_in_flight[rank] != (m < fill ? m : fill)) return false;
    }
    return true;
  }
};

/// ZB-H2: split backward, 2P - 1 micro-batches in flight; no rank idles within its own step
/// once M >= 2P - 1.
template <int M>
struct ZeroBubbleH2 : BuiltinSchedule<ZeroBubbleH2Family, M, 1> {
  static_assert(M >= 1, "mpp: ZeroBubbleH2<M> needs M >= 1 micro-batch");
  static_assert(7 * M <= max_actions_per_rank,
                "mpp: ZeroBubbleH2<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
