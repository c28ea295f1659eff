// Compile-fail cases, one per MPP_COMPILE_FAIL_CASE value. Each must be rejected by the compiler
// with the message CTest expects (tests/schedule/CMakeLists.txt); MPP_COMPILE_FAIL_CASE=0 is the
// control that must compile, so a broken include cannot pass for a rejection.
#include "mpp/comm/policy.hpp"
#include "mpp/pipeline/with_ranks.hpp"
#include "mpp/schedule.hpp"

namespace {

using namespace mpp::actions;

#if MPP_COMPILE_FAIL_CASE == 0
// Control: the same constructions, sound.
static_assert(mpp::sound<mpp::verify<mpp::OneFOneB<8>, mpp::Blocking<mpp::Gloo>>(4)>);
static_assert(mpp::sound<mpp::verify<mpp::Interleaved1F1B<8, 2>, mpp::Async<mpp::Gloo>>(4)>);
inline constexpr mpp::Action good[2][4] = {{F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1), B(1)}};
static_assert(mpp::sound<mpp::verify<mpp::Custom<good>, mpp::Blocking<mpp::Gloo>>(2)>);
[[maybe_unused]] int sizes_it_can_run(int world_size) {
  return mpp::with_ranks<2, 4>(world_size, [](auto ranks) {
    static_assert(
        mpp::sound<mpp::verify<mpp::Interleaved1F1B<4, 2>, mpp::Async<mpp::Gloo>>(ranks)>);
    return int{ranks};
  });
}

#elif MPP_COMPILE_FAIL_CASE == 1
// A blocking 1F1B lowered the textbook way: in the steady state both neighbours send first.
constexpr auto naive_blocking_1f1b() {
  mpp::ScheduleTable lowered{};
  lowered = mpp::lower_naive(mpp::OneFOneB<8>::table(4), mpp::CommSemantics::rendezvous);
  return mpp::verify(lowered, mpp::CommSemantics::rendezvous);
}
static_assert(mpp::sound<naive_blocking_1f1b()>);

#elif MPP_COMPILE_FAIL_CASE == 2
// Interleaved1F1B needs M to be a multiple of the number of ranks.
static_assert(mpp::sound<mpp::verify<mpp::Interleaved1F1B<6, 2>, mpp::Async<mpp::Gloo>>(4)>);

#elif MPP_COMPILE_FAIL_CASE == 3
// A hand-written table that forgets one backward: rank 1 never runs B(1).
inline constexpr mpp::Action forgets[2][4] = {{F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1)}};
static_assert(mpp::sound<mpp::verify<mpp::Custom<forgets>, mpp::Async<mpp::Gloo>>(2)>);

#elif MPP_COMPILE_FAIL_CASE == 4
// A hand-written table that runs a backward before its forward: rank 0 runs B(1) before F(1).
inline constexpr mpp::Action early[2][4] = {{F(0), B(0), B(1), F(1)}, {F(0), B(0), F(1), B(1)}};
static_assert(mpp::sound<mpp::verify<mpp::Custom<early>, mpp::Async<mpp::Gloo>>(2)>);

#elif MPP_COMPILE_FAIL_CASE == 5
// A structural rule known from the type alone: Interleaved1F1B with one chunk per rank.
static_assert(mpp::verify<mpp::Interleaved1F1B<8, 1>, mpp::Async<mpp::Gloo>>(4).ok);

#elif MPP_COMPILE_FAIL_CASE == 6
// The plain form also rejects (C++20 cannot print a computed message there; mpp::sound<> does).
static_assert(mpp::verify<mpp::Interleaved1F1B<6, 2>, mpp::Async<mpp::Gloo>>(4).ok,
              "mpp: Interleaved1F1B<6, 2> on 4 ranks is rejected");
#elif MPP_COMPILE_FAIL_CASE == 7
// A structural rule: at least one micro-batch.
static_assert(mpp::verify<mpp::GPipe<0>, mpp::Async<mpp::Gloo>>(4).ok);
#elif MPP_COMPILE_FAIL_CASE == 8
// A program for 2, 3 or 4 ranks whose schedule cannot run on one of them: every size in the list
// is proven when the program is compiled, so the build stops on 3 (as Pipeline's own
// static_assert, the same expression, stops it).
[[maybe_unused]] int sizes_it_cannot_run(int world_size) {
  return mpp::with_ranks<2, 3, 4>(world_size, [](auto ranks) {
    static_assert(
        mpp::sound<mpp::verify<mpp::Interleaved1F1B<4, 2>, mpp::Async<mpp::Gloo>>(ranks)>);
    return int{ranks};
  });
}
#endif

}  // namespace

int main() { return 0; }
