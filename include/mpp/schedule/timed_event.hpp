#pragma once
// One timed action of one rank: what the simulator predicts and what an executor measures.
// The renderers (ASCII, SVG, Chrome trace) take a list of these, so predicted and measured
// timelines are drawn by the same code.
#include "mpp/schedule/action.hpp"

namespace mpp {

struct TimedEvent {
  int rank = 0;
  double start =
      0;  // cost units when predicted; any consistent unit (e.g. microseconds) when measured
  double end = 0;
  Op op = Op::F;
  int micro_batch = 0;
  int chunk = 0;
  int stage = 0;
};

}  // namespace mpp
