#pragma once
// How the threads a transport starts for itself are scheduled: Gloo's event loop (it reads every
// incoming message and writes a send whose receiver was not ready yet), Gloo's collective
// workers and the Shm group's worker.
//
// Why it matters: when a rank's compute thread shares its core with those threads (ranks pinned
// one per core, or more ranks than cores), a message that arrives wakes the event loop, and a
// woken thread preempts the running one. If the compute thread was inside a send or a receive
// just then, it holds the connection's lock; Gloo's loop only try-locks it, finds it taken and
// polls again, spinning on the core that the lock's holder needs, until the scheduler's time
// slice runs out (about a millisecond per message). As SCHED_BATCH threads they never preempt
// on wake-up: they run when the compute thread waits for a message (which is when their work is
// needed) or at the next scheduler tick, and on an idle core at once.
//
// One more place needs them: a send. Gloo writes a message only once the receiver's "ready to
// receive" note has been read, and its event loop reads those notes. A rank that computes without
// waiting (the first stage's forwards) would otherwise hold every send it posts until it next
// waits, and its receiver idles that long; so a send over such a transport first yields the core
// to them (let_transport_threads_run), a system call when none has work.
#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace mpp {

/// How the threads a transport starts (Gloo's event loop and collective workers, the Shm
/// worker) are scheduled; the compute thread is never changed. `CommOptions::transport_threads`,
/// or `MPP_TRANSPORT_THREADS=batch|normal`.
enum class TransportThreads {
  /// SCHED_BATCH (the default): they never preempt a compute thread when they wake, so they
  /// cannot spin on a lock the preempted thread holds; they run when it waits or sends, at the
  /// next tick, or at once on an idle core.
  batch,
  /// The scheduler's default policy, as the transport leaves them.
  normal,
};

/// "batch" or "normal".
constexpr const char* to_string(TransportThreads t) {
  return t == TransportThreads::batch ? "batch" : "normal";
}

namespace detail {

/// The ids of this process's threads now (from /proc/self/task; empty where there is none).
inline std::vector<int> thread_ids() {
  std::vector<int> ids;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* entry = ::readdir(dir))
      if (const int id = std::atoi(entry->d_name); id > 0) ids.push_back(id);
    ::closedir(dir);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

/// Gives the core to this process's transport threads that have work, then returns (at once when
/// none has): before a send whose delivery waits for them (see the top of this file).
inline void let_transport_threads_run() { (void)::sched_yield(); }

/// Runs `start` (which creates a transport's device or group) and schedules the threads it
/// started as `policy` says. A thread started meanwhile by another thread of the program is
/// indistinguishable from the transport's and is scheduled the same way.
template <class Start>
auto with_transport_threads(TransportThreads policy, Start&& start) {
  if (policy == TransportThreads::normal) return start();
  const std::vector<int> before = thread_ids();
  auto made = start();
  for (const int id : thread_ids()) {
    if (std::binary_search(before.begin(), before.end(), id)) continue;
    const sched_param param{};
    // Lowering a thread's policy needs no privilege; a thread that already ended is skipped.
    (void)::sched_setscheduler(id, SCHED_BATCH, &param);
  }
  return made;
}

}  // namespace detail
}  // namespace mpp
