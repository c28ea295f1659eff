#pragma once
// Ranks that share cores: the replay's clock for the compute of ranks that outnumber the cores
// (Costs::cores). A compute needs its cost in core time; while n ranks compute on c < n cores,
// each gets c / n of a core (processor sharing, what a fair OS scheduler converges to), so a
// forward of cost 10 beside two other computing ranks on two cores takes 15. Posting a buffered
// message (Costs::send_overhead, recv_overhead) is CPU time and shares them too. A rank that waits
// for a message takes no core: the waits it sleeps through (MPP_SHM_SPIN_US=0 on Shm) are what
// this models, a spinning wait is a compute the table does not show.
//
// The verifier's replay knows when each compute can start (its rank is free and its input is
// there) but not when it ends, which depends on what the others compute meanwhile: it hands the
// start to `begin`, runs the other ranks as far as they can go, and then `advance` moves the
// shared clock to the next compute that ends. Times inside are in 1/scale of a cost unit, exact
// for up to 16 ranks computing at once and rounded to the nearest unit when a compute ends.
#include "mpp/schedule/limits.hpp"

namespace mpp::detail {

/// The shared clock of the ranks' computes (see the file comment).
struct CoreSharing {
  /// Sub-units per cost unit: lcm(1, ..., 16), so that c / n of a unit is exact for n <= 16.
  static constexpr long long scale = 720720;
  /// Where the shared clock is, in 1/scale units: every compute that starts before it is known.
  long long now = 0;
  long long start[max_ranks]{};  ///< when the rank's compute starts (1/scale units)
  long long left[max_ranks]{};   ///< the core time it still needs (1/scale units)
  int state[max_ranks]{};        ///< 0: no compute, 1: waiting to start or running, 2: ended
  int end[max_ranks]{};          ///< when it ended, in cost units (state 2)

  /// The rank's next compute starts at `start` (cost units) and needs `cost` of a core.
  constexpr void begin(int rank, int start_units, int cost) {
    const long long at = start_units * scale;
    start[rank] = at > now ? at : now;
    left[rank] = cost * scale;
    state[rank] = 1;
  }
  /// True when the rank has a compute that `begin` started and `advance` has not ended yet.
  constexpr bool running(int rank) const { return state[rank] == 1; }
  /// True when the rank's compute has ended: `take_end` then gives when.
  constexpr bool ended(int rank) const { return state[rank] == 2; }
  /// When the rank's compute ended (cost units); the rank has no compute any more.
  constexpr int take_end(int rank) {
    state[rank] = 0;
    return end[rank];
  }
  /// The rank's compute from `start_units` of `cost`: begins it if it has not, and once the clock
  /// has ended it, true with its end in `end_units` (false until then: the replay waits).
  constexpr bool run(int rank, int start_units, int cost, int& end_units) {
    if (!running(rank) && !ended(rank)) begin(rank, start_units, cost);
    if (!ended(rank)) return false;
    end_units = take_end(rank);
    return true;
  }

  /// Moves the clock to the end of the next compute of the `ranks` ranks on `cores` cores and
  /// ends it (and any that end with it). False when no rank has a compute to run.
  constexpr bool advance(int ranks, int cores) {
    for (;;) {
      int computing = 0;
      long long least_left = -1, next_start = -1;
      for (int r = 0; r < ranks; ++r) {
        if (state[r] != 1) continue;
        if (start[r] <= now) {
          ++computing;
          if (least_left < 0 || left[r] < least_left) least_left = left[r];
        } else if (next_start < 0 || start[r] < next_start) {
          next_start = start[r];
        }
      }
      if (computing == 0) {
        if (next_start < 0) return false;
        now = next_start;
        continue;
      }
      // Each computing rank runs at cores / computing of a core when they outnumber the cores.
      const bool crowded = computing > cores;
      const long long to_end = crowded ? (least_left * computing + cores - 1) / cores : least_left;
      const long long step =
          next_start >= 0 && next_start - now < to_end ? next_start - now : to_end;
      const long long done = crowded ? step * cores / computing : step;
      const long long from = now;
      now += step;
      bool any = false;
      for (int r = 0; r < ranks; ++r) {
        if (state[r] != 1 || start[r] > from) continue;
        left[r] -= done;
        if (left[r] > 0) continue;
        left[r] = 0;
        state[r] = 2;
        end[r] = static_cast<int>((now + scale / 2) / scale);
        any = true;
      }
      if (any) return true;
    }
  }
};

}  // namespace mpp::detail
