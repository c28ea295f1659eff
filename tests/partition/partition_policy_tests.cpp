// Partition policies without LibTorch: ranges, balance, and the run-time checks' messages.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "mpp/partition/by_params.hpp"
#include "mpp/partition/concepts.hpp"
#include "mpp/partition/explicit.hpp"
#include "mpp/partition/recompute.hpp"
#include "mpp/partition/uniform.hpp"

namespace {

std::vector<std::int64_t> equal_costs(int layers, std::int64_t each = 10) {
  return std::vector<std::int64_t>(static_cast<std::size_t>(layers), each);
}

std::vector<int> sizes_of(const std::vector<mpp::LayerRange>& ranges) {
  std::vector<int> sizes;
  for (auto r : ranges) sizes.push_back(r.size());
  return sizes;
}

void check_contiguous(const std::vector<mpp::LayerRange>& ranges, int layers) {
  REQUIRE_FALSE(ranges.empty());
  CHECK(ranges.front().begin == 0);
  CHECK(ranges.back().end == layers);
  for (std::size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i].begin == ranges[i - 1].end);
  for (auto r : ranges) CHECK(r.size() >= 1);
}

}  // namespace

static_assert(mpp::partition<mpp::Uniform<4>>);
static_assert(mpp::partition<mpp::Explicit<5, 4, 4, 3>>);
static_assert(mpp::partition<mpp::ByParams<2>>);
static_assert(mpp::partition<mpp::Recompute<mpp::Uniform<2>>>);
static_assert(!mpp::partition<int>);
static_assert(!mpp::recomputes_v<mpp::Uniform<2>>);
static_assert(mpp::recomputes_v<mpp::Recompute<mpp::ByParams<2>>>);
static_assert(mpp::Recompute<mpp::Uniform<4>>::ranks == 4);
static_assert(mpp::Explicit<5, 4, 4, 3>::total_layers == 16);
static_assert(mpp::Explicit<2, 2, 2, 2>::ranks_for(2) == 2);

TEST_CASE("Uniform<P> spreads layers evenly, the remainder over the first stages") {
  CHECK(sizes_of(mpp::Uniform<4>::split(equal_costs(16), 1)) == std::vector<int>{4, 4, 4, 4});
  CHECK(sizes_of(mpp::Uniform<4>::split(equal_costs(14), 1)) == std::vector<int>{4, 4, 3, 3});
  CHECK(sizes_of(mpp::Uniform<3>::split(equal_costs(16), 1)) == std::vector<int>{6, 5, 5});
  check_contiguous(mpp::Uniform<3>::split(equal_costs(16), 1), 16);
  // Interleaved: P x V pieces in model order.
  const auto chunked = mpp::Uniform<2>::split(equal_costs(16), 2);
  CHECK(sizes_of(chunked) == std::vector<int>{4, 4, 4, 4});
  check_contiguous(chunked, 16);
  CHECK(mpp::Uniform<2>::name() == "Uniform<2>");
}

TEST_CASE("Explicit<n...> takes the sizes as given and checks they cover the model") {
  using Sizes5443 = mpp::Explicit<5, 4, 4, 3>;
  using Sizes544 = mpp::Explicit<5, 4, 4>;
  const auto ranges = Sizes5443::split(equal_costs(16), 1);
  CHECK(sizes_of(ranges) == std::vector<int>{5, 4, 4, 3});
  check_contiguous(ranges, 16);
  CHECK(Sizes5443::name() == "Explicit<5,4,4,3>");
  CHECK_THROWS_WITH_AS(
      Sizes5443::split(equal_costs(12), 1),
      "mpp: Explicit<5,4,4,3> covers 16 layers but the model has 12; make the sizes sum to 12",
      mpp::PartitionError);
  CHECK_THROWS_WITH_AS(Sizes544::split(equal_costs(13), 2),
                       doctest::Contains("not a multiple of 2 chunks per rank"),
                       mpp::PartitionError);
}

TEST_CASE("more stages than layers is rejected with the fix") {
  CHECK_THROWS_WITH_AS(
      mpp::Uniform<4>::split(equal_costs(3), 1),
      "mpp: Uniform<4> cuts the model into 4 pieces but the model has only 3 layers; every "
      "piece needs at least one layer: use fewer ranks or chunks, or a deeper model",
      mpp::PartitionError);
  CHECK_THROWS_WITH_AS(
      mpp::ByParams<4>::split(equal_costs(7), 2),
      doctest::Contains("(4 ranks x 2 chunks per rank) but the model has only 7 layers"),
      mpp::PartitionError);
}

TEST_CASE("ByParams<P> balances parameter counts, and equals Uniform on equal layers") {
  CHECK(mpp::ByParams<4>::split(equal_costs(16), 1) == mpp::Uniform<4>::split(equal_costs(16), 1));
  CHECK(mpp::ByParams<3>::split(equal_costs(16), 1) == mpp::Uniform<3>::split(equal_costs(16), 1));
  CHECK(mpp::ByParams<2>::split(equal_costs(8), 2) == mpp::Uniform<2>::split(equal_costs(8), 2));

  // A heavy first layer (an embedding, say) gets a stage nearly to itself.
  const std::vector<std::int64_t> costs{100, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10};
  const auto ranges = mpp::ByParams<2>::split(costs, 1);
  check_contiguous(ranges, 11);
  CHECK(sizes_of(ranges) == std::vector<int>{1, 10});

  // The worst piece is optimal: compare against brute force over every 3-way cut.
  const std::vector<std::int64_t> uneven{7, 3, 9, 1, 1, 8, 2, 6, 4, 5};
  const auto got = mpp::ByParams<3>::split(uneven, 1);
  check_contiguous(got, 10);
  auto piece = [&](int a, int b) {
    return std::accumulate(uneven.begin() + a, uneven.begin() + b, std::int64_t{0});
  };
  std::int64_t best = INT64_MAX;
  for (int i = 1; i < 10; ++i)
    for (int j = i + 1; j < 10; ++j)
      best = std::min(best, std::max({piece(0, i), piece(i, j), piece(j, 10)}));
  std::int64_t worst_got = 0;
  for (auto r : got) worst_got = std::max(worst_got, piece(r.begin, r.end));
  CHECK(worst_got == best);
}
