#pragma once
// The definitions of timeline.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/trace/timeline.hpp"

namespace mpp::trace {

MPP_DECL double message_latency_us(std::span<const RankTrace> traces) {
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

MPP_DECL StepFigures step_figures(std::span<const RankTrace> traces) {
  StepFigures f;
  f.ranks = static_cast<int>(traces.size());
  double compute = 0.0, total = 0.0, recv_wait = 0.0, send = 0.0, recv_post = 0.0, step_end = 0.0;
  double send_cost = 0.0, recv_post_cost = 0.0;  // with the time before each post
  int sends = 0, recv_posts = 0;
  double sums[4] = {0, 0, 0, 0};
  int counts[4] = {0, 0, 0, 0};
  std::vector<std::array<double, 4>> stage_sums;
  std::vector<std::array<int, 4>> stage_counts;
  double last_start = traces.empty() ? 0.0 : traces.front().start_us, last_end = last_start;
  double last_step_end_begin = last_start;  // the last rank to begin its step's end
  for (const auto& t : traces) {
    f.step_us = std::max(f.step_us, t.step_us);
    last_start = std::max(last_start, t.start_us);
    last_end = std::max(last_end, t.start_us + t.step_us);
    compute += t.compute_us();
    total += t.step_us;
    f.rank_bubble.push_back(t.bubble());
    f.peak_activation_bytes.push_back(t.peak_activation_bytes);
    f.peak_in_flight.push_back(t.peak_in_flight);
    double recompute_pending = 0.0;  // a recompute belongs to the backward right after it
    // The executor's time between events (no event covers it) is charged to the next action or
    // post: it is that one's preparation, on the rank's path as the action is. A wait passes it on
    // (to the action the wait was for). Not in core time: there the time between events is other
    // ranks' turns on the core as well.
    double covered_to = 0.0, between = 0.0, step_end_begin = t.step_us;
    for (const auto& e : t.events) {
      if (!t.core_time) between += std::max(0.0, e.begin_us - covered_to);
      covered_to = std::max(covered_to, e.end_us);
      const double cost = e.duration_us() + between;
      int k = -1;
      switch (e.kind) {
        case EventKind::recv_wait:
        case EventKind::header_wait:
          recv_wait += e.duration_us();
          continue;
        case EventKind::send:
          send += e.duration_us();
          send_cost += cost;
          ++sends;
          break;
        case EventKind::recv_post:
          recv_post += e.duration_us();
          recv_post_cost += cost;
          ++recv_posts;
          break;
        case EventKind::send_wait:
        case EventKind::loss_sync:
          step_end += e.duration_us();
          step_end_begin = std::min(step_end_begin, e.begin_us);
          continue;
        case EventKind::recompute:
          recompute_pending += cost;
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
          continue;
      }
      between = 0.0;
      if (k < 0) continue;
      const double us = cost + (k == 1 || k == 2 ? recompute_pending : 0.0);
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
    last_step_end_begin = std::max(last_step_end_begin, t.start_us + step_end_begin);
  }
  f.span_us = last_end - last_start;
  f.step_end_us = traces.empty() ? 0.0 : last_end - last_step_end_begin;
  f.bubble = total > 0.0 ? 1.0 - compute / total : 0.0;
  if (total > 0.0) {
    f.recv_wait_share = recv_wait / total;
    f.send_share = send / total;
    f.recv_post_share = recv_post / total;
    f.step_end_share = step_end / total;
    f.untraced_share =
        f.bubble - f.recv_wait_share - f.send_share - f.recv_post_share - f.step_end_share;
  }
  f.send_overhead_us = sends > 0 ? send_cost / sends : 0.0;
  f.recv_overhead_us = recv_posts > 0 ? recv_post_cost / recv_posts : 0.0;
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

MPP_DECL double slowest_action_us(const StepFigures& f) {
  double largest = std::max({f.forward_us, f.backward_us, f.input_grad_us, f.weight_grad_us, 1e-9});
  for (const auto& s : f.stage_us) largest = std::max({largest, s[0], s[1], s[2], s[3]});
  return largest;
}

MPP_DECL int nearest_cost_units(const StepFigures& f, double us) {
  return static_cast<int>(std::lround(100.0 * us / slowest_action_us(f)));
}

MPP_DECL int measured_cost_units(const StepFigures& f, double us) {
  return us > 0.0 ? std::max(1, nearest_cost_units(f, us)) : 0;
}

MPP_DECL Costs measured_costs(const StepFigures& f) {
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

MPP_DECL Costs measured_costs_with_latency(const StepFigures& f) {
  Costs c = measured_costs(f);
  c.comm = measured_cost_units(f, f.message_latency_us);
  // Rounded to the nearest unit, not up to 1 as a duration is: a post of a fraction of a unit
  // (Shm's, under a microsecond) is 0, not a unit per message.
  c.send_overhead = nearest_cost_units(f, f.send_overhead_us);
  c.recv_overhead = nearest_cost_units(f, f.recv_overhead_us);
  return c;
}

MPP_DECL std::vector<TimedEvent> timed_events(std::span<const RankTrace> traces, bool comm) {
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

MPP_DECL std::string chrome_trace(std::span<const RankTrace> traces) {
  const auto events = timed_events(traces);
  return render_chrome_trace(events, 1.0);
}

MPP_DECL std::string ascii_timeline(std::span<const RankTrace> traces,
                                    const AsciiOptions& options) {
  const auto events = timed_events(traces, /*comm=*/false);
  return render_ascii(events, options);
}

MPP_DECL std::string svg_timeline(std::span<const RankTrace> traces, const SvgOptions& options) {
  const auto events = timed_events(traces, /*comm=*/true);
  return render_timeline(events, {.title = options.title,
                                  .subtitle = options.subtitle,
                                  .unit = "us",
                                  .row_height = options.row_height});
}

MPP_DECL std::string format_bytes(std::int64_t bytes) {
  char buf[32];
  if (bytes >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  return buf;
}

MPP_DECL std::string describe(const StepFigures& f, const VerifyResult& predicted_unit,
                              const VerifyResult& predicted_measured,
                              const VerifyResult* predicted_latency) {
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
