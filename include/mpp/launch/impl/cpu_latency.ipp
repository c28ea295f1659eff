#pragma once
// The definitions of cpu_latency.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/launch/cpu_latency.hpp"

namespace mpp::launch {

CpuLatencyLimit::CpuLatencyLimit(std::int32_t microseconds) : microseconds_(microseconds) {
  fd_ = ::open(cpu_latency_device, O_WRONLY | O_CLOEXEC);
  if (fd_ >= 0 && ::write(fd_, &microseconds, sizeof microseconds) ==
                      static_cast<ssize_t>(sizeof microseconds)) {
    status_ = std::string(cpu_latency_device) + " held at " + std::to_string(microseconds) +
              " us: idle CPUs " +
              (microseconds == 0 ? "poll instead of halting" : "stay in shallow sleep states");
    return;
  }
  status_ = std::string(cpu_latency_device) + " could not be held (" + std::strerror(errno) +
            (errno == EACCES || errno == EPERM ? "; it needs root" : "") +
            "): idle CPUs may halt and wake-ups may wait for a timer tick";
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

CpuLatencyLimit::~CpuLatencyLimit() {
  if (fd_ >= 0) ::close(fd_);
}

MPP_DECL std::int64_t current_cpu_latency_limit_us() {
  const int fd = ::open(cpu_latency_device, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  std::int32_t value = 0;
  const auto got = ::read(fd, &value, sizeof value);
  ::close(fd);
  return got == static_cast<ssize_t>(sizeof value) ? value : -1;
}

}  // namespace mpp::launch
