#pragma once
// What the Shm tests (shm_group_test.cpp, shm_mailbox_test.cpp) share: plain checks inside the
// workers, bounded worlds, the segment each rank prints and the check that none is left in
// /dev/shm, and the numbers the workers print ("elapsed_ms=...").
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpp/comm.hpp"
#include "mpp/comm/shm_group.hpp"
#include "support/world.hpp"

namespace mpp::test::shm {

using Clock = std::chrono::steady_clock;

/// A check inside a worker: throws (the worker fails, naming what) instead of a doctest CHECK.
inline void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

/// The host's monotonic clock in nanoseconds: the same instant reads the same in every process on
/// the host, so two ranks can compare when each did something.
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

/// The number a worker printed after `key` (e.g. "elapsed_ms="); -1 if it printed none.
inline long long number_after(const std::string& output, std::string_view key) {
  const auto at = output.find(key);
  if (at == std::string::npos) return -1;
  return std::stoll(output.substr(at + key.size()));
}

/// A world bounded in time, with extra variables for every rank (by default a 30 s deadline).
inline WorldOptions bounded(int seconds, std::vector<std::pair<std::string, std::string>> env = {
                                             {"MPP_TIMEOUT_S", "30"}}) {
  WorldOptions o;
  o.timeout = std::chrono::seconds(seconds);
  o.env = std::move(env);
  return o;
}

inline mpp::ShmProcessGroup& shm_of(const mpp::Group<mpp::Shm>& group) {
  return group.backend_group();
}

/// In a worker: prints the segment's name for check_no_segment_left.
inline void print_segment(const mpp::Group<mpp::Shm>& group) {
  std::printf("segment=%s\n", shm_of(group).segment_name().c_str());
  std::fflush(stdout);
}

/// Each rank printed its segment's name; none may exist once the ranks are gone.
inline void check_no_segment_left(const WorldResult& world) {
  for (int r = 0; r < world.size(); ++r) {
    const auto& out = world.output(r);
    const auto at = out.find("segment=");
    REQUIRE_MESSAGE(at != std::string::npos, out);
    const std::string name = out.substr(at + 8, out.find('\n', at) - at - 8);
    CAPTURE(name);
    CHECK(name.rfind("/mpp-shm-", 0) == 0);
    CHECK_FALSE(std::filesystem::exists("/dev/shm" + name));
  }
}

}  // namespace mpp::test::shm
