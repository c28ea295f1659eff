#pragma once
// The definitions of process.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/launch/process.hpp"

namespace mpp::launch {

[[nodiscard]] std::string ExitStatus::describe() const {
  if (exited) return "exited with code " + std::to_string(exit_code);
  const char* abbrev = ::sigabbrev_np(signal);
  return "was killed by signal " + std::to_string(signal) + " (" +
         (abbrev ? std::string("SIG") + abbrev : std::string("unknown")) + ")";
}

ExitStatus ExitStatus::from_wait_status(int status) {
  ExitStatus result;
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace mpp::launch

namespace mpp::launch::detail {

MPP_DECL std::string why_not_executable(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    if (error == ENOENT)
      return "no such file (check the path, relative to the current directory, and that the "
             "program was built)";
    if (error == ENOTDIR) return "a part of the path is not a directory (check the path)";
    if (error == EACCES) return "permission denied on a directory of the path";
    return std::string("cannot stat it: ") + std::strerror(error);
  }
  if (S_ISDIR(info.st_mode)) return "is a directory; give the path of the program inside it";
  if (!S_ISREG(info.st_mode)) return "is not a regular file; give the path of a program";
  return "is not executable (make it so: chmod +x " + path + ")";
}

MPP_DECL std::string resolve_program(const std::string& program) {
  auto executable = [](const std::string& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (program.empty()) throw LaunchError("mpp launch: no program given to run on each rank");
  if (program.find('/') != std::string::npos) {
    if (executable(program)) return program;
    throw LaunchError("mpp launch: cannot execute '" + program +
                      "': " + why_not_executable(program));
  }
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(begin, end - begin);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    if (executable(candidate)) return candidate;
    begin = end + 1;
  }
  throw LaunchError("mpp launch: '" + program +
                    "' was not found on PATH; give its path (e.g. ./build/" + program + ")");
}

MPP_DECL std::map<std::string, std::string> own_environment() {
  std::map<std::string, std::string> variables;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text = *entry;
    const auto equals = text.find('=');
    if (equals != std::string::npos) variables[text.substr(0, equals)] = text.substr(equals + 1);
  }
  return variables;
}

MPP_DECL std::vector<std::string> merged_environment(const EnvList& overrides,
                                                     const std::vector<std::string>& removed) {
  std::map<std::string, std::string> variables = own_environment();
  for (const auto& name : removed) variables.erase(name);
  for (const auto& [name, value] : overrides) variables[name] = value;
  std::vector<std::string> result;
  result.reserve(variables.size());
  for (const auto& [name, value] : variables) result.push_back(name + "=" + value);
  return result;
}

Pipe::Pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw LaunchError("mpp launch: pipe2() failed: " + errno_text(errno));
  read = fds[0];
  write = fds[1];
}

MPP_DECL void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

MPP_DECL int thread_count() {
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return 0;
  int count = 0;
  while (const dirent* entry = ::readdir(tasks))
    if (entry->d_name[0] != '.') ++count;
  ::closedir(tasks);
  return count;
}

MPP_DECL bool environment_allows_fork(const std::vector<std::string>& env,
                                      const std::vector<std::string>& read_at_run_time) {
  const std::map<std::string, std::string> own = own_environment();
  auto may_differ = [&](const std::string& name) {
    return name.rfind("MPP_", 0) == 0 || std::find(read_at_run_time.begin(), read_at_run_time.end(),
                                                   name) != read_at_run_time.end();
  };
  std::set<std::string> theirs;
  for (const auto& text : env) {
    const auto equals = text.find('=');
    if (equals == std::string::npos) continue;
    std::string name = text.substr(0, equals);
    const auto mine = own.find(name);
    if ((mine == own.end() || mine->second != text.substr(equals + 1)) && !may_differ(name))
      return false;
    theirs.insert(std::move(name));
  }
  for (const auto& [name, value] : own)
    if (!theirs.contains(name) && !may_differ(name)) return false;
  return true;
}

/// The child's side of spawn() with a ForkEntry: never returns.
[[noreturn]] MPP_DECL void run_fork_entry(const ForkEntry& entry,
                                          const std::vector<std::string>& argv, char** env) {
  environ = env;
  int code = 1;
  try {
    code = entry(argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  } catch (...) {
    std::fprintf(stderr,
                 "mpp launch: the rank's entry threw an exception that is not a "
                 "std::exception\n");
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

MPP_DECL Child spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                     int cpu, const ForkEntry* entry) {
  // Everything the child touches is prepared here: between fork and exec only
  // async-signal-safe calls are allowed (the parent may have many threads). A child that runs
  // `entry` has no such limit: this process runs one thread.
  std::vector<char*> argv_ptrs;
  for (const auto& arg : argv) argv_ptrs.push_back(const_cast<char*>(arg.c_str()));
  argv_ptrs.push_back(nullptr);
  std::vector<char*> env_ptrs;
  for (const auto& entry : env) env_ptrs.push_back(const_cast<char*>(entry.c_str()));
  env_ptrs.push_back(nullptr);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (cpu >= 0) CPU_SET(cpu, &cpus);

  Pipe out, err, exec_status;
  const int dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  if (entry != nullptr) {  // what is buffered now would be written twice, by both processes
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    for (int fd :
         {out.read, out.write, err.read, err.write, exec_status.read, exec_status.write, dev_null})
      if (fd >= 0) ::close(fd);
    throw LaunchError("mpp launch: fork() failed: " + errno_text(error));
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // own group: the launcher can stop the rank and everything it started
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a launcher killed outright takes its ranks along
    if (::getppid() != parent) ::_exit(127);
    // Before exec, so that every thread the rank starts inherits it.
    if (cpu >= 0) ::sched_setaffinity(0, sizeof cpus, &cpus);
    if (dev_null >= 0) ::dup2(dev_null, STDIN_FILENO);
    ::dup2(out.write, STDOUT_FILENO);
    ::dup2(err.write, STDERR_FILENO);
    // Dispositions set to "ignore" survive exec; a rank must start with the defaults.
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &default_action, nullptr);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (entry != nullptr) {
      // As exec would leave it: the other ranks' pipes, this one's exec_status and the files
      // the parent opened, closed (the launcher sees "exec succeeded" when exec_status closes).
      ::syscall(SYS_close_range, 3U, ~0U, 0U);
      run_fork_entry(*entry, argv, env_ptrs.data());
    }
    // Sockets and files the parent opened without O_CLOEXEC must not leak into the rank.
    ::syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
    ::execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
    const int error = errno;
    [[maybe_unused]] auto written = ::write(exec_status.write, &error, sizeof error);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so that kill(-pid) works from this point on
  for (int fd : {out.write, err.write, exec_status.write, dev_null})
    if (fd >= 0) ::close(fd);

  int child_errno = 0;
  ssize_t got;
  do {
    got = ::read(exec_status.read, &child_errno, sizeof child_errno);
  } while (got < 0 && errno == EINTR);
  ::close(exec_status.read);
  if (got == static_cast<ssize_t>(sizeof child_errno)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(out.read);
    ::close(err.read);
    throw LaunchError("mpp launch: cannot execute '" + argv[0] + "': " + errno_text(child_errno));
  }
  return Child{pid, out.read, err.read};
}

}  // namespace mpp::launch::detail
