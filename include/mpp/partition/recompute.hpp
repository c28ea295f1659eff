#pragma once
#include <string>

#include "mpp/partition/concepts.hpp"

namespace mpp {

/// `Recompute<Partition, Segments>`: a stage policy layered on a partition (gradient
/// checkpointing). Each stage runs its forward without keeping the autograd graph and holds, per
/// in-flight micro-batch, only the inputs of its `Segments` consecutive runs of modules, each
/// starting at a module with parameters and holding about as many of them (with the
/// random-number state there); its backward runs them again one at a time, last first, each right
/// before its own backward, as torch.utils.checkpoint.checkpoint_sequential does with `segments`.
/// One segment (the default) keeps only the stage input and rebuilds the whole stage's graph. It
/// refines its base tag, so it is a partition wherever the base is one.
template <partition Base, int Segments = 1>
struct Recompute : Base {
  static_assert(Segments >= 1,
                "mpp: Recompute<Partition, Segments> needs Segments >= 1 (1: keep only each "
                "stage's input)");
  /// The partition it refines.
  using base_partition = Base;
  static constexpr bool recompute = true;    ///< Read by recomputes_v.
  static constexpr int segments = Segments;  ///< Read by recompute_segments_v.
  /// `"Recompute<" + Base::name() + ">"`, or `"Recompute<" + Base::name() + ",S>"` (knobs are
  /// listed without spaces, as in every display name).
  static std::string name() {
    return "Recompute<" + Base::name() +
           (Segments == 1 ? std::string() : "," + std::to_string(Segments)) + ">";
  }
};

}  // namespace mpp
