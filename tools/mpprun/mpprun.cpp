// mpprun: a small torchrun for mpp binaries on one node (or one node of several). It spawns the
// ranks with the variables torchrun sets, echoes their output with a rank prefix, logs it per
// rank, and turns any rank's failure into the job's failure without leaving processes behind.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../common/cli_checks.hpp"
#include "mpp/launch/launch.hpp"
#include "mpp/launch/layout_environment.hpp"

namespace {

volatile std::sig_atomic_t stop_signal = 0;

extern "C" void on_stop_signal(int sig) { stop_signal = sig; }

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: the launcher's poll() returns at once
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
}

constexpr const char* footer = R"(
Each rank gets the variables torchrun sets: RANK (= node_rank * nproc_per_node + local_rank),
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK and NODE_RANK, MASTER_ADDR, MASTER_PORT, and
OMP_NUM_THREADS=1 / OPENBLAS_NUM_THREADS=1 unless already set. Options go before the program;
everything from the program on is passed to it unchanged.

Memory: unless already set, ranks also get MALLOC_TRIM_THRESHOLD_=68719476736 and
MALLOC_MMAP_THRESHOLD_=33554432, so glibc keeps freed memory for the next step instead of handing
it back to the kernel and page-faulting it in again (a training step's temporaries are the same
every step). Set either variable to override it (MALLOC_TRIM_THRESHOLD_=131072 is glibc's default).

Output: each rank's lines are echoed as "[rank<r>]: ..." (stdout to stdout, stderr to stderr) and
written unprefixed to <log-dir>/rank_<r>/stdout.log and stderr.log.

Failure: when a rank exits non-zero or dies from a signal, the other ranks get SIGTERM, then
SIGKILL after the grace period (each rank's whole process group, so nothing is left behind);
mpprun names the rank and its code or signal and exits with that code (128 + signal when killed).
Exit 124 when --timeout expires, 130 on Ctrl-C (which stops all ranks).

CPUs: with --cpu-bind auto (the default), when this node's ranks are no more than the CPUs mpprun
may use, local rank r runs on the r-th of those CPUs alone, as mpirun and srun bind by default:
ranks that wait microseconds for each other's messages are never queued on one CPU. With more
ranks than CPUs, or --cpu-bind none, the scheduler places them.

Latency: on machines whose idle CPUs halt (VMs, power-saving hosts) a rank woken by a message can
wait for a timer tick; --cpu-latency-us 0 keeps idle CPUs polling while the job runs, at the cost
of their power. It changes the whole machine's behaviour, so it is never on by default.

Security: the rendezvous store (served by rank 0 on MASTER_PORT) is unauthenticated, as in
PyTorch: whoever reaches the port can read and write its keys. On one host it listens on
127.0.0.1 only; across hosts on the one address of rank 0's host that reaches the peers (the
interface of MASTER_ADDR), so run multi-node jobs only on a trusted network or behind a firewall.
Multi-node: start one mpprun per node with the same --nnodes, --master-addr and --master-port and
its own --node-rank. Each of the four may instead come from the environment, as a launcher script
exports them: NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT (a flag wins over its variable). They are
not read when mpprun itself runs as a rank of another launcher (LOCAL_RANK is set): they then
describe the outer job.)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mpprun: start the ranks of an mpp (or any torchrun-style) program on this node\n"
      "  mpprun [OPTIONS] prog [args...]",
      "mpprun"};
  app.footer(footer);
  app.prefix_command();  // the first positional and everything after it belong to the program
  app.get_formatter()->column_width(34);

  mpp::launch::WorldLayout layout;
  std::string log_dir = "logs";
  int max_restarts = 0;
  double timeout_s = 0;
  double grace_s = 3;
  app.add_option("--nproc-per-node,--nproc_per_node", layout.nproc_per_node,
                 "Ranks to start on this node")
      ->required()
      ->check(mpp::tools::at_least(1, "the number of ranks to start on this node, e.g. 2"));
  CLI::Option* nnodes_flag =
      app.add_option("--nnodes", layout.nnodes, "Number of nodes in the job (or NNODES)")
          ->capture_default_str()
          ->check(mpp::tools::at_least(1, "the number of nodes in the job; 1 on one machine"));
  CLI::Option* node_rank_flag =
      app.add_option("--node-rank,--node_rank", layout.node_rank,
                     "This node's index in [0, nnodes) (or NODE_RANK)")
          ->capture_default_str()
          ->check(mpp::tools::at_least(0, "this node's index, from 0 to --nnodes - 1"));
  CLI::Option* master_addr_flag =
      app.add_option("--master-addr,--master_addr", layout.master_addr,
                     "Address of the host running rank 0 (or MASTER_ADDR)")
          ->capture_default_str();
  CLI::Option* master_port_flag =
      app.add_option("--master-port,--master_port", layout.master_port,
                     "Rendezvous port (or MASTER_PORT; default: a free port; required with "
                     "--nnodes > 1)")
          ->check(mpp::tools::within(1, std::optional<int>(65535),
                                     "a TCP port; leave it out to use a free one"));
  app.add_option("--log-dir,--log_dir", log_dir,
                 "Per-rank logs go to <dir>/rank_<r>/ (empty string: no log files)")
      ->capture_default_str();
  app.add_option("--max-restarts,--max_restarts", max_restarts,
                 "Restart all ranks up to N times after a failure")
      ->capture_default_str()
      ->check(mpp::tools::at_least(0, "0 never restarts"));
  app.add_option("--timeout", timeout_s, "Stop all ranks after this many seconds (0: never)")
      ->capture_default_str()
      ->check(mpp::tools::at_least(0.0, "seconds; 0 never stops the ranks"));
  app.add_option("--grace-period", grace_s, "Seconds between SIGTERM and SIGKILL when stopping")
      ->capture_default_str()
      ->check(mpp::tools::at_least(0.0, "seconds; 0 sends SIGKILL at once"));
  int cpu_latency_us = -1;
  app.add_option("--cpu-latency-us", cpu_latency_us,
                 "While the ranks run, keep idle CPUs able to wake within this many microseconds "
                 "(0: they poll; holds /dev/cpu_dma_latency, needs root)")
      ->check(mpp::tools::within(0, std::optional<int>(1000000000),
                                 "microseconds; 0 keeps idle CPUs polling"));

  std::string cpu_bind = "auto";
  app.add_option("--cpu-bind", cpu_bind,
                 "auto: one CPU per rank when the ranks fit on this node's CPUs; none: never bind")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "none"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  std::vector<std::string> command = app.remaining();
  if (!command.empty() && command.front() == "--") command.erase(command.begin());
  if (command.empty()) {
    std::fprintf(stderr,
                 "mpprun: no program given; usage: mpprun --nproc-per-node N prog [args...] "
                 "(see mpprun --help)\n");
    return 2;
  }

  // The variables a launcher script exports stand in for the flags it did not pass.
  std::string from_environment;
  if (!std::getenv("LOCAL_RANK")) {
    mpp::launch::WorldLayout env_layout = layout;
    try {
      mpp::launch::apply_layout_environment(env_layout, [](std::string_view name) {
        const char* value = std::getenv(std::string(name).c_str());
        return value ? std::optional<std::string>(value) : std::nullopt;
      });
    } catch (const mpp::launch::LaunchError& error) {
      std::fprintf(stderr, "%s\n", error.what());
      return 2;
    }
    auto take = [&](CLI::Option* flag, const char* name, auto& field, const auto& env_value) {
      if (flag->count() > 0 || field == env_value) return;
      field = env_value;
      from_environment +=
          std::string(from_environment.empty() ? "" : ", ") + name + "=" + std::getenv(name);
    };
    take(nnodes_flag, "NNODES", layout.nnodes, env_layout.nnodes);
    take(node_rank_flag, "NODE_RANK", layout.node_rank, env_layout.node_rank);
    take(master_addr_flag, "MASTER_ADDR", layout.master_addr, env_layout.master_addr);
    take(master_port_flag, "MASTER_PORT", layout.master_port, env_layout.master_port);
  }

  install_stop_handlers();
  std::optional<mpp::launch::CpuLatencyLimit> cpu_latency;
  if (cpu_latency_us >= 0) {
    cpu_latency.emplace(cpu_latency_us);
    std::fprintf(stderr, "mpprun: %s%s\n", cpu_latency->status().c_str(),
                 cpu_latency->held() ? " while the ranks run" : "; running without it");
  }
  const bool port_given = layout.master_port != 0;
  mpp::launch::LaunchOptions options;
  options.command = command;
  options.log_dir = log_dir;
  options.capture_limit = 0;  // echoed and logged as it comes; nothing to keep in memory
  options.on_line = mpp::launch::prefixed_console();
  options.should_stop = [] { return stop_signal != 0; };
  options.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  options.grace = std::chrono::milliseconds(static_cast<long long>(grace_s * 1000));
  options.max_restarts = max_restarts;
  options.bind_cpus = cpu_bind == "auto";

  try {
    for (int attempt = 0;; ++attempt) {
      options.layout = layout;
      if (!port_given) options.layout.master_port = 0;  // a fresh free port for each attempt
      options.restart_count = attempt;
      options.append_logs = attempt > 0;
      const auto result = mpp::launch::launch(options);
      if (result.ok()) return 0;

      std::string message;
      if (result.first_failure >= 0) {
        const auto& failed = result.ranks[result.first_failure];
        message = "mpprun: rank " + std::to_string(failed.rank) + " (pid " +
                  std::to_string(failed.pid) + ") " + failed.status.describe() + "\n";
      } else if (result.timed_out) {
        message = "mpprun: --timeout of " + std::to_string(timeout_s) + " s expired\n";
      } else if (result.interrupted) {
        message = "mpprun: interrupted by signal " + std::to_string(stop_signal) + "\n";
      }
      for (const auto& rank : result.ranks)
        if (rank.local_rank != result.first_failure)
          message += "mpprun:   " + rank.describe() + "\n";
      std::fputs(message.c_str(), stderr);
      if (result.interrupted || stop_signal != 0) return 128 + (stop_signal ? stop_signal : SIGINT);
      if (attempt >= max_restarts) return result.exit_code();
      std::fprintf(stderr, "mpprun: restarting all ranks (restart %d of %d)\n", attempt + 1,
                   max_restarts);
    }
  } catch (const mpp::launch::LaunchError& error) {
    std::fprintf(stderr, "%s%s%s\n", error.what(),
                 from_environment.empty() ? "" : " (from the environment: ",
                 from_environment.empty() ? "" : (from_environment + ")").c_str());
    return 2;
  }
}
