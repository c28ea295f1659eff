#pragma once
#include <string>

namespace mpp {

/// A contiguous run of layers [begin, end) owned by one model piece (a stage, or one of a rank's
/// chunks under an interleaved schedule). Torch-free so that partitions can be computed anywhere.
struct LayerRange {
  int begin = 0;  ///< First layer, 0-based.
  int end = 0;    ///< One past the last layer.

  /// The number of layers.
  constexpr int size() const { return end - begin; }
  /// Same begin and end.
  constexpr bool operator==(const LayerRange&) const = default;
};

/// "[begin, end)".
inline std::string to_string(const LayerRange& r) {
  return "[" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

}  // namespace mpp
