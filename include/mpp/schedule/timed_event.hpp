#pragma once
// One timed action of one rank: what the simulator predicts and what an executor measures.
// The renderers (ASCII, SVG, Chrome trace) take a list of these, so predicted and measured
// timelines are drawn by the same code.
#include "mpp/schedule/action.hpp"

namespace mpp {

/// One timed action of one rank, predicted or measured (see the file comment).
struct TimedEvent {
  int rank = 0;  ///< The rank that ran it.
  /// Cost units when predicted; any consistent unit (microseconds, say) when measured.
  double start = 0;
  double end = 0;       ///< In the unit of `start`.
  Op op = Op::F;        ///< What ran.
  int micro_batch = 0;  ///< Its micro-batch.
  int chunk = 0;        ///< Local chunk on the rank.
  int stage = 0;        ///< Global stage.
};

}  // namespace mpp
