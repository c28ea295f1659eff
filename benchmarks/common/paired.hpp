#pragma once
// Paired measurements: the median of per-block ratios with a distribution-free 95 % interval.
// A block times the layer under test and its baseline back to back, so that a change of the
// machine's load slower than a block cancels in the ratio and a hiccup spoils one block, which
// the median ignores (benchmarks/comm/comm_bench.cpp, benchmarks/pipeline/pipeline_bench.cpp).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace mpp::bench {

inline double median_of_sorted(const std::vector<double>& v) {
  const std::size_t n = v.size();
  if (n == 0) return 0.0;
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The median of `v` with a distribution-free 95 % confidence interval: the order statistics
/// j < k with P(X_(j) <= median <= X_(k)) >= 0.95 under Binomial(n, 1/2) (normal approximation).
struct MedianInterval {
  double median, lo, hi;
};

inline MedianInterval median_with_interval(std::vector<double> v) {
  if (v.empty()) return {0.0, 0.0, 0.0};
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  const double half_width = 1.96 * std::sqrt(n) / 2.0;
  const auto last = static_cast<std::ptrdiff_t>(v.size()) - 1;
  const auto j = std::clamp<std::ptrdiff_t>(
      static_cast<std::ptrdiff_t>(std::floor(n / 2.0 - half_width)) - 1, 0, last);
  const auto k = std::clamp<std::ptrdiff_t>(
      static_cast<std::ptrdiff_t>(std::ceil(n / 2.0 + half_width)), 0, last);
  return {median_of_sorted(v), v[static_cast<std::size_t>(j)], v[static_cast<std::size_t>(k)]};
}

}  // namespace mpp::bench
