#pragma once
// Megatron's interleaved 1F1B: V model chunks per rank, stage = chunk * P + rank; the bubble
// shrinks by V.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

template <int M, int V>
struct Interleaved1F1B;

/// Interleaved 1F1B as a run-time choice (see `schedule_family`).
struct Interleaved1F1BFamily {
  static constexpr std::string_view name = "Interleaved1F1B";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"interleaved", "interleaved-1f1b",
                                                   "Interleaved1F1B"};
  static constexpr bool takes_micro_batches = true;  ///< M is a knob.
  static constexpr int fixed_chunks = 0;             ///< V is a knob.
  /// The compile-time tag.
  template <int M, int V>
  using with = Interleaved1F1B<M, V>;

  /// Micro-batches go through the chunks in groups of P, which is why M must be a multiple of P.
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int chunks) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, micro_batches, chunks, 6);
    if (!t.ok()) return;
    const int p = t.ranks, m = t.micro_batches, v = t.chunks_per_rank;
    if (v < 2) {
      t.error << "mpp: Interleaved1F1B<M, V> needs V >= 2 chunks per rank (got V=" << v
              << "); use OneFOneB<M> for V = 1";
      return;
    }
    if (m % p != 0) {
      t.error << "mpp: Interleaved1F1B<M, V> needs M to be a multiple of the number of ranks (got "
                 "M="
              << m << " for " << p << " ranks); use M=" << (m / p + 1) * p << " or OneFOneB";
      return;
    }
    const int total = m * v;
    auto unit = [&](int r, int k, bool forward) {
      const int group = k / (p * v), within = k % (p * v);
      const int chunk = forward ? within / p : v - 1 - within / p;
      detail::emit(t, r, forward ? Op::F : Op::B, group * p + within % p, chunk);
    };
    for (int r = 0; r < p; ++r) {
      int warmup = (p - r - 1) * 2 + (v - 1) * p;
      if (warmup > total) warmup = total;
      for (int k = 0; k < warmup; ++k) unit(r, k, true);
      for (int k = 0; k + warmup < total; ++k) {
        unit(r, warmup + k, true);
        unit(r, k, false);
      }
      for (int k = total - warmup; k < total; ++k) unit(r, k, false);
    }
  }
  /// V >= 2 and M a multiple of P.
  static constexpr bool accepts(int p, int m, int v) { return v >= 2 && m % p == 0; }
  /// Idle (P-1)/(V*M) of the ideal compute, exactly.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int m, int v) {
    return static_cast<long>(r.total_idle()) * v * m == static_cast<long>(p - 1) * r.total_busy;
  }
};

/// Megatron's interleaved 1F1B with V model chunks per rank: bubble shrinks by V.
template <int M, int V>
struct Interleaved1F1B : BuiltinSchedule<Interleaved1F1BFamily, M, V> {
  static_assert(M >= 1, "mpp: Interleaved1F1B<M, V> needs M >= 1 micro-batch");
  static_assert(
      V >= 2, "mpp: Interleaved1F1B<M, V> needs V >= 2 chunks per rank; use OneFOneB<M> for V = 1");
  static_assert(V <= max_chunks_per_rank,
                "mpp: Interleaved1F1B<M, V> needs V <= mpp::max_chunks_per_rank");
  static_assert(6 * M * V <= max_actions_per_rank,
                "mpp: Interleaved1F1B<M, V> exceeds mpp::max_actions_per_rank; lower M or V");
};

}  // namespace mpp
