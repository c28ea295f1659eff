#pragma once
// The error thrown when a partition does not fit the model or the world at run time.
#include <stdexcept>
#include <string>

#include "mpp/error.hpp"

namespace mpp {

/// A partition that cannot cut the model as asked (layer counts, stage counts).
struct PartitionError : InvalidArgument {
  using InvalidArgument::InvalidArgument;
};

}  // namespace mpp
