// The process launcher behind mpprun and run_world: variables, output, deadline, failure
// propagation and clean-up, checked on real processes (this binary re-executed as workers).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mpp/launch/launch.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value ? value : fallback;
}

int rank_from_env() { return std::atoi(env_or("RANK", "-1").c_str()); }

/// Sleeps in short steps so that a worker never outlives a broken launcher for long.
int sleep_for(std::chrono::seconds total) {
  const auto end = std::chrono::steady_clock::now() + total;
  while (std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(20ms);
  return 0;
}

bool process_gone(pid_t pid) {
  // A killed orphan may linger as a zombie until init reaps it; a zombie runs nothing.
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] == 'Z';
}

/// Set by a test before it launches: a rank that sees it is a fork of the test, not an exec.
int parent_marker = 0;

/// Options under which the rank's environment differs from this process's in torchrun variables
/// alone, so that fork_entry may be used.
mpp::launch::LaunchOptions fork_options(int ranks, std::string worker) {
  mpp::launch::LaunchOptions options;
  options.command = {mpp::test::self_executable(), "--mpp-worker=" + std::move(worker)};
  options.layout.nproc_per_node = ranks;
  options.single_thread_defaults = false;
  options.allocator_defaults = false;
  options.timeout = 30s;
  options.grace = 500ms;
  return options;
}

}  // namespace

MPP_TEST_WORKER("launch_env") {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                           "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS",
                           "OPENBLAS_NUM_THREADS", "MPP_EXTRA", "MPP_REMOVED"})
    std::printf("%s=%s\n", name, env_or(name, "<unset>").c_str());
  for (int i = 1; i < argc; ++i) std::printf("arg=%s\n", argv[i]);
  return 0;
}

MPP_TEST_WORKER("launch_output") {
  std::printf("out line 1 of rank %d\n", rank_from_env());
  std::fflush(stdout);
  std::fprintf(stderr, "err line of rank %d\n", rank_from_env());
  std::fflush(stderr);
  std::printf("unterminated tail");
  return 0;
}

// Rank 1 fails with code 3 after a moment; the others would sleep far beyond any test deadline.
MPP_TEST_WORKER("launch_fail_rank1") {
  if (rank_from_env() == 1) {
    std::this_thread::sleep_for(100ms);
    std::fprintf(stderr, "rank 1 gives up\n");
    return 3;
  }
  return sleep_for(30s);
}

// Rank 1 ignores SIGTERM; rank 0 fails once rank 1 is known to ignore it (a marker file).
MPP_TEST_WORKER("launch_ignore_term") {
  const std::filesystem::path marker =
      std::filesystem::temp_directory_path() / ("mpp_ignore_term_" + env_or("MASTER_PORT", "0"));
  if (rank_from_env() == 0) {
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (!std::filesystem::exists(marker) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(10ms);
    std::filesystem::remove(marker);
    return 5;
  }
  std::signal(SIGTERM, SIG_IGN);
  std::ofstream(marker) << "ready\n";
  return sleep_for(30s);
}

MPP_TEST_WORKER("launch_sleep") { return sleep_for(30s); }

MPP_TEST_WORKER("launch_abort") {
  if (rank_from_env() == 0) std::raise(SIGKILL);
  return sleep_for(30s);
}

// Starts a grandchild that would outlive the rank, reports its pid, then fails.
MPP_TEST_WORKER("launch_grandchild") {
  char sleep_path[] = "/bin/sleep";
  char seconds[] = "30";
  char* child_argv[] = {sleep_path, seconds, nullptr};
  pid_t child = 0;
  if (::posix_spawn(&child, sleep_path, nullptr, nullptr, child_argv, environ) != 0) return 10;
  std::printf("grandchild=%d\n", static_cast<int>(child));
  std::fflush(stdout);
  // Rank 1 fails only once rank 0 has its grandchild too (a marker per job, by port), so that
  // the launcher's stop never lands before rank 0 has started one.
  const std::filesystem::path marker =
      std::filesystem::temp_directory_path() / ("mpp_grandchild_" + env_or("MASTER_PORT", "0"));
  if (rank_from_env() == 0) {
    std::ofstream(marker) << child;
    return sleep_for(30s);
  }
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!std::filesystem::exists(marker) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  std::filesystem::remove(marker);
  return 4;
}

TEST_SUITE("launch") {
  TEST_CASE("torchrun variables: global rank = node_rank * nproc_per_node + local_rank") {
    mpp::launch::WorldLayout layout;
    layout.nproc_per_node = 2;
    layout.nnodes = 3;
    layout.node_rank = 2;
    layout.master_addr = "10.0.0.1";
    layout.master_port = 29500;
    const auto env = mpp::launch::rank_environment(layout, 1);
    auto value = [&](const std::string& name) {
      for (const auto& [key, val] : env)
        if (key == name) return val;
      return std::string("<unset>");
    };
    CHECK(value("RANK") == "5");
    CHECK(value("WORLD_SIZE") == "6");
    CHECK(value("LOCAL_RANK") == "1");
    CHECK(value("LOCAL_WORLD_SIZE") == "2");
    CHECK(value("GROUP_RANK") == "2");
    CHECK(value("NODE_RANK") == "2");
    CHECK(value("MASTER_ADDR") == "10.0.0.1");
    CHECK(value("MASTER_PORT") == "29500");
  }

  TEST_CASE("invalid layouts are rejected with the rule and the fix") {
    mpp::launch::WorldLayout layout;
    layout.nnodes = 2;
    CHECK_THROWS_WITH_AS(mpp::launch::validate(layout),
                         doctest::Contains("--master-port is required with --nnodes > 1"),
                         mpp::launch::LaunchError);
    layout.master_port = 29500;
    layout.node_rank = 2;
    CHECK_THROWS_WITH_AS(mpp::launch::validate(layout), doctest::Contains("--node-rank"),
                         mpp::launch::LaunchError);
    layout.node_rank = 0;
    layout.nproc_per_node = 0;
    CHECK_THROWS_WITH_AS(mpp::launch::validate(layout), doctest::Contains("--nproc-per-node"),
                         mpp::launch::LaunchError);
  }

  TEST_CASE("free_port returns a port that can be bound") {
    const int port = mpp::launch::free_port();
    CHECK(port > 0);
    CHECK(port <= 65535);
  }

  TEST_CASE("a missing program is one clear error before any rank starts") {
    mpp::launch::LaunchOptions options;
    options.command = {"mpp-no-such-program-anywhere"};
    options.layout.nproc_per_node = 2;
    CHECK_THROWS_WITH_AS(mpp::launch::launch(options), doctest::Contains("was not found on PATH"),
                         mpp::launch::LaunchError);
    options.command = {"/nonexistent/dir/prog"};
    CHECK_THROWS_WITH_AS(mpp::launch::launch(options),
                         doctest::Contains("cannot execute '/nonexistent/dir/prog': no such file"),
                         mpp::launch::LaunchError);
  }

  TEST_CASE("a program path that cannot run says what is true of it") {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("mpp_launch_not_executable_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto text = dir / "notes.txt";
    std::ofstream(text) << "not a program\n";
    std::filesystem::permissions(
        text, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    mpp::launch::LaunchOptions options;
    options.layout.nproc_per_node = 1;
    options.command = {dir.string()};
    CHECK_THROWS_WITH_AS(mpp::launch::launch(options), doctest::Contains("': is a directory"),
                         mpp::launch::LaunchError);
    options.command = {text.string()};
    const std::string not_executable =
        "': is not executable (make it so: chmod +x " + text.string() + ")";
    CHECK_THROWS_WITH_AS(mpp::launch::launch(options), doctest::Contains(not_executable.c_str()),
                         mpp::launch::LaunchError);
    options.command = {(text / "prog").string()};
    CHECK_THROWS_WITH_AS(mpp::launch::launch(options),
                         doctest::Contains("': a part of the path is not a directory"),
                         mpp::launch::LaunchError);
    options.command = {"/dev/null"};
    CHECK_THROWS_WITH_AS(mpp::launch::launch(options),
                         doctest::Contains("': is not a regular file"), mpp::launch::LaunchError);
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("every rank gets its torchrun variables, extra env, removed env and arguments") {
    mpp::test::WorldOptions options;
    options.args = {"--alpha", "beta"};
    options.env = {{"MPP_EXTRA", "yes"}};
    options.unset_env = {"MPP_REMOVED"};
    ::setenv("MPP_REMOVED", "should-not-reach-the-ranks", 1);
    const auto world = mpp::test::run_world(4, "launch_env", options);
    ::unsetenv("MPP_REMOVED");
    REQUIRE_MESSAGE(world.ok(), world.report());
    REQUIRE(world.size() == 4);
    const std::string port = std::to_string(world.launch.master_port);
    const std::string omp = env_or("OMP_NUM_THREADS", "1");
    const std::string openblas = env_or("OPENBLAS_NUM_THREADS", "1");
    for (int r = 0; r < 4; ++r) {
      const auto& out = world.output(r);
      INFO(out);
      CHECK(out.find("RANK=" + std::to_string(r) + "\n") == 0);
      CHECK(out.find("\nWORLD_SIZE=4\n") != std::string::npos);
      CHECK(out.find("\nLOCAL_RANK=" + std::to_string(r) + "\n") != std::string::npos);
      CHECK(out.find("\nLOCAL_WORLD_SIZE=4\n") != std::string::npos);
      CHECK(out.find("\nGROUP_RANK=0\n") != std::string::npos);
      CHECK(out.find("\nNODE_RANK=0\n") != std::string::npos);
      CHECK(out.find("\nMASTER_ADDR=127.0.0.1\n") != std::string::npos);
      CHECK(out.find("\nMASTER_PORT=" + port + "\n") != std::string::npos);
      CHECK(out.find("\nOMP_NUM_THREADS=" + omp + "\n") != std::string::npos);
      CHECK(out.find("\nOPENBLAS_NUM_THREADS=" + openblas + "\n") != std::string::npos);
      CHECK(out.find("\nMPP_EXTRA=yes\n") != std::string::npos);
      CHECK(out.find("\nMPP_REMOVED=<unset>\n") != std::string::npos);
      CHECK(out.find("\narg=--alpha\narg=beta\n") != std::string::npos);
    }
    CHECK(world.launch.master_port > 0);
  }

  TEST_CASE("stdout and stderr are captured per rank, line by line, tail included") {
    const auto world = mpp::test::run_world(2, "launch_output");
    REQUIRE_MESSAGE(world.ok(), world.report());
    for (int r = 0; r < 2; ++r) {
      const std::string rank = std::to_string(r);
      CHECK(world.output(r).find("out line 1 of rank " + rank + "\n") != std::string::npos);
      CHECK(world.output(r).find("err line of rank " + rank + "\n") != std::string::npos);
      CHECK(world.output(r).find("unterminated tail\n") != std::string::npos);
      CHECK(world.error_output(r) == "err line of rank " + rank + "\n");
    }
  }

  TEST_CASE("a failing rank stops the others promptly and its code is the job's") {
    const auto start = std::chrono::steady_clock::now();
    const auto world = mpp::test::run_world(3, "launch_fail_rank1");
    const auto took = std::chrono::steady_clock::now() - start;
    INFO(world.report());
    CHECK_FALSE(world.ok());
    CHECK(world.launch.first_failure == 1);
    CHECK(world.launch.exit_code() == 3);
    CHECK(world.exit_code(1) == 3);
    CHECK_FALSE(world.rank(1).stopped_by_launcher);
    CHECK(world.error_output(1) == "rank 1 gives up\n");
    for (int r : {0, 2}) {
      CHECK(world.rank(r).stopped_by_launcher);
      CHECK(world.rank(r).status.signal == SIGTERM);
    }
    CHECK(world.launch.summary().find("rank 1 exited with code 3") != std::string::npos);
    CHECK(took < 10s);
  }

  TEST_CASE("a rank that ignores SIGTERM is killed after the grace period") {
    mpp::test::WorldOptions options;
    options.grace = 300ms;
    const auto world = mpp::test::run_world(2, "launch_ignore_term", options);
    INFO(world.report());
    CHECK(world.launch.exit_code() == 5);
    CHECK(world.rank(1).status.signal == SIGKILL);
    CHECK(world.launch.elapsed < 10s);
  }

  TEST_CASE("a rank killed by a signal is reported as such") {
    const auto world = mpp::test::run_world(2, "launch_abort");
    INFO(world.report());
    CHECK(world.launch.first_failure == 0);
    CHECK(world.launch.exit_code() == 128 + SIGKILL);
    CHECK(world.rank(0).describe().find("killed by signal 9 (SIGKILL)") != std::string::npos);
  }

  TEST_CASE("the deadline stops a hung world and says so") {
    mpp::test::WorldOptions options;
    options.timeout = 500ms;
    const auto world = mpp::test::run_world(2, "launch_sleep", options);
    INFO(world.report());
    CHECK(world.timed_out());
    CHECK_FALSE(world.ok());
    CHECK(world.launch.exit_code() == 124);
    CHECK(world.launch.first_failure == -1);
    CHECK(world.launch.summary().find("deadline of 500 ms expired") != std::string::npos);
    CHECK(world.launch.elapsed < 10s);
  }

  TEST_CASE("processes a rank started are gone when the job ends") {
    const auto world = mpp::test::run_world(2, "launch_grandchild");
    INFO(world.report());
    CHECK(world.launch.exit_code() == 4);
    for (int r = 0; r < 2; ++r) {
      const auto& out = world.output(r);
      const auto at = out.find("grandchild=");
      REQUIRE(at != std::string::npos);
      const pid_t pid = std::atoi(out.c_str() + at + 11);
      REQUIRE(pid > 0);
      // SIGKILL is asynchronous: give the kernel a moment to finish the job.
      const auto until = std::chrono::steady_clock::now() + 2s;
      while (!process_gone(pid) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(10ms);
      CHECK_MESSAGE(process_gone(pid), "grandchild ", pid, " of rank ", r, " survived");
    }
  }

  TEST_CASE("stop_all_on_failure=false lets the others run to their own end") {
    mpp::test::WorldOptions options;
    options.stop_all_on_failure = false;
    options.timeout = 600ms;
    const auto world = mpp::test::run_world(2, "launch_fail_rank1", options);
    INFO(world.report());
    CHECK(world.exit_code(1) == 3);
    CHECK(world.timed_out());  // rank 0 kept sleeping until the deadline
    CHECK(world.rank(0).stopped_by_launcher);
  }

  TEST_CASE("logs go to <log_dir>/rank_<r>/ and the console callback sees prefixed ranks") {
    const auto dir =
        std::filesystem::temp_directory_path() / ("mpp_launch_logs_" + std::to_string(::getpid()));
    mpp::launch::LaunchOptions options;
    options.command = {mpp::test::self_executable(), "--mpp-worker=launch_output"};
    options.layout.nproc_per_node = 2;
    options.log_dir = dir.string();
    options.timeout = 30s;
    std::ostringstream seen;
    options.on_line = [&](int rank, mpp::launch::Stream stream, std::string_view line) {
      seen << rank << (stream == mpp::launch::Stream::err ? " err " : " out ") << line << "\n";
    };
    const auto result = mpp::launch::launch(options);
    REQUIRE_MESSAGE(result.ok(), result.summary());
    for (int r = 0; r < 2; ++r) {
      std::ifstream out(dir / ("rank_" + std::to_string(r)) / "stdout.log");
      std::ifstream err(dir / ("rank_" + std::to_string(r)) / "stderr.log");
      std::stringstream out_text, err_text;
      out_text << out.rdbuf();
      err_text << err.rdbuf();
      CHECK(out_text.str() == "out line 1 of rank " + std::to_string(r) + "\nunterminated tail\n");
      CHECK(err_text.str() == "err line of rank " + std::to_string(r) + "\n");
      CHECK(seen.str().find(std::to_string(r) + " err err line of rank " + std::to_string(r)) !=
            std::string::npos);
    }
    std::filesystem::remove_all(dir);
  }
  TEST_CASE("environment_allows_fork: torchrun variables and MPP_* may differ, nothing else") {
    using mpp::launch::detail::environment_allows_fork;
    using mpp::launch::detail::merged_environment;
    const std::vector<std::string> rank_names{"RANK", "WORLD_SIZE"};
    CHECK(environment_allows_fork(merged_environment({}, {}), rank_names));
    CHECK(environment_allows_fork(merged_environment({{"RANK", "3"}, {"WORLD_SIZE", "4"}}, {}),
                                  rank_names));
    CHECK(environment_allows_fork(merged_environment({{"MPP_TIMEOUT_S", "9"}}, {}), rank_names));
    ::setenv("MPP_LAUNCH_TEST_GONE", "1", 1);
    ::setenv("LAUNCH_TEST_GONE", "1", 1);
    CHECK(environment_allows_fork(merged_environment({}, {"MPP_LAUNCH_TEST_GONE"}), rank_names));
    CHECK_FALSE(environment_allows_fork(merged_environment({}, {"LAUNCH_TEST_GONE"}), rank_names));
    ::unsetenv("MPP_LAUNCH_TEST_GONE");
    ::unsetenv("LAUNCH_TEST_GONE");
    const std::string threads = env_or("OMP_NUM_THREADS", "") + "7";
    CHECK_FALSE(environment_allows_fork(merged_environment({{"OMP_NUM_THREADS", threads}}, {}),
                                        rank_names));
    CHECK_FALSE(environment_allows_fork(merged_environment({{"LD_PRELOAD", "x.so"}}, {}), {}));
  }

  TEST_CASE("fork_entry: a rank is a fork of the launcher, started as an exec'd rank would be") {
    parent_marker = 7;
    const int leaked = ::open("/dev/null", O_RDONLY);  // without O_CLOEXEC
    REQUIRE(leaked >= 3);
    struct sigaction ignore {
    }, previous{};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGTERM, &ignore, &previous);
    auto options = fork_options(2, "launch_env");
    options.env = {{"MPP_EXTRA", "yes"}};
    options.fork_entry = [leaked](const std::vector<std::string>& argv) {
      struct sigaction term {};
      ::sigaction(SIGTERM, nullptr, &term);
      char stdin_target[64] = {};
      [[maybe_unused]] auto n =
          ::readlink("/proc/self/fd/0", stdin_target, sizeof stdin_target - 1);
      std::printf("marker=%d rank=%s extra=%s argv1=%s\n", parent_marker,
                  env_or("RANK", "?").c_str(), env_or("MPP_EXTRA", "?").c_str(),
                  argv.at(1).c_str());
      std::printf("leaked fd open: %d, SIGTERM default: %d, stdin: %s, own group: %d\n",
                  ::fcntl(leaked, F_GETFD) != -1, term.sa_handler == SIG_DFL, stdin_target,
                  ::getpgrp() == ::getpid());
      return 0;
    };
    const auto result = mpp::launch::launch(options);
    ::sigaction(SIGTERM, &previous, nullptr);
    ::close(leaked);
    parent_marker = 0;
    REQUIRE_MESSAGE(result.ok(), result.summary());
    REQUIRE(result.ranks.size() == 2);
    for (int r = 0; r < 2; ++r) {
      const auto& rank = result.ranks[static_cast<std::size_t>(r)];
      INFO(rank.output);
      CHECK(rank.forked);
      CHECK(rank.output.find("marker=7 rank=" + std::to_string(r) +
                             " extra=yes argv1=--mpp-worker=launch_env\n") == 0);
      CHECK(rank.output.find("leaked fd open: 0, SIGTERM default: 1, stdin: /dev/null, own group: "
                             "1\n") != std::string::npos);
    }
  }

  TEST_CASE("fork_entry: a forked rank's failure stops the others, an exception is its message") {
    auto options = fork_options(2, "launch_sleep");
    options.fork_entry = [](const std::vector<std::string>&) -> int {
      if (rank_from_env() == 1) throw std::runtime_error("rank 1's entry gives up");
      return sleep_for(30s);
    };
    const auto result = mpp::launch::launch(options);
    INFO(result.summary());
    REQUIRE(result.ranks.size() == 2);
    CHECK(result.ranks[0].forked);
    CHECK(result.first_failure == 1);
    CHECK(result.ranks[1].status.exit_code == 1);
    CHECK(result.ranks[1].error_output == "rank 1's entry gives up\n");
    CHECK(result.ranks[0].stopped_by_launcher);
    CHECK(result.ranks[0].status.signal == SIGTERM);
    CHECK(result.elapsed < 10s);
  }

  TEST_CASE("fork_entry is not used while another thread runs, nor for a load-time variable") {
    auto entry = [](const std::vector<std::string>&) {
      std::printf("the entry ran\n");
      return 0;
    };
    {  // another thread: the rank is exec'd and runs the command's worker
      std::mutex mutex;
      std::condition_variable wake;
      bool done = false;
      std::thread other([&] {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return done; });
      });
      auto options = fork_options(1, "launch_env");
      options.fork_entry = entry;
      const auto result = mpp::launch::launch(options);
      {
        const std::lock_guard<std::mutex> lock(mutex);
        done = true;
      }
      wake.notify_one();
      other.join();
      REQUIRE_MESSAGE(result.ok(), result.summary());
      CHECK_FALSE(result.ranks[0].forked);
      CHECK(result.ranks[0].output.find("RANK=0\n") == 0);
    }
    {  // a variable a library reads when it loads
      auto options = fork_options(1, "launch_env");
      options.fork_entry = entry;
      const std::string threads = env_or("OMP_NUM_THREADS", "") + "7";
      options.env = {{"OMP_NUM_THREADS", threads}};
      const auto result = mpp::launch::launch(options);
      REQUIRE_MESSAGE(result.ok(), result.summary());
      CHECK_FALSE(result.ranks[0].forked);
      CHECK(result.ranks[0].output.find("\nOMP_NUM_THREADS=" + threads + "\n") !=
            std::string::npos);
    }
  }
}
