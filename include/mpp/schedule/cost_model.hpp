#pragma once
// The verifier's cost model: integer durations in abstract units (any unit; only ratios matter).
#include "mpp/schedule/action.hpp"

namespace mpp {

/// Durations of one action on one chunk. The defaults are the "unit costs" of the literature:
/// T_F = 1, T_B = 2 (= T_I + T_W with T_I = T_W = 1), free communication.
struct Costs {
  int forward = 1;      ///< T_F, one forward
  int backward = 2;     ///< T_B, a full backward
  int input_grad = 1;   ///< T_I, the input-grad half of a split backward
  int weight_grad = 1;  ///< T_W, the weight-grad half
  int comm = 0;         ///< T_comm: one point-to-point transfer between neighbouring ranks

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
};

}  // namespace mpp
