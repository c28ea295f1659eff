// mpprun end to end: the built launcher runs this test binary's workers as its ranks.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mpp/launch/launch.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

namespace {

using namespace std::chrono_literals;

int env_rank() {
  const char* rank = std::getenv("RANK");
  return rank ? std::atoi(rank) : -1;
}

int nap(std::chrono::seconds total) {
  const auto end = std::chrono::steady_clock::now() + total;
  while (std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(20ms);
  return 0;
}

/// Runs mpprun with `args` (a single process, through the same launcher) and returns its result.
mpp::launch::LaunchResult run_mpprun(
    std::vector<std::string> args,
    std::function<void(int, mpp::launch::Stream, std::string_view)> on_line = {},
    mpp::launch::EnvList env = {}, std::vector<std::string> unset = {}) {
  mpp::launch::LaunchOptions options;
  options.env = std::move(env);  // mpprun's own environment, which its ranks inherit
  options.command = {MPP_MPPRUN_PATH};
  options.command.insert(options.command.end(), args.begin(), args.end());
  options.single_thread_defaults = false;  // mpprun itself must set them for its ranks
  options.allocator_defaults = false;
  options.unset_env = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_",
                       "MALLOC_MMAP_THRESHOLD_"};
  options.unset_env.insert(options.unset_env.end(), unset.begin(), unset.end());
  options.timeout = 60s;
  options.on_line = std::move(on_line);
  return mpp::launch::launch(options);
}

std::vector<pid_t> pids_in(const std::string& text, const std::string& key) {
  std::vector<pid_t> pids;
  const std::regex pattern(key + "=([0-9]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it)
    pids.push_back(std::stoi((*it)[1]));
  return pids;
}

bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] == 'Z';
}

bool all_gone(const std::vector<pid_t>& pids) {
  const auto until = std::chrono::steady_clock::now() + 2s;
  for (;;) {
    bool done = true;
    for (pid_t pid : pids) done = done && gone(pid);
    if (done || std::chrono::steady_clock::now() > until) return done;
    std::this_thread::sleep_for(10ms);
  }
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::filesystem::path scratch_dir(const char* name) {
  auto dir = std::filesystem::temp_directory_path() /
             (std::string("mpp_mpprun_") + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace

MPP_TEST_WORKER("mpprun_exit3") {
  std::printf("pid=%d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  if (env_rank() == 1) {
    std::this_thread::sleep_for(300ms);
    std::fprintf(stderr, "rank 1 failing on purpose\n");
    return 3;
  }
  return nap(30s);
}

// Prints the CPUs this rank may run on, as "cpus=0,1,".
MPP_TEST_WORKER("mpprun_cpus") {
  std::string cpus;
  for (int cpu : mpp::launch::allowed_cpus()) cpus += std::to_string(cpu) + ",";
  std::printf("cpus=%s\n", cpus.c_str());
  return 0;
}

MPP_TEST_WORKER("mpprun_env") {
  for (const char* name :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
        "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
        "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"}) {
    const char* value = std::getenv(name);
    std::printf("%s=%s\n", name, value ? value : "<unset>");
  }
  std::fprintf(stderr, "args:");
  for (int i = 1; i < argc; ++i) std::fprintf(stderr, " %s", argv[i]);
  std::fprintf(stderr, "\n");
  return 0;
}

MPP_TEST_WORKER("mpprun_wait") {
  std::printf("ready pid=%d ppid=%d\n", static_cast<int>(::getpid()),
              static_cast<int>(::getppid()));
  std::fflush(stdout);
  return nap(30s);
}

MPP_TEST_WORKER("mpprun_cpu_latency") {
  std::printf("cpu_latency_us=%lld\n",
              static_cast<long long>(mpp::launch::current_cpu_latency_limit_us()));
  return 0;
}

TEST_SUITE("mpprun") {
  TEST_CASE("a rank that exits 3 makes mpprun exit 3 promptly and leaves no process behind") {
    const auto logs = scratch_dir("exit3");
    const auto result = run_mpprun({"--nproc-per-node", "3", "--log-dir", logs.string(),
                                    mpp::test::self_executable(), "--mpp-worker=mpprun_exit3"});
    REQUIRE(result.ranks.size() == 1);
    const auto& mpprun = result.ranks[0];
    INFO(mpprun.output);
    CHECK(mpprun.status.exited);
    CHECK(mpprun.status.exit_code == 3);
    CHECK(result.elapsed < 10s);
    CHECK(mpprun.error_output.find("[rank1]: rank 1 failing on purpose\n") != std::string::npos);
    CHECK(std::regex_search(mpprun.error_output,
                            std::regex(R"(mpprun: rank 1 \(pid [0-9]+\) exited with code 3)")));
    CHECK(mpprun.error_output.find("rank 0 was killed by signal 15 (SIGTERM)") !=
          std::string::npos);
    const auto pids = pids_in(mpprun.output, "pid");
    CHECK(pids.size() == 3);
    CHECK(all_gone(pids));
    CHECK(read_file(logs / "rank_1" / "stderr.log") == "rank 1 failing on purpose\n");
    std::filesystem::remove_all(logs);
  }

  TEST_CASE("ranks get the torchrun variables, output is prefixed and logged per rank") {
    const auto logs = scratch_dir("env");
    const auto result =
        run_mpprun({"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                    "127.0.0.1", "--master-port", "29631", "--log-dir", logs.string(),
                    mpp::test::self_executable(), "--mpp-worker=mpprun_env", "--flag", "x"});
    const auto& mpprun = result.ranks.at(0);
    INFO(mpprun.output);
    REQUIRE(result.ok());
    for (int local = 0; local < 2; ++local) {
      const int rank = 2 + local;  // node_rank 1 * nproc_per_node 2 + local_rank
      const std::string prefix = "[rank" + std::to_string(rank) + "]: ";
      for (const std::string& line :
           {"RANK=" + std::to_string(rank), std::string("WORLD_SIZE=4"),
            "LOCAL_RANK=" + std::to_string(local), std::string("LOCAL_WORLD_SIZE=2"),
            std::string("GROUP_RANK=1"), std::string("NODE_RANK=1"),
            std::string("MASTER_ADDR=127.0.0.1"), std::string("MASTER_PORT=29631"),
            std::string("OMP_NUM_THREADS=1"), std::string("OPENBLAS_NUM_THREADS=1"),
            std::string("MALLOC_TRIM_THRESHOLD_=68719476736"),
            std::string("MALLOC_MMAP_THRESHOLD_=33554432")})
        CHECK_MESSAGE(mpprun.output.find(prefix + line + "\n") != std::string::npos, line);
      CHECK(mpprun.error_output.find(prefix + "args: --mpp-worker=mpprun_env --flag x\n") !=
            std::string::npos);
      const auto dir = logs / ("rank_" + std::to_string(rank));
      const auto out = read_file(dir / "stdout.log");
      CHECK(out.rfind("RANK=" + std::to_string(rank) + "\n", 0) == 0);  // unprefixed
      CHECK(read_file(dir / "stderr.log") == "args: --mpp-worker=mpprun_env --flag x\n");
    }
    std::filesystem::remove_all(logs);
  }

  TEST_CASE(
      "NNODES, NODE_RANK, MASTER_ADDR and MASTER_PORT from the environment act as the flags") {
    // As a launcher script exports them; mpprun here is not a rank of another launcher.
    const std::vector<std::string> outer = {"LOCAL_RANK"};
    const mpp::launch::EnvList env = {{"NNODES", "2"},
                                      {"NODE_RANK", "1"},
                                      {"MASTER_ADDR", "127.0.0.1"},
                                      {"MASTER_PORT", "29633"}};
    const std::vector<std::string> job = {
        "--nproc-per-node",       "2", "--log-dir", "", mpp::test::self_executable(),
        "--mpp-worker=mpprun_env"};
    auto result = run_mpprun(job, {}, env, outer);
    auto output = result.ranks.at(0).output;
    REQUIRE_MESSAGE(result.ok(), output);
    for (const std::string line :
         {"[rank2]: RANK=2", "[rank3]: RANK=3", "[rank3]: WORLD_SIZE=4", "[rank2]: NODE_RANK=1",
          "[rank2]: MASTER_ADDR=127.0.0.1", "[rank3]: MASTER_PORT=29633"})
      CHECK_MESSAGE(output.find(line + "\n") != std::string::npos, line);

    // A flag wins over its variable.
    std::vector<std::string> flagged = {"--node-rank", "0"};
    flagged.insert(flagged.end(), job.begin(), job.end());
    result = run_mpprun(flagged, {}, env, outer);
    output = result.ranks.at(0).output;
    REQUIRE_MESSAGE(result.ok(), output);
    CHECK(output.find("[rank0]: RANK=0\n") != std::string::npos);
    CHECK(output.find("[rank1]: NODE_RANK=0\n") != std::string::npos);
    CHECK(output.find("[rank1]: MASTER_PORT=29633\n") != std::string::npos);

    // Bad values name the variable and the fix, and start nothing.
    result = run_mpprun(job, {}, {{"NODE_RANK", "one"}}, outer);
    CHECK(result.ranks.at(0).status.exit_code == 2);
    CHECK(result.ranks.at(0).output.find("NODE_RANK='one' (from the environment) is not an "
                                         "integer") != std::string::npos);
    CHECK(result.ranks.at(0).output.find("--node-rank") != std::string::npos);
    CHECK(result.ranks.at(0).output.find("[rank") == std::string::npos);
    result =
        run_mpprun(job, {}, {{"NNODES", "2"}, {"NODE_RANK", "2"}, {"MASTER_PORT", "29633"}}, outer);
    CHECK(result.ranks.at(0).status.exit_code == 2);
    CHECK(result.ranks.at(0).output.find("--node-rank must be in [0, nnodes)") !=
          std::string::npos);
    CHECK(result.ranks.at(0).output.find("(from the environment: NNODES=2, NODE_RANK=2, "
                                         "MASTER_PORT=29633)") != std::string::npos);

    // Run as a rank of another launcher (LOCAL_RANK set), mpprun leaves the outer job's
    // variables alone: NNODES=2 without a port would otherwise be refused.
    result =
        run_mpprun({"--nproc-per-node", "1", "--log-dir", "", "/bin/true"}, {}, {{"NNODES", "2"}});
    CHECK(result.ok());
  }

  TEST_CASE("a thread or allocator variable the caller set wins over mpprun's default") {
    const auto result =
        run_mpprun({"--nproc-per-node", "1", "--log-dir", "", mpp::test::self_executable(),
                    "--mpp-worker=mpprun_env"},
                   {}, {{"MALLOC_TRIM_THRESHOLD_", "131072"}, {"OMP_NUM_THREADS", "2"}});
    const auto& mpprun = result.ranks.at(0);
    INFO(mpprun.output);
    REQUIRE(result.ok());
    for (const char* line : {"OMP_NUM_THREADS=2", "OPENBLAS_NUM_THREADS=1",
                             "MALLOC_TRIM_THRESHOLD_=131072", "MALLOC_MMAP_THRESHOLD_=33554432"})
      CHECK_MESSAGE(mpprun.output.find(std::string("[rank0]: ") + line + "\n") != std::string::npos,
                    line);
  }

  TEST_CASE("Ctrl-C (SIGINT to mpprun) stops every rank") {
    int ready = 0;
    pid_t mpprun_pid = 0;
    const auto result = run_mpprun({"--nproc-per-node", "2", "--log-dir", "",
                                    mpp::test::self_executable(), "--mpp-worker=mpprun_wait"},
                                   [&](int, mpp::launch::Stream, std::string_view line) {
                                     const auto at = line.find("ppid=");
                                     if (at == std::string_view::npos) return;
                                     mpprun_pid =
                                         std::atoi(std::string(line.substr(at + 5)).c_str());
                                     if (++ready == 2) ::kill(mpprun_pid, SIGINT);
                                   });
    const auto& mpprun = result.ranks.at(0);
    INFO(mpprun.output);
    CHECK(ready == 2);
    CHECK(mpprun.status.exit_code == 130);
    CHECK(result.elapsed < 10s);
    const auto pids = pids_in(mpprun.output, "ready pid");
    CHECK(pids.size() == 2);
    CHECK(all_gone(pids));
  }

  TEST_CASE("--max-restarts restarts the whole group, then reports the failure") {
    const auto result = run_mpprun({"--nproc-per-node", "2", "--max-restarts", "1", "--log-dir", "",
                                    mpp::test::self_executable(), "--mpp-worker=mpprun_exit3"});
    const auto& mpprun = result.ranks.at(0);
    INFO(mpprun.output);
    CHECK(mpprun.status.exit_code == 3);
    CHECK(mpprun.error_output.find("restarting all ranks (restart 1 of 1)") != std::string::npos);
    CHECK(pids_in(mpprun.output, "pid").size() == 4);
  }

  TEST_CASE("--cpu-latency-us holds the CPU wake-up limit while the ranks run, or says why not") {
    const auto result =
        run_mpprun({"--nproc-per-node", "2", "--cpu-latency-us", "0", "--log-dir", "",
                    mpp::test::self_executable(), "--mpp-worker=mpprun_cpu_latency"});
    const auto& mpprun = result.ranks.at(0);
    INFO(mpprun.output);
    INFO(mpprun.error_output);
    REQUIRE(result.ok());
    if (mpprun.error_output.find("mpprun: /dev/cpu_dma_latency held at 0 us: idle CPUs poll "
                                 "instead of halting while the ranks run") != std::string::npos) {
      // every rank sees the limit in force (a limit is the smallest any process holds)
      CHECK(mpprun.output.find("[rank0]: cpu_latency_us=0\n") != std::string::npos);
      CHECK(mpprun.output.find("[rank1]: cpu_latency_us=0\n") != std::string::npos);
    } else {
      MESSAGE("this machine does not let the test hold /dev/cpu_dma_latency (not root?)");
      CHECK(mpprun.error_output.find("mpprun: /dev/cpu_dma_latency could not be held (") !=
            std::string::npos);
      CHECK(mpprun.error_output.find("; running without it") != std::string::npos);
    }
    const auto bad = run_mpprun({"--cpu-latency-us", "-1", "/bin/true"});
    CHECK(bad.ranks.at(0).status.exit_code != 0);
  }

  TEST_CASE("--cpu-bind auto gives each rank its own CPU when the ranks fit, none never binds") {
    const std::vector<int> cpus = mpp::launch::allowed_cpus();
    REQUIRE(!cpus.empty());
    std::string all;
    for (int cpu : cpus) all += std::to_string(cpu) + ",";
    const int fit = static_cast<int>(std::min<std::size_t>(cpus.size(), 4));
    auto cpus_of = [](const std::vector<std::string>& flags, int ranks) {
      std::vector<std::string> args = {"--nproc-per-node", std::to_string(ranks), "--log-dir", ""};
      args.insert(args.end(), flags.begin(), flags.end());
      args.push_back(mpp::test::self_executable());
      args.push_back("--mpp-worker=mpprun_cpus");
      const auto result = run_mpprun(args);
      const auto& mpprun = result.ranks.at(0);
      INFO(mpprun.output);
      REQUIRE(result.ok());
      return mpprun.output;
    };
    const std::string bound = cpus_of({}, fit);  // auto is the default
    for (int r = 0; r < fit; ++r)
      CHECK(bound.find("[rank" + std::to_string(r) + "]: cpus=" + std::to_string(cpus[r]) +
                       ",\n") != std::string::npos);
    const std::string unbound = cpus_of({"--cpu-bind", "none"}, fit);
    for (int r = 0; r < fit; ++r)
      CHECK(unbound.find("[rank" + std::to_string(r) + "]: cpus=" + all + "\n") !=
            std::string::npos);
    if (cpus.size() <= 4) {  // more ranks than CPUs: the scheduler places them
      const int over = static_cast<int>(cpus.size()) + 1;
      const std::string crowded = cpus_of({"--cpu-bind", "auto"}, over);
      for (int r = 0; r < over; ++r)
        CHECK(crowded.find("[rank" + std::to_string(r) + "]: cpus=" + all + "\n") !=
              std::string::npos);
    }
    const auto bad = run_mpprun({"--cpu-bind", "cores", "/bin/true"});
    CHECK(bad.ranks.at(0).status.exit_code != 0);
  }

  TEST_CASE("usage errors name the fix") {
    auto result = run_mpprun({"--nproc-per-node", "2", "--nnodes", "2", "/bin/true"});
    CHECK(result.ranks.at(0).status.exit_code == 2);
    CHECK(result.ranks.at(0).output.find("--master-port is required with --nnodes > 1") !=
          std::string::npos);
    result = run_mpprun({"--nproc-per-node", "2"});
    CHECK(result.ranks.at(0).status.exit_code == 2);
    CHECK(result.ranks.at(0).output.find("no program given") != std::string::npos);
    result = run_mpprun({"--help"});
    CHECK(result.ranks.at(0).status.exit_code == 0);
    CHECK(result.ranks.at(0).output.find("unauthenticated") != std::string::npos);
  }

  TEST_CASE("a number out of range names its bound, the value and what to pass") {
    // One check per option (tools/common/cli_checks.hpp), not CLI11's "Value 0 not in range
    // 0.000000 to 1797...".
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--nproc-per-node", "0", "/bin/true"},
         "--nproc-per-node: must be >= 1, got 0 (the number of ranks to start on this node"},
        {{"--nproc-per-node", "two", "/bin/true"},
         "--nproc-per-node: expects a whole number, got 'two'"},
        {{"--nproc-per-node", "1", "--nnodes", "0", "/bin/true"}, "--nnodes: must be >= 1, got 0"},
        {{"--nproc-per-node", "1", "--master-port", "0", "/bin/true"},
         "--master-port: must be between 1 and 65535, got 0 (a TCP port; leave it out"},
        {{"--nproc-per-node", "1", "--timeout", "-1", "/bin/true"},
         "--timeout: must be >= 0, got -1 (seconds; 0 never stops the ranks)"},
    };
    for (const auto& [args, expected] : cases) {
      CAPTURE(expected);
      const auto result = run_mpprun(args);
      CHECK(result.ranks.at(0).status.exit_code != 0);
      CHECK(result.ranks.at(0).output.find(expected) != std::string::npos);
      CHECK(result.ranks.at(0).output.find("not in range") == std::string::npos);
    }
  }

  TEST_CASE("a program path that does not exist is named as such, before any rank starts") {
    const auto result =
        run_mpprun({"--nproc-per-node", "2", "--log-dir", "", "/nonexistent/dir/prog"});
    CHECK(result.ranks.at(0).status.exit_code != 0);
    CHECK(result.ranks.at(0).output.find("cannot execute '/nonexistent/dir/prog': no such file") !=
          std::string::npos);
  }
}
