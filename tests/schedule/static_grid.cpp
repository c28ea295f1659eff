// Every built-in schedule, for every P <= 8 and M <= 32 (Interleaved: M a multiple of P,
// V = 2), under both comm semantics, proven sound by the compiler, with the known answers
// of the literature checked on the figures of the same replay. docs/schedules.md quotes this
// TU's compile time (it builds as its own target: mpp_schedule_static_grid).
#include <utility>

#include "mpp/comm/policy.hpp"
#include "mpp/schedule.hpp"

namespace {

using mpp::Async;
using mpp::Blocking;
using mpp::Gloo;

template <class Sched>
constexpr bool known_answer(const mpp::VerifyResult& r, int p) {
  const int m = Sched::micro_batches, v = Sched::chunks_per_rank;
  const long idle = r.total_idle(), busy = r.total_busy, makespan = r.makespan;
  if (Sched::name == "GPipe" || Sched::name == "Naive" || Sched::name == "OneFOneB") {
    // Bubble (p-1)/(m+p-1) of the step, exactly.
    if (idle * (m + p - 1) != static_cast<long>(p - 1) * p * makespan) return false;
    for (int rank = 0; rank < p; ++rank) {
      const int expected = Sched::name == "OneFOneB" ? (m < p - rank ? m : p - rank) : m;
      if (r.peak_in_flight[rank] != expected) return false;
    }
    return true;
  }
  if (Sched::name == "Interleaved1F1B")  // (p-1)/(v*m) of the ideal compute, exactly
    return idle * v * m == static_cast<long>(p - 1) * busy;
  if (Sched::name == "ZeroBubbleH1") {
    // With T_F = T_I = T_W each rank idles (p-1)(T_F + T_I - T_W) = p-1: a third of 1F1B's
    // 3(p-1), once M >= P; and no rank holds more than P micro-batches (1F1B's peak).
    if (m >= p && makespan != 3 * m + p - 1) return false;
    return r.max_peak_in_flight() == (m < p ? m : p);
  }
  return false;
}

template <class Sched, class Comm>
constexpr mpp::VerifyResult proven(int p) {
  mpp::VerifyResult r = mpp::verify<Sched, Comm>(p);
  if (r.ok && !known_answer<Sched>(r, p)) {
    r.ok = false;
    r.message = mpp::FixedText{};
    r.message << "mpp: known answer broken for " << Sched::name << " M=" << Sched::micro_batches
              << " V=" << Sched::chunks_per_rank << " on " << p << " ranks: makespan " << r.makespan
              << ", busy " << r.total_busy;
  }
  return r;
}

template <class Sched, int... P>
constexpr bool prove(std::integer_sequence<int, P...>) {
  return ((mpp::sound<proven<Sched, Blocking<Gloo>>(P + 1)> &&
           mpp::sound<proven<Sched, Async<Gloo>>(P + 1)>)&&...);
}

template <int M, int V, int P>
constexpr bool prove_interleaved_on() {
  // Only P that divide M: other P are rejected by design (see the compile-fail tests).
  if constexpr (M % P != 0)
    return true;
  else
    return mpp::sound<proven<mpp::Interleaved1F1B<M, V>, Blocking<Gloo>>(P)> &&
           mpp::sound<proven<mpp::Interleaved1F1B<M, V>, Async<Gloo>>(P)>;
}

template <int M, int V, int... P>
constexpr bool prove_interleaved(std::integer_sequence<int, P...>) {
  return (prove_interleaved_on<M, V, P + 1>() && ...);
}

constexpr auto ranks_1_to_8 = std::make_integer_sequence<int, 8>{};

// One top-level static_assert per M: the compiler reclaims its constexpr garbage between
// top-level declarations, not within one, so a single fold over all M would hold gigabytes.
template <int M>
constexpr bool prove_m() {
  if constexpr (M > MPP_GRID_MAX_M)
    return true;
  else
    return prove<mpp::GPipe<M>>(ranks_1_to_8) && prove<mpp::OneFOneB<M>>(ranks_1_to_8) &&
           prove<mpp::ZeroBubbleH1<M>>(ranks_1_to_8) && prove_interleaved<M, 2>(ranks_1_to_8);
}

static_assert(prove<mpp::Naive>(ranks_1_to_8));
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
