// The schedule search: from costs and a cap on activations, a proven table at least as short as
// the built-ins that fit the same cap, and never shorter than its own lower bound.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>

#include "mpp/schedule.hpp"
#include "mpp/schedule/search.hpp"

using namespace mpp;

namespace {

std::unique_ptr<SearchResult> run(const SearchSpec& spec) {
  auto out = std::make_unique<SearchResult>();
  search_into(*out, spec);
  return out;
}

VerifyResult builtin(std::string_view name, int ranks, int micro_batches, int chunks,
                     const Costs& costs) {
  return make_plan(ScheduleSpec{name, micro_batches, chunks}, CommSemantics::buffered, ranks, costs)
      ->figures;
}

/// Every stage costs F = I = W = 2 and B = 4, but the last costs half as much again (its forward
/// also computes the loss, as the course model's does).
Costs last_stage_heavier(int stages) {
  Costs c{.forward = 2, .backward = 4, .input_grad = 2, .weight_grad = 2};
  c.stage[static_cast<std::size_t>(stages - 1)] = {3, 6, 3, 3};
  return c;
}

}  // namespace

TEST_CASE("search at unit costs: within 1F1B's memory as short as ZB-H1, and proven") {
  const auto found = run({.ranks = 4, .micro_batches = 8, .max_in_flight = 4});
  REQUIRE(found->ok());
  const VerifyResult zb_h1 = builtin("zb-h1", 4, 8, 1, {});
  CHECK(found->figures.bubble_fraction() <= zb_h1.bubble_fraction());
  CHECK(found->figures.max_peak_in_flight() <= 4);
  CHECK(found->figures.makespan >= found->lower_bound);
  // The table it returns is what the figures describe: lowered and verified again, the same.
  CHECK(make_plan(found->table, CommSemantics::buffered)->figures.makespan ==
        found->figures.makespan);
}

TEST_CASE("search that only ties a built-in returns the built-in") {
  // Whole backwards at unit costs within 1F1B's memory: nothing beats 1F1B, and a table of the
  // search that is as short takes its place only when predicted strictly faster.
  const auto found =
      run({.ranks = 4, .micro_batches = 8, .max_in_flight = 4, .split_backward = false});
  REQUIRE(found->ok());
  const VerifyResult one_f_one_b = builtin("1f1b", 4, 8, 1, {});
  CHECK(found->figures.makespan == one_f_one_b.makespan);
  CHECK(found->origin.view() == std::string_view("OneFOneB"));
}

TEST_CASE("search with a V placement and twice the cap: as short as ZB-V") {
  const auto found = run(
      {.ranks = 4, .micro_batches = 8, .placement = v_shape_placement(4, 2), .max_in_flight = 8});
  REQUIRE(found->ok());
  const VerifyResult zb_v = builtin("zb-v", 4, 8, 2, {});
  CHECK(found->figures.bubble_fraction() <= zb_v.bubble_fraction());
  CHECK(found->figures.max_peak_in_flight() <= 8);
  CHECK(found->table.placement == v_shape_placement(4, 2));
}

TEST_CASE("search at unit costs with ZB-H2's memory: as short as ZB-H2") {
  const auto found = run({.ranks = 4, .micro_batches = 8, .max_in_flight = 8});
  REQUIRE(found->ok());
  const VerifyResult zb_h2 = builtin("zb-h2", 4, 8, 1, {});
  REQUIRE(zb_h2.max_peak_in_flight() <= 8);
  CHECK(found->figures.bubble_fraction() <= zb_h2.bubble_fraction());
}

TEST_CASE("search with a heavier last stage: below the built-ins that fit the cap") {
  // One chunk per rank, 1F1B's memory: shorter than 1F1B, and ZB-H1 is already at the bound.
  const Costs looped = last_stage_heavier(4);
  const auto flat = run({.ranks = 4, .micro_batches = 8, .max_in_flight = 4, .costs = looped});
  REQUIRE(flat->ok());
  CHECK(flat->figures.makespan < builtin("1f1b", 4, 8, 1, looped).makespan);
  CHECK(flat->figures.makespan <= builtin("zb-h1", 4, 8, 1, looped).makespan);
  CHECK(flat->figures.makespan == flat->lower_bound);
  // Two chunks per rank in a V, 2P chunk activations: shorter than ZB-V (DualPipeV needs 2P + 1).
  const Costs vee = last_stage_heavier(8);
  const auto v = run({.ranks = 4,
                      .micro_batches = 8,
                      .placement = v_shape_placement(4, 2),
                      .max_in_flight = 8,
                      .costs = vee});
  REQUIRE(v->ok());
  CHECK(v->figures.makespan < builtin("zb-v", 4, 8, 2, vee).makespan);
  CHECK(v->figures.makespan < builtin("v-half", 4, 8, 2, vee).makespan);
  CHECK(v->figures.makespan < builtin("v-min", 4, 8, 2, vee).makespan);
  CHECK(builtin("dualpipev", 4, 8, 2, vee).max_peak_in_flight() > 8);
}

TEST_CASE("search in a V with messages that cost: within ZB-V's memory, no longer than ZB-V") {
  // Messages as measured over Shm (a fifth of a forward): a rank that filled its cap with first
  // chunks could not run the second chunk that frees them, so a micro-batch enters a rank only
  // with room for both of its chunks there.
  for (const int ranks : {2, 4}) {
    const Costs costs{
        .forward = 57, .backward = 114, .input_grad = 57, .weight_grad = 94, .comm = 23};
    const auto found = run({.ranks = ranks,
                            .micro_batches = 8,
                            .placement = v_shape_placement(ranks, 2),
                            .max_in_flight = 2 * ranks,
                            .costs = costs});
    REQUIRE_MESSAGE(found->ok(), found->error.view());
    CHECK(found->figures.max_peak_in_flight() <= 2 * ranks);
    CHECK(found->figures.makespan <= builtin("zb-v", ranks, 8, 2, costs).makespan);
  }
  // A cap below one micro-batch's chunks on a rank lets nothing through, and says what would.
  const auto tight = run(
      {.ranks = 4, .micro_batches = 8, .placement = v_shape_placement(4, 2), .max_in_flight = 1});
  CHECK(std::string(tight->error.view()).find("one micro-batch at a time needs 2") !=
        std::string::npos);
}

TEST_CASE("search on fewer cores than ranks: predicted, bounded and chosen on those cores") {
  // 4 ranks on 2 cores, one chunk each, 1F1B's memory, the last stage heavier. Each rank computes
  // 8 * (2 + 2 + 2) = 48 (the last 72): 216 over 2 cores, 108 at the least.
  Costs costs = last_stage_heavier(4);
  const auto one_core_each =
      run({.ranks = 4, .micro_batches = 8, .max_in_flight = 4, .costs = costs});
  costs.cores = 2;
  const auto shared = run({.ranks = 4, .micro_batches = 8, .max_in_flight = 4, .costs = costs});
  REQUIRE(one_core_each->ok());
  REQUIRE(shared->ok());
  CHECK(shared->lower_bound == 108);
  CHECK(shared->figures.makespan >= shared->lower_bound);
  // Its figures are its table's on two cores, and shorter than the table found for a core each
  // (the same candidates, chosen on the other clock) runs on two.
  CHECK(make_plan(shared->table, CommSemantics::buffered, costs)->figures.makespan ==
        shared->figures.makespan);
  const int elsewhere_best =
      make_plan(one_core_each->table, CommSemantics::buffered, costs)->figures.makespan;
  CHECK(shared->figures.makespan < elsewhere_best);
  CHECK(shared->figures.makespan <= builtin("1f1b", 4, 8, 1, costs).makespan);
  CHECK(shared->figures.makespan <= builtin("zb-h1", 4, 8, 1, costs).makespan);
  MESSAGE("on 2 cores: searched " << shared->figures.makespan << ", the table for a core each "
                                  << elsewhere_best << ", bound " << shared->lower_bound);
}

TEST_CASE("search refuses what cannot be and names the fix") {
  const auto bad = run({.ranks = 4, .micro_batches = 8, .max_in_flight = -1});
  CHECK(std::string(bad->error.view()).find("cap on activations must be >= 1") !=
        std::string::npos);
  const auto wrong_map =
      run({.ranks = 4, .micro_batches = 8, .placement = v_shape_placement(2, 2)});
  CHECK(std::string(wrong_map->error.view()).find("placement is for 2 ranks, not 4") !=
        std::string::npos);
}

TEST_CASE("search for P = 8, M = 32 in a V: proven, and not below its own bound") {
  const auto start = std::chrono::steady_clock::now();
  const auto found = run(
      {.ranks = 8, .micro_batches = 32, .placement = v_shape_placement(8, 2), .max_in_flight = 16});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(found->ok());
  CHECK(found->figures.makespan >= found->lower_bound);
  MESSAGE("P = 8, M = 32, V placement: " << found->candidates << " candidates in " << seconds
                                         << " s");
}

TEST_CASE("search with a free placement: a map that balances the heavy stages, proven") {
  // Stages 0, 3, 4 and 7 cost four times the others. Looped puts 0 and 4 on rank 0, V puts 0 and
  // 7 there: either way two ranks hold two heavy stages each. A free placement gives each rank one.
  Costs costs{.forward = 1, .backward = 2, .input_grad = 1, .weight_grad = 1};
  for (const int heavy : {0, 3, 4, 7}) costs.stage[static_cast<std::size_t>(heavy)] = {4, 8, 4, 4};
  const SearchSpec looped{.ranks = 4,
                          .micro_batches = 8,
                          .placement = interleaved_placement(4, 2),
                          .max_in_flight = 8,
                          .costs = costs};
  SearchSpec vee = looped;
  vee.placement = v_shape_placement(4, 2);
  SearchSpec free = looped;
  free.free_placement = true;
  const auto on_looped = run(looped), on_v = run(vee), found = run(free);
  REQUIRE(on_looped->ok());
  REQUIRE(on_v->ok());
  REQUIRE_MESSAGE(found->ok(), found->error.view());
  CHECK(found->placements > 1);
  CHECK(on_looped->placements == 1);
  CHECK(found->figures.makespan < on_looped->figures.makespan);
  CHECK(found->figures.makespan < on_v->figures.makespan);
  CHECK(found->figures.max_peak_in_flight() <= 8);
  CHECK(found->figures.makespan >= found->lower_bound);
  for (int r = 0; r < 4; ++r) {
    int heavy_here = 0;
    for (int c = 0; c < 2; ++c) {
      const int s = found->table.placement.stage_of(r, c);
      heavy_here += s == 0 || s == 3 || s == 4 || s == 7 ? 1 : 0;
    }
    CHECK_MESSAGE(heavy_here == 1, "rank " << r << ": " << describe(found->table.placement).view());
  }
  // The table carries its map: lowered and verified again, the same figures.
  CHECK(make_plan(found->table, CommSemantics::buffered, costs)->figures.makespan ==
        found->figures.makespan);
}

TEST_CASE(
    "search with a free placement at unit costs: never longer than with the map it was given") {
  for (const int cap : {4, 8}) {
    const SearchSpec given{.ranks = 4,
                           .micro_batches = 8,
                           .placement = v_shape_placement(4, 2),
                           .max_in_flight = cap * 2};
    SearchSpec free = given;
    free.free_placement = true;
    const auto on_v = run(given), found = run(free);
    REQUIRE(on_v->ok());
    REQUIRE(found->ok());
    CHECK(found->figures.makespan <= on_v->figures.makespan);
  }
  // One chunk per rank: every map is the looped one with its ranks renumbered.
  const auto single = run({.ranks = 4, .micro_batches = 8, .free_placement = true});
  REQUIRE(single->ok());
  CHECK(single->placements == 1);
}

TEST_CASE("search with a free placement for P = 8, M = 32: proven") {
  const auto start = std::chrono::steady_clock::now();
  const auto found = run({.ranks = 8,
                          .micro_batches = 32,
                          .placement = v_shape_placement(8, 2),
                          .free_placement = true,
                          .max_in_flight = 16});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(found->ok());
  CHECK(found->figures.makespan >= found->lower_bound);
  MESSAGE("P = 8, M = 32, free placement: " << found->placements << " placements, "
                                            << found->candidates << " candidates in " << seconds
                                            << " s");
}
