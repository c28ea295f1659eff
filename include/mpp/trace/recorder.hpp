#pragma once
// A rank's step recorder.
#include <time.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "mpp/trace/event.hpp"

namespace mpp::trace {

/// Records a rank's events during a step: two clock reads and a push into a reserved vector per
/// action, so it is always on. One per rank, used from one thread.
///
/// With MPP_TRACE_CORE_TIME=1 (read at each step's start) a compute lasts the CPU time its thread
/// spent on it (CLOCK_THREAD_CPUTIME_ID) from its start: the core time the cost model's
/// Costs::cores asks for when ranks outnumber cores, where the wall time counts the other ranks'
/// turns on the core as well. Everything else (messages, the step) keeps the wall clock.
class Recorder {
 public:
  /// The clock events are timed with.
  using clock = std::chrono::steady_clock;

  /// True when MPP_TRACE_CORE_TIME is 1: computes are timed by their thread's CPU time.
  static bool core_time_from_env() {
    const char* text = std::getenv("MPP_TRACE_CORE_TIME");
    return text != nullptr && std::string_view(text) == "1";
  }

  /// Starts a new step of `rank`, dropping the previous trace; `expected_events` reserves room
  /// so that recording does not allocate. `chunk_stages` is the global stage of each of the
  /// rank's chunks (empty: chunk c is stage c).
  void begin_step(int rank, std::size_t expected_events, std::vector<int> chunk_stages = {}) {
    trace_ = RankTrace{};
    trace_.rank = rank;
    trace_.chunk_stages = std::move(chunk_stages);
    trace_.events.reserve(expected_events);
    start_ = clock::now();
    trace_.start_us = std::chrono::duration<double, std::micro>(start_.time_since_epoch()).count();
    held_bytes_ = 0;
    in_flight_ = 0;
    core_time_ = core_time_from_env();
    trace_.core_time = core_time_;
  }

  /// The current time, for an event's begin and end.
  clock::time_point now() {
    const clock::time_point t = clock::now();
    if (core_time_) {
      cpu_marks_[next_mark_ % cpu_marks_.size()] = {t, thread_cpu()};
      ++next_mark_;
    }
    return t;
  }

  /// Records an event that ran from `begin` to `end` (times from now()).
  void record(EventKind kind, Op op, int micro_batch, int chunk, int peer, clock::time_point begin,
              clock::time_point end) {
    double end_us = since_start(end);
    if (core_time_ && is_compute(kind)) {
      const auto* from = cpu_mark(begin);
      const auto* to = cpu_mark(end);
      if (from && to) end_us = since_start(begin) + (to->cpu - from->cpu).count() / 1e3;
    }
    trace_.events.push_back({kind, op, micro_batch, chunk, peer, since_start(begin), end_us});
  }

  /// Activation accounting: bytes kept for a backward, and micro-batches in flight.
  void hold(std::int64_t bytes) {
    held_bytes_ += bytes;
    if (held_bytes_ > trace_.peak_activation_bytes) trace_.peak_activation_bytes = held_bytes_;
  }
  /// Bytes no longer kept (their backward ran).
  void release(std::int64_t bytes) { held_bytes_ -= bytes; }
  /// A micro-batch's forward started on this rank.
  void enter_flight() {
    if (++in_flight_ > trace_.peak_in_flight) trace_.peak_in_flight = in_flight_;
  }
  /// A micro-batch's last backward op ended on this rank.
  void leave_flight() { --in_flight_; }
  /// Bytes held now.
  std::int64_t held_bytes() const { return held_bytes_; }

  /// Ends the step: sets its duration.
  void end_step() { trace_.step_us = since_start(clock::now()); }
  /// The trace recorded so far (complete after end_step()).
  const RankTrace& trace() const { return trace_; }

 private:
  double since_start(clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - start_).count();
  }

  static std::chrono::nanoseconds thread_cpu() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  }

  /// A time now() returned and the thread's CPU time then.
  struct CpuMark {
    clock::time_point wall{};
    std::chrono::nanoseconds cpu{};
  };
  /// The mark of a time now() returned lately, or null.
  const CpuMark* cpu_mark(clock::time_point t) const {
    for (const CpuMark& m : cpu_marks_)
      if (m.wall == t) return &m;
    return nullptr;
  }

  RankTrace trace_;
  clock::time_point start_{};
  std::int64_t held_bytes_ = 0;
  int in_flight_ = 0;
  bool core_time_ = false;
  // The last times now() returned with their CPU times, for the computes' core time: a compute's
  // begin and end are among them (a few events at most run inside one).
  std::array<CpuMark, 16> cpu_marks_{};
  std::size_t next_mark_ = 0;
};

}  // namespace mpp::trace
