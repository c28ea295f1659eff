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
  /// share of rank time not spent computing: 1 - sum(compute) / sum(step)
  double bubble = 0.0;
  std::vector<double> rank_bubble;  ///< Each rank's bubble (RankTrace::bubble()), by rank.
  std::vector<std::int64_t> peak_activation_bytes;  ///< Each rank's peak, by rank.
  std::vector<int> peak_in_flight;  ///< Each rank's peak micro-batches in flight, by rank.
  /// Mean measured durations (us) of one F, B, I and W on one chunk: the cost model's inputs.
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
  /// blocking) and on posting one receive (async; 0 when none was posted): a transport's cost
  /// per message besides its latency, LogP's overhead.
  ///@{
  double send_overhead_us = 0.0, recv_overhead_us = 0.0;
  ///@}
};

/// The mean latency of the messages a receiver was waiting for (see StepFigures).
inline double message_latency_us(std::span<const RankTrace> traces) {
  const int P = static_cast<int>(traces.size());
  std::vector<double> samples;
  for (const auto& receiver : traces) {
    for (const auto& wait : receiver.events) {
      if (wait.kind != EventKind::recv_wait || wait.peer < 0 || wait.peer >= P) continue;
      const bool forward = wait.op == Op::RECV_F;
      const int stage = receiver.stage_of(wait.chunk, P);
      const int from_stage = forward ? stage - 1 : stage + 1;
      const auto& sender = traces[static_cast<std::size_t>(wait.peer)];
      for (const auto& send : sender.events) {
        if (send.kind != EventKind::send || send.op != (forward ? Op::SEND_F : Op::SEND_B) ||
            send.micro_batch != wait.micro_batch || sender.stage_of(send.chunk, P) != from_stage)
          continue;
        const double send_begin = sender.start_us + send.begin_us;
        const double send_end = sender.start_us + send.end_us;
        const double wait_begin = receiver.start_us + wait.begin_us;
        const double wait_end = receiver.start_us + wait.end_us;
        if (wait_begin <= send_end && wait_end >= send_begin)
          samples.push_back(wait_end - send_begin);
        break;
      }
    }
  }
  if (samples.empty()) return 0.0;
  // The mean, not the median: a few slow deliveries (a descheduled thread) cost the step as much
  // as many fast ones, and the bubble adds them up.
  double sum = 0.0;
  for (double x : samples) sum += x;
  return sum / static_cast<double>(samples.size());
}

/// The figures of one step from every rank's trace (indexed by rank).
inline StepFigures step_figures(std::span<const RankTrace> traces) {
  StepFigures f;
  f.ranks = static_cast<int>(traces.size());
  double compute = 0.0, total = 0.0, recv_wait = 0.0, send = 0.0, recv_post = 0.0, step_end = 0.0;
  int sends = 0, recv_posts = 0;
  double sums[4] = {0, 0, 0, 0};
  int counts[4] = {0, 0, 0, 0};
  std::vector<std::array<double, 4>> stage_sums;
  std::vector<std::array<int, 4>> stage_counts;
  for (const auto& t : traces) {
    f.step_us = std::max(f.step_us, t.step_us);
    compute += t.compute_us();
    total += t.step_us;
    f.rank_bubble.push_back(t.bubble());
    f.peak_activation_bytes.push_back(t.peak_activation_bytes);
    f.peak_in_flight.push_back(t.peak_in_flight);
    double recompute_pending = 0.0;  // a recompute belongs to the backward right after it
    for (const auto& e : t.events) {
      int k = -1;
      switch (e.kind) {
        case EventKind::recv_wait:
        case EventKind::header_wait:
          recv_wait += e.duration_us();
          break;
        case EventKind::send:
          send += e.duration_us();
          ++sends;
          break;
        case EventKind::recv_post:
          recv_post += e.duration_us();
          ++recv_posts;
          break;
        case EventKind::send_wait:
        case EventKind::loss_sync:
          step_end += e.duration_us();
          break;
        case EventKind::recompute:
          recompute_pending += e.duration_us();
          break;
        case EventKind::forward:
          k = 0;
          break;
        case EventKind::backward:
          k = 1;
          break;
        case EventKind::input_grad:
          k = 2;
          break;
        case EventKind::weight_grad:
          k = 3;
          break;
        default:
          break;
      }
      if (k < 0) continue;
      const double us = e.duration_us() + (k == 1 || k == 2 ? recompute_pending : 0.0);
      if (k == 1 || k == 2) recompute_pending = 0.0;
      sums[k] += us;
      ++counts[k];
      const auto stage = static_cast<std::size_t>(t.stage_of(e.chunk, f.ranks));
      if (stage >= stage_sums.size()) {
        stage_sums.resize(stage + 1, {0, 0, 0, 0});
        stage_counts.resize(stage + 1, {0, 0, 0, 0});
      }
      stage_sums[stage][static_cast<std::size_t>(k)] += us;
      ++stage_counts[stage][static_cast<std::size_t>(k)];
    }
  }
  f.bubble = total > 0.0 ? 1.0 - compute / total : 0.0;
  if (total > 0.0) {
    f.recv_wait_share = recv_wait / total;
    f.send_share = send / total;
    f.recv_post_share = recv_post / total;
    f.step_end_share = step_end / total;
    f.untraced_share =
        f.bubble - f.recv_wait_share - f.send_share - f.recv_post_share - f.step_end_share;
  }
  f.send_overhead_us = sends > 0 ? send / sends : 0.0;
  f.recv_overhead_us = recv_posts > 0 ? recv_post / recv_posts : 0.0;
  auto mean = [&](int k) { return counts[k] > 0 ? sums[k] / counts[k] : 0.0; };
  f.forward_us = mean(0);
  f.backward_us = mean(1);
  f.input_grad_us = mean(2);
  f.weight_grad_us = mean(3);
  f.stage_us.assign(stage_sums.size(), {0, 0, 0, 0});
  for (std::size_t st = 0; st < stage_sums.size(); ++st)
    for (std::size_t k = 0; k < 4; ++k)
      if (stage_counts[st][k] > 0) f.stage_us[st][k] = stage_sums[st][k] / stage_counts[st][k];
  f.message_latency_us = message_latency_us(traces);
  return f;
}

/// The slowest mean action (F, B, I or W, common or of one stage) in microseconds: 100 cost units
/// in measured_costs().
inline double slowest_action_us(const StepFigures& f) {
  double largest = std::max({f.forward_us, f.backward_us, f.input_grad_us, f.weight_grad_us, 1e-9});
  for (const auto& s : f.stage_us) largest = std::max({largest, s[0], s[1], s[2], s[3]});
  return largest;
}

/// The duration of one cost unit of measured_costs(), in microseconds.
inline double measured_cost_unit_us(const StepFigures& f) { return slowest_action_us(f) / 100.0; }

/// `us` in measured cost units, rounded to the nearest (a fraction of a unit is 0).
inline int nearest_cost_units(const StepFigures& f, double us) {
  return static_cast<int>(std::lround(100.0 * us / slowest_action_us(f)));
}

/// `us` in measured cost units, at least 1 (0 stays 0).
inline int measured_cost_units(const StepFigures& f, double us) {
  return us > 0.0 ? std::max(1, nearest_cost_units(f, us)) : 0;
}

/// The verifier's cost model with the measured ratios (integers, the slowest action 100): the mean
/// F, B, I and W over every stage, and each stage's own where it ran them, so that a stage slower
/// than the others (the loss, an uneven cut) paces the prediction as it paces the run.
inline Costs measured_costs(const StepFigures& f) {
  auto units = [&](double us, int fallback) {
    return us > 0.0 ? measured_cost_units(f, us) : fallback;
  };
  // A backward that did not run as one (a split schedule ran I and W) costs what its two halves
  // did: the same work.
  const auto whole = [&](double b, double i, double w, int fallback) {
    return units(b > 0.0 ? b : (i > 0.0 && w > 0.0 ? i + w : 0.0), fallback);
  };
  Costs c;
  c.forward = units(f.forward_us, 1);
  c.backward = whole(f.backward_us, f.input_grad_us, f.weight_grad_us, 2 * c.forward);
  c.input_grad = units(f.input_grad_us, c.forward);
  c.weight_grad = units(f.weight_grad_us, c.forward);
  c.comm = 0;
  for (std::size_t st = 0; st < f.stage_us.size() && st < c.stage.size(); ++st) {
    const auto& s = f.stage_us[st];
    c.stage[st] = {units(s[0], 0), whole(s[1], s[2], s[3], 0), units(s[2], 0), units(s[3], 0)};
  }
  return c;
}

/// measured_costs() plus what a message costs, in the same units: the measured latency as T_comm
/// and the CPU time of posting a send and a receive as their overheads (what an asynchronous
/// replay charges the posting rank; a rendezvous replay times a transfer as T_comm alone).
inline Costs measured_costs_with_latency(const StepFigures& f) {
  Costs c = measured_costs(f);
  c.comm = measured_cost_units(f, f.message_latency_us);
  // Rounded to the nearest unit, not up to 1 as a duration is: a post of a fraction of a unit
  // (Shm's, under a microsecond) is 0, not a unit per message.
  c.send_overhead = nearest_cost_units(f, f.send_overhead_us);
  c.recv_overhead = nearest_cost_units(f, f.recv_overhead_us);
  return c;
}

/// The ranks' events on one time axis (microseconds from the earliest step start): compute as
/// F/B/I/W (a recompute is drawn as part of the backward it precedes) and, with `comm`, sends
/// as SEND_F/SEND_B and time blocked on a receive as RECV_F/RECV_B.
inline std::vector<TimedEvent> timed_events(std::span<const RankTrace> traces, bool comm = true) {
  double origin = traces.empty() ? 0.0 : traces.front().start_us;
  for (const auto& t : traces) origin = std::min(origin, t.start_us);
  std::vector<TimedEvent> out;
  for (const auto& t : traces) {
    const double shift = t.start_us - origin;
    double recompute_start = -1.0;
    for (const auto& e : t.events) {
      if (e.kind == EventKind::recompute) {
        recompute_start = e.begin_us;
        continue;
      }
      if (e.kind == EventKind::send_wait || e.kind == EventKind::loss_sync) continue;
      if (!comm && !is_compute(e.kind)) continue;
      if ((e.kind == EventKind::send || e.kind == EventKind::recv_wait ||
           e.kind == EventKind::header_wait || e.kind == EventKind::recv_post) &&
          e.duration_us() < 1.0)
        continue;  // posting an async operation: nothing to draw
      double begin = e.begin_us;
      if (recompute_start >= 0.0 &&
          (e.kind == EventKind::backward || e.kind == EventKind::input_grad)) {
        begin = recompute_start;
        recompute_start = -1.0;
      }
      TimedEvent te;
      te.rank = t.rank;
      te.start = begin + shift;
      te.end = e.end_us + shift;
      te.op = e.op;
      te.micro_batch = e.micro_batch;
      te.chunk = e.chunk;
      te.stage = t.stage_of(e.chunk, static_cast<int>(traces.size()));
      out.push_back(te);
    }
  }
  return out;
}

/// Chrome trace JSON (open in Perfetto or chrome://tracing), times in microseconds.
inline std::string chrome_trace(std::span<const RankTrace> traces) {
  const auto events = timed_events(traces);
  return render_chrome_trace(events, 1.0);
}

/// The measured timeline as ASCII: rank rows, compute only (time blocked or idle shows as '.'),
/// time in microseconds.
inline std::string ascii_timeline(std::span<const RankTrace> traces,
                                  const AsciiOptions& options = {}) {
  const auto events = timed_events(traces, /*comm=*/false);
  return render_ascii(events, options);
}

/// The measured timeline as SVG, in the colours of a predicted one (mpp-schedule --svg): compute
/// boxes F/B/I/W (a recompute as part of its backward) and, in grey, sends and time blocked on a
/// receive, on a time axis in microseconds from the earliest rank's step start; the legend
/// names the kinds of box drawn (render_timeline()).
inline std::string svg_timeline(std::span<const RankTrace> traces, const SvgOptions& options = {}) {
  const auto events = timed_events(traces, /*comm=*/true);
  return render_timeline(events, {.title = options.title,
                                  .subtitle = options.subtitle,
                                  .unit = "us",
                                  .row_height = options.row_height});
}

/// `bytes` for people: "1.50 MiB" from 1 MiB up, "12.0 KiB" below.
inline std::string format_bytes(std::int64_t bytes) {
  char buf[32];
  if (bytes >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  return buf;
}

/// Measured next to predicted, one line per rank plus the pipeline's bubble:
///   bubble measured 21.4%, predicted 20.0% (unit costs) / 18.9% (measured costs)
///   rank 0: bubble 22.0%, peak activations 1.50 MiB, 2 micro-batches in flight (predicted 2)
inline std::string describe(const StepFigures& f, const VerifyResult& predicted_unit,
                            const VerifyResult& predicted_measured,
                            const VerifyResult* predicted_latency = nullptr) {
  char buf[256];
  std::string out;
  std::snprintf(buf, sizeof buf,
                "bubble measured %.1f%%, predicted %.1f%% (unit costs) / %.1f%% (measured costs, "
                "communication free)\n",
                100.0 * f.bubble, 100.0 * predicted_unit.bubble_fraction(),
                100.0 * predicted_measured.bubble_fraction());
  out += buf;
  // Only an asynchronous step posts receives; its overheads are what the replay charged.
  const bool posted = f.recv_post_share > 0.0;
  if (predicted_latency != nullptr && f.message_latency_us > 0.0) {
    std::snprintf(buf, sizeof buf,
                  "  with the measured %.0f us per message (send to receiver unblocked) ",
                  f.message_latency_us);
    out += buf;
    if (posted) {
      std::snprintf(buf, sizeof buf, "and %.0f us / %.0f us to post a send / a receive ",
                    f.send_overhead_us, f.recv_overhead_us);
      out += buf;
    }
    std::snprintf(buf, sizeof buf, "the verifier predicts %.1f%%\n",
                  100.0 * predicted_latency->bubble_fraction());
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "  of the step: %.1f%% waiting for messages, %.1f%% sending, ",
                100.0 * f.recv_wait_share, 100.0 * f.send_share);
  out += buf;
  if (posted) {
    std::snprintf(buf, sizeof buf, "%.1f%% posting receives, ", 100.0 * f.recv_post_share);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "%.1f%% at the step's end, %.1f%% between actions\n",
                100.0 * f.step_end_share, 100.0 * f.untraced_share);
  out += buf;
  for (int r = 0; r < f.ranks; ++r) {
    const auto i = static_cast<std::size_t>(r);
    std::snprintf(buf, sizeof buf,
                  "rank %d: bubble %.1f%%, peak activations %s, %d micro-batch%s in flight "
                  "(predicted %d)\n",
                  r, 100.0 * f.rank_bubble[i], format_bytes(f.peak_activation_bytes[i]).c_str(),
                  f.peak_in_flight[i], f.peak_in_flight[i] == 1 ? "" : "es",
                  r < max_ranks ? predicted_unit.peak_in_flight[r] : 0);
    out += buf;
  }
  return out;
}

}  // namespace mpp::trace
