// Ranks on fewer cores than ranks: the shared clock alone, the verifier's replay with it (by hand,
// in static_assert and at run time), predictions that do not move when every rank has a core,
// and the search under it.
#include <doctest/doctest.h>

#include <memory>

#include "mpp/comm/policy.hpp"
#include "mpp/schedule.hpp"
#include "mpp/schedule/core_sharing.hpp"
#include "mpp/schedule/search.hpp"

using namespace mpp;
using namespace mpp::actions;

namespace {

// Two ranks, two micro-batches, F = 1 and B = 2, free messages: 9 units on a core each.
inline constexpr Action two_ranks[2][4] = {{F(0), F(1), B(0), B(1)}, {F(0), B(0), F(1), B(1)}};
using TwoRanks = Custom<two_ranks>;

constexpr Costs on_cores(int cores) {
  Costs c{};
  c.cores = cores;
  return c;
}

// By hand, on one core: F0 on rank 0 alone [0, 1]; F1 on rank 0 and F0 on rank 1 share it, both
// end at 3; B0 on rank 1 alone [3, 5]; F1 on rank 1 and B0 on rank 0 share it from 5: the F ends
// at 7 with half the B done; B1 on rank 1 and the rest of B0 share it from 7: B0 ends at 9 with
// half of B1 done, which ends alone at 10; B1 on rank 0 [10, 12]. Twelve units of compute on one
// core: 12.
static_assert(verify<TwoRanks, Async<Gloo>>(2).makespan == 9);
static_assert(verify<TwoRanks, Async<Gloo>>(2, on_cores(1)).makespan == 12);
static_assert(verify<TwoRanks, Async<Gloo>>(2, on_cores(2)).makespan == 9);
static_assert(verify<TwoRanks, Async<Gloo>>(2, on_cores(3)).makespan == 9);
static_assert(verify<TwoRanks, Blocking<Gloo>>(2, on_cores(1)).makespan == 12);

// Posting a send is CPU time too: with one unit per post, 10 on a core each; on one core the sum
// of the computes and the four posts (two activations, two gradients), 12 + 4.
constexpr Costs posting_on_cores(int cores) {
  Costs c = on_cores(cores);
  c.send_overhead = 1;
  return c;
}
static_assert(verify<TwoRanks, Async<Gloo>>(2, posting_on_cores(0)).makespan == 10);
static_assert(verify<TwoRanks, Async<Gloo>>(2, posting_on_cores(1)).makespan == 16);

/// Every figure of the verifier's result, compared.
void check_same_figures(const VerifyResult& a, const VerifyResult& b) {
  REQUIRE(a.ok);
  REQUIRE(b.ok);
  CHECK(a.makespan == b.makespan);
  CHECK(a.total_busy == b.total_busy);
  for (int r = 0; r < a.ranks; ++r) {
    CHECK(a.busy[r] == b.busy[r]);
    CHECK(a.finish[r] == b.finish[r]);
    CHECK(a.first_start[r] == b.first_start[r]);
    CHECK(a.peak_in_flight[r] == b.peak_in_flight[r]);
  }
}

/// Uneven stages and messages that cost, as measured ones are.
Costs uneven(int stages, int cores) {
  Costs c{.forward = 4, .backward = 9, .input_grad = 4, .weight_grad = 6, .comm = 3};
  c.send_overhead = 1;
  for (int s = 0; s < stages; ++s)
    c.stage[static_cast<std::size_t>(s)] = {3 + s % 3, 8 + s % 2, 4 + s % 2, 5 + s % 3};
  c.cores = cores;
  return c;
}

}  // namespace

TEST_CASE("the shared clock: c / n of a core each while n ranks outnumber c cores") {
  auto clock = std::make_unique<detail::CoreSharing>();
  // Three computes of 10 on two cores, all from 0: each gets two thirds of a core, all end at 15.
  for (int r = 0; r < 3; ++r) clock->begin(r, 0, 10);
  REQUIRE(clock->advance(3, 2));
  for (int r = 0; r < 3; ++r) {
    REQUIRE(clock->ended(r));
    CHECK(clock->take_end(r) == 15);
  }
  CHECK_FALSE(clock->advance(3, 2));

  // 10 and 10 from 0 (a core each, 3 done at 3), 4 from 3: the three share two cores, the 4 ends
  // at 3 + 4 * 3 / 2 = 9 with 4 more done of each 10; their last 3 take a core each: 12.
  clock = std::make_unique<detail::CoreSharing>();
  clock->begin(0, 0, 10);
  clock->begin(1, 0, 10);
  clock->begin(2, 3, 4);
  REQUIRE(clock->advance(3, 2));
  CHECK_FALSE(clock->ended(0));
  REQUIRE(clock->ended(2));
  CHECK(clock->take_end(2) == 9);
  REQUIRE(clock->advance(3, 2));
  CHECK(clock->take_end(0) == 12);
  CHECK(clock->take_end(1) == 12);
}

TEST_CASE("one core for two ranks: the hand-computed timeline") {
  auto compute = std::make_unique<ScheduleTable>();
  table_into<TwoRanks>(*compute, 2);
  const auto plan = make_plan(*compute, CommSemantics::buffered, on_cores(1));
  REQUIRE(plan->figures.ok);
  CHECK(plan->figures.makespan == 12);
  CHECK(plan->figures.busy[0] == 6);  // core time: what the computes cost, not how long they took
  CHECK(plan->figures.busy[1] == 6);
  // Rank 0's B0 starts at 5 and, sharing the core the whole time, ends at 9.
  const auto events = simulate_events(plan->table, CommSemantics::buffered, on_cores(1));
  bool seen = false;
  for (const TimedEvent& e : events)
    if (e.rank == 0 && e.op == Op::B && e.micro_batch == 0) {
      seen = true;
      CHECK(e.start == 5);
      CHECK(e.end == 9);
    }
  CHECK(seen);
}

TEST_CASE("a core per rank, or more: every built-in's prediction as without cores") {
  for (const int ranks : {2, 4}) {
    for_each_builtin_schedule([&]<class F>() {
      for (const CommSemantics semantics : {CommSemantics::buffered, CommSemantics::rendezvous}) {
        auto compute = std::make_unique<ScheduleTable>();
        F::generate(*compute, ranks, F::takes_micro_batches ? 8 : 1,
                    F::fixed_chunks != 0 ? F::fixed_chunks : 2);
        if (!compute->ok()) continue;
        const int stages = compute->stages();
        const auto without = make_plan(*compute, semantics, uneven(stages, 0));
        if (!without->figures.ok) continue;
        CAPTURE(F::name);
        CAPTURE(ranks);
        for (const int cores : {ranks, ranks + 1, 64})
          check_same_figures(make_plan(*compute, semantics, uneven(stages, cores))->figures,
                             without->figures);
        // Fewer cores: the same table, proven the same, never predicted shorter; on one core the
        // step holds every rank's compute one after another, longer than on a core each when
        // ranks compute at once (not Naive's single micro-batch, one rank at a time).
        const auto fewer = make_plan(*compute, semantics, uneven(stages, ranks - 1));
        REQUIRE(fewer->figures.ok);
        CHECK(fewer->figures.makespan >= without->figures.makespan);
        CHECK(fewer->figures.total_busy == without->figures.total_busy);
        const auto one = make_plan(*compute, semantics, uneven(stages, 1));
        REQUIRE(one->figures.ok);
        CHECK(one->figures.makespan >= one->figures.total_busy);
        if (F::takes_micro_batches) CHECK(one->figures.makespan > without->figures.makespan);
      }
    });
  }
}

TEST_CASE("cores below zero are refused, naming the fix") {
  const VerifyResult r = verify<TwoRanks, Async<Gloo>>(2, on_cores(-1));
  CHECK_FALSE(r.ok);
  CHECK(r.rule == Rule::parameters);
  CHECK(r.message.view().find("cores must be >= 0 (got -1)") != std::string_view::npos);
  auto found = std::make_unique<SearchResult>();
  search_into(*found, {.ranks = 2, .micro_batches = 4, .costs = on_cores(-2)});
  CHECK_FALSE(found->ok());
  CHECK(found->error.view().find("-2 cores") != std::string_view::npos);
}
