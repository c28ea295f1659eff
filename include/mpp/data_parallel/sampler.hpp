#pragma once
// DistributedSampler: which dataset indices this rank reads in an epoch.
//
// Every rank builds the same permutation of [0, N) from (seed, epoch) — no communication — and
// takes every R-th index starting at its rank. When N is not a multiple of R the remainder is
// either padded (the first indices of the permutation are repeated, so every rank gets
// ceil(N / R) samples and every sample is read at least once) or dropped (every rank gets
// floor(N / R) samples and no sample is read twice). Equal counts on every rank matter: a rank
// with one batch fewer would leave the others waiting in an all-reduce.
//
// Standard library only, with its own generator, so the order is the same on every platform
// and every standard library (std::shuffle's is not specified).
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpp/error.hpp"

namespace mpp {

/// What DistributedSampler does with the last N mod R samples.
enum class Remainder {
  pad,   ///< repeat indices from the start of the permutation until every rank has ceil(N / R)
  drop,  ///< cut the tail of the permutation so that every rank has floor(N / R)
};

/// How DistributedSampler orders and splits the dataset; every rank passes the same.
struct SamplerOptions {
  /// Permute the indices every epoch (false: dataset order).
  bool shuffle = true;
  /// Seed of the permutation, mixed with the epoch.
  std::uint64_t seed = 0;
  /// Pad or drop when R does not divide N.
  Remainder remainder = Remainder::pad;
};

namespace detail {

/// splitmix64: a small, well-mixed generator that is identical everywhere.
struct SplitMix64 {
  std::uint64_t state;
  constexpr std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, bound) without modulo bias (rejection of the short last interval).
  constexpr std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % bound);
    std::uint64_t x = next();
    while (x >= limit) x = next();
    return x % bound;
  }
};

inline std::vector<std::size_t> epoch_permutation(std::size_t n, std::uint64_t seed,
                                                  std::uint64_t epoch, bool shuffle) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (!shuffle || n < 2) return order;
  SplitMix64 gen{seed * 0xD1B54A32D192ED03ull + epoch};
  for (std::size_t i = n - 1; i > 0; --i) {  // Fisher–Yates
    const auto j = static_cast<std::size_t>(gen.below(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace detail

/// Which dataset indices this rank reads in an epoch: every rank builds the same permutation and
/// takes every num_replicas-th index from its rank on. No communication.
class DistributedSampler {
 public:
  /// `num_replicas` and `rank` are those of the data-parallel group. Throws std::invalid_argument
  /// when the rank is outside [0, num_replicas) or Remainder::drop leaves no sample.
  DistributedSampler(std::size_t dataset_size, int num_replicas, int rank,
                     SamplerOptions options = {})
      : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
    if (num_replicas < 1)
      throw InvalidArgument("mpp: DistributedSampler needs num_replicas >= 1 (got " +
                            std::to_string(num_replicas) + "); pass the data-parallel world size");
    if (rank < 0 || rank >= num_replicas)
      throw InvalidArgument("mpp: DistributedSampler rank " + std::to_string(rank) +
                            " is outside [0, " + std::to_string(num_replicas) +
                            "); pass the rank within the data-parallel group");
    const auto replicas = static_cast<std::size_t>(num_replicas);
    per_rank_ = options.remainder == Remainder::pad ? (dataset_size + replicas - 1) / replicas
                                                    : dataset_size / replicas;
    if (per_rank_ == 0 && dataset_size > 0)
      throw InvalidArgument("mpp: DistributedSampler with Remainder::drop leaves no sample for " +
                            std::to_string(num_replicas) + " ranks out of " +
                            std::to_string(dataset_size) + "; use Remainder::pad or fewer ranks");
  }

  /// Reshuffle for a new epoch: call it on every rank with the same epoch before iterating,
  /// otherwise every epoch reads the data in the same order.
  void set_epoch(std::uint64_t epoch) { epoch_ = epoch; }
  /// The epoch set last (0 at first).
  std::uint64_t epoch() const { return epoch_; }

  /// Samples this rank reads per epoch (the same on every rank).
  std::size_t size() const { return per_rank_; }
  /// Samples read per epoch across all ranks (dataset size, plus padding or minus the drop).
  std::size_t total_size() const { return per_rank_ * static_cast<std::size_t>(num_replicas_); }
  /// Samples in the dataset (N).
  std::size_t dataset_size() const { return dataset_size_; }
  /// This rank in the data-parallel group.
  int rank() const { return rank_; }
  /// Ranks of the data-parallel group (R).
  int num_replicas() const { return num_replicas_; }

  /// This rank's dataset indices for the current epoch, in reading order.
  std::vector<std::size_t> indices() const {
    auto order = detail::epoch_permutation(dataset_size_, options_.seed, epoch_, options_.shuffle);
    const std::size_t total = total_size();
    if (total > order.size()) {  // pad by cycling through the permutation from its start
      const std::size_t n = order.size();
      order.reserve(total);
      for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i % n]);
    } else {
      order.resize(total);
    }
    std::vector<std::size_t> mine;
    mine.reserve(per_rank_);
    for (std::size_t i = static_cast<std::size_t>(rank_); i < total;
         i += static_cast<std::size_t>(num_replicas_))
      mine.push_back(order[i]);
    return mine;
  }

 private:
  std::size_t dataset_size_;
  int num_replicas_;
  int rank_;
  SamplerOptions options_;
  std::size_t per_rank_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace mpp
