#pragma once
// Where a rank's cores went: the kernel's per-thread scheduler statistics
// (/proc/self/task/<id>/schedstat: time on a CPU, time runnable but waiting for one). Read before
// and after a run of steps, they say how much CPU the transport's own threads took and how long
// the calling (compute) thread waited for its core while another thread had it.
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "mpp/comm/transport_threads.hpp"

namespace mpp::bench {

/// Scheduler times of this process's threads, in microseconds.
struct ThreadTimes {
  double own_run_us = 0.0;     ///< the calling thread on a CPU
  double own_wait_us = 0.0;    ///< the calling thread runnable but not running
  double others_run_us = 0.0;  ///< every other thread on a CPU
};

/// Now, from /proc/self/task (zeros where the kernel keeps no scheduler statistics).
inline ThreadTimes thread_times() {
  ThreadTimes t;
  const long self = ::syscall(SYS_gettid);
  for (const int id : mpp::detail::thread_ids()) {
    const std::string path = "/proc/self/task/" + std::to_string(id) + "/schedstat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;
    unsigned long long run_ns = 0, wait_ns = 0;
    if (std::fscanf(f, "%llu %llu", &run_ns, &wait_ns) == 2) {
      if (id == self) {
        t.own_run_us += static_cast<double>(run_ns) / 1e3;
        t.own_wait_us += static_cast<double>(wait_ns) / 1e3;
      } else {
        t.others_run_us += static_cast<double>(run_ns) / 1e3;
      }
    }
    std::fclose(f);
  }
  return t;
}

}  // namespace mpp::bench
