#pragma once
#include <string>
#include <vector>

#include "mpp/pipeline/shape_header.hpp"
#include "mpp/schedule/placement.hpp"

namespace mpp::detail {

/// What the executor needs to know besides the table and the pieces.
struct ExecutorConfig {
  std::string pipeline_name;  // "Pipeline<Uniform<2>, GPipe<4>, Async<Gloo>>", for messages
  std::string schedule_name;  // "GPipe<4>"
  int ranks = 1;              // P
  int chunks_per_rank = 1;    // V
  int micro_batches = 1;      // M
  Placement placement{};      // which stages this rank holds
  std::vector<ActivationSpec> expected_inputs;   // per local chunk: what its first layer takes
  std::vector<ActivationSpec> expected_outputs;  // per local chunk: what the next stage takes
};

}  // namespace mpp::detail
