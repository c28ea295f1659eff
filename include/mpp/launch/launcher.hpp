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
};

/// How one rank of the node ended, with its captured output.
struct RankResult {
  int rank = -1;                     ///< global rank
  int local_rank = -1;               ///< index on this node
  pid_t pid = -1;                    ///< Its process id (also its process group's).
  ExitStatus status;                 ///< How it ended.
  bool stopped_by_launcher = false;  ///< it was still running when the launcher stopped the job
  std::string output;                ///< stdout and stderr lines, in arrival order
  std::string error_output;          ///< stderr lines only

  /// Exited with code 0.
  [[nodiscard]] bool ok() const { return status.success(); }
  /// "rank 3 exited with code 1", for messages.
  [[nodiscard]] std::string describe() const {
    std::string text = "rank " + std::to_string(rank) + " " + status.describe();
    if (stopped_by_launcher) text += " (stopped by the launcher)";
    return text;
  }
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
  [[nodiscard]] bool ok() const {
    return !timed_out && !interrupted &&
           std::all_of(ranks.begin(), ranks.end(), [](const RankResult& r) { return r.ok(); });
  }
  /// 0 on success; the failed rank's code (128 + signal when killed); 124 on timeout (as
  /// timeout(1)); 130 when interrupted (as a shell after Ctrl-C).
  [[nodiscard]] int exit_code() const {
    if (first_failure >= 0) return ranks[first_failure].status.shell_code();
    if (timed_out) return 124;
    if (interrupted) return 130;
    for (const auto& rank : ranks)
      if (!rank.ok()) return rank.status.shell_code() == 0 ? 1 : rank.status.shell_code();
    return 0;
  }
  /// One line per rank, the cause first.
  [[nodiscard]] std::string summary() const {
    std::string text;
    if (first_failure >= 0) text += "mpp launch: " + ranks[first_failure].describe() + "\n";
    if (timed_out)
      text += "mpp launch: deadline of " + std::to_string(timeout.count()) +
              " ms expired; the ranks still running were stopped\n";
    if (interrupted) text += "mpp launch: interrupted; all ranks were stopped\n";
    for (const auto& rank : ranks)
      if (rank.local_rank != first_failure) text += "  " + rank.describe() + "\n";
    return text;
  }
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
  void operator()(std::FILE* file) const {
    if (file) std::fclose(file);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

struct RunningRank {
  Child child;
  bool reaped = false;
  LineSplitter splitter[2];
  File log[2];
};

inline void keep_tail(std::string& text, std::size_t limit) {
  if (limit == 0) {
    text.clear();
  } else if (text.size() > limit) {
    text.erase(0, text.size() - limit);
  }
}

inline File open_log(const std::filesystem::path& path, bool append) {
  File file(std::fopen(path.c_str(), append ? "a" : "w"));
  if (!file)
    throw LaunchError("mpp launch: cannot open log file " + path.string() + ": " +
                      errno_text(errno) + " (choose another --log-dir)");
  std::setvbuf(file.get(), nullptr, _IOLBF, 0);
  return file;
}

}  // namespace detail

/// Starts `options.layout.nproc_per_node` ranks of `options.command` and waits for all of them.
/// Throws LaunchError when the job cannot start (bad layout, program not executable); a rank's
/// failure, the deadline or an interruption is reported in the result instead.
inline LaunchResult launch(const LaunchOptions& options) {
  using namespace std::chrono;
  using detail::Clock;
  validate(options.layout);
  if (options.command.empty())
    throw LaunchError("mpp launch: no program given to run on each rank");

  WorldLayout layout = options.layout;
  if (layout.master_port == 0) layout.master_port = free_port();

  std::vector<std::string> argv = options.command;
  argv[0] = detail::resolve_program(argv[0]);

  const int count = layout.nproc_per_node;
  LaunchResult result;
  result.master_port = layout.master_port;
  result.timeout = options.timeout;
  result.ranks.resize(count);
  std::vector<detail::RunningRank> running(count);

  if (!options.log_dir.empty()) {
    for (int local = 0; local < count; ++local) {
      const auto dir = std::filesystem::path(options.log_dir) /
                       ("rank_" + std::to_string(layout.global_rank(local)));
      std::error_code error;
      std::filesystem::create_directories(dir, error);
      if (error)
        throw LaunchError("mpp launch: cannot create log directory " + dir.string() + ": " +
                          error.message() + " (choose another --log-dir)");
      running[local].log[0] = detail::open_log(dir / "stdout.log", options.append_logs);
      running[local].log[1] = detail::open_log(dir / "stderr.log", options.append_logs);
    }
  }

  EnvList common;
  if (options.single_thread_defaults) {
    for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"})
      if (!std::getenv(name)) common.emplace_back(name, "1");
  }
  if (options.allocator_defaults) {
    for (const auto& [name, value] : allocator_environment)
      if (!std::getenv(name)) common.emplace_back(name, value);
  }

  const std::vector<int> cpus = options.bind_cpus ? cpu_binding(count) : std::vector<int>{};
  const auto start = Clock::now();
  auto stop_group = [](pid_t group, int sig) {
    if (group > 0) ::kill(-group, sig);
  };
  for (int local = 0; local < count; ++local) {
    EnvList env = common;
    for (auto& entry : rank_environment(layout, local, options.restart_count, options.max_restarts))
      if (std::find(options.unset_env.begin(), options.unset_env.end(), entry.first) ==
          options.unset_env.end())
        env.push_back(std::move(entry));
    env.insert(env.end(), options.env.begin(), options.env.end());
    try {
      running[local].child =
          detail::spawn(argv, detail::merged_environment(env, options.unset_env),
                        cpus.empty() ? -1 : cpus[static_cast<std::size_t>(local)]);
    } catch (...) {
      for (int started = 0; started < local; ++started) {
        stop_group(running[started].child.pid, SIGKILL);
        ::waitpid(running[started].child.pid, nullptr, 0);
        detail::close_fd(running[started].child.stdout_fd);
        detail::close_fd(running[started].child.stderr_fd);
      }
      throw;
    }
    auto& rank = result.ranks[local];
    rank.rank = layout.global_rank(local);
    rank.local_rank = local;
    rank.pid = running[local].child.pid;
  }

  bool stopping = false;
  bool killed = false;
  Clock::time_point kill_at{};
  std::optional<Clock::time_point> all_reaped_at;
  const auto deadline =
      options.timeout.count() > 0 ? start + options.timeout : Clock::time_point::max();

  auto begin_stop = [&] {
    if (stopping) return;
    stopping = true;
    kill_at = Clock::now() + options.grace;
    for (int local = 0; local < count; ++local) {
      if (!running[local].reaped) result.ranks[local].stopped_by_launcher = true;
      stop_group(running[local].child.pid, SIGTERM);
    }
  };

  auto deliver = [&](int local, Stream stream, std::string_view line) {
    auto& rank = result.ranks[local];
    if (options.capture_limit > 0) {
      rank.output.append(line).push_back('\n');
      detail::keep_tail(rank.output, options.capture_limit);
      if (stream == Stream::err) {
        rank.error_output.append(line).push_back('\n');
        detail::keep_tail(rank.error_output, options.capture_limit);
      }
    }
    if (auto& log = running[local].log[stream == Stream::err ? 1 : 0]) {
      std::fwrite(line.data(), 1, line.size(), log.get());
      std::fputc('\n', log.get());
    }
    if (options.on_line) options.on_line(rank.rank, stream, line);
  };

  std::vector<char> buffer(1U << 16);
  for (;;) {
    // Output first: a rank that exits right after printing its error must not lose it.
    std::vector<pollfd> fds;
    std::vector<std::pair<int, int>> owners;  // (local rank, stream index)
    for (int local = 0; local < count; ++local) {
      const int stream_fds[2] = {running[local].child.stdout_fd, running[local].child.stderr_fd};
      for (int s = 0; s < 2; ++s)
        if (stream_fds[s] >= 0) {
          fds.push_back(pollfd{stream_fds[s], POLLIN, 0});
          owners.emplace_back(local, s);
        }
    }
    auto now = Clock::now();
    auto wait = milliseconds(50);  // also the reaping period for ranks whose pipes stay open
    if (deadline != Clock::time_point::max() && !stopping)
      wait = std::min(wait, duration_cast<milliseconds>(deadline - now) + milliseconds(1));
    if (stopping && !killed)
      wait = std::min(wait, duration_cast<milliseconds>(kill_at - now) + milliseconds(1));
    wait = std::max(wait, milliseconds(0));
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (ready > 0) {
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const auto [local, s] = owners[i];
        int& fd = s == 0 ? running[local].child.stdout_fd : running[local].child.stderr_fd;
        const ssize_t got = ::read(fd, buffer.data(), buffer.size());
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        const Stream stream = s == 0 ? Stream::out : Stream::err;
        auto emit = [&, local = local](std::string_view line) { deliver(local, stream, line); };
        if (got <= 0) {
          running[local].splitter[s].finish(emit);
          detail::close_fd(fd);
        } else {
          running[local].splitter[s].feed(std::string_view(buffer.data(), got), emit);
        }
      }
    }

    for (int local = 0; local < count; ++local) {
      auto& rank = running[local];
      if (rank.reaped) continue;
      int status = 0;
      const pid_t got = ::waitpid(rank.child.pid, &status, WNOHANG);
      if (got == 0) continue;
      if (got < 0 && errno == EINTR) continue;
      rank.reaped = true;
      result.ranks[local].status =
          got < 0 ? ExitStatus{false, -1, 0} : ExitStatus::from_wait_status(status);
      const bool failed = !result.ranks[local].status.success();
      if (failed && !result.ranks[local].stopped_by_launcher && result.first_failure < 0) {
        result.first_failure = local;
        if (options.stop_all_on_failure) begin_stop();
      }
    }

    now = Clock::now();
    if (!stopping && options.should_stop && options.should_stop()) {
      result.interrupted = true;
      begin_stop();
    }
    const bool all_reaped =
        std::all_of(running.begin(), running.end(), [](const auto& r) { return r.reaped; });
    if (!all_reaped && !stopping && now >= deadline) {
      result.timed_out = true;
      begin_stop();
    }
    if (stopping && !killed && now >= kill_at) {
      killed = true;
      for (auto& rank : running) stop_group(rank.child.pid, SIGKILL);
    }
    if (all_reaped) {
      if (!all_reaped_at) {
        all_reaped_at = now;
        // Whatever a rank started and left running goes with it.
        for (auto& rank : running) stop_group(rank.child.pid, SIGKILL);
      }
      const bool drained = std::all_of(running.begin(), running.end(), [](const auto& r) {
        return r.child.stdout_fd < 0 && r.child.stderr_fd < 0;
      });
      if (drained || now - *all_reaped_at > seconds(2)) break;
    }
  }
  for (int local = 0; local < count; ++local) {
    for (int s = 0; s < 2; ++s) {
      auto emit = [&](std::string_view line) {
        deliver(local, s == 0 ? Stream::out : Stream::err, line);
      };
      running[local].splitter[s].finish(emit);
    }
    detail::close_fd(running[local].child.stdout_fd);
    detail::close_fd(running[local].child.stderr_fd);
  }
  result.elapsed = duration_cast<milliseconds>(Clock::now() - start);
  return result;
}

/// An `on_line` callback that echoes each line to this process's stdout or stderr with a
/// `"[rank<r>]: "` prefix, one write per line so that concurrent writers do not interleave.
inline std::function<void(int, Stream, std::string_view)> prefixed_console() {
  return [](int rank, Stream stream, std::string_view line) {
    std::string text = "[rank" + std::to_string(rank) + "]: ";
    text.append(line).push_back('\n');
    const int fd = stream == Stream::err ? STDERR_FILENO : STDOUT_FILENO;
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t wrote = ::write(fd, text.data() + done, text.size() - done);
      if (wrote < 0 && errno == EINTR) continue;
      if (wrote <= 0) break;
      done += static_cast<std::size_t>(wrote);
    }
  };
}

}  // namespace mpp::launch
