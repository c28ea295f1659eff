#pragma once
// A rank's neighbours in a chain of ranks. Torch-free and constexpr so that schedules and
// their tests can reason about neighbours without a process group.
#include <stdexcept>
#include <string>

namespace mpp {

/// A rank's place in a chain of `size` ranks, rank 0 first.
struct Topology {
  /// This rank, in [0, size).
  int rank = 0;
  /// Number of ranks in the chain.
  int size = 1;

  /// Whether this rank is the first stage.
  constexpr bool is_first() const { return rank == 0; }
  /// Whether this rank is the last stage.
  constexpr bool is_last() const { return rank == size - 1; }
  /// The rank that receives this rank's activations; -1 on the last stage.
  constexpr int next_rank() const { return is_last() ? -1 : rank + 1; }
  /// The rank this rank's activations come from; -1 on the first stage.
  constexpr int prev_rank() const { return is_first() ? -1 : rank - 1; }
  /// The neighbour after this rank on the ring (wraps around to 0), as interleaved schedules need.
  constexpr int ring_next() const { return (rank + 1) % size; }
  /// The neighbour before this rank on the ring (rank 0's is size - 1).
  constexpr int ring_prev() const { return (rank + size - 1) % size; }
};

}  // namespace mpp
