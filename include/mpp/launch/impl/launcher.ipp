#pragma once
// The definitions of launcher.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/launch/launcher.hpp"

namespace mpp::launch {

[[nodiscard]] std::string RankResult::describe() const {
  std::string text = "rank " + std::to_string(rank) + " " + status.describe();
  if (stopped_by_launcher) text += " (stopped by the launcher)";
  return text;
}

[[nodiscard]] bool LaunchResult::ok() const {
  return !timed_out && !interrupted &&
         std::all_of(ranks.begin(), ranks.end(), [](const RankResult& r) { return r.ok(); });
}

[[nodiscard]] int LaunchResult::exit_code() const {
  if (first_failure >= 0) return ranks[first_failure].status.shell_code();
  if (timed_out) return 124;
  if (interrupted) return 130;
  for (const auto& rank : ranks)
    if (!rank.ok()) return rank.status.shell_code() == 0 ? 1 : rank.status.shell_code();
  return 0;
}

[[nodiscard]] std::string LaunchResult::summary() const {
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

}  // namespace mpp::launch

namespace mpp::launch::detail {

void FileCloser::operator()(std::FILE* file) const {
  if (file) std::fclose(file);
}

MPP_DECL void keep_tail(std::string& text, std::size_t limit) {
  if (limit == 0) {
    text.clear();
  } else if (text.size() > limit) {
    text.erase(0, text.size() - limit);
  }
}

MPP_DECL File open_log(const std::filesystem::path& path, bool append) {
  File file(std::fopen(path.c_str(), append ? "a" : "w"));
  if (!file)
    throw LaunchError("mpp launch: cannot open log file " + path.string() + ": " +
                      errno_text(errno) + " (choose another --log-dir)");
  std::setvbuf(file.get(), nullptr, _IOLBF, 0);
  return file;
}

}  // namespace mpp::launch::detail

namespace mpp::launch {

MPP_DECL LaunchResult launch(const LaunchOptions& options) {
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
    std::vector<std::string> rank_names;
    for (auto& entry :
         rank_environment(layout, local, options.restart_count, options.max_restarts)) {
      rank_names.push_back(entry.first);
      if (std::find(options.unset_env.begin(), options.unset_env.end(), entry.first) ==
          options.unset_env.end())
        env.push_back(std::move(entry));
    }
    env.insert(env.end(), options.env.begin(), options.env.end());
    const auto rank_env = detail::merged_environment(env, options.unset_env);
    const bool fork = options.fork_entry && detail::thread_count() == 1 &&
                      detail::environment_allows_fork(rank_env, rank_names);
    try {
      running[local].child =
          detail::spawn(argv, rank_env, cpus.empty() ? -1 : cpus[static_cast<std::size_t>(local)],
                        fork ? &options.fork_entry : nullptr);
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
    rank.forked = fork;
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

MPP_DECL std::function<void(int, Stream, std::string_view)> prefixed_console() {
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
