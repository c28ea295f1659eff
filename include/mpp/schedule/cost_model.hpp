#pragma once
// The verifier's cost model: integer durations in abstract units (any unit; only ratios matter).
#include <array>

#include "mpp/schedule/action.hpp"
#include "mpp/schedule/table.hpp"

namespace mpp {

/// What one stage's actions cost where that stage differs from the others; 0 keeps the common
/// cost of `Costs`.
struct StageCosts {
  int forward = 0;      ///< T_F on this stage, or 0
  int backward = 0;     ///< T_B on this stage, or 0
  int input_grad = 0;   ///< T_I on this stage, or 0
  int weight_grad = 0;  ///< T_W on this stage, or 0
};

/// Durations of one action on one chunk. The defaults are the "unit costs" of the literature:
/// T_F = 1, T_B = 2 (= T_I + T_W with T_I = T_W = 1), free communication.
struct Costs {
  int forward = 1;      ///< T_F, one forward
  int backward = 2;     ///< T_B, a full backward
  int input_grad = 1;   ///< T_I, the input-grad half of a split backward
  int weight_grad = 1;  ///< T_W, the weight-grad half
  int comm = 0;         ///< T_comm: one point-to-point transfer between neighbouring ranks
  /// LogP's overhead: the CPU time a rank spends posting one send (`send_overhead`) or one
  /// receive (`recv_overhead`) of an asynchronous (buffered) table, charged to that rank's clock
  /// at the SEND or RECV; T_comm counts from the send's start. 0: posting is free. A rendezvous
  /// transfer is T_comm on both ranks and a compute-only table's transfers are implicit: neither
  /// is charged an overhead.
  ///@{
  int send_overhead = 0;
  int recv_overhead = 0;
  ///@}
  /// The cores the ranks run on. 0, or at least the ranks: a core each, every compute takes its
  /// cost. Fewer: the ranks that compute at once share them (mpp/schedule/core_sharing.hpp), a
  /// compute beside more computing ranks than cores takes longer, and the costs are core time
  /// (a compute's CPU time, not its wall time among others, which counts the sharing already).
  int cores = 0;
  /// Per stage, where stages differ (indexed by stage; zeros keep the costs above). Measured, the
  /// stages of an evenly cut model differ too: the last stage's forward also computes the loss,
  /// the first stage's backward computes no gradient for its input.
  std::array<StageCosts, max_ranks * max_chunks_per_rank> stage{};

  /// True when `ranks` ranks share fewer cores than they are (see `cores`).
  constexpr bool shares_cores(int ranks) const { return cores > 0 && cores < ranks; }

  /// The duration of `op`: its compute cost, or `comm` for a send or receive.
  constexpr int of(Op op) const {
    switch (op) {
      case Op::F:
        return forward;
      case Op::B:
        return backward;
      case Op::I:
        return input_grad;
      case Op::W:
        return weight_grad;
      default:
        return comm;
    }
  }

  /// The duration of `op` on stage `s`: the stage's own cost where it has one, else of(op).
  constexpr int of(Op op, int s) const {
    if (s >= 0 && s < static_cast<int>(stage.size())) {
      const StageCosts& c = stage[static_cast<std::size_t>(s)];
      const int own = op == Op::F   ? c.forward
                      : op == Op::B ? c.backward
                      : op == Op::I ? c.input_grad
                      : op == Op::W ? c.weight_grad
                                    : 0;
      if (own > 0) return own;
    }
    return of(op);
  }
};

}  // namespace mpp
