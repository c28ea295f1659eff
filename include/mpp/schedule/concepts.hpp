#pragma once
// The `mpp::schedule` concept (a compile-time schedule: its knobs and its table) and the
// `mpp::schedule_family` concept (a built-in schedule as chosen at run time by name).
#include <concepts>
#include <string>
#include <string_view>

#include "mpp/schedule/table.hpp"
#include "mpp/schedule/verify.hpp"

namespace mpp {

/// A schedule names its knobs and generates the compute table for a number of ranks P.
/// A type of the user's meets it as well as the built-ins: `mpp::Pipeline`, the verifier and
/// the test and benchmark helpers take any `schedule`.
template <class S>
concept schedule = requires(int ranks) {
  { S::micro_batches } -> std::convertible_to<int>;
  { S::chunks_per_rank } -> std::convertible_to<int>;
  { S::name } -> std::convertible_to<std::string_view>;
  { S::table(ranks) } -> std::same_as<ScheduleTable>;
};

/// A built-in schedule as a run-time choice: its name and spellings, which knobs it takes, its
/// generator for any (P, M, V), the compile-time tag for given knobs (`with<M, V>`), and what
/// the literature says of its figures (checked for every P <= 8 and M <= 32 by the static grid).
template <class F>
concept schedule_family = requires(ScheduleTable& t, const VerifyResult& r, int n) {
  { F::name } -> std::convertible_to<std::string_view>;
  { F::spellings[0] } -> std::convertible_to<std::string_view>;
  { F::takes_micro_batches } -> std::convertible_to<bool>;
  { F::fixed_chunks } -> std::convertible_to<int>;
  {F::generate(t, n, n, n)};
  { F::accepts(n, n, n) } -> std::same_as<bool>;
  { F::matches_literature(r, n, n, n) } -> std::same_as<bool>;
  requires schedule<typename F::template with<1, 2>>;
};

/// Fills `t` with the compute table of `S` on `ranks` ranks, in place when the schedule can
/// (a table is large: generating into it avoids a copy).
template <schedule S>
constexpr void table_into(ScheduleTable& t, int ranks) {
  if constexpr (requires { S::generate(t, ranks); })
    S::generate(t, ranks);
  else
    t = S::table(ranks);
}

/// "GPipe<8>", "Interleaved1F1B<8,2>", "Naive": a schedule's name with its knobs, the one
/// spelling benchmarks, tests, traces and messages use.
template <schedule S>
std::string schedule_display_name() {
  if constexpr (requires { S::display_name(); })
    return S::display_name();
  else
    return std::string(S::name);
}

}  // namespace mpp
