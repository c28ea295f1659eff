#pragma once
// Which CPU each rank of one node runs on. Ranks that exchange small messages wait for each
// other in microseconds; when the scheduler queues two of them on one CPU (a woken process often
// lands beside its waker), each message waits for the other rank's time slice instead. Binding
// rank r to the r-th CPU the launcher may use (as mpirun and srun do by default) keeps them apart.
// Standard library and POSIX only: no LibTorch.
#include <sched.h>

#include <vector>

namespace mpp::launch {

/// The CPUs this process may run on, in increasing order.
inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

/// One CPU per local rank (`result[r]` for rank r) when `ranks` fit on the allowed CPUs, one
/// each; empty when they do not (more ranks than CPUs): then the scheduler places them.
inline std::vector<int> cpu_binding(int ranks) {
  std::vector<int> cpus = allowed_cpus();
  if (ranks < 1 || static_cast<int>(cpus.size()) < ranks) return {};
  cpus.resize(static_cast<std::size_t>(ranks));
  return cpus;
}

}  // namespace mpp::launch
