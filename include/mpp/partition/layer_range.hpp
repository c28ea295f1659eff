#pragma once
// A contiguous run of layers [begin, end) owned by one model piece (a stage, or one of a rank's
// chunks under an interleaved schedule). Torch-free so that partitions can be computed anywhere.
#include <string>

namespace mpp {

struct LayerRange {
  int begin = 0;
  int end = 0;

  constexpr int size() const { return end - begin; }
  constexpr bool operator==(const LayerRange&) const = default;
};

inline std::string to_string(const LayerRange& r) {
  return "[" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

}  // namespace mpp
