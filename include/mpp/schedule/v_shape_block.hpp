#pragma once
// The generator the V-shape schedules of "Pipeline Parallelism with Controllable Memory" (Qi et
// al., 2024) share: a building block (when each rank runs a micro-batch's two forwards and two
// input grads) repeated every 6 steps, squeezed, with each weight grad put where it costs no
// time. The block alone decides the order of F and I on a rank, hence the schedule's memory and
// bubble; each schedule (v_half.hpp, v_min.hpp) only gives its block.
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp::detail {

/// A V-shape building block for V = 2 (rank r holds stages r and 2P - 1 - r): on each rank, the
/// step at which micro-batch 0 runs F on chunk 0, F on chunk 1, I on chunk 1 and I on chunk 0;
/// micro-batch k runs each 6k steps later. `cap` is the most chunk activations a rank may hold.
struct VShapeBlock {
  int offset[max_ranks][4]{};
  int cap = 0;
};

/// The generator's scratch (unit costs: every F, I and W takes one step).
struct VShapeBlockState {
  static constexpr int max_micro_batches = max_actions_per_rank / 14;  // 7 actions x 2 chunks
  static constexpr int per_rank = 4 * max_micro_batches;               // F and I of both chunks
  Action order[max_ranks][per_rank];                     // each rank's F and I in the block's order
  int next[max_ranks];                                   // the next entry of `order` to run
  int forward_end[2 * max_ranks][max_micro_batches];     // step + 1 when F(stage, mb) is done
  int input_grad_end[2 * max_ranks][max_micro_batches];  // step + 1 when I(stage, mb) is done
  int pending_w[max_ranks][2 * max_micro_batches];       // chunk * M + mb of each I whose W waits
  int pending_head[max_ranks], pending_tail[max_ranks];
  int in_flight[max_ranks];
};

/// Fills a V-shape table (init_table done, placement v_shape) from `block`.
///
/// 1. Repeat: rank r's F and I run in the order of their steps offset[r][j] + 6k (the block's
///    offsets differ modulo 6, so no two of a rank's passes take the same step).
/// 2. Squeeze: replay at unit costs; a rank runs its next F or I as soon as its input is there.
/// 3. Weight grads: a rank whose next F or I is not ready yet, or whose next F would hold more
///    than `cap` chunk activations, runs its oldest pending W instead. A W only frees memory and
///    nobody waits for it, so putting it in the gaps costs no time and keeps the peak at `cap`.
///    (Were the next F over the cap with no W pending, the rank would run it anyway rather than
///    wait forever; each family's matches_literature checks the peak, so the static grid would
///    catch it.)
constexpr void fill_v_shape_block(ScheduleTable& t, const VShapeBlock& block) {
  with_state<VShapeBlockState>([&](VShapeBlockState& st) {
    const int p = t.ranks, m = t.micro_batches, stages = 2 * p;
    constexpr Op kinds[4] = {Op::F, Op::F, Op::I, Op::I};
    constexpr int chunks[4] = {0, 1, 1, 0};
    // 1. The block repeated. Pass j runs at steps offset[r][j] + 6k: in round R = offset / 6 + k
    //    at phase offset % 6. Within a round the passes go by phase (a tie: by j, as one step).
    for (int r = 0; r < p; ++r) {
      int base[4], phase[4], by_phase[4] = {0, 1, 2, 3}, rounds = 0;
      bool negative = false;
      for (int j = 0; j < 4; ++j) {
        const int offset = block.offset[r][j];
        negative = negative || offset < 0;
        base[j] = offset / 6;
        phase[j] = offset % 6;
        rounds = base[j] + m > rounds ? base[j] + m : rounds;
      }
      for (int i = 1; i < 4; ++i)  // insertion sort: stable, so ties stay in j order
        for (int j = i; j > 0 && phase[by_phase[j - 1]] > phase[by_phase[j]]; --j) {
          const int swap = by_phase[j];
          by_phase[j] = by_phase[j - 1];
          by_phase[j - 1] = swap;
        }
      int count = 0;
      for (int round = 0; round < rounds && !negative; ++round)
        for (const int j : by_phase) {
          const int k = round - base[j];
          if (k < 0 || k >= m) continue;
          st.order[r][count++] = Action{kinds[j], k, chunks[j], t.placement.stage_at[r][chunks[j]]};
        }
      if (count != 4 * m) {
        t.error << "mpp: " << t.ranks << "-rank V-shape building block has two passes at one step "
                << "on rank " << r << "; this is a bug in mpp";
        return 0;
      }
    }
    // 2. and 3. The replay.
    int remaining = 6 * p * m;
    for (int step = 0; remaining > 0 && step <= 6 * p * m; ++step) {
      for (int r = 0; r < p; ++r) {
        // Ends are stored as step + 1: done by now when 0 < end <= step.
        bool ready = false;
        const Action* a = nullptr;
        if (st.next[r] < 4 * m) {
          a = &st.order[r][st.next[r]];
          const int s = a->stage, k = a->micro_batch;
          if (a->op == Op::F) {
            const int input = s == 0 ? 0 : st.forward_end[s - 1][k];
            ready = s == 0 || (input != 0 && input <= step);
          } else {
            const int own = st.forward_end[s][k];
            const int grad = s == stages - 1 ? 0 : st.input_grad_end[s + 1][k];
            ready = own != 0 && own <= step && (s == stages - 1 || (grad != 0 && grad <= step));
          }
        }
        const bool has_w = st.pending_head[r] < st.pending_tail[r];
        if (ready && (a->op == Op::I || st.in_flight[r] < block.cap || !has_w)) {
          const int s = a->stage, k = a->micro_batch;
          if (a->op == Op::F) {
            st.forward_end[s][k] = step + 1;
            ++st.in_flight[r];
          } else {
            st.input_grad_end[s][k] = step + 1;
            st.pending_w[r][st.pending_tail[r]++] = a->chunk * m + k;
          }
          t.actions[r][t.length[r]++] = *a;
          ++st.next[r];
        } else if (has_w) {
          const int entry = st.pending_w[r][st.pending_head[r]++];
          const int chunk = entry / m;
          --st.in_flight[r];
          t.actions[r][t.length[r]++] =
              Action{Op::W, entry % m, chunk, t.placement.stage_at[r][chunk]};
        } else {
          continue;  // idle this step
        }
        --remaining;
      }
    }
    if (remaining > 0) t.error << "mpp: the V-shape block's replay stalled; this is a bug in mpp";
    return 0;
  });
}

}  // namespace mpp::detail
