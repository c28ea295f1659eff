#pragma once
// The names a pipeline's run-time errors quote, so that a message says which pipeline broke.
#include <string>

namespace mpp::detail {

/// The pipeline's and its schedule's display names, for messages.
struct PipelineNames {
  std::string pipeline;  // "Pipeline<Uniform<2>, GPipe<4>, Async<Gloo>>"
  std::string schedule;  // "GPipe<4>"
};

}  // namespace mpp::detail
