// The verifier's rules, each broken on purpose (compile time and run time), hand-written and
// imported tables, and the remaining known answers (interleaved, ZB-H1, communication costs).
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "mpp/comm/policy.hpp"
#include "mpp/schedule.hpp"

using namespace mpp;
using namespace mpp::actions;

namespace {

// A hand-written table is a schedule.
inline constexpr Action good_rows[2][4] = {{F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1), B(1)}};
using Good = Custom<good_rows>;
static_assert(schedule<Good>);
static_assert(Good::micro_batches == 2 && Good::ranks == 2);
static_assert(verify<Good, Blocking<Gloo>>(2).ok);
static_assert(verify<Good, Async<Gloo>>(2).ok);
static_assert(verify<Good, Blocking<Gloo>>(2).makespan == 9);  // quoted in docs/schedules.md

// ZB-style split backward, hand-written.
inline constexpr Action split_rows[2][6] = {{F(0), F(1), I(0), I(1), W(0), W(1)},
                                            {F(0), I(0), F(1), I(1), W(0), W(1)}};
static_assert(verify<Custom<split_rows>, Blocking<Gloo>>(2).ok);

// Each rule, broken; the verifier names the rule, the rank and the step of the row.
inline constexpr Action forgets_backward[2][4] = {{F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1)}};
constexpr VerifyResult r_forgets = verify<Custom<forgets_backward>, Async<Gloo>>(2);
static_assert(!r_forgets.ok && r_forgets.rule == Rule::exactly_once && r_forgets.rank == 1 &&
              r_forgets.step == 3);
static_assert(r_forgets.action.op == Op::B && r_forgets.action.micro_batch == 1 &&
              r_forgets.action.stage == 1);

inline constexpr Action backward_first[2][4] = {{F(0), B(0), B(1), F(1)}, {F(0), B(0), F(1), B(1)}};
constexpr VerifyResult r_early = verify<Custom<backward_first>, Async<Gloo>>(2);
static_assert(!r_early.ok && r_early.rule == Rule::forward_before_backward && r_early.rank == 0 &&
              r_early.step == 2);

inline constexpr Action weight_first[2][6] = {{F(0), F(1), I(0), W(1), I(1), W(0)},
                                              {F(0), I(0), F(1), I(1), W(0), W(1)}};
constexpr VerifyResult r_weight = verify<Custom<weight_first>, Async<Gloo>>(2);
static_assert(!r_weight.ok && r_weight.rule == Rule::input_grad_before_weight_grad &&
              r_weight.step == 3);

inline constexpr Action twice[2][5] = {{F(0), F(1), B(0), B(1), F(1)}, {F(0), B(0), F(1), B(1)}};
static_assert(verify<Custom<twice>, Async<Gloo>>(2).rule == Rule::exactly_once);

inline constexpr Action both_backwards[2][5] = {{F(0), F(1), B(0), B(1)},
                                                {F(0), B(0), F(1), I(1), B(1)}};
static_assert(verify<Custom<both_backwards>, Async<Gloo>>(2).rule == Rule::exactly_once);

// Cross-rank order that cannot run: rank 0 waits for B(1) before giving F(1) to rank 1.
inline constexpr Action cyclic[2][4] = {{F(0), B(0), B(1), F(1)}, {F(0), F(1), B(0), B(1)}};
static_assert(verify<Custom<cyclic>, Async<Gloo>>(2).rule == Rule::forward_before_backward);
inline constexpr Action waits_forever[2][4] = {{F(0), B(1), F(1), B(0)}, {F(0), F(1), B(1), B(0)}};
static_assert(verify<Custom<waits_forever>, Async<Gloo>>(2).rule == Rule::forward_before_backward);
// Consistent message orders, but a cycle: rank 0 waits for B(0) before sending F(1), which
// rank 1 needs before it runs B(0).
inline constexpr Action cross_wait[2][4] = {{F(0), B(0), F(1), B(1)}, {F(0), F(1), B(0), B(1)}};
constexpr VerifyResult r_cross = verify<Custom<cross_wait>, Async<Gloo>>(2);
static_assert(!r_cross.ok && r_cross.rule == Rule::deadlock && r_cross.rank == 0);
// Rank 1 consumes F(1) before F(0), but rank 0 sends F(0) first: the receives would take each
// other's tensors.
inline constexpr Action out_of_order[2][4] = {{F(0), F(1), B(0), B(1)}, {F(1), F(0), B(0), B(1)}};
static_assert(verify<Custom<out_of_order>, Async<Gloo>>(2).rule == Rule::matched_messages);

// Wrong number of rows, wrong stage for a chunk.
static_assert(verify<Good, Async<Gloo>>(3).rule == Rule::parameters);

// The textbook blocking 1F1B deadlocks; the lowering mpp::lower does for rendezvous does not.
constexpr bool naive_blocking_deadlocks() {
  ScheduleTable lowered{};
  lowered = lower_naive(OneFOneB<8>::table(4), CommSemantics::rendezvous);
  const VerifyResult r = verify(lowered, CommSemantics::rendezvous);
  return !r.ok && r.rule == Rule::deadlock && r.action.op == Op::SEND_F;
}
static_assert(naive_blocking_deadlocks());

// OneFOneB handles M < P (it degenerates into fill-drain, same bubble formula).
static_assert(verify<OneFOneB<2>, Blocking<Gloo>>(4).ok);
static_assert(verify<OneFOneB<2>, Blocking<Gloo>>(4).makespan == 3 * (2 + 4 - 1));

std::unique_ptr<ScheduleTable> lowered_1f1b(int p, int m, CommSemantics sem) {
  auto compute = std::make_unique<ScheduleTable>();
  generate_into(*compute, ScheduleSpec{"OneFOneB", m, 1}, p);
  auto out = std::make_unique<ScheduleTable>();
  lower_into(*out, *compute, sem);
  return out;
}

std::unique_ptr<Plan> plan_of(std::string_view kind, int p, int m, int v, CommSemantics sem,
                              Costs costs = {}) {
  auto compute = std::make_unique<ScheduleTable>();
  generate_into(*compute, ScheduleSpec{kind, m, v}, p);
  auto plan = std::make_unique<Plan>();
  plan_into(*plan, *compute, sem, costs);
  return plan;
}

int find(const ScheduleTable& t, int rank, Op op, int mb) {
  for (int k = 0; k < t.length[rank]; ++k)
    if (t.actions[rank][k].op == op && t.actions[rank][k].micro_batch == mb) return k;
  return -1;
}

void erase(ScheduleTable& t, int rank, int step) {
  for (int k = step; k + 1 < t.length[rank]; ++k) t.actions[rank][k] = t.actions[rank][k + 1];
  --t.length[rank];
}

}  // namespace

TEST_CASE("lowered-table rules: send after compute, receive before compute, matched messages") {
  SUBCASE("a send moved before its compute") {
    auto t = lowered_1f1b(2, 4, CommSemantics::buffered);
    const int send = find(*t, 0, Op::SEND_F, 1), compute = find(*t, 0, Op::F, 1);
    REQUIRE(send > compute);
    std::swap(t->actions[0][send], t->actions[0][compute]);
    const VerifyResult r = verify(*t, CommSemantics::buffered);
    CHECK(r.rule == Rule::send_after_compute);
    CHECK(r.rank == 0);
    CHECK(r.step == compute);
  }
  SUBCASE("a receive removed") {
    auto t = lowered_1f1b(2, 4, CommSemantics::buffered);
    erase(*t, 1, find(*t, 1, Op::RECV_F, 2));
    const VerifyResult r = verify(*t, CommSemantics::buffered);
    CHECK(r.rule == Rule::receive_before_compute);
    CHECK(r.rank == 1);
    CHECK(r.action.op == Op::F);
    CHECK(r.action.micro_batch == 2);
  }
  SUBCASE("a send removed") {
    auto t = lowered_1f1b(2, 4, CommSemantics::buffered);
    erase(*t, 0, find(*t, 0, Op::SEND_F, 3));
    const VerifyResult r = verify(*t, CommSemantics::buffered);
    CHECK(r.rule == Rule::matched_messages);
    CHECK(std::string(r.message.view()).find("never sends it") != std::string::npos);
  }
  SUBCASE("receives posted in another order than the peer sends") {
    auto t = std::make_unique<ScheduleTable>();
    table_from_action_csv(*t,
                          "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                          "1RECV_F1,1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n");
    REQUIRE(t->ok());
    const VerifyResult r = verify(*t, CommSemantics::buffered);
    CHECK(r.rank == 1);
    CHECK(r.step == 1);
    CHECK(r.rule == Rule::matched_messages);
    CHECK(std::string(r.message.view()).find("post receives in the order the peer sends") !=
          std::string::npos);
  }
  SUBCASE("a send to the wrong rank") {
    auto t = lowered_1f1b(3, 4, CommSemantics::buffered);
    t->actions[0][find(*t, 0, Op::SEND_F, 0)].peer = 2;
    CHECK(verify(*t, CommSemantics::buffered).rule == Rule::comm_endpoint);
  }
  SUBCASE("stage does not match the chunk and the rank") {
    auto t = lowered_1f1b(2, 4, CommSemantics::buffered);
    t->actions[1][find(*t, 1, Op::F, 0)].stage = 0;
    CHECK(verify(*t, CommSemantics::buffered).rule == Rule::stage_map);
  }
}

TEST_CASE("rendezvous deadlock report names the cycle of both neighbours sending first") {
  auto compute = std::make_unique<ScheduleTable>(OneFOneB<8>::table(4));
  auto naive = std::make_unique<ScheduleTable>(lower_naive(*compute, CommSemantics::rendezvous));
  const VerifyResult r = verify(*naive, CommSemantics::rendezvous);
  REQUIRE_FALSE(r.ok);
  CHECK(r.rule == Rule::deadlock);
  const std::string message(r.message.view());
  CHECK(message.find("rule 'no deadlock' on rank 2 at step") != std::string::npos);
  CHECK(message.find("SEND_F(stage 2, mb 1) to rank 3: waits for rank 3") != std::string::npos);
  CHECK(message.find("on SEND_B(stage 3, mb 0) to rank 2 and waits for rank 2 (a cycle)") !=
        std::string::npos);
}

TEST_CASE("Interleaved 1F1B: idle / busy = (p-1)/(v*m) for m a multiple of p") {
  for (int sem = 0; sem < 2; ++sem)
    for (int v = 2; v <= 4; ++v)
      for (int p = 2; p <= 8; ++p)
        for (int m = p; m <= 32; m += p) {
          CAPTURE(sem);
          CAPTURE(v);
          CAPTURE(p);
          CAPTURE(m);
          const auto plan = plan_of("Interleaved1F1B", p, m, v, CommSemantics(sem));
          REQUIRE(plan->figures.ok);
          CHECK(static_cast<long>(plan->figures.total_idle()) * v * m ==
                static_cast<long>(p - 1) * plan->figures.total_busy);
        }
}

TEST_CASE("ZB-H1 (T_F = T_I = T_W): a third of 1F1B's idle time, same peak memory") {
  for (int sem = 0; sem < 2; ++sem)
    for (int p = 2; p <= 8; ++p)
      for (int m = p; m <= 32; ++m) {
        CAPTURE(sem);
        CAPTURE(p);
        CAPTURE(m);
        const auto zb = plan_of("ZeroBubbleH1", p, m, 1, CommSemantics(sem));
        const auto ofob = plan_of("OneFOneB", p, m, 1, CommSemantics(sem));
        REQUIRE(zb->figures.ok);
        REQUIRE(ofob->figures.ok);
        CHECK(zb->figures.total_busy == ofob->figures.total_busy);
        CHECK(3 * zb->figures.total_idle() == ofob->figures.total_idle());
        CHECK(zb->figures.makespan == 3 * m + p - 1);
        CHECK(zb->figures.max_peak_in_flight() == ofob->figures.max_peak_in_flight());
        CHECK(zb->figures.max_peak_in_flight() == p);
      }
}

TEST_CASE("communication costs: both lowerings stay sound, and the step gets longer") {
  for (int sem = 0; sem < 2; ++sem)
    for (std::string_view kind : {"GPipe", "OneFOneB", "ZeroBubbleH1"}) {
      CAPTURE(sem);
      const auto free = plan_of(kind, 4, 8, 1, CommSemantics(sem));
      const auto costly =
          plan_of(kind, 4, 8, 1, CommSemantics(sem),
                  Costs{.forward = 2, .backward = 4, .input_grad = 2, .weight_grad = 2, .comm = 1});
      REQUIRE(costly->figures.ok);
      CHECK(costly->figures.makespan > 2 * free->figures.makespan);
    }
  const auto il =
      plan_of("Interleaved1F1B", 4, 8, 2, CommSemantics::rendezvous,
              Costs{.forward = 2, .backward = 4, .input_grad = 2, .weight_grad = 2, .comm = 1});
  CHECK(il->figures.ok);
}

TEST_CASE("posting overheads: an async replay charges them to the posting rank, nothing else") {
  const Costs free{.forward = 2, .backward = 4, .input_grad = 2, .weight_grad = 2, .comm = 1};
  Costs posted = free;
  posted.send_overhead = 1;
  posted.recv_overhead = 1;
  for (std::string_view kind : {"GPipe", "OneFOneB", "ZeroBubbleH1"}) {
    CAPTURE(kind);
    const auto async = plan_of(kind, 4, 8, 1, CommSemantics::buffered);
    const auto without = verify(async->table, CommSemantics::buffered, free);
    const auto with = verify(async->table, CommSemantics::buffered, posted);
    REQUIRE(with.ok);
    // The rank in the middle posts 4 messages per micro-batch; some of them are on its path.
    CHECK(with.makespan > without.makespan);
    CHECK(with.total_busy == without.total_busy);  // posting is not compute: it is bubble
    CHECK(with.bubble_fraction() > without.bubble_fraction());
    // No rank finishes earlier than its compute plus every post it makes.
    for (int r = 0; r < 4; ++r) {
      int posts = 0;
      for (int k = 0; k < async->table.length[r]; ++k)
        posts += is_comm(async->table.actions[r][k].op) ? 1 : 0;
      CHECK(with.finish[r] >= with.busy[r] + posts);
    }
    // A rendezvous transfer is T_comm on both ranks; a compute-only table's are implicit.
    const auto blocking = plan_of(kind, 4, 8, 1, CommSemantics::rendezvous);
    CHECK(verify(blocking->table, CommSemantics::rendezvous, posted).makespan ==
          verify(blocking->table, CommSemantics::rendezvous, free).makespan);
    auto compute = std::make_unique<ScheduleTable>();
    generate_into(*compute, ScheduleSpec{kind, 8, 1}, 4);
    CHECK(verify(*compute, CommSemantics::buffered, posted).makespan ==
          verify(*compute, CommSemantics::buffered, free).makespan);
  }
}

TEST_CASE("torch.distributed.pipelining action strings and CSV round-trip") {
  int stage = -1, mb = -1;
  Op op = Op::F;
  CHECK(parse_action("1SEND_F0", stage, op, mb));
  CHECK(stage == 1);
  CHECK(op == Op::SEND_F);
  CHECK(mb == 0);
  CHECK(parse_action(" 12RECV_B31 ", stage, op, mb));
  CHECK((stage == 12 && op == Op::RECV_B && mb == 31));
  CHECK_FALSE(parse_action("1X0", stage, op, mb));
  CHECK(to_action_string(Action{Op::I, 3, 1, 5, -1}) == "5I3");

  for (int sem = 0; sem < 2; ++sem) {
    const auto plan = make_plan(ScheduleSpec{"Interleaved1F1B", 8, 2}, CommSemantics(sem), 4);
    const std::string csv = to_action_csv(plan->table);
    auto back = std::make_unique<ScheduleTable>();
    table_from_action_csv(*back, csv, CommSemantics(sem));
    REQUIRE(back->ok());
    CHECK(back->lowered);
    CHECK(back->ranks == 4);
    CHECK(back->chunks_per_rank == 2);
    CHECK(back->micro_batches == 8);
    for (int r = 0; r < 4; ++r) {
      REQUIRE(back->length[r] == plan->table.length[r]);
      for (int k = 0; k < back->length[r]; ++k)
        CHECK(back->actions[r][k] == plan->table.actions[r][k]);
    }
    CHECK(verify(*back, CommSemantics(sem)).makespan == plan->figures.makespan);
  }
  // A compute-only CSV (as torch prints before lowering) is a schedule to lower and verify.
  auto compute = std::make_unique<ScheduleTable>();
  table_from_action_csv(*compute, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  REQUIRE(compute->ok());
  CHECK_FALSE(compute->lowered);
  CHECK(make_plan(*compute, CommSemantics::rendezvous)->figures.makespan == 9);
  table_from_action_csv(*compute, "0F0,0Q1\n");
  CHECK(std::string(compute->error.view()).find("cannot parse action '0Q1'") != std::string::npos);
}

TEST_CASE("timelines: ASCII, SVG and Chrome trace from the same events") {
  const auto plan = make_plan(ScheduleSpec{"OneFOneB", 4, 1}, CommSemantics::rendezvous, 2);
  const auto events = simulate_events(plan->table, CommSemantics::rendezvous);
  CHECK(events.size() == 16);  // 2 ranks x 4 micro-batches x (F + B); free transfers are not drawn
  const std::string ascii = render_ascii(events);
  CHECK(ascii.find("rank 0  F0 F1 .. .. B0 -  F2 B1 -  F3 B2 -  .. B3 -  ") != std::string::npos);
  CHECK(ascii.find("rank 1  .. F0 B0 -  F1 B1 -  F2 B2 -  F3 B3 -  .. .. ") != std::string::npos);
  const std::string svg = render_svg(events, {"1F1B", "figures"});
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  const std::string trace = render_chrome_trace(events);
  CHECK(trace.find("\"traceEvents\"") != std::string::npos);
  std::size_t complete = 0;
  for (std::size_t at = trace.find("\"ph\":\"X\""); at != std::string::npos;
       at = trace.find("\"ph\":\"X\"", at + 1))
    ++complete;
  CHECK(complete == events.size());
  // Measured traces (non-integral times) render with the same code.
  std::vector<TimedEvent> measured = {{0, 0.0, 1.5, Op::F, 0, 0, 0}, {1, 1.6, 3.1, Op::F, 0, 0, 1}};
  CHECK(render_ascii(measured, {20}).find("rank 1") != std::string::npos);
}

TEST_CASE("the ASCII timeline never drops an action, even when several start within one cell") {
  // Ten time units in ten cells: F0 and F1 both start in cell 0, B1 and B0 both in cell 6.
  const std::vector<TimedEvent> events = {{0, 0.0, 0.4, Op::F, 0, 0, 0},
                                          {0, 0.5, 0.9, Op::F, 1, 0, 0},
                                          {0, 6.1, 6.5, Op::B, 1, 0, 0},
                                          {0, 6.6, 9.5, Op::B, 0, 0, 0},
                                          {1, 2.0, 10.0, Op::F, 0, 0, 1}};
  const std::string ascii = render_ascii(events, {10});
  INFO(ascii);
  CHECK(ascii.find("rank 0  F0 F1 .. .. .. .. B1 B0 -  -  \n") != std::string::npos);
  CHECK(ascii.find("rank 1  .. .. F0 -  -  -  -  -  -  -  \n") != std::string::npos);
  // Crowded at the end of the row: the labels run past the axis rather than vanish.
  const std::vector<TimedEvent> crowded = {
      {0, 9.1, 9.2, Op::F, 0, 0, 0}, {0, 9.3, 9.4, Op::F, 1, 0, 0}, {0, 9.5, 10.0, Op::F, 2, 0, 0}};
  const std::string end = render_ascii(crowded, {10});
  INFO(end);
  CHECK(end.find(" F0 F1 F2 ") != std::string::npos);
}

TEST_CASE("per-stage costs: a slower stage paces the replay; equal ones change nothing") {
  // GPipe<4> on 2 ranks, F = 1 and B = 2 everywhere but stage 1's forward, which costs 2 (the
  // last stage also computes the loss). Rank 1's forwards end at 3, 5, 7, 9; its backwards run
  // 9..17; rank 0's wait for them: 11..19. Busy 12 + 16 of 2 x 19.
  for (int sem = 0; sem < 2; ++sem) {
    CAPTURE(sem);
    Costs slow_last;
    slow_last.stage[1].forward = 2;
    const auto uneven = plan_of("GPipe", 2, 4, 1, CommSemantics(sem), slow_last);
    REQUIRE(uneven->figures.ok);
    CHECK(uneven->figures.makespan == 19);
    CHECK(uneven->figures.total_busy == 28);
    const auto even = plan_of("GPipe", 2, 4, 1, CommSemantics(sem));
    CHECK(even->figures.makespan == 15);
    CHECK(even->figures.bubble_fraction() < uneven->figures.bubble_fraction());
  }
  // Stage costs equal to the common ones: every schedule's figures are unchanged.
  for (const char* kind : {"GPipe", "OneFOneB", "ZeroBubbleH1"}) {
    CAPTURE(kind);
    Costs same;
    for (int s = 0; s < 4; ++s) same.stage[static_cast<std::size_t>(s)] = {1, 2, 1, 1};
    const auto a = plan_of(kind, 4, 8, 1, CommSemantics::buffered);
    const auto b = plan_of(kind, 4, 8, 1, CommSemantics::buffered, same);
    CHECK(a->figures.makespan == b->figures.makespan);
    CHECK(a->figures.total_busy == b->figures.total_busy);
  }
}
