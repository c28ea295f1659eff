#pragma once
// Multi-process tests: run_world(n, "worker") starts this test binary n times as
// `/proc/self/exe --mpp-worker=worker`, each with the torchrun variables of its rank, through the
// same launcher as mpprun (mpp/launch). It waits for all ranks within a deadline and returns each
// rank's exit status and output, so a test can CHECK success as well as error messages.
// A rank is a fork of the test that runs the worker where the launcher allows it
// (LaunchOptions::fork_entry: this process runs one thread, the environment CTest gives the tests
// is the ranks'), which saves LibTorch's start; else, and under a sanitizer, an exec:
//
//   MPP_TEST_WORKER("ring") { ...; return 0; }
//   TEST_CASE("ring") {
//     auto world = mpp::test::run_world(4, "ring");
//     CHECK_MESSAGE(world.ok(), world.report());
//   }
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpp/launch/launcher.hpp"
#include "worker.hpp"

namespace mpp::test {

struct WorldOptions {
  // Every multi-process test is bounded: a hung rank fails the test instead of hanging it.
  std::chrono::milliseconds timeout{60'000};
  std::vector<std::string> args;                         // appended after --mpp-worker=<name>
  std::vector<std::pair<std::string, std::string>> env;  // extra variables for every rank
  std::vector<std::string> unset_env;  // variables removed (e.g. {"RANK"} to test env errors)
  // true: the first failing rank stops the others (as mpprun does). false: every rank runs to
  // its own end or the deadline, e.g. to check the error a survivor reports about a dead peer.
  bool stop_all_on_failure = true;
  std::chrono::milliseconds grace{2'000};
  int master_port = 0;  // 0: a free port
};

struct WorldResult {
  launch::LaunchResult launch;

  [[nodiscard]] bool ok() const { return launch.ok(); }
  [[nodiscard]] bool timed_out() const { return launch.timed_out; }
  [[nodiscard]] int size() const { return static_cast<int>(launch.ranks.size()); }
  [[nodiscard]] const launch::RankResult& rank(int r) const { return launch.ranks.at(r); }
  [[nodiscard]] int exit_code(int r) const { return rank(r).status.shell_code(); }
  [[nodiscard]] const std::string& output(int r) const { return rank(r).output; }
  [[nodiscard]] const std::string& error_output(int r) const { return rank(r).error_output; }

  /// Everything needed to understand a failure, for CHECK_MESSAGE / INFO.
  [[nodiscard]] std::string report() const {
    std::string text = launch.summary();
    for (const auto& r : launch.ranks) {
      text += "---- rank " + std::to_string(r.rank) + " (" + r.status.describe() + ") output:\n";
      text += r.output;
    }
    return text;
  }
};

/// The path of the running test binary, re-executed for each rank.
inline std::string self_executable() {
  std::string path(4096, '\0');
  const ssize_t length = ::readlink("/proc/self/exe", path.data(), path.size());
  if (length <= 0) throw launch::LaunchError("mpp test: cannot read /proc/self/exe");
  path.resize(static_cast<std::size_t>(length));
  return path;
}

/// Whether run_world may fork its ranks: not under a sanitizer, whose checks at exit (leaks) a
/// fork would skip and whose threads would refuse it anyway.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool forks_ranks = false;
#else
inline constexpr bool forks_ranks = true;
#endif

/// A rank forked from the test: the worker that argv's `--mpp-worker=<name>` names, from the state
/// an exec'd rank starts in (fork_resets).
inline int run_forked_worker(const std::vector<std::string>& argv) {
  for (const auto& reset : fork_resets()) reset();
  std::vector<char*> pointers;
  for (const auto& arg : argv) pointers.push_back(const_cast<char*>(arg.c_str()));
  pointers.push_back(nullptr);
  constexpr std::string_view flag = "--mpp-worker=";
  for (const auto& arg : argv)
    if (std::string_view(arg).substr(0, flag.size()) == flag)
      return run_worker(std::string_view(arg).substr(flag.size()), static_cast<int>(argv.size()),
                        pointers.data());
  return run_worker("", static_cast<int>(argv.size()), pointers.data());
}

inline WorldResult run_world(int world_size, std::string_view worker, WorldOptions options = {}) {
  launch::LaunchOptions launch_options;
  launch_options.command = {self_executable(), "--mpp-worker=" + std::string(worker)};
  launch_options.command.insert(launch_options.command.end(), options.args.begin(),
                                options.args.end());
  launch_options.layout.nproc_per_node = world_size;
  launch_options.layout.master_port = options.master_port;
  launch_options.env = std::move(options.env);
  launch_options.unset_env = std::move(options.unset_env);
  launch_options.timeout = options.timeout;
  launch_options.grace = options.grace;
  launch_options.stop_all_on_failure = options.stop_all_on_failure;
  if (forks_ranks) launch_options.fork_entry = run_forked_worker;
  return WorldResult{launch::launch(launch_options)};
}

}  // namespace mpp::test
