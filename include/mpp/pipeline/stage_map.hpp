#pragma once
// Where one rank's chunks sit in the pipeline: which stage each local chunk is, which rank holds a
// neighbouring stage, and whether that neighbour is on this rank (the v-shape's turn, handed over
// in memory). The executor's compute and its messages both ask these questions; the answers
// depend only on the placement, the number of ranks and this rank.
#include <string>

#include "mpp/pipeline/shape_header.hpp"
#include "mpp/schedule/placement.hpp"

namespace mpp::detail {

/// Message tags: one per (link, micro-batch, direction), plus one header tag per link.
constexpr int activation_tag(int from_stage, int micro_batch, int stages) {
  return ((micro_batch * stages + from_stage) * 3) + 0;
}
constexpr int gradient_tag(int to_stage, int micro_batch, int stages) {
  return ((micro_batch * stages + to_stage) * 3) + 1;
}
constexpr int header_tag(int from_stage) { return from_stage * 3 + 2; }

/// The placement geometry seen from one rank.
struct StageMap {
  Placement placement{};
  int ranks = 1;   // P
  int stages = 1;  // P·V
  int rank = 0;

  int stage_of(int chunk) const { return placement.stage_of(rank, chunk); }
  int rank_of_stage(int stage) const { return placement.rank_of(stage); }
  bool is_first_stage(int chunk) const { return stage_of(chunk) == 0; }
  bool is_last_stage(int chunk) const { return stage_of(chunk) == stages - 1; }
  bool holds_first_stage() const { return rank_of_stage(0) == rank; }
  bool holds_last_stage() const { return rank_of_stage(stages - 1) == rank; }
  /// The rank of the stage before (`step` -1) or after (+1) local `chunk`'s.
  int neighbour_rank(int chunk, int step) const { return rank_of_stage(stage_of(chunk) + step); }
  /// Whether the stage before (`step` -1) or after (+1) local `chunk`'s is on this rank too: the
  /// value is then handed over in memory, with no message (the v-shape's turn).
  bool local_neighbour(int chunk, int step) const {
    const int other = stage_of(chunk) + step;
    return other >= 0 && other < stages && rank_of_stage(other) == rank;
  }
  /// The local chunk that holds the stage `step` away from `chunk`'s.
  int neighbour_chunk(int chunk, int step) const {
    return placement.chunk_of(stage_of(chunk) + step);
  }
  /// "stage 3 (rank 1)", for messages.
  std::string stage_text(int stage) const {
    return "stage " + std::to_string(stage) + " (rank " + std::to_string(rank_of_stage(stage)) +
           ")";
  }
  /// Throws unless what `to_stage` receives from `from_stage` is what its first layer takes;
  /// `from_stage` -1 means the user's inputs.
  void check_fit(const ActivationSpec& got, const ActivationSpec& expected, int from_stage,
                 int to_stage) const {
    if (got == expected) return;
    if (from_stage < 0)
      throw PipelineError("mpp: stage 0 expects inputs " + to_string(expected) +
                          " but train_step got " + to_string(got) +
                          "; convert or reshape the inputs (or fix the model's first layer)");
    throw PipelineError(
        "mpp: " + stage_text(to_stage) + " expects activations " + to_string(expected) + " but " +
        stage_text(from_stage) + " sends " + to_string(got) +
        "; the stages do not fit together: check the partition and the layer sizes at the cut");
  }
};

}  // namespace mpp::detail
