#pragma once
// From the ranks' step traces to figures and pictures. The pictures are drawn by the schedule
// library's renderers from TimedEvents, exactly as the verifier's predicted timelines are, so a
// measured run and its prediction are drawn by the same code and can be read side by side.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "mpp/config.hpp"
#include "mpp/schedule/render.hpp"
#include "mpp/schedule/timed_event.hpp"
#include "mpp/schedule/verify.hpp"
#include "mpp/trace/event.hpp"
#include "mpp/trace/plot.hpp"

namespace mpp::trace {

/// Measured figures of one step over all ranks.
struct StepFigures {
  int ranks = 0;         ///< Ranks traced.
  double step_us = 0.0;  ///< the slowest rank's step
  /// From the moment the last rank started its step to the moment the last one ended it: the step
  /// as the cost model replays it, every rank free at its start. Between steps a rank that ended
  /// the last step early starts the next early and waits for the others (1F1B's last stage waits
  /// so for the first stage's last backward and optimizer step): its step_us counts that wait,
  /// the span does not. Ranks' clocks must be comparable (one host: CLOCK_MONOTONIC).
  double span_us = 0.0;
  /// share of rank time not spent computing: 1 - sum(compute) / sum(step)
  double bubble = 0.0;
  std::vector<double> rank_bubble;  ///< Each rank's bubble (RankTrace::bubble()), by rank.
  std::vector<std::int64_t> peak_activation_bytes;  ///< Each rank's peak, by rank.
  std::vector<int> peak_in_flight;  ///< Each rank's peak micro-batches in flight, by rank.
  /// Mean measured durations (us) of one F, B, I and W on one chunk, each with the executor's
  /// time before it (since the rank's last event, through any wait for its input; not in core
  /// time, RankTrace::core_time): the cost model's inputs. A replay of the actions alone leaves
  /// that time out, about 1 % of a step.
  ///@{
  double forward_us = 0.0, backward_us = 0.0, input_grad_us = 0.0, weight_grad_us = 0.0;
  ///@}
  /// The same per stage (indexed by stage: mean F, B, I, W in us, 0 where none ran). Stages of an
  /// evenly cut model differ too: the last computes the loss in its forward, the first no input
  /// gradient in its backward.
  std::vector<std::array<double, 4>> stage_us;
  /// Mean time from a send's start to the end of the receiver's wait for it, over the messages
  /// the receiver was already waiting for: what one transfer costs on the critical path (0 if
  /// no receiver ever waited). Ranks' clocks must be comparable (one host: CLOCK_MONOTONIC).
  double message_latency_us = 0.0;
  /// The bubble taken apart, each a share of all ranks' step time like `bubble` (the five add up
  /// to it): blocked on a receive (a link's shape header included), in a send (posting it, or
  /// blocked on it), posting a receive (async), at the end of the step (the last sends and the loss
  /// shared with every rank), and between events, which no event covers (the executor's own work
  /// between actions, or a rank descheduled there).
  ///@{
  double recv_wait_share = 0.0, send_share = 0.0, recv_post_share = 0.0, step_end_share = 0.0,
         untraced_share = 0.0;
  ///@}
  /// Mean CPU time (us) a rank spends on one send (posting it, async; its whole transfer,
  /// blocking) and on posting one receive (async; 0 when none was posted), each with the
  /// executor's time before it as an action's: a transport's cost per message besides its
  /// latency, LogP's overhead.
  ///@{
  double send_overhead_us = 0.0, recv_overhead_us = 0.0;
  ///@}
  /// From the moment the last rank began its step's end (its sends' wait, then the loss shared)
  /// to the moment the last rank ended its step: what a predicted step adds to the verifier's
  /// makespan, which ends with the last action. Ranks' clocks must be comparable.
  double step_end_us = 0.0;
};

/// The mean latency of the messages a receiver was waiting for (see StepFigures).
MPP_DECL double message_latency_us(std::span<const RankTrace> traces);

/// The figures of one step from every rank's trace (indexed by rank).
MPP_DECL StepFigures step_figures(std::span<const RankTrace> traces);

/// The slowest mean action (F, B, I or W, common or of one stage) in microseconds: 100 cost units
/// in measured_costs().
MPP_DECL double slowest_action_us(const StepFigures& f);

/// The duration of one cost unit of measured_costs(), in microseconds.
inline double measured_cost_unit_us(const StepFigures& f) { return slowest_action_us(f) / 100.0; }

/// `us` in measured cost units, rounded to the nearest (a fraction of a unit is 0).
MPP_DECL int nearest_cost_units(const StepFigures& f, double us);

/// `us` in measured cost units, at least 1 (0 stays 0).
MPP_DECL int measured_cost_units(const StepFigures& f, double us);

/// The verifier's cost model with the measured ratios (integers, the slowest action 100): the mean
/// F, B, I and W over every stage, and each stage's own where it ran them, so that a stage slower
/// than the others (the loss, an uneven cut) paces the prediction as it paces the run.
MPP_DECL Costs measured_costs(const StepFigures& f);

/// measured_costs() plus what a message costs, in the same units: the measured latency as T_comm
/// and the CPU time of posting a send and a receive as their overheads (what an asynchronous
/// replay charges the posting rank; a rendezvous replay times a transfer as T_comm alone).
MPP_DECL Costs measured_costs_with_latency(const StepFigures& f);

/// The ranks' events on one time axis (microseconds from the earliest step start): compute as
/// F/B/I/W (a recompute is drawn as part of the backward it precedes) and, with `comm`, sends
/// as SEND_F/SEND_B and time blocked on a receive as RECV_F/RECV_B.
MPP_DECL std::vector<TimedEvent> timed_events(std::span<const RankTrace> traces, bool comm = true);

/// Chrome trace JSON (open in Perfetto or chrome://tracing), times in microseconds.
MPP_DECL std::string chrome_trace(std::span<const RankTrace> traces);

/// The measured timeline as ASCII: rank rows, compute only (time blocked or idle shows as '.'),
/// time in microseconds.
MPP_DECL std::string ascii_timeline(std::span<const RankTrace> traces,
                                    const AsciiOptions& options = {});

/// The measured timeline as SVG, in the colours of a predicted one (mpp-schedule --svg): compute
/// boxes F/B/I/W (a recompute as part of its backward) and, in grey, sends and time blocked on a
/// receive, on a time axis in microseconds from the earliest rank's step start; the legend
/// names the kinds of box drawn (render_timeline()).
MPP_DECL std::string svg_timeline(std::span<const RankTrace> traces,
                                  const SvgOptions& options = {});

/// `bytes` for people: "1.50 MiB" from 1 MiB up, "12.0 KiB" below.
MPP_DECL std::string format_bytes(std::int64_t bytes);

/// Measured next to predicted, one line per rank plus the pipeline's bubble:
///   bubble measured 21.4%, predicted 20.0% (unit costs) / 18.9% (measured costs)
///   rank 0: bubble 22.0%, peak activations 1.50 MiB, 2 micro-batches in flight (predicted 2)
MPP_DECL std::string describe(const StepFigures& f, const VerifyResult& predicted_unit,
                              const VerifyResult& predicted_measured,
                              const VerifyResult* predicted_latency = nullptr);

}  // namespace mpp::trace

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/trace/impl/timeline.ipp"
#endif
