#pragma once
// The error thrown when a partition does not fit the model or the world at run time.
#include <stdexcept>
#include <string>

namespace mpp {

struct partition_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

}  // namespace mpp
