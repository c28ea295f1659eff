#pragma once
// V-ZB ("Pipeline Parallelism with Controllable Memory", Qi et al. 2024): the zero-bubble member
// of the paper's V-shape family. Two chunks per rank in a V (rank r holds stages r and
// 2P - 1 - r), the backward split into I and W, 1F1B's activation memory (2P chunk activations,
// P micro-batches) and, under T_F = T_I = T_W, no idle within any rank's own step: the paper's
// table gives V-ZB a bubble of 0 at activation memory p, and counts the bubble as its
// playground and code do, 1 - (compute of one rank) / (the longest time any rank spends from
// its own first pass to its own last). The ranks start one forward apart and so end one apart:
// the step is a parallelogram, rank r busy from step r to step 6M + r. Measured by mpp's
// makespan instead (`VerifyResult::bubble_fraction`), the same table idles P (P - 1) of
// P (6M + P - 1): the triangles at both ends, which the zero-bubble papers fill with the
// neighbouring steps (each rank starts its next step when its own optimizer step is done).
//
// The construction is the one the paper's authors run for V-ZB (their memory setup "zb", the
// default of their V schedules): the ZB-V scheduler of the Zero Bubble paper, bounded by 2P
// chunk activations per rank, not the building-block greedy of V-Min and V-Half
// (v_shape_block.hpp). mpp's ZeroBubbleV is a simpler greedy with the same makespan that leaves
// rank 0 idle within its step; this one warms up differently and places the weight grads so
// that no rank does, which is the paper's figure.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M>
struct VZeroBubble;

namespace detail {

/// The V-ZB generator's scratch (unit costs: every F, I and W takes one step).
struct VZeroBubbleState {
  static constexpr int max_micro_batches = max_actions_per_rank / 14;  // 7 actions x 2 chunks
  int forward_end[2 * max_ranks][max_micro_batches];     // step + 1 when F(stage, mb) ends, or 0
  int input_grad_end[2 * max_ranks][max_micro_batches];  // step + 1 when I(stage, mb) ends, or 0
  int clock[max_ranks];                                  // when the rank's last placed pass ends
  int forwards[max_ranks][2];                            // F placed so far, per chunk
  int input_grads[max_ranks][2];                         // I placed so far, per chunk
  int pending_w[max_ranks][2 * max_micro_batches];       // chunk * M + mb of each I whose W waits
  int pending_head[max_ranks], pending_tail[max_ranks];
  int in_flight[max_ranks];  // chunk activations held: + 1 at F, - 1 at W
  bool broken;               // a rule of the construction failed (a bug in mpp)
};

/// Places passes one rank at a time, each as early as its rank's clock and its input allow
/// (unit costs), and emits them in that order: a rank's row is its passes in time order.
class VZeroBubbleBuilder {
 public:
  /// Builds into `t` (init_table done, v-shape placement) with the zeroed scratch `st`.
  constexpr VZeroBubbleBuilder(ScheduleTable& t, VZeroBubbleState& st)
      : t_(t), st_(st), p_(t.ranks), m_(t.micro_batches), cap_(2 * t.ranks) {}

  /// Fills the table, or leaves the reason in its `error`. The V's two arms: chunk 0 runs down
  /// the ranks (stage r on rank r), chunk 1 back up.
  constexpr void build() {
    // 1. The first forward of every rank, down the first arm.
    for (int r = 0; r < p_; ++r) forward(r, 0);
    // 2. Warm-up, from the last rank up: rank r waits for micro-batch 0 to come back up the
    //    second arm; it fills that wait with further chunk-0 forwards (each also run on the
    //    ranks above it, which feed it) while at least 2r + 1 of its 2P activation slots stay
    //    free for what it must still hold, then runs its first chunk-1 forward.
    for (int r = p_ - 1; r >= 0; --r) {
      if (r < p_ - 1) {
        const int back = st_.forward_end[stage(r + 1, 1)][0];
        while (st_.in_flight[r] + 2 + 2 * r <= cap_ && st_.clock[r] + 1 <= back &&
               st_.forwards[r][0] < m_ - r && !st_.broken)
          for (int j = 0; j <= r; ++j) forward(j, 0);
      }
      forward(r, 1);
    }
    // 3. Each rank below the first gets as many forwards as the rank above it, and more chunk-1
    //    forwards than it (or all M), the chunks taken in turn from the last rank up.
    int chunk = 0;
    for (int r = 1; r < p_; ++r) {
      for (int guard = 0; guard <= 4 * m_ && !st_.broken; ++guard) {
        const int above = st_.forwards[r - 1][0] + st_.forwards[r - 1][1];
        const bool behind =
            st_.forwards[r][0] + st_.forwards[r][1] < above ||
            (st_.forwards[r][1] <= st_.forwards[r - 1][1] && st_.forwards[r - 1][1] < m_);
        if (!behind) break;
        if (guard == 4 * m_) {
          st_.broken = true;
          break;
        }
        for (int j = p_ - 1; j >= r; --j)
          if (st_.forwards[j][chunk] < m_) forward(j, chunk);
        chunk = 1 - chunk;
      }
    }
    // 4. Steady state and cool-down: rounds of one input grad, then one forward, per rank. A
    //    rank whose next pass waits for a neighbour runs pending weight grads meanwhile (a W
    //    only frees memory, so nobody waits for it), and runs one before a forward that would
    //    exceed 2P chunk activations.
    for (int round = 0; round < 2 * m_ && !st_.broken; ++round) {
      input_grad_round();
      forward_round();
    }
    // 5. The weight grads still pending.
    for (int r = 0; r < p_; ++r)
      while (st_.pending_head[r] < st_.pending_tail[r]) weight_grad(r);
    for (int r = 0; r < p_; ++r)
      if (st_.forwards[r][0] != m_ || st_.forwards[r][1] != m_ || st_.input_grads[r][0] != m_ ||
          st_.input_grads[r][1] != m_)
        st_.broken = true;
    if (st_.broken)
      t_.error << "mpp: the V-ZB construction broke a rule on " << p_ << " ranks with M=" << m_
               << "; this is a bug in mpp";
  }

 private:
  ScheduleTable& t_;
  VZeroBubbleState& st_;
  int p_, m_, cap_;

  // The V (v_shape_placement): chunk 0 of rank r is stage r, chunk 1 is stage 2P - 1 - r.
  // Computed here rather than looked up, so that no index can be negative.
  constexpr int stage(int r, int chunk) const { return chunk == 0 ? r : 2 * p_ - 1 - r; }

  // When the input of rank r's next F (forward) or I on `chunk` is there: 0 if nothing to wait
  // for on another rank; -1 if its producer is not placed yet.
  constexpr int forward_input(int r, int chunk) const {
    const int s = stage(r, chunk), k = st_.forwards[r][chunk];
    if (s == 0 || k >= m_) return 0;
    const int end = st_.forward_end[s - 1][k];
    return end == 0 ? -1 : end;
  }
  constexpr int input_grad_input(int r, int chunk) const {
    const int s = stage(r, chunk), k = st_.input_grads[r][chunk];
    if (k >= m_) return 0;
    int ready = st_.forward_end[s][k];
    if (ready == 0) return -1;
    if (s < 2 * p_ - 1) {
      const int end = st_.input_grad_end[s + 1][k];
      if (end == 0) return -1;
      ready = end > ready ? end : ready;
    }
    return ready;
  }

  // Runs pending weight grads while the next pass's input (ready at step `ready`) is not there.
  constexpr void fill_until(int r, int ready) {
    while (st_.pending_head[r] < st_.pending_tail[r] && ready >= st_.clock[r] + 1) weight_grad(r);
  }

  constexpr void place(int r, Op op, int chunk, int ready) {
    if (ready < 0) {
      st_.broken = true;
      return;
    }
    const int s = stage(r, chunk);
    int& count = op == Op::F ? st_.forwards[r][chunk] : st_.input_grads[r][chunk];
    if (count >= m_) {
      st_.broken = true;
      return;
    }
    const int k = count++;
    const int start = ready > st_.clock[r] ? ready : st_.clock[r];
    st_.clock[r] = start + 1;
    if (op == Op::F) {
      st_.forward_end[s][k] = start + 1;
      ++st_.in_flight[r];
      if (st_.in_flight[r] > cap_) st_.broken = true;
    } else {
      st_.input_grad_end[s][k] = start + 1;
      st_.pending_w[r][st_.pending_tail[r]++] = chunk * m_ + k;
    }
    emit(t_, r, op, k, chunk);
  }

  constexpr void forward(int r, int chunk) { place(r, Op::F, chunk, forward_input(r, chunk)); }

  constexpr void weight_grad(int r) {
    const int entry = st_.pending_w[r][st_.pending_head[r]++];
    ++st_.clock[r];
    --st_.in_flight[r];
    emit(t_, r, Op::W, entry % m_, entry / m_);
  }

  // Which arm rank r's next input grad takes: chunk 1 (the arm the gradient enters by) unless
  // the rank has done as many of them as of chunk 0; chunk 0 as soon as its input is placed.
  constexpr int next_input_grad_chunk(int r) const {
    if (st_.input_grads[r][0] >= st_.input_grads[r][1]) return 1;
    if (r == p_ - 1 || st_.input_grads[r][1] >= m_) return 0;
    return st_.input_grad_end[stage(r + 1, 0)][st_.input_grads[r][0]] != 0 ? 0 : 1;
  }

  // One input grad per rank: the chunk-0 ones from the last rank up, then the chunk-1 ones
  // from the first rank down, so that each is placed after the one it depends on.
  constexpr void input_grad_round() {
    int chunk_of_rank[max_ranks]{};
    for (int r = 0; r < p_; ++r) chunk_of_rank[r] = next_input_grad_chunk(r);
    for (int pass = 0; pass < 2; ++pass)
      for (int i = 0; i < p_; ++i) {
        const int r = pass == 0 ? p_ - 1 - i : i, chunk = pass == 0 ? 0 : 1;
        if (chunk_of_rank[r] != chunk || st_.input_grads[r][chunk] >= m_) continue;
        const int ready = input_grad_input(r, chunk);
        fill_until(r, ready);
        place(r, Op::I, chunk, ready);
      }
  }

  // One forward per rank, first rank first: chunk 0 while the rank has run no more of them than
  // of chunk 1, else chunk 1 if its input is placed, else chunk 0 if its input is placed.
  constexpr void forward_round() {
    for (int r = 0; r < p_; ++r) {
      if (st_.forwards[r][1] >= m_) continue;
      int chunk = -1;
      if (st_.forwards[r][1] >= st_.forwards[r][0])
        chunk = 0;
      else if (forward_input(r, 1) >= 0)
        chunk = 1;
      else if (st_.forwards[r][0] < m_ && forward_input(r, 0) >= 0)
        chunk = 0;
      if (chunk < 0) continue;
      while (st_.in_flight[r] >= cap_ && st_.pending_head[r] < st_.pending_tail[r]) weight_grad(r);
      const int ready = forward_input(r, chunk);
      fill_until(r, ready);
      place(r, Op::F, chunk, ready);
    }
  }
};

/// Fills a V-ZB table (init_table done, placement v_shape) for M >= 2P - 1.
constexpr void fill_v_zero_bubble(ScheduleTable& t) {
  with_state<VZeroBubbleState>([&](VZeroBubbleState& st) {
    VZeroBubbleBuilder{t, st}.build();
    return 0;
  });
}

}  // namespace detail

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

  /// Fills `t` for P = `ranks`, M = `micro_batches` (V = 2, v-shape placement); M >= 2P - 1.
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 2, 7);
    if (t.ok() && micro_batches < 2 * ranks - 1)
      t.error << "mpp: VZeroBubble<M> needs M >= 2 * ranks - 1 to fill its warm-up without a "
                 "bubble (got M="
              << micro_batches << " for " << ranks << " ranks); use M=" << 2 * ranks - 1
              << " or more, or ZeroBubbleV";
    if (!t.ok()) return;
    t.placement = v_shape_placement(t.ranks, 2);
    detail::fill_v_zero_bubble(t);
  }
  /// M >= 2P - 1: rank 0 runs 2P - 1 forwards before its first backward can start.
  static constexpr bool accepts(int p, int m, int) { return m >= 2 * p - 1; }
  /// The paper's table under T_F = T_I = T_W (per chunk): bubble 0 and activation memory p
  /// micro-batches. Here, exactly: every rank holds at most 2P chunk activations and reaches
  /// it, and idles 0 within its own step, which runs from step r to step 6M + r (the
  /// parallelogram); the makespan 6M + P - 1 is the shortest any schedule can take (rank P - 1
  /// cannot start before step P - 1), ZB-V's too.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    if (m < 2 * p - 1 || r.makespan != 6 * m + p - 1) return false;
    for (int k = 0; k < p; ++k)
      if (r.peak_in_flight[k] != 2 * p || r.span_idle(k) != 0 || r.first_start[k] != k ||
          r.finish[k] != 6 * m + k)
        return false;
    return true;
  }
};

/// V-ZB: two chunks per rank in a V, split backward; 1F1B's memory and no idle within any
/// rank's step.
template <int M>
struct VZeroBubble : BuiltinSchedule<VZeroBubbleFamily, M, 2> {
  static_assert(M >= 1, "mpp: VZeroBubble<M> needs M >= 1 micro-batch");
  static_assert(14 * M <= max_actions_per_rank,
                "mpp: VZeroBubble<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
