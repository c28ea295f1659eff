#pragma once
// V-Min ("Pipeline Parallelism with Controllable Memory", Qi et al. 2024): two chunks per rank
// in a V (rank r holds stages r and 2P - 1 - r), the backward split into I and W, and about a
// third of 1F1B's activation memory -- (P + 4) / 3 stage-equivalents -- for a bubble of about
// 2P / (3M) of the compute.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/v_shape_block.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M>
struct VMin;

/// V-Min as a run-time choice (see `schedule_family`).
struct VMinFamily {
  static constexpr std::string_view name = "VMin";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"v-min", "vmin", "VMin"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 2;             ///< V is always 2 (the two arms of the V).
  /// The compile-time tag.
  template <int M, int V>
  using with = VMin<M>;

  /// The most chunk activations a rank holds: the paper's (P + 4) / 3 micro-batches (rounded
  /// down), two chunks each.
  static constexpr int peak_chunks(int p) { return 2 * ((p + 4) / 3); }

  /// The paper's V-Min building block (see detail::fill_v_shape_block for the rest): on rank r,
  /// F of chunk 0 at step r, F of chunk 1 at 2P - 1 - r, I of chunk 1 at 2P + d + r and I of
  /// chunk 0 at 4P - 1 + d - r. Each pass follows the one it depends on at once, so a
  /// micro-batch's activations live as short as the V allows: the two chunks' lifetimes add up
  /// to about 4P steps on every rank, about 2P/3 chunk activations at one micro-batch per 6
  /// steps. d = 2 when 3 divides P puts the four passes on different steps modulo 6.
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 2, 7);
    t.placement = v_shape_placement(t.ranks, 2);
    if (!t.ok()) return;
    const int p = t.ranks, d = p % 3 == 0 ? 2 : 0;
    detail::VShapeBlock block{};
    block.cap = peak_chunks(p);
    for (int r = 0; r < p; ++r) {
      block.offset[r][0] = r;
      block.offset[r][1] = 2 * p - 1 - r;
      block.offset[r][2] = 2 * p + d + r;
      block.offset[r][3] = 4 * p - 1 + d - r;
    }
    detail::fill_v_shape_block(t, block);
  }
  /// Every P and M (with 2M below the cap every rank holds all its micro-batches).
  static constexpr bool accepts(int, int, int) { return true; }
  /// The paper's table under T_F = T_I = T_W (per chunk): activation memory (P + 4) // 3
  /// micro-batches, bubble about 2P / (3M). Here, once 2M reaches peak_chunks(P): the largest
  /// peak is exactly 2 ((P + 4) // 3) chunk activations (1F1B: 2P on rank 0), and the step takes
  /// 6M + c steps with c = 4P - 5, or 4P - 3 when 3 divides P (0 for P = 1), rank 0 idling those
  /// c steps and no rank more: c < 4P, i.e. idle / compute < 2P / (3M), the paper's figure. With
  /// fewer micro-batches the largest peak is all of them, 2M.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    const int cap = peak_chunks(p);
    if (r.max_peak_in_flight() != (2 * m < cap ? 2 * m : cap)) return false;
    if (2 * m < cap) return true;
    const int c = p == 1 ? 0 : (p % 3 == 0 ? 4 * p - 3 : 4 * p - 5);
    if (r.makespan != 6 * m + c || r.span_idle(0) != c) return false;
    for (int rank = 1; rank < p; ++rank)
      if (r.span_idle(rank) > c) return false;
    return true;
  }
};

/// V-Min: two chunks per rank in a V, split backward; about a third of 1F1B's activation memory.
template <int M>
struct VMin : BuiltinSchedule<VMinFamily, M, 2> {
  static_assert(M >= 1, "mpp: VMin<M> needs M >= 1 micro-batch");
  static_assert(14 * M <= max_actions_per_rank,
                "mpp: VMin<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
