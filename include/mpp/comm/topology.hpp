#pragma once
// A rank's neighbours in a chain of stages. Torch-free and constexpr so that schedules and
// their tests can reason about neighbours without a process group.
#include <stdexcept>
#include <string>

namespace mpp {

struct Topology {
  int rank = 0;
  int size = 1;

  constexpr bool is_first() const { return rank == 0; }
  constexpr bool is_last() const { return rank == size - 1; }
  /// The rank that receives this rank's activations; -1 on the last stage.
  constexpr int next_rank() const { return is_last() ? -1 : rank + 1; }
  /// The rank this rank's activations come from; -1 on the first stage.
  constexpr int prev_rank() const { return is_first() ? -1 : rank - 1; }
  /// Neighbours on a ring (wrap around), as interleaved schedules need.
  constexpr int ring_next() const { return (rank + 1) % size; }
  constexpr int ring_prev() const { return (rank + size - 1) % size; }
};

}  // namespace mpp
