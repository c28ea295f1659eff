#pragma once
// A rank's step recorder.
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "mpp/trace/event.hpp"

namespace mpp::trace {

/// Records a rank's events during a step: two clock reads and a push into a reserved vector per
/// action, so it is always on. One per rank, used from one thread.
class Recorder {
 public:
  /// The clock events are timed with.
  using clock = std::chrono::steady_clock;

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
  }

  /// The current time, for an event's begin and end.
  clock::time_point now() const { return clock::now(); }

  /// Records an event that ran from `begin` to `end` (times from now()).
  void record(EventKind kind, Op op, int micro_batch, int chunk, int peer, clock::time_point begin,
              clock::time_point end) {
    trace_.events.push_back(
        {kind, op, micro_batch, chunk, peer, since_start(begin), since_start(end)});
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

  RankTrace trace_;
  clock::time_point start_{};
  std::int64_t held_bytes_ = 0;
  int in_flight_ = 0;
};

}  // namespace mpp::trace
