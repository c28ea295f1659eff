#pragma once
// Starting one rank as a fresh process (fork immediately followed by exec) in its own process
// group, with its stdout and stderr on pipes. A rank may instead be a fork that calls a function
// of this program (ForkEntry), which saves the program's start, but only from a process that runs
// one thread: a forked copy of a process whose OpenMP or Gloo threads are running can deadlock,
// an exec'd one starts clean.
// Standard library and POSIX (plus Linux's PR_SET_PDEATHSIG) only.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mpp/config.hpp"
#include "mpp/launch/environment.hpp"

extern char** environ;  // NOLINT: POSIX declares it nowhere in a header

namespace mpp::launch {

/// How a process ended, as waitpid reports it.
struct ExitStatus {
  bool exited = false;  ///< true: exit_code is valid; false: killed by `signal`
  int exit_code = -1;   ///< The process's exit code when `exited`.
  int signal = 0;       ///< The signal that killed it when not `exited`.

  /// Exited with code 0.
  [[nodiscard]] bool success() const { return exited && exit_code == 0; }
  /// The code a shell would report: the exit code, or 128 + signal.
  [[nodiscard]] int shell_code() const { return exited ? exit_code : 128 + signal; }
  /// "exited with code 3" or "was killed by signal 9 (SIGKILL)", for messages.
  [[nodiscard]] MPP_DECL std::string describe() const;
  /// From the status waitpid() returned.
  MPP_DECL static ExitStatus from_wait_status(int status);
};

/// What a rank started as a fork runs instead of exec'ing its command: it gets the command
/// (argv[0] resolved to a path) and returns the rank's exit code (an exception exits with 1 and its
/// message on stderr).
using ForkEntry = std::function<int(const std::vector<std::string>& argv)>;

namespace detail {

inline std::string errno_text(int error) { return std::strerror(error); }

/// What is true of a `path` that cannot be executed: "no such file", "is a directory", "is not
/// executable" (with the chmod that makes it so), each with what to do about it.
MPP_DECL std::string why_not_executable(const std::string& path);

/// Resolves `program` the way execvp would, but before fork, so that a typo is one clear error
/// instead of N identical rank failures.
MPP_DECL std::string resolve_program(const std::string& program);

/// This process's environment, by name.
MPP_DECL std::map<std::string, std::string> own_environment();

/// The parent's environment with `overrides` applied (later entries win) and `removed` dropped.
MPP_DECL std::vector<std::string> merged_environment(const EnvList& overrides,
                                                     const std::vector<std::string>& removed);

/// A pipe whose ends are closed on exec in every process but the one that dup2's them.
struct Pipe {
  int read = -1;
  int write = -1;
  MPP_DECL Pipe();
};

MPP_DECL void close_fd(int& fd);

/// A started process: the leader of its own process group, its output on two pipes.
struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

/// The threads this process runs now (from /proc/self/task); 0 when it cannot tell.
MPP_DECL int thread_count();

/// Whether a rank with environment `env` may be a fork of this process: the two environments
/// differ only in the variables `read_at_run_time` names and in MPP_*. Any other variable may be
/// read once when a library loads (OMP_NUM_THREADS by libgomp, MALLOC_* by glibc, LD_* by the
/// loader): a fork's libraries read them long ago, with this process's values.
MPP_DECL bool environment_allows_fork(const std::vector<std::string>& env,
                                      const std::vector<std::string>& read_at_run_time);

/// fork + exec `argv` (argv[0] already resolved to a path) with exactly `env`, on CPU `cpu` alone
/// when it is not negative. Throws LaunchError if the exec itself fails (the child's errno comes
/// back on a pipe). With `entry`, the child calls it instead of exec: the caller has checked that
/// this process runs one thread (thread_count) and that `env` allows it (environment_allows_fork).
/// The fork starts as an exec'd rank would: its own process group, stdin from /dev/null, no file
/// descriptor open but 0-2, default signal dispositions, exactly `env`.
MPP_DECL Child spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     int cpu = -1, const ForkEntry* entry = nullptr);

}  // namespace detail
}  // namespace mpp::launch

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/launch/impl/process.ipp"
#endif
