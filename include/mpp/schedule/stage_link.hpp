#pragma once
// Where a stage meets its neighbouring stage: the question "does this value travel as a message?"
// that lowering (which emits the message), the verifier (which times it) and the executor (which
// hands the value over) all depend on. Placement::link answers it; nothing else does. Standard
// library only.

namespace mpp {

/// How a stage's forward input (the stage before) or its backward's output gradient (the stage
/// after) reaches it.
enum class LinkKind : unsigned char {
  edge,       ///< no stage there: the user's batch before stage 0, the loss after the last stage
  same_rank,  ///< a chunk of the same rank: the value is handed over in memory, no message
  message,    ///< another rank: a SEND and a RECV carry it
};

/// One side of a stage: the neighbouring stage, its rank and, on the same rank, its chunk.
struct StageLink {
  LinkKind kind = LinkKind::edge;  ///< how the value arrives
  int stage = -1;                  ///< the neighbouring stage; -1 at an edge
  int rank = -1;                   ///< the rank that holds it; -1 at an edge
  int chunk = -1;                  ///< its local chunk on that rank; -1 at an edge

  /// A SEND and a RECV carry the value.
  constexpr bool is_message() const { return kind == LinkKind::message; }
  /// The value is handed over in memory by another chunk of the same rank.
  constexpr bool is_same_rank() const { return kind == LinkKind::same_rank; }
  /// No stage there (the batch or the loss).
  constexpr bool is_edge() const { return kind == LinkKind::edge; }
  /// Field by field.
  friend constexpr bool operator==(const StageLink&, const StageLink&) = default;
};

}  // namespace mpp
