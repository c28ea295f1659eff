#pragma once
// The action IR shared by generators, lowering, the verifier, rendering and the executor.
// Standard library only.
#include <string_view>

namespace mpp {

/// What one step of a rank's table does.
///   F       forward of (stage, micro_batch)
///   B       full backward (input grad and weight grad together)
///   I, W    the backward split as in zero-bubble schedules: input grad, then weight grad
///   SEND_F  send the output of F(stage) to the rank of stage + 1
///   RECV_F  receive the input of F(stage) from the rank of stage - 1
///   SEND_B  send the input grad of B/I(stage) to the rank of stage - 1
///   RECV_B  receive the output grad needed by B/I(stage) from the rank of stage + 1
enum class Op : int { F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B };

/// The number of Op values (F through RECV_B).
inline constexpr int op_count = 8;

/// The op's name as the tables print it ("F", "SEND_B"), "?" for a value outside Op.
constexpr std::string_view to_string(Op op) {
  constexpr std::string_view names[op_count] = {"F",      "B",      "I",      "W",
                                                "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
  const int i = static_cast<int>(op);
  return (i >= 0 && i < op_count) ? names[i] : std::string_view{"?"};
}

/// F, B, I or W: work on a model chunk.
constexpr bool is_compute(Op op) {
  return op == Op::F || op == Op::B || op == Op::I || op == Op::W;
}
/// A send or a receive.
constexpr bool is_comm(Op op) { return !is_compute(op); }
/// SEND_F or SEND_B.
constexpr bool is_send(Op op) { return op == Op::SEND_F || op == Op::SEND_B; }
/// RECV_F or RECV_B.
constexpr bool is_recv(Op op) { return op == Op::RECV_F || op == Op::RECV_B; }
/// B or I: the op that produces the gradient sent to the previous stage.
constexpr bool is_backward(Op op) { return op == Op::B || op == Op::I; }
/// Communication that carries activations (F) rather than gradients (B).
constexpr bool carries_activation(Op op) { return op == Op::SEND_F || op == Op::RECV_F; }

/// One step of a rank's table.
/// `chunk` is the local model chunk on the rank; `stage` is the global stage it computes or
/// communicates for, the table's placement's stage of (rank, chunk) (interleaved unless the table
/// says otherwise). `peer` is the other rank of a SEND/RECV, -1 for compute.
/// An Action whose micro_batch is negative is padding (lets hand-written rows differ in length).
struct Action {
  Op op = Op::F;         ///< What the step does.
  int micro_batch = -1;  ///< Micro-batch index from 0; negative for padding.
  int chunk = 0;         ///< The rank's local model chunk, 0 .. chunks_per_rank - 1.
  int stage = -1;        ///< Global stage; -1 until the table is built (or named by hand).
  int peer = -1;         ///< The other rank of a SEND/RECV; -1 for compute.
  /// True on an F that forms one OVERLAP_F_B pair with the backward (B or I) right after it
  /// (DualPipeV's overlapped forward and backward), written `(aFm;bBn)OVERLAP_F_B` in the action
  /// CSV. On one CPU stream the pair runs as its two actions in order and the verifier times it
  /// as their sum; lowering sends the F's output before the backward runs, and so keeps the mark
  /// only where no send comes between the two.
  bool overlap_with_next = false;

  /// Field by field.
  friend constexpr bool operator==(const Action&, const Action&) = default;
  /// True for a padding entry (negative micro_batch), which no rank executes.
  constexpr bool is_padding() const { return micro_batch < 0; }
};

/// Shorthands for hand-written tables: `using namespace mpp::actions; { F(0), F(1), B(0), B(1) }`.
/// The stage and peer are filled in from the row (rank) and the chunk when the table is built.
namespace actions {
/// A forward of `micro_batch` on local `chunk`.
constexpr Action F(int micro_batch, int chunk = 0) { return {Op::F, micro_batch, chunk, -1, -1}; }

/// A full backward of `micro_batch` on local `chunk`.
constexpr Action B(int micro_batch, int chunk = 0) { return {Op::B, micro_batch, chunk, -1, -1}; }
/// The input-grad half of a split backward.
constexpr Action I(int micro_batch, int chunk = 0) { return {Op::I, micro_batch, chunk, -1, -1}; }
/// The weight-grad half of a split backward.
constexpr Action W(int micro_batch, int chunk = 0) { return {Op::W, micro_batch, chunk, -1, -1}; }
/// Send F's output to the next stage.
constexpr Action SEND_F(int micro_batch, int chunk = 0) {
  return {Op::SEND_F, micro_batch, chunk, -1, -1};
}
/// Receive F's input from the previous stage.
constexpr Action RECV_F(int micro_batch, int chunk = 0) {
  return {Op::RECV_F, micro_batch, chunk, -1, -1};
}
/// Send the input grad to the previous stage.
constexpr Action SEND_B(int micro_batch, int chunk = 0) {
  return {Op::SEND_B, micro_batch, chunk, -1, -1};
}
/// Receive the output grad from the next stage.
constexpr Action RECV_B(int micro_batch, int chunk = 0) {
  return {Op::RECV_B, micro_batch, chunk, -1, -1};
}
/// `forward` (an F) paired with the backward written right after it: `overlapped(F(4)), B(1, 1)`
/// is PyTorch's `(0F4;1B1)OVERLAP_F_B` on its rank.
constexpr Action overlapped(Action forward) {
  forward.overlap_with_next = true;
  return forward;
}
/// `a` on global `stage`, as PyTorch's `<stage>F<mb>` names it: a table whose rows name their
/// stages takes its placement from them (each rank's chunks are its stages in increasing order).
constexpr Action on_stage(int stage, Action a) {
  a.stage = stage;
  return a;
}
}  // namespace actions

/// A fixed-capacity text that constexpr code can build and that prints in full when a
/// result holding it appears as a template argument in a compiler diagnostic.
struct FixedText {
  static constexpr int capacity =
      512;                ///< Bytes of storage; the text is cut at capacity - 1 characters.
  char text[capacity]{};  ///< The characters, not NUL-terminated beyond `length`.
  int length = 0;         ///< Characters used.

  /// Appends `s`, cut at the capacity; returns *this to chain.
  constexpr FixedText& append(std::string_view s) {
    for (char c : s)
      if (length < capacity - 1) text[length++] = c;
    return *this;
  }
  /// Appends `value` in decimal.
  constexpr FixedText& append(int value) {
    char digits[12]{};
    int n = 0;
    const bool negative = value < 0;
    long long v = negative ? -static_cast<long long>(value) : value;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    if (negative) append("-");
    while (n > 0) {
      const char c[1] = {digits[--n]};
      append(std::string_view(c, 1));
    }
    return *this;
  }
  /// Appends `a` as the verifier's messages name it: "F(stage 1, mb 0) ...".
  constexpr FixedText& append(const Action& a) {
    append(to_string(a.op)).append("(stage ").append(a.stage).append(", mb ").append(a.micro_batch);
    if (a.chunk != 0) append(", chunk ").append(a.chunk);
    append(")");
    if (is_comm(a.op)) append(is_send(a.op) ? " to rank " : " from rank ").append(a.peer);
    return *this;
  }
  /// append(v), as a stream.
  template <class T>
  constexpr FixedText& operator<<(const T& v) {
    return append(v);
  }
  /// Appends a NUL-terminated string.
  constexpr FixedText& operator<<(const char* s) { return append(std::string_view(s)); }

  /// True when nothing was appended.
  constexpr bool empty() const { return length == 0; }
  /// The text so far.
  constexpr std::string_view view() const { return {text, static_cast<std::size_t>(length)}; }
  /// The characters, not NUL-terminated; data() and size() make it usable as a C++26
  /// static_assert message.
  constexpr const char* data() const { return text; }
  /// The text's length (pairs with data()).
  constexpr std::size_t size() const { return static_cast<std::size_t>(length); }
};

}  // namespace mpp
