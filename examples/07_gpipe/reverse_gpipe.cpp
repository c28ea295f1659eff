// Lab 7, exercise: GPipe with its backwards in reverse micro-batch order (M-1 ... 0), written as a
// hand-made table and checked by the verifier against GPipe<4> on 2 ranks, at compile time
// (static_assert) and printed at run time. Torch-free.
//
//   reverse_gpipe
//   mpp-schedule --import-csv examples/07_gpipe/reverse_gpipe.csv   (the same table, as a CSV)
#include <cstdio>

#include "mpp/comm/policy.hpp"
#include "mpp/schedule.hpp"

// [quote:table]
using namespace mpp::actions;  // F(micro-batch), B(micro-batch)
inline constexpr mpp::Action reverse_rows[2][8] = {
    {F(0), F(1), F(2), F(3), B(3), B(2), B(1), B(0)},  // rank 0 (stage 0)
    {F(0), F(1), F(2), F(3), B(3), B(2), B(1), B(0)},  // rank 1 (stage 1)
};
using ReverseGPipe = mpp::Custom<reverse_rows>;  // M = 4 and P = 2, deduced from the rows

using Comm = mpp::Async<mpp::Gloo>;
constexpr auto reverse = mpp::verify<ReverseGPipe, Comm>(2);
constexpr auto gpipe = mpp::verify<mpp::GPipe<4>, Comm>(2);
static_assert(reverse.ok, "the reverse-order table is a sound schedule");
static_assert(reverse.makespan == gpipe.makespan, "same step length as GPipe<4>");
static_assert(reverse.max_peak_in_flight() == gpipe.max_peak_in_flight(), "same peak memory");
// [/quote:table]

namespace {

// The verifier's figures, in mpp-schedule's words.
void print(const char* name, const mpp::VerifyResult& r) {
  std::printf("%-28s makespan %d, bubble %.1f%% (idle/busy %.3f), peak in flight per rank", name,
              r.makespan, 100.0 * r.bubble_fraction(), r.bubble_ratio());
  for (int rank = 0; rank < r.ranks; ++rank) std::printf(" %d", r.peak_in_flight[rank]);
  std::printf("\n");
}

}  // namespace

int main() {
  print("GPipe<4>, backwards 0..3:", gpipe);
  print("Custom, backwards 3..0:", reverse);
  // Under the rendezvous sends of Blocking<Gloo> the order must still match on both sides of each
  // channel: rank 1 sends the gradients of 3, 2, 1, 0 and rank 0 receives them in that order.
  constexpr auto blocking = mpp::verify<ReverseGPipe, mpp::Blocking<mpp::Gloo>>(2);
  static_assert(blocking.ok);
  print("Custom under Blocking<Gloo>:", blocking);
  return 0;
}
