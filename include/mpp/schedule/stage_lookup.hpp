#pragma once
// What the verifier and the lowerings ask of every action -- how its stage meets its neighbours
// and what it costs -- answered once per table into arrays. At compile time a call of
// Placement::link() or Costs::of() costs the evaluator about ten times an array read, and these
// questions are asked for every action of every table the static grid proves. Standard library
// only.
#include "mpp/schedule/cost_model.hpp"
#include "mpp/schedule/placement.hpp"

namespace mpp::detail {

/// Per stage: the durations of its F, B, I and W, and how it meets the stage before and after.
/// Filled by fill() for the stages of one placement and one cost model.
struct StageLookup {
  int duration[max_stages][4];          ///< Costs::of(op, stage) for op F, B, I, W
  bool previous_same_rank[max_stages];  ///< the stage before is another chunk of the same rank
  bool next_same_rank[max_stages];      ///< the stage after is another chunk of the same rank
  int previous_peer[max_stages];  ///< the rank a message from the stage before comes from, or -1
  int next_peer[max_stages];      ///< the rank a message to the stage after goes to, or -1

  /// Answers for every stage of `placement` (at most mpp::max_stages) under `costs`.
  constexpr void fill(const Placement& placement, const Costs& costs) {
    fill_links(placement);
    const int stages = placement.stages() < max_stages ? placement.stages() : max_stages;
    for (int s = 0; s < stages; ++s)
      for (int op = 0; op < 4; ++op) duration[s][op] = costs.of(static_cast<Op>(op), s);
  }

  /// The neighbours alone, for a reader that asks no duration (the buffered lowering).
  constexpr void fill_links(const Placement& placement) {
    const int stages = placement.stages() < max_stages ? placement.stages() : max_stages;
    for (int s = 0; s < stages; ++s) {
      const StageLink before = placement.link(s, -1), after = placement.link(s, +1);
      previous_same_rank[s] = before.is_same_rank();
      next_same_rank[s] = after.is_same_rank();
      previous_peer[s] = before.is_message() ? before.rank : -1;
      next_peer[s] = after.is_message() ? after.rank : -1;
    }
  }
};

}  // namespace mpp::detail
