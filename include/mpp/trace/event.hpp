#pragma once
// What one rank did during one training step, as timed events. Torch-free: the executor
// records, the trace headers turn the record into figures and pictures.
#include <cstdint>
#include <string_view>
#include <vector>

#include "mpp/schedule/action.hpp"

namespace mpp::trace {

/// What a recorded event is: a compute the schedule planned, or time spent on communication.
enum class EventKind : std::uint8_t {
  forward,      ///< F: a piece's forward on one micro-batch
  backward,     ///< B: full backward (input and weight gradients)
  input_grad,   ///< I: gradient w.r.t. the piece's input only (zero-bubble)
  weight_grad,  ///< W: gradient w.r.t. the piece's parameters (zero-bubble)
  recompute,    ///< the forward re-run before a backward under Recompute
  send,         ///< posting (async) or completing (blocking) a send
  recv_wait,    ///< blocked until a received activation or gradient is there
  header_wait,  ///< blocked until a link's shape header is there (its first RECV_F of a step)
  recv_post,    ///< posting a receive (async): its buffer made and handed to the transport
  send_wait,    ///< end of step: waiting for the sends still in flight
  loss_sync,    ///< end of step: sharing the loss with every rank
};

/// A short label: "F", "B", "I", "W", "R", "send", "recv-wait", "header-wait", "recv-post",
/// "send-wait", "loss-sync".
constexpr std::string_view kind_name(EventKind k) {
  switch (k) {
    case EventKind::forward:
      return "F";
    case EventKind::backward:
      return "B";
    case EventKind::input_grad:
      return "I";
    case EventKind::weight_grad:
      return "W";
    case EventKind::recompute:
      return "R";
    case EventKind::send:
      return "send";
    case EventKind::recv_wait:
      return "recv-wait";
    case EventKind::header_wait:
      return "header-wait";
    case EventKind::recv_post:
      return "recv-post";
    case EventKind::send_wait:
      return "send-wait";
    case EventKind::loss_sync:
      return "loss-sync";
  }
  return "?";
}

/// Compute is what a schedule plans; everything else is time not spent on the model.
constexpr bool is_compute(EventKind k) {
  return k == EventKind::forward || k == EventKind::backward || k == EventKind::input_grad ||
         k == EventKind::weight_grad || k == EventKind::recompute;
}

/// One timed event of a rank's step.
struct Event {
  EventKind kind = EventKind::forward;  ///< What happened.
  Op op = Op::F;  ///< the table action it belongs to (SEND_B, RECV_F ... for comm events)
  std::int32_t micro_batch = -1;  ///< -1 when the event belongs to no micro-batch (loss-sync).
  std::int32_t chunk = 0;         ///< Local chunk on the rank.
  std::int32_t peer = -1;         ///< for send / recv-wait
  double begin_us = 0.0;          ///< since the step began on this rank
  double end_us = 0.0;            ///< Microseconds since the step began on this rank.

  /// end_us - begin_us.
  constexpr double duration_us() const { return end_us - begin_us; }
};

/// One rank's step: its events, how long it took, and what it held.
struct RankTrace {
  int rank = 0;                   ///< The rank that recorded it.
  std::vector<int> chunk_stages;  ///< the global stage of each of its chunks (its placement)
  double start_us = 0.0;      ///< the step's start on the machine's monotonic clock (aligns ranks)
  double step_us = 0.0;       ///< How long the step took on this rank, in microseconds.
  std::vector<Event> events;  ///< In the order they were recorded.
  std::int64_t peak_activation_bytes = 0;  ///< largest total of tensors kept for backward
  int peak_in_flight = 0;  ///< most micro-batches between F and their last backward op
  /// Its computes last their thread's CPU time, not their wall time (MPP_TRACE_CORE_TIME=1,
  /// Recorder): a compute ends before the wall clock says, and the time to the next event is
  /// other ranks' turns on the core as much as this rank's own work.
  bool core_time = false;

  /// The global stage of local `chunk` in a pipeline of `ranks` ranks: from chunk_stages, or
  /// interleaved (chunk * ranks + rank) when the trace names no stages.
  int stage_of(int chunk, int ranks) const {
    return chunk >= 0 && chunk < static_cast<int>(chunk_stages.size())
               ? chunk_stages[static_cast<std::size_t>(chunk)]
               : chunk * ranks + rank;
  }
  /// Time spent computing (forward, backward, I, W, recompute), in microseconds.
  double compute_us() const {
    double t = 0.0;
    for (const auto& e : events)
      if (is_compute(e.kind)) t += e.duration_us();
    return t;
  }
  /// Measured bubble: the share of the step not spent computing (blocked on a peer or idle).
  double bubble() const { return step_us > 0.0 ? 1.0 - compute_us() / step_us : 0.0; }
};

}  // namespace mpp::trace
