#pragma once
// The CPU wake-up latency limit (Linux PM QoS, /dev/cpu_dma_latency). On machines whose idle
// CPUs halt or enter deep sleep states (virtual machines with haltpoll, most laptops and
// servers), a thread woken on an idle CPU can wait a long time to run: on the 2-core VMs mpp
// is measured on, a receive whose CPU had halted was seen waiting for the next 4 ms timer tick.
// Ranks that wait for each other every few hundred microseconds (a pipeline of small
// micro-batches, a ping-pong) pay that on every message. While a process holds the file open
// with a limit written to it, the kernel keeps idle CPUs in states they leave within that many
// microseconds (0: they poll). Writing needs root; the limit lapses when the file is closed.
// Torch-free.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include "mpp/config.hpp"

namespace mpp::launch {

/// The kernel's PM QoS device: a limit written to it holds while the file stays open.
inline constexpr const char* cpu_latency_device = "/dev/cpu_dma_latency";

/// Holds the CPU wake-up latency limit at `microseconds` while alive; `status()` says whether it
/// could, in a sentence.
class CpuLatencyLimit {
 public:
  /// Asks for `microseconds` (0: idle CPUs poll). Never throws: without the rights (root) the
  /// limit is simply not held, and status() says so.
  MPP_DECL explicit CpuLatencyLimit(std::int32_t microseconds);
  MPP_DECL ~CpuLatencyLimit();
  CpuLatencyLimit(const CpuLatencyLimit&) = delete;
  CpuLatencyLimit& operator=(const CpuLatencyLimit&) = delete;

  /// Whether the limit is in force.
  bool held() const { return fd_ >= 0; }
  /// The limit asked for, in microseconds.
  std::int32_t microseconds() const { return microseconds_; }
  /// One sentence for a log: held or not, and what that means.
  const std::string& status() const { return status_; }

 private:
  std::int32_t microseconds_;
  int fd_ = -1;
  std::string status_;
};

/// The limit in force now (the smallest any process holds; 2000000000 when none does), or -1
/// when it cannot be read.
MPP_DECL std::int64_t current_cpu_latency_limit_us();

}  // namespace mpp::launch

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/launch/impl/cpu_latency.ipp"
#endif
