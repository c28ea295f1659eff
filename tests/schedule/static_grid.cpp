// Every built-in schedule of mpp::builtin_schedules, for every P <= 8 and M <= 32 (V = 2 where V
// is a knob), under both comm semantics: proven sound by the compiler where its family accepts
// (P, M, V), with the figures the literature gives (each family's matches_literature) checked
// on the same replay, and rejected by its generator where the family does not accept them.
// docs/schedules.md quotes its compile time. It is compiled in parts, each the M of
// [MPP_GRID_M_FIRST, MPP_GRID_M_LAST], side by side (target mpp_schedule_static_grid).
#include <tuple>
#include <utility>

#include "mpp/comm/policy.hpp"
#include "mpp/schedule.hpp"

namespace {

using mpp::Async;
using mpp::Blocking;
using mpp::Gloo;

template <class Sched, class Comm>
constexpr mpp::VerifyResult proven(int p) {
  using Family = typename Sched::family;
  mpp::VerifyResult r = mpp::verify<Sched, Comm>(p);
  if (r.ok && !Family::matches_literature(r, p, Sched::micro_batches, Sched::chunks_per_rank)) {
    r.ok = false;
    r.message = mpp::FixedText{};
    r.message << "mpp: known answer broken for " << Sched::name << " M=" << Sched::micro_batches
              << " V=" << Sched::chunks_per_rank << " on " << p << " ranks: makespan " << r.makespan
              << ", busy " << r.total_busy << ", peak in flight " << r.max_peak_in_flight();
  }
  return r;
}

template <class Sched, int P>
constexpr bool prove_on() {
  using Family = typename Sched::family;
  if constexpr (Family::accepts(P, Sched::micro_batches, Sched::chunks_per_rank))
    return mpp::sound<proven<Sched, Blocking<Gloo>>(P)> &&
           mpp::sound<proven<Sched, Async<Gloo>>(P)>;
  else  // rejected by design, with the generator's message (see the compile-fail tests)
    return mpp::verify<Sched, Async<Gloo>>(P).rule == mpp::Rule::parameters;
}

template <class Sched, int... P>
constexpr bool prove(std::integer_sequence<int, P...>) {
  return (prove_on<Sched, P + 1>() && ...);
}

constexpr auto ranks_1_to_8 = std::make_integer_sequence<int, 8>{};

template <int M, class... Families>
constexpr bool prove_families(std::tuple<Families...>*) {
  // A family without an M knob is proven once, at M = 1.
  return ((M > 1 && !Families::takes_micro_batches
               ? true
               : prove<typename Families::template with<M, 2>>(ranks_1_to_8)) &&
          ...);
}

// One top-level static_assert per M: the compiler reclaims its constexpr garbage between
// top-level declarations, not within one, so a single fold over all M would hold gigabytes.
template <int M>
constexpr bool prove_m() {
  if constexpr (M < MPP_GRID_M_FIRST || M > MPP_GRID_M_LAST)
    return true;
  else
    return prove_families<M>(static_cast<mpp::builtin_schedules*>(nullptr));
}

#define MPP_PROVE_M(M) static_assert(prove_m<M>());
#define MPP_PROVE_8(M) \
  MPP_PROVE_M(M + 1)   \
  MPP_PROVE_M(M + 2)   \
  MPP_PROVE_M(M + 3)   \
  MPP_PROVE_M(M + 4) MPP_PROVE_M(M + 5) MPP_PROVE_M(M + 6) MPP_PROVE_M(M + 7) MPP_PROVE_M(M + 8)
MPP_PROVE_8(0)
MPP_PROVE_8(8)
MPP_PROVE_8(16)
MPP_PROVE_8(24)
#undef MPP_PROVE_8
#undef MPP_PROVE_M

}  // namespace
