#pragma once
#include <string>

#include "mpp/partition/concepts.hpp"

namespace mpp {

/// `Recompute<Partition>`: a stage policy layered on a partition (gradient checkpointing). Each
/// stage runs its forward without keeping the autograd graph, holds only the stage input per
/// in-flight micro-batch, and re-runs the forward with the graph just before its backward. It
/// refines its base tag, so it is a partition wherever the base is one.
template <partition Base>
struct Recompute : Base {
  /// The partition it refines.
  using base_partition = Base;
  static constexpr bool recompute = true;  ///< Read by recomputes_v.
  /// `"Recompute<" + Base::name() + ">"`.
  static std::string name() { return "Recompute<" + Base::name() + ">"; }
};

}  // namespace mpp
