#pragma once
// V-Half ("Pipeline Parallelism with Controllable Memory", Qi et al. 2024): two chunks per rank
// in a V (rank r holds stages r and 2P - 1 - r), the backward split into I and W, and about half
// of 1F1B's activation memory -- (P + 2) / 2 stage-equivalents -- for a bubble of about P / (2M)
// of the compute.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/v_shape_block.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M>
struct VHalf;

/// V-Half as a run-time choice (see `schedule_family`).
struct VHalfFamily {
  static constexpr std::string_view name = "VHalf";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"v-half", "vhalf", "VHalf"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 2;             ///< V is always 2 (the two arms of the V).
  /// The compile-time tag.
  template <int M, int V>
  using with = VHalf<M>;

  /// The most chunk activations a rank holds: the paper's (P + 2) / 2 micro-batches (rounded
  /// down), two chunks each.
  static constexpr int peak_chunks(int p) { return 2 * ((p + 2) / 2); }

  /// The paper's V-Half building block (see detail::fill_v_shape_block for the rest): on rank r,
  /// F of chunk 0 at step 2r, F of chunk 1 at 3P - 2 - r, I of chunk 1 at 3P - 1 + d + 2r and I
  /// of chunk 0 at 6P - 2 + d - r. The arm that goes down the ranks advances two steps a rank,
  /// the arm that comes back one, so the two chunks' lifetimes add up to about 6P steps on every
  /// rank: about P chunk activations each, at one micro-batch per 6 steps. d = 3 when P is even
  /// puts the four passes on different steps modulo 6.
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, 2, 7);
    t.placement = v_shape_placement(t.ranks, 2);
    if (!t.ok()) return;
    const int p = t.ranks, d = p % 2 == 0 ? 3 : 0;
    detail::VShapeBlock block{};
    block.cap = peak_chunks(p);
    for (int r = 0; r < p; ++r) {
      block.offset[r][0] = 2 * r;
      block.offset[r][1] = 3 * p - 2 - r;
      block.offset[r][2] = 3 * p - 1 + d + 2 * r;
      block.offset[r][3] = 6 * p - 2 + d - r;
    }
    detail::fill_v_shape_block(t, block);
  }
  /// Every P and M (with 2M below the cap every rank holds all its micro-batches).
  static constexpr bool accepts(int, int, int) { return true; }
  /// The paper's table under T_F = T_I = T_W (per chunk): activation memory (P + 2) // 2
  /// micro-batches, bubble about P / (2M). Here, once 2M reaches peak_chunks(P): the largest peak
  /// is exactly 2 ((P + 2) // 2) chunk activations (1F1B: 2P on rank 0), and the step takes
  /// 6M + c steps with c = 3P - 3 (P even) or 3P - 4 (P odd; 0 for P = 1), rank 0 idling those c
  /// steps and no rank more: c <= 3P, i.e. idle / compute <= P / (2M), the paper's figure. With
  /// fewer micro-batches the largest peak is all of them, 2M.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int) {
    const int cap = peak_chunks(p);
    if (r.max_peak_in_flight() != (2 * m < cap ? 2 * m : cap)) return false;
    if (2 * m < cap) return true;
    const int c = p == 1 ? 0 : (p % 2 == 0 ? 3 * p - 3 : 3 * p - 4);
    if (r.makespan != 6 * m + c || r.span_idle(0) != c) return false;
    for (int rank = 1; rank < p; ++rank)
      if (r.span_idle(rank) > c) return false;
    return true;
  }
};

/// V-Half: two chunks per rank in a V, split backward; about half of 1F1B's activation memory.
template <int M>
struct VHalf : BuiltinSchedule<VHalfFamily, M, 2> {
  static_assert(M >= 1, "mpp: VHalf<M> needs M >= 1 micro-batch");
  static_assert(14 * M <= max_actions_per_rank,
                "mpp: VHalf<M> exceeds mpp::max_actions_per_rank; lower M");
};

}  // namespace mpp
