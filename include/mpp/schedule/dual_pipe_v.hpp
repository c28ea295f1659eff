#pragma once
// DualPipeV (DeepSeek's DualPipe "cut in half"; torch.distributed.pipelining's
// ScheduleDualPipeV): two chunks per rank in a V (rank r holds stages r and 2P - 1 - r), full
// backwards overlapped with forwards of the other arm in the steady state (OVERLAP_F_B pairs),
// and the backward split into I and W at the ramps so that W fills what would be bubbles.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M>
struct DualPipeV;

namespace detail {

/// One rank's DualPipeV row. Chunk 0 is the rank's stage on the way down (r), chunk 1 its stage
/// on the way back (2P - 1 - r); each chunk takes its micro-batches in order. The row has eight
/// phases, sized so that every rank ends with M forwards and M backwards per chunk:
///   1. 2(P - r - 1) forwards of chunk 0 (the ranks further down wait for their first input);
///   2. r + 1 pairs of forwards, chunk 0 then chunk 1;
///   3. P - r - 1 times: I of chunk 1, the oldest W, a forward of chunk 1;
///   4. M - 2P + r + 1 times: F0 overlapped with B1, then F1 overlapped with B0 (the last rank
///      runs its first F0 and B1 apart: its F0 feeds its own F1);
///   5. P - r - 1 times: B1, then F1 overlapped with B0;
///   6. r + 1 times: B1 then B0, split into I and W from the middle on;
///   7. P - r - 1 times: the oldest W, then I of chunk 0;
///   8. the W still pending (r + 1 of them).
struct DualPipeVRow {
  static constexpr int max_pending = 2 * (max_actions_per_rank / 14);
  int forward[2]{}, backward[2]{};
  int pending_chunk[max_pending]{}, pending_mb[max_pending]{};
  int head = 0, tail = 0;
};

constexpr void fill_dual_pipe_v(ScheduleTable& t) {
  const int p = t.ranks, m = t.micro_batches;
  for (int r = 0; r < p; ++r) {
    DualPipeVRow row{};
    const auto f = [&](int chunk, bool overlap = false) {
      emit(t, r, Op::F, row.forward[chunk]++, chunk);
      t.actions[r][t.length[r] - 1].overlap_with_next = overlap;
    };
    const auto b = [&](int chunk, bool split) {
      const int mb = row.backward[chunk]++;
      emit(t, r, split ? Op::I : Op::B, mb, chunk);
      if (split) {
        row.pending_chunk[row.tail] = chunk;
        row.pending_mb[row.tail++] = mb;
      }
    };
    const auto w = [&] {
      if (row.head == row.tail) return;
      emit(t, r, Op::W, row.pending_mb[row.head], row.pending_chunk[row.head]);
      ++row.head;
    };
    const int down = p - r - 1;
    for (int i = 0; i < 2 * down; ++i) f(0);
    for (int i = 0; i <= r; ++i) {
      f(0);
      f(1);
    }
    for (int i = 0; i < down; ++i) {
      b(1, true);
      w();
      f(1);
    }
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {
      const bool apart = i == 0 && r == p - 1;
      f(0, !apart);
      b(1, false);
      f(1, true);
      b(0, false);
    }
    for (int i = 0; i < down; ++i) {
      b(1, false);
      f(1, true);
      b(0, false);
    }
    bool split = false;
    for (int i = 0; i <= r; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) split = true;
      b(1, split);
      if (i == (r + 1) / 2 && r % 2 == 0) split = true;
      b(0, split);
    }
    for (int i = 0; i < down; ++i) {
      w();
      b(0, true);
    }
    while (row.head < row.tail) w();
  }
}

}  // namespace detail

/// DualPipeV as a run-time choice (see `schedule_family`).
struct DualPipeVFamily {
  static constexpr std::string_view name = "DualPipeV";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"dualpipev", "dual-pipe-v", "DualPipeV"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 2;             ///< V is always 2 (the two arms of the V).
  /// The compile-time tag.
  template <int M, int V>
  using with = DualPipeV<M>;

  /// Fills `t` for P = `ranks`, M = `micro_batches` (V = 2, v-shape placement); M >= 2P.
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 2, 7);
    if (t.ok() && micro_batches < 2 * ranks)
      t.error << "mpp: DualPipeV<M> needs M >= 2 * ranks to fill its V (got M=" << micro_batches
              << " for " << ranks << " ranks); use M=" << 2 * ranks << " or more";
    if (!t.ok()) return;
    t.placement = v_shape_placement(t.ranks, 2);
    detail::fill_dual_pipe_v(t);
  }
  /// M >= 2P.
  static constexpr bool accepts(int p, int m, int) { return m >= 2 * p; }
  /// DualPipe's table (DeepSeek-V3 report; the DualPipe README): with PP = 2P stages a rank
  /// idles at most (PP/2 - 1)(F&B + B - 3W) and holds PP + 1 chunk activations. On one CPU
  /// stream F&B = F + B, so at unit chunk costs (F = I = W = 1, B = 2) no rank idles more than
  /// (P - 1)(3 + 2 - 3) = 2(P - 1) (P = 4, M = 10: 3 of 63 with buffered sends, 6 of 66 under
  /// rendezvous), and every rank's peak is 2P + 1.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    if (m < 2 * p) return false;
    for (int k = 0; k < p; ++k)
      if (r.makespan - r.busy[k] > 2 * (p - 1) || r.peak_in_flight[k] != 2 * p + 1) return false;
    return true;
  }
};

/// DualPipeV: two chunks per rank in a V, forwards overlapped with backwards in the steady state.
template <int M>
struct DualPipeV : BuiltinSchedule<DualPipeVFamily, M, 2> {
  static_assert(M >= 1, "mpp: DualPipeV<M> needs M >= 1 micro-batch");
  static_assert(14 * M <= max_actions_per_rank,
                "mpp: DualPipeV<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
