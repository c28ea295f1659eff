// The search over chunk counts: each chunk count searched with its own costs at the same memory,
// and the shortest in time chosen.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "mpp/schedule.hpp"
#include "mpp/schedule/chunk_count_search.hpp"

using namespace mpp;

namespace {

std::unique_ptr<ChunkCountResult> run(const SearchSpec& spec,
                                      const std::vector<ChunkCountCosts>& options) {
  auto out = std::make_unique<ChunkCountResult>();
  search_chunk_counts_into(*out, spec, options);
  return out;
}

std::unique_ptr<SearchResult> alone(const SearchSpec& spec) {
  auto out = std::make_unique<SearchResult>();
  search_into(*out, spec);
  return out;
}

/// P = 4, M = 8 in a V, capped at ZB-V's 2P chunk activations.
constexpr SearchSpec in_a_v{
    .ranks = 4, .micro_batches = 8, .placement = v_shape_placement(4, 2), .max_in_flight = 8};

/// One chunk per rank: each action 4 (B 8).
constexpr Costs one_chunk{.forward = 4, .backward = 8, .input_grad = 4, .weight_grad = 4};

}  // namespace

TEST_CASE("search over chunk counts: halves that cost their share choose two, a fixed part one") {
  const Costs halves{.forward = 2, .backward = 4, .input_grad = 2, .weight_grad = 2};
  // Half the layers for three quarters of the time: what a chunk's fixed part does.
  const Costs with_fixed_part{.forward = 3, .backward = 6, .input_grad = 3, .weight_grad = 3};
  SearchSpec looped = in_a_v;
  looped.placement = interleaved_placement(4, 1);
  looped.max_in_flight = 4;
  looped.costs = one_chunk;
  const auto alone_one = alone(looped);
  SearchSpec v = in_a_v;
  v.costs = halves;
  const auto alone_halves = alone(v);
  v.costs = with_fixed_part;
  const auto alone_fixed = alone(v);
  REQUIRE(alone_one->ok());
  REQUIRE(alone_halves->ok());
  REQUIRE(alone_fixed->ok());
  MESSAGE("one chunk " << alone_one->figures.makespan << ", two at half cost "
                       << alone_halves->figures.makespan << ", two with a fixed part "
                       << alone_fixed->figures.makespan);
  REQUIRE(alone_halves->figures.makespan < alone_one->figures.makespan);
  REQUIRE(alone_fixed->figures.makespan > alone_one->figures.makespan);

  const auto cheap = run(in_a_v, {{1, one_chunk}, {2, halves}});
  REQUIRE_MESSAGE(cheap->ok(), cheap->error.view());
  CHECK(cheap->chunks_per_rank == 2);
  CHECK(cheap->option == 1);
  CHECK(cheap->best.figures.makespan == alone_halves->figures.makespan);
  CHECK(cheap->best.table.placement == v_shape_placement(4, 2));

  const auto dear = run(in_a_v, {{1, one_chunk}, {2, with_fixed_part}});
  REQUIRE_MESSAGE(dear->ok(), dear->error.view());
  CHECK(dear->chunks_per_rank == 1);
  CHECK(dear->option == 0);
  CHECK(dear->max_in_flight == 4);  // 2P chunk activations of two chunks: P of one
  CHECK(dear->best.figures.makespan == alone_one->figures.makespan);
  CHECK(dear->best.figures.max_peak_in_flight() <= 4);
  // The table it returns is proven again as it stands, with the costs of its own chunk count.
  CHECK(make_plan(dear->best.table, CommSemantics::buffered, one_chunk)->figures.makespan ==
        dear->best.figures.makespan);
}

TEST_CASE("search over chunk counts: the cap is the same memory at every chunk count") {
  CHECK(cap_for_chunks(in_a_v, 1) == 4);
  CHECK(cap_for_chunks(in_a_v, 2) == 8);
  CHECK(cap_for_chunks(in_a_v, 4) == 16);
  SearchSpec looped{.ranks = 4, .micro_batches = 8, .max_in_flight = 4};
  CHECK(cap_for_chunks(looped, 2) == 8);
  looped.placement = interleaved_placement(4, 1);
  CHECK(cap_for_chunks(looped, 2) == 8);
  SearchSpec tight = in_a_v;
  tight.max_in_flight = 1;
  CHECK(cap_for_chunks(tight, 1) == 1);  // rounded down to 0, but a cap is at least 1
  tight.max_in_flight = 0;
  CHECK(cap_for_chunks(tight, 1) == 0);  // no cap stays no cap
}

TEST_CASE("search over chunk counts compares times, not the units of each file") {
  // The same layers: two chunks at exactly half the cost of one, in a unit ten times smaller.
  // Compared in units, one chunk's makespan is the smaller number; in time, two chunks win.
  const Costs one_in_tens{.forward = 1, .backward = 2, .input_grad = 1, .weight_grad = 1};
  const Costs two_in_ones{.forward = 5, .backward = 10, .input_grad = 5, .weight_grad = 5};
  const auto found = run(in_a_v, {{.chunks_per_rank = 1, .costs = one_in_tens, .unit_us = 10.0},
                                  {.chunks_per_rank = 2, .costs = two_in_ones, .unit_us = 1.0}});
  REQUIRE_MESSAGE(found->ok(), found->error.view());
  CHECK(found->chunks_per_rank == 2);
  SearchSpec looped = in_a_v;
  looped.placement = interleaved_placement(4, 1);
  looped.max_in_flight = 4;
  looped.costs = one_in_tens;
  const int one_makespan = alone(looped)->figures.makespan;
  CHECK(found->best.figures.makespan > one_makespan);
  // A step time is the makespan and then the step's end: a longer end (measured with two
  // chunks) that eats two chunks' lead chooses one.
  const double lead_us = 10.0 * one_makespan - found->best.figures.makespan;
  const auto ended = run(
      in_a_v,
      {{.chunks_per_rank = 1, .costs = one_in_tens, .unit_us = 10.0},
       {.chunks_per_rank = 2, .costs = two_in_ones, .unit_us = 1.0, .step_end_us = lead_us + 1.0}});
  REQUIRE_MESSAGE(ended->ok(), ended->error.view());
  CHECK(ended->chunks_per_rank == 1);
}

TEST_CASE(
    "search over chunk counts: a free placement is searched where there are chunks to place") {
  SearchSpec spec = in_a_v;
  spec.free_placement = true;
  const Costs halves{.forward = 2, .backward = 4, .input_grad = 2, .weight_grad = 2};
  const auto found = run(spec, {{1, one_chunk}, {2, halves}});
  REQUIRE_MESSAGE(found->ok(), found->error.view());
  CHECK(found->best.placements > 1);  // the maps of the free search, for two chunks per rank
  const auto one = run(spec, {{1, one_chunk}});
  REQUIRE(one->ok());
  CHECK(one->best.placements == 1);  // one chunk per rank: one map up to renumbering
}

TEST_CASE("search over chunk counts refuses what it cannot compare and names the fix") {
  const auto contains = [](const ChunkCountResult& r, const char* text) {
    return std::string(r.error.view()).find(text) != std::string::npos;
  };
  CHECK(contains(*run(in_a_v, {}), "at least one chunk count"));
  CHECK(contains(*run(in_a_v, {{2, {}}, {2, {}}}), "give each chunk count once"));
  CHECK(contains(*run(in_a_v, {{0, {}}}), "must be 1 to 8, not 0"));
  CHECK(contains(*run(in_a_v, {{.chunks_per_rank = 1, .unit_us = 2.0}, {.chunks_per_rank = 2}}),
                 "give it for all"));
  // No chunk count fits the cap: the search's own message.
  SearchSpec tight = in_a_v;
  tight.max_in_flight = 1;
  const auto none = run(tight, {{2, {}}});
  CHECK_FALSE(none->ok());
  CHECK(contains(*none, "raise the cap"));
}
