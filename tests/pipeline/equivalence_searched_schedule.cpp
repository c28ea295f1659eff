// A table whose placement the search chose: `mpp-schedule search --placement free` at build time
// (CMakeLists.txt), with messages that cost five forwards, keeps each rank's two stages
// consecutive. The emitted header proves the table by static_assert; here it trains on 4 ranks,
// for every comm policy and partition, to the monolith's parameters.
#include <doctest/doctest.h>

#include "pipeline/equivalence.hpp"
#include "searched_free_p4_m4.hpp"

static_assert(mpp::schedule<searched::SearchedFree>);
static_assert(searched::SearchedFree::micro_batches == 4);
static_assert(searched::SearchedFree::chunks_per_rank == 2);
// The map is its own: rank r holds stages 2r and 2r + 1, neither looped nor V.
static_assert(!(searched::SearchedFree::table(4).placement == mpp::interleaved_placement(4, 2)));
static_assert(!(searched::SearchedFree::table(4).placement == mpp::v_shape_placement(4, 2)));
static_assert(searched::SearchedFree::table(4).placement.rank_of(1) == 0 &&
              searched::SearchedFree::table(4).placement.rank_of(6) == 3);

MPP_PIPELINE_EQUIVALENCE_AS("Custom (searched, free placement)", 4, searched::SearchedFree)
