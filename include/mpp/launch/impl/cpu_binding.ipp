#pragma once
// The definitions of cpu_binding.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/launch/cpu_binding.hpp"

namespace mpp::launch {

MPP_DECL std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

MPP_DECL std::vector<int> cpu_binding(int ranks) {
  std::vector<int> cpus = allowed_cpus();
  if (ranks < 1 || static_cast<int>(cpus.size()) < ranks) return {};
  cpus.resize(static_cast<std::size_t>(ranks));
  return cpus;
}

}  // namespace mpp::launch
