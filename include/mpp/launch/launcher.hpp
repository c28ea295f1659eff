#pragma once
// Runs the ranks of one node: spawns them with the torchrun variables, collects their output line
// by line, enforces a deadline, and when one rank fails stops the others (SIGTERM to each rank's
// process group, SIGKILL after a grace period) so that nothing is left behind.
// This is the one mechanism behind both `mpprun` and the multi-process tests.
#include <poll.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpp/config.hpp"
#include "mpp/launch/cpu_binding.hpp"
#include "mpp/launch/environment.hpp"
#include "mpp/launch/process.hpp"

namespace mpp::launch {

/// Which output stream a rank's line came from.
enum class Stream { out, err };

/// What LaunchOptions::allocator_defaults gives every rank (each unless already set): glibc keeps
/// freed memory instead of trimming the heap and page-faulting it in again the next step.
inline constexpr std::pair<const char*, const char*> allocator_environment[] = {
    {"MALLOC_TRIM_THRESHOLD_", "68719476736"},  // never trim below 64 GiB free
    {"MALLOC_MMAP_THRESHOLD_", "33554432"},     // 32 MiB, the most glibc would reach by itself
};

/// What launch() runs and how: the command, the layout of the job, the environment, deadlines
/// and where output goes.
struct LaunchOptions {
  std::vector<std::string> command;    ///< program and its arguments, the same for every rank
  WorldLayout layout;                  ///< This node's place in the job.
  EnvList env;                         ///< extra variables for every rank; they win over all others
  std::vector<std::string> unset_env;  ///< inherited or rank variables to remove (not `env`'s)
  /// One thread per rank unless the caller's environment or `env` says otherwise: ranks share
  /// the cores, and OpenMP/OpenBLAS would otherwise each start one thread per core.
  bool single_thread_defaults = true;
  /// Keep freed memory in the process unless the caller's environment or `env` says otherwise:
  /// with glibc's defaults the heap is trimmed as soon as a few MiB at its top are free, so every
  /// training step's large temporaries (the optimizer's, the gradients) page-fault in again
  /// (LibTorch's Adam step on 16 M parameters: ~75 ms instead of ~22 ms). Sets
  /// allocator_environment.
  bool allocator_defaults = true;
  /// Run local rank r on the r-th CPU the launcher may use when the node's ranks fit one per CPU
  /// (cpu_binding.hpp); with more ranks than CPUs the scheduler places them, as without it.
  bool bind_cpus = false;
  std::chrono::milliseconds timeout{0};   ///< whole-run deadline; 0: none
  std::chrono::milliseconds grace{3000};  ///< between SIGTERM and SIGKILL
  bool stop_all_on_failure = true;        ///< false: let the other ranks run to their own end
  std::string log_dir;                    ///< non-empty: `<log_dir>/rank_<r>/{stdout,stderr}.log`
  bool append_logs = false;               ///< restarts add to the same files
  std::size_t capture_limit = 16U << 20;  ///< bytes of output kept per rank (the tail); 0: none
  /// Called with every output line of every rank as it arrives (mpprun echoes them); may be
  /// empty.
  std::function<void(int rank, Stream, std::string_view line)> on_line;
  std::function<bool()> should_stop;  ///< polled; true stops all ranks (Ctrl-C in mpprun)
  int restart_count = 0;              ///< exported as TORCHELASTIC_RESTART_COUNT
  int max_restarts = 0;               ///< Exported as TORCHELASTIC_MAX_RESTARTS.
  /// When set, a rank may start as a fork of this process that returns fork_entry(command) instead
  /// of exec'ing `command`: it saves the program's start (a LibTorch program's ~0.6 s of CPU). Only
  /// while this process runs one thread, and only when the rank's environment differs from this
  /// process's in the torchrun variables and MPP_* alone (detail::environment_allows_fork);
  /// otherwise, or under a sanitizer's threads, the rank is exec'd as without it. The entry must
  /// do what `command` would do, from the state this process is in.
  ForkEntry fork_entry;
};

/// How one rank of the node ended, with its captured output.
struct RankResult {
  int rank = -1;                     ///< global rank
  int local_rank = -1;               ///< index on this node
  pid_t pid = -1;                    ///< Its process id (also its process group's).
  ExitStatus status;                 ///< How it ended.
  bool stopped_by_launcher = false;  ///< it was still running when the launcher stopped the job
  bool forked = false;               ///< it ran LaunchOptions::fork_entry instead of an exec
  std::string output;                ///< stdout and stderr lines, in arrival order
  std::string error_output;          ///< stderr lines only

  /// Exited with code 0.
  [[nodiscard]] bool ok() const { return status.success(); }
  /// "rank 3 exited with code 1", for messages.
  [[nodiscard]] MPP_DECL std::string describe() const;
};

/// How the node's ranks ended, from launch().
struct LaunchResult {
  std::vector<RankResult> ranks;  ///< indexed by local rank
  /// The rendezvous port the ranks were given (resolved when the layout said 0).
  int master_port = 0;
  bool timed_out = false;                ///< The deadline stopped the job.
  bool interrupted = false;              ///< should_stop() stopped the job.
  int first_failure = -1;                ///< local rank whose own failure ended the job, or -1
  std::chrono::milliseconds elapsed{0};  ///< Wall time of the whole run.
  std::chrono::milliseconds timeout{0};  ///< The deadline it ran under; 0: none.

  /// Every rank exited with code 0, without timeout or interruption.
  [[nodiscard]] MPP_DECL bool ok() const;
  /// 0 on success; the failed rank's code (128 + signal when killed); 124 on timeout (as
  /// timeout(1)); 130 when interrupted (as a shell after Ctrl-C).
  [[nodiscard]] MPP_DECL int exit_code() const;
  /// One line per rank, the cause first.
  [[nodiscard]] MPP_DECL std::string summary() const;
};

namespace detail {

using Clock = std::chrono::steady_clock;

/// Splits a byte stream into lines; a line longer than the limit is cut rather than held.
struct LineSplitter {
  std::string pending;
  static constexpr std::size_t max_line = 1U << 16;

  template <class Emit>
  void feed(std::string_view bytes, Emit&& emit) {
    pending.append(bytes);
    std::size_t start = 0;
    for (std::size_t newline; (newline = pending.find('\n', start)) != std::string::npos;
         start = newline + 1)
      emit(std::string_view(pending).substr(start, newline - start));
    pending.erase(0, start);
    if (pending.size() >= max_line) {
      emit(std::string_view(pending));
      pending.clear();
    }
  }
  template <class Emit>
  void finish(Emit&& emit) {
    if (!pending.empty()) emit(std::string_view(pending));
    pending.clear();
  }
};

struct FileCloser {
  MPP_DECL void operator()(std::FILE* file) const;
};
using File = std::unique_ptr<std::FILE, FileCloser>;

struct RunningRank {
  Child child;
  bool reaped = false;
  LineSplitter splitter[2];
  File log[2];
};

MPP_DECL void keep_tail(std::string& text, std::size_t limit);

MPP_DECL File open_log(const std::filesystem::path& path, bool append);

}  // namespace detail

/// Starts `options.layout.nproc_per_node` ranks of `options.command` and waits for all of them.
/// Throws LaunchError when the job cannot start (bad layout, program not executable); a rank's
/// failure, the deadline or an interruption is reported in the result instead.
MPP_DECL LaunchResult launch(const LaunchOptions& options);

/// An `on_line` callback that echoes each line to this process's stdout or stderr with a
/// `"[rank<r>]: "` prefix, one write per line so that concurrent writers do not interleave.
MPP_DECL std::function<void(int, Stream, std::string_view)> prefixed_console();

}  // namespace mpp::launch

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/launch/impl/launcher.ipp"
#endif
