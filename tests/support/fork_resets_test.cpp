// A rank that run_world forks from a test case starts from the LibTorch state an exec'd rank
// starts in (fork_resets.cpp): here, the default generator at its default seed.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "mpp/launch/launcher.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

MPP_TEST_WORKER("fork_resets_draw") {
  std::printf("drew %.9f\n", torch::rand({1}).item<double>());
  return 0;
}

TEST_CASE("run_world: a forked rank draws what a new process draws from the default generator") {
  torch::manual_seed(12345);
  (void)torch::rand({100});  // the test case's own draws move its generator on
  const auto world = mpp::test::run_world(2, "fork_resets_draw");
  REQUIRE_MESSAGE(world.ok(), world.report());
  auto fresh = at::detail::createCPUGenerator(c10::default_rng_seed_val);
  char expected[64];
  std::snprintf(expected, sizeof expected, "drew %.9f\n", at::rand({1}, fresh).item<double>());
  // Under CTest this process has the variables the launcher gives every rank, and
  // MPP_TEST_RANKS_ENVIRONMENT says so (tests/CMakeLists.txt): the ranks are forks. Run by hand
  // without them, or under a sanitizer (world.hpp), they are exec'd.
  bool ranks_environment = true;
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"})
    ranks_environment =
        ranks_environment && std::getenv(name) != nullptr && std::string(std::getenv(name)) == "1";
  for (const auto& [name, value] : mpp::launch::allocator_environment)
    ranks_environment = ranks_environment && std::getenv(name) != nullptr &&
                        std::string(std::getenv(name)) == value;
  if (std::getenv("MPP_TEST_RANKS_ENVIRONMENT") != nullptr)
    CHECK_MESSAGE(ranks_environment,
                  "tests/CMakeLists.txt's rank_environment.cmake no longer gives the cases the "
                  "variables LaunchOptions gives every rank (launcher.hpp): no rank can be a fork");
  const bool forked = mpp::test::forks_ranks && ranks_environment;
  for (int r = 0; r < 2; ++r) {
    INFO(world.output(r));
    CHECK(world.output(r) == expected);
    CHECK(world.rank(r).forked == forked);
  }
}
