// The figures of a step computed from the ranks' traces (include/mpp/trace/timeline.hpp): the
// bubble and its parts, on traces written by hand.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "mpp/trace/timeline.hpp"

namespace {

using mpp::Op;
using mpp::trace::Event;
using mpp::trace::EventKind;
using mpp::trace::RankTrace;

Event event(EventKind kind, Op op, int micro_batch, double begin, double end, int peer = -1) {
  return Event{kind, op, micro_batch, 0, peer, begin, end};
}

RankTrace rank_trace(int rank, double step_us, std::vector<Event> events) {
  RankTrace t;
  t.rank = rank;
  t.step_us = step_us;
  t.events = std::move(events);
  return t;
}

}  // namespace

TEST_CASE("step figures: the bubble's parts add up to it and each names its own time") {
  // Rank 0: F 0-40, send 40-42, nothing traced 42-50, blocked on a receive 50-70, B 70-150,
  // the step's end 150-160 (its sends, then the loss). Rank 1: blocked 0-44, F 44-84, B 84-164,
  // send 164-165, nothing traced 165-170, loss 170-180. Compute 120 + 120 of 160 + 180.
  const RankTrace r0 = rank_trace(
      0, 160,
      {event(EventKind::forward, Op::F, 0, 0, 40), event(EventKind::send, Op::SEND_F, 0, 40, 42, 1),
       event(EventKind::recv_wait, Op::RECV_B, 0, 50, 70, 1),
       event(EventKind::backward, Op::B, 0, 70, 150),
       event(EventKind::send_wait, Op::SEND_F, -1, 150, 152),
       event(EventKind::loss_sync, Op::SEND_F, -1, 152, 160)});
  const RankTrace r1 = rank_trace(
      1, 180,
      {event(EventKind::recv_wait, Op::RECV_F, 0, 0, 44, 0),
       event(EventKind::forward, Op::F, 0, 44, 84), event(EventKind::backward, Op::B, 0, 84, 164),
       event(EventKind::send, Op::SEND_B, 0, 164, 165, 0),
       event(EventKind::loss_sync, Op::SEND_F, -1, 170, 180)});
  const std::vector<RankTrace> traces{r0, r1};
  const auto f = mpp::trace::step_figures(traces);
  const double total = 160 + 180;
  CHECK(f.bubble == doctest::Approx(1.0 - 240 / total));
  CHECK(f.recv_wait_share == doctest::Approx((20 + 44) / total));
  CHECK(f.send_share == doctest::Approx((2 + 1) / total));
  CHECK(f.step_end_share == doctest::Approx((10 + 10) / total));
  CHECK(f.untraced_share == doctest::Approx((8 + 5) / total));
  CHECK(f.recv_wait_share + f.send_share + f.step_end_share + f.untraced_share ==
        doctest::Approx(f.bubble));
  // The summary names the parts.
  const std::string text = mpp::trace::describe(f, mpp::VerifyResult{}, mpp::VerifyResult{});
  CHECK(text.find("18.8% waiting for messages, 0.9% sending, 5.9% at the step's end, 3.8% "
                  "between actions") != std::string::npos);
}

TEST_CASE("step figures: posting a receive is its own part, and both posts are overheads") {
  // Async. Rank 0: F 0-40, send 40-44, post a receive 44-50, blocked 50-70, B 70-150.
  // Rank 1: post 0-2, blocked on the link's header 2-42 and on the data 42-44, F 44-84, B 84-164,
  // send 164-168, post 168-172 (nothing to receive: the figures do not care). Compute 120 + 120
  // of 150 + 172.
  const RankTrace r0 = rank_trace(
      0, 150,
      {event(EventKind::forward, Op::F, 0, 0, 40), event(EventKind::send, Op::SEND_F, 0, 40, 44, 1),
       event(EventKind::recv_post, Op::RECV_B, 0, 44, 50, 1),
       event(EventKind::recv_wait, Op::RECV_B, 0, 50, 70, 1),
       event(EventKind::backward, Op::B, 0, 70, 150)});
  const RankTrace r1 = rank_trace(
      1, 172,
      {event(EventKind::recv_post, Op::RECV_F, 0, 0, 2, 0),
       event(EventKind::header_wait, Op::RECV_F, 0, 2, 42, 0),
       event(EventKind::recv_wait, Op::RECV_F, 0, 42, 44, 0),
       event(EventKind::forward, Op::F, 0, 44, 84), event(EventKind::backward, Op::B, 0, 84, 164),
       event(EventKind::send, Op::SEND_B, 0, 164, 168, 0),
       event(EventKind::recv_post, Op::RECV_F, 1, 168, 172, 0)});
  const std::vector<RankTrace> traces{r0, r1};
  const auto f = mpp::trace::step_figures(traces);
  const double total = 150 + 172;
  CHECK(f.recv_post_share == doctest::Approx((6 + 2 + 4) / total));
  CHECK(f.recv_wait_share + f.send_share + f.recv_post_share + f.step_end_share +
            f.untraced_share ==
        doctest::Approx(f.bubble));
  CHECK(f.untraced_share == doctest::Approx(0.0));
  CHECK(f.recv_wait_share == doctest::Approx((20 + 40 + 2) / total));  // the header's wait too
  // The header is no sample of a message's latency: only the data's wait (send 40, there 44).
  CHECK(f.message_latency_us == doctest::Approx(4.0));
  CHECK(f.send_overhead_us == doctest::Approx(4.0));
  CHECK(f.recv_overhead_us == doctest::Approx(4.0));
  // In cost units (the slowest action, B = 80 us, is 100): 4 us is 5 units each.
  const mpp::Costs c = mpp::trace::measured_costs_with_latency(f);
  CHECK(c.send_overhead == 5);
  CHECK(c.recv_overhead == 5);
  const std::string text = mpp::trace::describe(f, mpp::VerifyResult{}, mpp::VerifyResult{});
  CHECK(text.find("sending, 3.7% posting receives, ") != std::string::npos);
  // A blocking step posts no receive: its summary has no such part.
  mpp::trace::StepFigures blocking = f;
  blocking.recv_post_share = 0.0;
  CHECK(mpp::trace::describe(blocking, mpp::VerifyResult{}, mpp::VerifyResult{}).find("posting") ==
        std::string::npos);
}

TEST_CASE(
    "step figures: the time between events is the next action's or post's, and the step's "
    "end is the last rank's") {
  // Rank 0: nothing traced 0-3, F 3-40, nothing 40-41, send 41-43, nothing 43-50, blocked 50-70,
  // nothing 70-72, B 72-150, the step's end 150-160. Rank 1: blocked 0-44, F 44-84, B 84-164,
  // send 164-165, nothing 165-170, loss 170-180.
  const RankTrace r0 = rank_trace(
      0, 160,
      {event(EventKind::forward, Op::F, 0, 3, 40), event(EventKind::send, Op::SEND_F, 0, 41, 43, 1),
       event(EventKind::recv_wait, Op::RECV_B, 0, 50, 70, 1),
       event(EventKind::backward, Op::B, 0, 72, 150),
       event(EventKind::send_wait, Op::SEND_F, -1, 150, 152),
       event(EventKind::loss_sync, Op::SEND_F, -1, 152, 160)});
  const RankTrace r1 = rank_trace(
      1, 180,
      {event(EventKind::recv_wait, Op::RECV_F, 0, 0, 44, 0),
       event(EventKind::forward, Op::F, 0, 44, 84), event(EventKind::backward, Op::B, 0, 84, 164),
       event(EventKind::send, Op::SEND_B, 0, 164, 165, 0),
       event(EventKind::loss_sync, Op::SEND_F, -1, 170, 180)});
  const std::vector<RankTrace> traces{r0, r1};
  const auto f = mpp::trace::step_figures(traces);
  REQUIRE(f.stage_us.size() == 2);
  CHECK(f.stage_us[0][0] == doctest::Approx(40));          // 3 before it, 37 of its own
  CHECK(f.stage_us[0][1] == doctest::Approx(7 + 2 + 78));  // through the wait: 43-50 and 70-72
  CHECK(f.stage_us[1][0] == doctest::Approx(40));
  CHECK(f.stage_us[1][1] == doctest::Approx(80));
  CHECK(f.send_overhead_us == doctest::Approx((1 + 2 + 1) / 2.0));
  // The bubble's parts are what the events say: the time between them stays untraced.
  CHECK(f.untraced_share == doctest::Approx((3 + 1 + 7 + 2 + 5) / 340.0));
  // Both started at 0: rank 1 began its step's end last, at 170, and ended at 180, last.
  CHECK(f.step_end_us == doctest::Approx(10));
  // Timed in core time, the time between a rank's events is not its own: nothing is charged.
  RankTrace core = r0;
  core.core_time = true;
  const std::vector<RankTrace> in_core_time{core, r1};
  const auto c = mpp::trace::step_figures(in_core_time);
  CHECK(c.stage_us[0][0] == doctest::Approx(37));
  CHECK(c.stage_us[0][1] == doctest::Approx(78));
  CHECK(c.send_overhead_us == doctest::Approx((2 + 1) / 2.0));
}

TEST_CASE("step figures: the summary says 1 micro-batch, 2 micro-batches") {
  mpp::trace::StepFigures f;
  f.ranks = 2;
  f.rank_bubble = {0.5, 0.25};
  f.peak_activation_bytes = {2048, 1024};
  f.peak_in_flight = {2, 1};
  const std::string text = mpp::trace::describe(f, mpp::VerifyResult{}, mpp::VerifyResult{});
  CHECK(text.find("rank 0: bubble 50.0%, peak activations 2.0 KiB, 2 micro-batches in flight") !=
        std::string::npos);
  CHECK(text.find("rank 1: bubble 25.0%, peak activations 1.0 KiB, 1 micro-batch in flight") !=
        std::string::npos);
}

TEST_CASE("step figures: each stage's own F and B costs reach the verifier's cost model") {
  // Rank 0 (stage 0): F 40, B 80. Rank 1 (stage 1): F 44 (its loss), B 80.
  const RankTrace r0 = rank_trace(0, 200,
                                  {event(EventKind::forward, Op::F, 0, 0, 40),
                                   event(EventKind::recv_wait, Op::RECV_B, 0, 40, 120, 1),
                                   event(EventKind::backward, Op::B, 0, 120, 200)});
  const RankTrace r1 = rank_trace(
      1, 200,
      {event(EventKind::recv_wait, Op::RECV_F, 0, 0, 40, 0),
       event(EventKind::forward, Op::F, 0, 40, 84), event(EventKind::backward, Op::B, 0, 84, 164)});
  const std::vector<RankTrace> traces{r0, r1};
  const auto f = mpp::trace::step_figures(traces);
  REQUIRE(f.stage_us.size() == 2);
  CHECK(f.stage_us[0][0] == doctest::Approx(40));
  CHECK(f.stage_us[1][0] == doctest::Approx(44));
  CHECK(f.forward_us == doctest::Approx(42));
  const mpp::Costs c = mpp::trace::measured_costs(f);
  CHECK(c.forward == 53);  // 42 / 80, the common cost
  CHECK(c.backward == 100);
  CHECK(c.of(Op::F, 0) == 50);
  CHECK(c.of(Op::F, 1) == 55);
  CHECK(c.of(Op::B, 1) == 100);
  CHECK(c.of(Op::I, 1) == c.input_grad);  // no I ran: the common cost
}

TEST_CASE("step figures: the span starts when the last rank starts, the slowest step does not") {
  // Rank 1 ended its last step early and starts this one 600 us before rank 0, then waits for
  // rank 0's forward: its step is 1000 us long, of which the pipeline (both ranks in their step)
  // takes the last 400, as a replay with both ranks free at 0 would.
  RankTrace r0 = rank_trace(0, 380,
                            {event(EventKind::forward, Op::F, 0, 0, 100),
                             event(EventKind::backward, Op::B, 0, 180, 380)});
  RankTrace r1 = rank_trace(1, 1000,
                            {event(EventKind::recv_wait, Op::RECV_F, 0, 0, 700, 0),
                             event(EventKind::forward, Op::F, 0, 700, 800),
                             event(EventKind::backward, Op::B, 0, 800, 1000)});
  r0.start_us = 5600;
  r1.start_us = 5000;
  const std::vector<RankTrace> traces{r0, r1};
  const auto f = mpp::trace::step_figures(traces);
  CHECK(f.step_us == doctest::Approx(1000));
  CHECK(f.span_us == doctest::Approx(400));  // 5600 to 6000
  // Started together, the span is the slowest step.
  r1.start_us = 5600;
  const std::vector<RankTrace> together{r0, r1};
  CHECK(mpp::trace::step_figures(together).span_us == doctest::Approx(1000));
}
