#pragma once
// Starting one rank as a fresh process (fork immediately followed by exec) in its own process
// group, with its stdout and stderr on pipes. Never fork alone: a forked copy of a process whose
// OpenMP or Gloo threads are running can deadlock, an exec'd one starts clean.
// Standard library and POSIX (plus Linux's PR_SET_PDEATHSIG) only.
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
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

namespace detail {

inline std::string errno_text(int error) { return std::strerror(error); }

/// What is true of a `path` that cannot be executed: "no such file", "is a directory", "is not
/// executable" (with the chmod that makes it so), each with what to do about it.
MPP_DECL std::string why_not_executable(const std::string& path);

/// Resolves `program` the way execvp would, but before fork, so that a typo is one clear error
/// instead of N identical rank failures.
MPP_DECL std::string resolve_program(const std::string& program);

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

/// fork + exec `argv` (argv[0] already resolved to a path) with exactly `env`, on CPU `cpu` alone
/// when it is not negative. Throws LaunchError if the exec itself fails (the child's errno comes
/// back on a pipe).
MPP_DECL Child spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     int cpu = -1);

}  // namespace detail
}  // namespace mpp::launch

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/launch/impl/process.ipp"
#endif
