#pragma once
// Multi-process tests: a test case spawns the test binary itself once per rank with
// `--mpp-worker=<name>` (see world.hpp); main.cpp then runs the worker registered under that
// name instead of doctest. A worker throws (or returns non-zero) to fail its rank.
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace mpp::test {

using WorkerFn = std::function<int(int argc, char** argv)>;

inline std::map<std::string, WorkerFn>& worker_registry() {
  static std::map<std::string, WorkerFn> registry;
  return registry;
}

struct WorkerRegistrar {
  WorkerRegistrar(const char* name, WorkerFn fn) { worker_registry().emplace(name, std::move(fn)); }
};

/// What a rank forked from a test case (world.hpp) does first so that it starts from the state an
/// exec'd rank would, e.g. LibTorch's default generator at its default seed.
inline std::vector<std::function<void()>>& fork_resets() {
  static std::vector<std::function<void()>> resets;
  return resets;
}

struct ForkReset {
  explicit ForkReset(std::function<void()> reset) { fork_resets().push_back(std::move(reset)); }
};

/// Runs the worker registered as `name` with argv as its arguments: its exit code; 2 (and a
/// message) when no worker has that name, 1 (and its message) when it throws. main.cpp defines it.
int run_worker(std::string_view name, int argc, char** argv);

}  // namespace mpp::test

#define MPP_DETAIL_CAT2(a, b) a##b
#define MPP_DETAIL_CAT(a, b) MPP_DETAIL_CAT2(a, b)

/// MPP_TEST_WORKER("name") { ...body using the rank's environment...; return 0; }
/// Its function and registrar are named by __COUNTER__, unique in a unit that includes several
/// test files (the unity groups of tests/CMakeLists.txt).
#define MPP_TEST_WORKER(name) MPP_DETAIL_TEST_WORKER(name, __COUNTER__)
#define MPP_DETAIL_TEST_WORKER(name, id)                                         \
  static int MPP_DETAIL_CAT(mpp_worker_fn_, id)(int argc, char** argv);          \
  static const ::mpp::test::WorkerRegistrar MPP_DETAIL_CAT(mpp_worker_reg_, id){ \
      name, &MPP_DETAIL_CAT(mpp_worker_fn_, id)};                                \
  static int MPP_DETAIL_CAT(mpp_worker_fn_, id)([[maybe_unused]] int argc,       \
                                                [[maybe_unused]] char** argv)
