#pragma once
// The tags of a pipeline's messages: one per (link, micro-batch, direction), plus one shape
// header per link, so that no two messages between the same two ranks in one step share a tag.

namespace mpp::detail {

/// The activation `from_stage` sends to the next stage for `micro_batch`.
constexpr int activation_tag(int from_stage, int micro_batch, int stages) {
  return ((micro_batch * stages + from_stage) * 3) + 0;
}
/// The gradient sent back to `to_stage` for `micro_batch`.
constexpr int gradient_tag(int to_stage, int micro_batch, int stages) {
  return ((micro_batch * stages + to_stage) * 3) + 1;
}
/// The shape header of the link leaving `from_stage`.
constexpr int header_tag(int from_stage) { return from_stage * 3 + 2; }

}  // namespace mpp::detail
