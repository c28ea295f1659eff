#pragma once
// Naive: stop-and-wait. The whole batch is one micro-batch, forward through every stage, then
// back; one rank works at a time.
#include <string_view>

#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/gpipe.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

struct Naive;

/// The Naive schedule as a run-time choice (see `schedule_family`).
struct NaiveFamily {
  static constexpr std::string_view name = "Naive";  ///< The tag's name.
  /// What `mpp-schedule` and the labs' flags accept.
  static constexpr std::string_view spellings[] = {"naive", "Naive"};
  static constexpr bool takes_micro_batches = false;  ///< M is always 1.
  static constexpr int fixed_chunks = 1;              ///< V is always 1.
  /// The compile-time tag (the knobs are ignored: Naive has none).
  template <int M, int V>
  using with = Naive;

  /// Fills `t` for P = `ranks`; M must be 1 (the whole batch).
  static constexpr void generate(ScheduleTable& t, int ranks, int micro_batches, int) {
    t = ScheduleTable{};
    detail::init_table(t, name, ranks, 1, 1, 6);
    if (!t.ok()) return;
    if (micro_batches > 1) {
      t.error << "mpp: Naive runs one micro-batch (the whole batch); got M=" << micro_batches
              << "; use GPipe<M> to split the batch";
      return;
    }
    detail::fill_gpipe(t);
  }
  /// Every P.
  static constexpr bool accepts(int, int micro_batches, int) { return micro_batches == 1; }
  /// Bubble (P-1)/P of the step: one rank works at a time.
  static constexpr bool matches_literature(const VerifyResult& r, int p, int, int) {
    return static_cast<long>(r.total_idle()) == static_cast<long>(p - 1) * r.makespan;
  }
};

/// Stop-and-wait: the whole batch is one micro-batch, forward through every stage, then back.
struct Naive : BuiltinSchedule<NaiveFamily, 1, 1> {};

}  // namespace mpp
