// DistributedSampler and bucket planning: plain data, checked without LibTorch.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "mpp/data_parallel/buckets.hpp"
#include "mpp/data_parallel/sampler.hpp"

namespace {

std::map<std::size_t, int> count_over_ranks(std::size_t n, int ranks, mpp::SamplerOptions opt,
                                            std::uint64_t epoch = 0) {
  std::map<std::size_t, int> seen;
  for (int r = 0; r < ranks; ++r) {
    mpp::DistributedSampler s(n, ranks, r, opt);
    s.set_epoch(epoch);
    const auto idx = s.indices();
    CHECK(idx.size() == s.size());
    for (auto i : idx) ++seen[i];
  }
  return seen;
}

}  // namespace

TEST_CASE("DistributedSampler: every sample exactly once when the dataset divides evenly") {
  for (int ranks : {1, 2, 4}) {
    for (bool shuffle : {false, true}) {
      const auto seen = count_over_ranks(64, ranks, {.shuffle = shuffle, .seed = 3});
      CHECK(seen.size() == 64);
      for (auto [i, c] : seen) {
        CHECK(i < 64);
        CHECK(c == 1);
      }
    }
  }
}

TEST_CASE("DistributedSampler: uneven sizes, pad covers everything, drop never repeats") {
  for (std::size_t n : {1u, 5u, 7u, 10u, 101u}) {
    for (int ranks : {2, 3, 4}) {
      CAPTURE(n);
      CAPTURE(ranks);
      const auto r = static_cast<std::size_t>(ranks);
      // pad: all samples at least once; the extra reads are exactly the padding, each sample at
      // most twice
      const auto padded = count_over_ranks(n, ranks, {.shuffle = true, .seed = 11});
      CHECK(padded.size() == n);
      std::size_t reads = 0;
      for (auto [i, c] : padded) {
        CHECK(i < n);
        CHECK(c >= 1);
        CHECK(c <= 1 + static_cast<int>((r - 1) / n + 1));
        reads += static_cast<std::size_t>(c);
      }
      CHECK(reads == (n + r - 1) / r * r);
      // drop: disjoint across ranks, and fewer than `ranks` samples left out
      if (n >= r) {
        const auto dropped = count_over_ranks(
            n, ranks, {.shuffle = true, .seed = 11, .remainder = mpp::Remainder::drop});
        CHECK(dropped.size() == n / r * r);
        CHECK(n - dropped.size() < r);
        for (auto [i, c] : dropped) CHECK(c == 1);
      } else {
        CHECK_THROWS_WITH_AS(
            mpp::DistributedSampler(n, ranks, 0, {.remainder = mpp::Remainder::drop}),
            doctest::Contains("Remainder::pad"), std::invalid_argument);
      }
    }
  }
}

TEST_CASE("DistributedSampler: set_epoch reshuffles, the same epoch repeats, all ranks agree") {
  mpp::DistributedSampler a(1000, 2, 0, {.seed = 5});
  mpp::DistributedSampler b(1000, 2, 1, {.seed = 5});
  const auto e0 = a.indices();
  a.set_epoch(1);
  b.set_epoch(1);
  const auto e1 = a.indices();
  CHECK(e0 != e1);
  a.set_epoch(0);
  CHECK(a.indices() == e0);
  // ranks of the same epoch partition the dataset
  a.set_epoch(1);
  std::vector<std::size_t> both = a.indices();
  const auto other = b.indices();
  both.insert(both.end(), other.begin(), other.end());
  std::sort(both.begin(), both.end());
  for (std::size_t i = 0; i < both.size(); ++i) CHECK(both[i] == i);
  // without shuffle, rank r reads r, r + R, r + 2R, ...
  mpp::DistributedSampler plain(10, 4, 1, {.shuffle = false});
  CHECK(plain.indices() == std::vector<std::size_t>{1, 5, 9});
  // a different seed gives a different order
  mpp::DistributedSampler c(1000, 2, 0, {.seed = 6});
  CHECK(c.indices() != e0);
}

TEST_CASE("DistributedSampler: bad rank or replica count is rejected with the fix") {
  CHECK_THROWS_WITH_AS(mpp::DistributedSampler(10, 0, 0), doctest::Contains("num_replicas >= 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(mpp::DistributedSampler(10, 2, 2), doctest::Contains("outside [0, 2)"),
                       std::invalid_argument);
}

TEST_CASE("plan_buckets: reverse order, capped by bytes, one dtype per bucket") {
  // 4 parameters of 100, 10, 100, 10 floats (400, 40, 400, 40 bytes)
  std::vector<mpp::GradSpec> params = {{100, 4, 0}, {10, 4, 0}, {100, 4, 0}, {10, 4, 0}};
  SUBCASE("a cap that holds two parameters") {
    const auto plan = mpp::plan_buckets(params, 440);
    REQUIRE(plan.buckets.size() == 2);
    CHECK(plan.buckets[0].params == std::vector<std::size_t>{3, 2});
    CHECK(plan.buckets[0].offsets == std::vector<std::size_t>{0, 10});
    CHECK(plan.buckets[0].bytes == 440);
    CHECK(plan.buckets[1].params == std::vector<std::size_t>{1, 0});
    CHECK(plan.bucket_of == std::vector<std::size_t>{1, 1, 0, 0});
    CHECK(plan.slot_of == std::vector<std::size_t>{1, 0, 1, 0});
  }
  SUBCASE("a tiny cap gives one bucket per parameter, a big parameter still fits alone") {
    const auto plan = mpp::plan_buckets(params, 1);
    REQUIRE(plan.buckets.size() == 4);
    for (std::size_t b = 0; b < 4; ++b)
      CHECK(plan.buckets[b].params == std::vector<std::size_t>{3 - b});
  }
  SUBCASE("a huge cap gives one bucket") {
    const auto plan = mpp::plan_buckets(params, mpp::default_bucket_bytes);
    REQUIRE(plan.buckets.size() == 1);
    CHECK(plan.buckets[0].params == std::vector<std::size_t>{3, 2, 1, 0});
    CHECK(plan.buckets[0].elements == 220);
  }
  SUBCASE("dtypes never share a bucket") {
    std::vector<mpp::GradSpec> mixed = {{10, 4, 0}, {10, 8, 1}, {10, 4, 0}, {10, 8, 1}};
    const auto plan = mpp::plan_buckets(mixed, 1000);
    REQUIRE(plan.buckets.size() == 2);
    for (const auto& b : plan.buckets)
      for (auto p : b.params) CHECK(mixed[p].dtype == b.dtype);
  }
  SUBCASE("every parameter is in exactly one bucket") {
    std::vector<mpp::GradSpec> many;
    for (std::size_t i = 0; i < 32; ++i)
      many.push_back({(i % 2) ? std::size_t{128} : std::size_t{128 * 128}, 4, 0});
    const auto plan = mpp::plan_buckets(many, 100000);
    std::vector<int> hits(many.size(), 0);
    for (const auto& b : plan.buckets) {
      CHECK(b.bytes <= 100000);
      for (auto p : b.params) ++hits[p];
    }
    for (int h : hits) CHECK(h == 1);
  }
  CHECK_THROWS_WITH_AS(mpp::plan_buckets(params, 0), doctest::Contains("at least 1 byte"),
                       std::invalid_argument);
}
