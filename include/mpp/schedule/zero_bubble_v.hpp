#pragma once
// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism"; torch.distributed.pipelining's
// ScheduleZBVZeroBubble): two chunks per rank placed in a V (rank r holds stages r and
// 2P - 1 - r), the backward split into I and W, and at most 2P chunk activations per rank --
// 1F1B's memory, since a chunk is half a stage.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M>
struct ZeroBubbleV;

namespace detail {

/// The generator's scratch (unit costs: every F, I and W takes one step).
struct ZeroBubbleVState {
  static constexpr int max_micro_batches = max_actions_per_rank / 14;  // 7 actions x 2 chunks
  int forward_end[2 * max_ranks][max_micro_batches];     // step + 1 when F(stage, mb) is done
  int input_grad_end[2 * max_ranks][max_micro_batches];  // step + 1 when I(stage, mb) is done
  int next_forward[max_ranks][2], next_input_grad[max_ranks][2];
  int pending_w[max_ranks][2 * max_micro_batches];  // (chunk, mb) of each I whose W is to come
  int pending_head[max_ranks], pending_tail[max_ranks];
  int in_flight[max_ranks];
};

/// Lists each rank's actions by replaying the pipeline at unit costs, one step at a time. A free
/// rank runs, in this order of preference: a forward whose input is there, deeper chunk first,
/// while it holds fewer than 2P chunk activations (a forward starts the longest path left: the
/// rest of the V down and back); else the input grad (I) of its oldest micro-batch that has its
/// output grad; else the oldest pending weight grad (W), which fills what would otherwise be a
/// bubble. For every P <= 8 and M >= 2P this reaches the shortest possible step, 6M + P - 1
/// (the static grid proves it), within 2P chunk activations per rank.
constexpr void fill_zero_bubble_v(ScheduleTable& t) {
  with_state<ZeroBubbleVState>([&](ZeroBubbleVState& st) {
    const int p = t.ranks, m = t.micro_batches, stages = 2 * p, cap = 2 * p;
    int remaining = 6 * p * m;
    for (int step = 0; remaining > 0; ++step) {
      for (int r = 0; r < p; ++r) {
        // Ends are stored as step + 1: done by now when 0 < end <= step. The placement is a V:
        // both chunks of every rank exist.
        Op op = Op::F;
        int chunk = -1, mb = -1;
        // F: the deeper chunk first, while the rank holds fewer than 2P chunk activations.
        if (st.in_flight[r] < cap) {
          for (int c = 1; c >= 0 && chunk < 0; --c) {
            const int k = st.next_forward[r][c];
            if (k >= m) continue;
            const int s = t.placement.stage_at[r][c];
            if (s > 0) {
              const int input = st.forward_end[s - 1][k];
              if (input == 0 || input > step) continue;
            }
            op = Op::F;
            chunk = c;
            mb = k;
          }
        }
        // I: oldest micro-batch first, the deeper chunk on a tie.
        for (int c = 1; c >= 0 && (chunk < 0 || op == Op::I); --c) {
          const int k = st.next_input_grad[r][c];
          if (k >= m) continue;
          const int s = t.placement.stage_at[r][c], forward = st.forward_end[s][k];
          if (forward == 0 || forward > step) continue;
          if (s < stages - 1) {
            const int grad = st.input_grad_end[s + 1][k];
            if (grad == 0 || grad > step) continue;
          }
          if (chunk < 0 || k < mb) {
            op = Op::I;
            chunk = c;
            mb = k;
          }
        }
        if (chunk < 0 && st.pending_head[r] < st.pending_tail[r]) {
          const int entry = st.pending_w[r][st.pending_head[r]++];
          op = Op::W;
          chunk = entry / m;
          mb = entry % m;
        }
        if (chunk < 0) continue;  // idle this step
        const int s = t.placement.stage_at[r][chunk];
        if (op == Op::F) {
          st.forward_end[s][mb] = step + 1;
          ++st.next_forward[r][chunk];
          ++st.in_flight[r];
        } else if (op == Op::I) {
          st.input_grad_end[s][mb] = step + 1;
          ++st.next_input_grad[r][chunk];
          st.pending_w[r][st.pending_tail[r]++] = chunk * m + mb;
        } else {
          --st.in_flight[r];
        }
        t.actions[r][t.length[r]++] = Action{op, mb, chunk, s};
        --remaining;
      }
    }
    return 0;
  });
}

}  // namespace detail

/// ZB-V as a run-time choice (see `schedule_family`).
struct ZeroBubbleVFamily {
  static constexpr std::string_view name = "ZeroBubbleV";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"zb-v", "zbv", "ZeroBubbleV"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 2;             ///< V is always 2 (the two arms of the V).
  /// The compile-time tag.
  template <int M, int V>
  using with = ZeroBubbleV<M>;

  /// Fills `t` for P = `ranks`, M = `micro_batches` (V = 2, v-shape placement).
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 2, 7);
    t.placement = v_shape_placement(t.ranks, 2);
    if (t.ok()) detail::fill_zero_bubble_v(t);
  }
  /// Every P and M.
  static constexpr bool accepts(int, int, int) { return true; }
  /// With T_F = T_I = T_W (per chunk) and M >= 2P: no rank holds more than 2P chunk activations
  /// (P stages' worth: 1F1B's peak), and the step takes 6M + P - 1: each rank's 6M of compute
  /// plus the P - 1 forwards the last rank waits for before its first one -- against 1F1B's
  /// 6(M + P - 1) and ZB-H1's 6M + 2(P - 1) at the same stage costs.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    if (r.max_peak_in_flight() > 2 * p) return false;
    return m < 2 * p || r.makespan == 6 * m + p - 1;
  }
};

/// ZB-V: two chunks per rank in a V, split backward; 1F1B's memory with a bubble of P - 1 chunk
/// forwards per rank.
template <int M>
struct ZeroBubbleV : BuiltinSchedule<ZeroBubbleVFamily, M, 2> {
  static_assert(M >= 1, "mpp: ZeroBubbleV<M> needs M >= 1 micro-batch");
  static_assert(14 * M <= max_actions_per_rank,
                "mpp: ZeroBubbleV<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
