// with_ranks: one binary, several world sizes (torch-free, in the schedule test binary). The
// compile-time half, a size the schedule cannot run stopping the build, is the compile-fail case
// with_ranks_size_the_schedule_cannot_run in tests/schedule.
#include "mpp/pipeline/with_ranks.hpp"

#include <doctest/doctest.h>

#include <string>
#include <type_traits>
#include <vector>

#include "mpp/comm/policy.hpp"
#include "mpp/schedule.hpp"

TEST_SUITE("with_ranks") {
  TEST_CASE("with_ranks calls f with the matching size as a constant and returns its result") {
    std::vector<int> called;
    auto f = [&](auto ranks) {
      static_assert(std::is_same_v<decltype(ranks), std::integral_constant<int, ranks.value>>);
      called.push_back(ranks.value);
      // Each instantiation is a compile-time proof: the schedule for exactly this many ranks.
      static_assert(mpp::sound<mpp::verify<mpp::OneFOneB<8>, mpp::Async<mpp::Shm>>(ranks)>);
      return ranks.value * 10;
    };
    CHECK(mpp::with_ranks<2, 4, 8>(2, f) == 20);
    CHECK(mpp::with_ranks<2, 4, 8>(4, f) == 40);
    CHECK(mpp::with_ranks<2, 4, 8>(8, f) == 80);
    CHECK(called == std::vector<int>{2, 4, 8});
    // A void f, and a reference result passed through.
    int seen = 0;
    mpp::with_ranks<3>(3, [&](auto ranks) { seen = ranks; });
    CHECK(seen == 3);
    int target = 7;
    int& same = mpp::with_ranks<1, 2>(2, [&](auto) -> int& { return target; });
    CHECK(&same == &target);
  }

  TEST_CASE("a world size outside the list is refused with the list and how to launch") {
    auto f = [](auto ranks) { return int{ranks}; };
    std::string message;
    try {
      mpp::with_ranks<2, 4, 8>(3, f);
    } catch (const mpp::WorldSizeError& error) {
      message = error.what();
    }
    CHECK(message ==
          "mpp: this program runs on 2, 4 or 8 ranks, not 3; launch one of those, e.g. mpprun "
          "--nproc-per-node 2 <program>");
    CHECK_THROWS_WITH_AS(mpp::with_ranks<4>(1, f),
                         "mpp: this program runs on 4 ranks, not 1; launch that many, e.g. "
                         "mpprun --nproc-per-node 4 <program>",
                         std::invalid_argument);
    auto none = [&] { return mpp::with_ranks<2, 4>(0, f); };
    CHECK_THROWS_AS(none(), mpp::WorldSizeError);
  }
}
