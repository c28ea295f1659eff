#pragma once
// The one list of built-in schedules, and choosing one of them at run time by name.
//
// Adding a built-in schedule is one header (its tag and its family: generator, spellings,
// accepted knobs, the figures the literature gives) and one entry below. The static grid proves
// it for every P <= 8 and M <= 32 against its own figures, the equivalence tests train it
// against the monolith, the benchmark matrix runs it, and `mpp-schedule --list` names it for
// the docs' figures: all of them read this list.
#include <string_view>
#include <tuple>

#include "mpp/schedule/concepts.hpp"
#include "mpp/schedule/dual_pipe_v.hpp"
#include "mpp/schedule/gpipe.hpp"
#include "mpp/schedule/interleaved_1f1b.hpp"
#include "mpp/schedule/naive.hpp"
#include "mpp/schedule/one_f_one_b.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/v_half.hpp"
#include "mpp/schedule/v_min.hpp"
#include "mpp/schedule/v_zero_bubble.hpp"
#include "mpp/schedule/zero_bubble_h1.hpp"
#include "mpp/schedule/zero_bubble_h2.hpp"
#include "mpp/schedule/zero_bubble_v.hpp"

namespace mpp {

/// Every built-in schedule family, in the order tests, benchmarks and figures list them.
// [builtin-schedules] tests/pipeline/CMakeLists.txt counts the families between these markers
// clang-format off
using builtin_schedules = std::tuple<
    NaiveFamily,
    GPipeFamily,
    OneFOneBFamily,
    Interleaved1F1BFamily,
    ZeroBubbleH1Family,
    ZeroBubbleH2Family,
    ZeroBubbleVFamily,
    DualPipeVFamily,
    VHalfFamily,
    VMinFamily,
    VZeroBubbleFamily>;
// clang-format on
// [/builtin-schedules]

/// The number of built-in schedules.
inline constexpr int builtin_schedule_count =
    static_cast<int>(std::tuple_size_v<builtin_schedules>);

namespace detail {
template <class Tuple>
struct all_families;
template <class... F>
struct all_families<std::tuple<F...>> {
  static constexpr bool value = (schedule_family<F> && ...);
};
}  // namespace detail
static_assert(detail::all_families<builtin_schedules>::value,
              "mpp: every entry of builtin_schedules must meet mpp::schedule_family");

/// Calls `f.template operator()<Family>()` for each built-in schedule family, in list order.
template <class F>
constexpr void for_each_builtin_schedule(F&& f) {
  [&]<class... Families>(std::tuple<Families...>*) {
    (f.template operator()<Families>(), ...);
  }(static_cast<builtin_schedules*>(nullptr));
}

/// A built-in schedule chosen at run time (mpp-schedule, the labs' flags): a name or spelling
/// of one of `builtin_schedules` and its knobs.
struct ScheduleSpec {
  std::string_view schedule = "OneFOneB";  ///< "gpipe", "1f1b", "OneFOneB", ...
  int micro_batches = 1;                   ///< M, micro-batches per step (>= 1).
  int chunks_per_rank = 1;  ///< V, chunks per rank (used by families whose V is a knob).
};

/// True if `name` is a spelling (or the name) of family F.
template <schedule_family F>
constexpr bool names_family(std::string_view name) {
  if (name == F::name) return true;
  for (std::string_view s : F::spellings)
    if (s == name) return true;
  return false;
}

/// "naive, gpipe, 1f1b, ...": each built-in schedule's first spelling.
inline constexpr FixedText builtin_schedule_names() {
  FixedText out{};
  for_each_builtin_schedule([&]<class F>() {
    if (!out.empty()) out << ", ";
    out << F::spellings[0];
  });
  return out;
}

/// Generates a built-in schedule's compute table in place (no copy of the large table). An
/// unknown name, or knobs the schedule rejects, leave the reason in the table's `error`.
constexpr void generate_into(ScheduleTable& t, const ScheduleSpec& spec, int ranks) {
  bool found = false;
  for_each_builtin_schedule([&]<class F>() {
    if (found || !names_family<F>(spec.schedule)) return;
    found = true;
    F::generate(t, ranks, spec.micro_batches,
                F::fixed_chunks == 0 ? spec.chunks_per_rank : F::fixed_chunks);
  });
  if (!found) {
    t = ScheduleTable{};
    t.error << "mpp: unknown schedule '" << spec.schedule << "'; the built-in schedules are "
            << builtin_schedule_names().view();
  }
}

/// The table of `spec` on `ranks` ranks; a rule it breaks is in the table's `error`.
constexpr ScheduleTable generate(const ScheduleSpec& spec, int ranks) {
  ScheduleTable t{};
  generate_into(t, spec, ranks);
  return t;
}

/// Calls `f.template operator()<F>()` for the family `name` names; false if none does.
template <class Fn>
constexpr bool with_builtin_schedule(std::string_view name, Fn&& f) {
  bool found = false;
  for_each_builtin_schedule([&]<class F>() {
    if (!found && names_family<F>(name)) {
      found = true;
      f.template operator()<F>();
    }
  });
  return found;
}

}  // namespace mpp
