#pragma once
// What each of a rank's chunks takes and gives, read from the model (the schedule knows nothing
// of shapes), and the run-time rule that checks a value against it where it crosses between two
// stages: a mismatch fails with both shapes and both stages instead of a silent reinterpretation.
#include <string>

#include "mpp/pipeline/shape_header.hpp"
#include "mpp/schedule/stage_link.hpp"

namespace mpp::detail {

/// One local chunk's activations: what its first layer takes and what the next stage's first
/// layer takes (empty for the last stage).
struct ChunkShapes {
  ActivationSpec input;   // what the chunk's first layer takes
  ActivationSpec output;  // what the next stage's first layer takes
};

/// "stage 3 (rank 1)", for messages.
inline std::string stage_text(int stage, int rank) {
  return "stage " + std::to_string(stage) + " (rank " + std::to_string(rank) + ")";
}

/// Throws unless what `to_stage` on `to_rank` receives over `from` is what its first layer takes;
/// an edge `from` means the user's inputs.
inline void check_fit(const ActivationSpec& got, const ActivationSpec& expected,
                      const StageLink& from, int to_stage, int to_rank) {
  if (got == expected) return;
  if (from.is_edge())
    throw PipelineError("mpp: stage 0 expects inputs " + to_string(expected) +
                        " but train_step got " + to_string(got) +
                        "; convert or reshape the inputs (or fix the model's first layer)");
  throw PipelineError(
      "mpp: " + stage_text(to_stage, to_rank) + " expects activations " + to_string(expected) +
      " but " + stage_text(from.stage, from.rank) + " sends " + to_string(got) +
      "; the stages do not fit together: check the partition and the layer sizes at the cut");
}

}  // namespace mpp::detail
