// The action IR, the stage<->rank map, lowering and the executor-facing plan.
#include <doctest/doctest.h>

#include <string>

#include "mpp/comm/policy.hpp"
#include "mpp/schedule.hpp"

using namespace mpp;

namespace {

// Both comm semantics of every built-in schedule are sound for a small case, at compile time.
static_assert(verify<GPipe<4>, Blocking<Gloo>>(4).ok);
static_assert(verify<OneFOneB<8>, Blocking<Gloo>>(4).ok);
static_assert(verify<OneFOneB<8>, Async<Gloo>>(4).ok);
static_assert(verify<Interleaved1F1B<8, 2>, Blocking<Gloo>>(4).ok);
static_assert(verify<ZeroBubbleH1<8>, Async<Gloo>>(4).ok);
static_assert(sound<verify<Naive, Blocking<Gloo>>(3)>);

// The stage<->rank map: stage = chunk * P + rank.
constexpr ScheduleTable interleaved = Interleaved1F1B<4, 2>::table(2);
static_assert(interleaved.stages() == 4);
static_assert(interleaved.stage_of(1, 1) == 3 && interleaved.rank_of(3) == 1 &&
              interleaved.chunk_of(3) == 1);

}  // namespace

TEST_CASE("1F1B table on P=2, M=3: warm-up, steady 1F1B, drain") {
  const auto t = std::make_unique<ScheduleTable>(OneFOneB<3>::table(2));
  REQUIRE(t->ok());
  using namespace mpp::actions;
  const Action rank0[] = {F(0), F(1), B(0), F(2), B(1), B(2)};
  const Action rank1[] = {F(0), B(0), F(1), B(1), F(2), B(2)};
  REQUIRE(t->size(0) == 6);
  REQUIRE(t->size(1) == 6);
  for (int k = 0; k < 6; ++k) {
    CHECK(t->at(0, k).op == rank0[k].op);
    CHECK(t->at(0, k).micro_batch == rank0[k].micro_batch);
    CHECK(t->at(0, k).stage == 0);
    CHECK(t->at(1, k).op == rank1[k].op);
    CHECK(t->at(1, k).micro_batch == rank1[k].micro_batch);
    CHECK(t->at(1, k).stage == 1);
  }
}

TEST_CASE("every action of a lowered plan carries stage, local chunk and peer") {
  const auto plan = make_plan(ScheduleSpec{"Interleaved1F1B", 8, 2}, CommSemantics::buffered, 4);
  CHECK(plan->ranks() == 4);
  CHECK(plan->stages() == 8);
  CHECK(plan->micro_batches() == 8);
  for (int r = 0; r < plan->ranks(); ++r)
    for (const Action& a : plan->actions(r)) {
      CHECK(a.stage == plan->stage_of(r, a.chunk));
      if (a.op == Op::SEND_F || a.op == Op::RECV_B) CHECK(a.peer == plan->rank_of(a.stage + 1));
      if (a.op == Op::RECV_F || a.op == Op::SEND_B) CHECK(a.peer == plan->rank_of(a.stage - 1));
      if (is_compute(a.op)) CHECK(a.peer == -1);
    }
  CHECK(plan->figures.ok);
  CHECK(plan->figures.makespan > 0);
}

TEST_CASE("async lowering posts every receive at the start of the step") {
  const auto plan = make_plan(OneFOneB<4>::table(2), CommSemantics::buffered);
  // Rank 1 (last stage) runs F0 B0 F1 B1 ...: the four activation receives come first, in the
  // order the forwards consume them, then the computes with each send right after its compute.
  const auto a = plan->actions(1);
  REQUIRE(a.size() >= 7);
  for (int mb = 0; mb < 4; ++mb) CHECK(a[mb] == Action{Op::RECV_F, mb, 0, 1, 0});
  CHECK(a[4] == Action{Op::F, 0, 0, 1, -1});
  CHECK(a[5] == Action{Op::B, 0, 0, 1, -1});
  CHECK(a[6] == Action{Op::SEND_B, 0, 0, 1, 0});
  // Rank 0 posts its gradient receives first as well; none is left for later.
  const auto r0 = plan->actions(0);
  for (int mb = 0; mb < 4; ++mb) CHECK(r0[mb] == Action{Op::RECV_B, mb, 0, 0, 1});
  for (std::size_t k = 4; k < r0.size(); ++k) CHECK(r0[k].op != Op::RECV_B);
}

TEST_CASE("blocking lowering pairs neighbour exchanges; the textbook order deadlocks") {
  const auto compute = std::make_unique<ScheduleTable>(OneFOneB<8>::table(4));
  const auto naive =
      std::make_unique<ScheduleTable>(lower_naive(*compute, CommSemantics::rendezvous));
  const VerifyResult bad = verify(*naive, CommSemantics::rendezvous);
  CHECK_FALSE(bad.ok);
  CHECK(bad.rule == Rule::deadlock);
  CHECK(std::string(bad.message.view()).find("no deadlock") != std::string::npos);
  // The same textbook order is fine once sends are buffered.
  CHECK(verify(*naive, CommSemantics::buffered).ok);
  const auto good = std::make_unique<ScheduleTable>(lower(*compute, CommSemantics::rendezvous));
  CHECK(verify(*good, CommSemantics::rendezvous).ok);
}

TEST_CASE("run-time errors name the rule and the fix") {
  CHECK_THROWS_WITH_AS(
      make_plan(ScheduleSpec{"Interleaved1F1B", 6, 2}, CommSemantics::buffered, 4),
      doctest::Contains("needs M to be a multiple of the number of ranks (got M=6 for 4 ranks)"),
      ScheduleError);
  CHECK_THROWS_WITH_AS(make_plan(ScheduleSpec{"GPipe", 8, 1}, CommSemantics::buffered, 40),
                       doctest::Contains("mpp::max_ranks"), ScheduleError);
  CHECK_THROWS_WITH_AS(make_plan(ScheduleSpec{"GPipe", 200, 1}, CommSemantics::buffered, 4),
                       doctest::Contains("mpp::max_actions_per_rank"), ScheduleError);
}
