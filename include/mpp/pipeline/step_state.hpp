#pragma once
// What one training step of one rank keeps between the actions of its row: per micro-batch and
// local chunk a Slot (what the backward needs, and the messages posted for it), per incoming link
// what its shape header said, the sends still in flight and what finished micro-batches left to
// free. It lives on train_step's frame, so an error that unwinds the step abandons its posted
// messages (Request's rule) instead of waiting on them.
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/autograd/function.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpp/comm/communicator.hpp"
#include "mpp/pipeline/micro_batch.hpp"
#include "mpp/pipeline/shape_header.hpp"

namespace mpp::detail {

/// Under Recompute: where the forward of one segment of a stage started, to run it again.
struct Checkpoint {
  at::Tensor input;      // the segment's input, kept without a graph
  at::Tensor rng_state;  // the generator's state there: the recompute draws the same masks
};

/// What the compute keeps of one micro-batch on one chunk for its backward (StageCompute's).
struct SlotGraph {
  // Input of the graph the backward runs through (a leaf that requires grad, except on stage 0);
  // under Recompute, the input of the segment rebuilt last.
  at::Tensor input;
  std::vector<Checkpoint> checkpoints;  // under Recompute: one per segment not yet rebuilt
  at::Tensor loss;                      // weighted loss, the root on the last stage
  // Split backward: where each layer with parameters hands its output to the graph (an edge,
  // not the tensor, so that its bytes are not kept alive) and the gradient there (after I).
  torch::autograd::edge_list layer_edges;
  std::vector<at::Tensor> layer_grads;
  std::int64_t held_bytes = 0;   // activation bytes counted for this micro-batch
  bool ready = false;            // the autograd graph for the backward exists
  bool input_grad_done = false;  // split backward: I ran, W may follow
};

/// What one micro-batch's compute on one chunk produced for the neighbouring stages: handed over
/// in memory on the same rank or sent.
struct SlotOutputs {
  at::Tensor output;  // F's output (the graph's root on a middle stage); under Recompute only
                      // kept until sent
  std::vector<std::int64_t> output_shape;  // what RECV_B receives
  c10::ScalarType output_dtype = c10::kFloat;
  at::Tensor input_grad;  // B's or I's gradient of the input, what SEND_B sends
};

/// The receives posted for one micro-batch on one chunk (StageLinks').
struct SlotReceives {
  at::Tensor activation;  // where RECV_F lands
  Request activation_request;
  bool activation_deferred = false;  // RECV_F seen before the link's shape was known
  at::Tensor gradient;               // where RECV_B lands
  Request gradient_request;
  bool gradient_deferred = false;  // RECV_B seen before this micro-batch's forward
};

/// One micro-batch on one local chunk.
struct Slot {
  SlotGraph graph;         // kept for the backward
  SlotOutputs produced;    // for the neighbouring stages
  SlotReceives posted;     // messages on their way in
  bool in_flight = false;  // F ran and the backward has not finished
};

/// An incoming link (the stage before a local chunk, on another rank) during one step.
struct InLink {
  bool known = false;  // shape header received this step
  bool header_posted = false;
  at::Tensor header_buffer;
  Request header_request;
  ActivationSpec spec;
};

/// What finished micro-batches held, freed off the critical path (see StageCompute::finish).
struct Released {
  std::vector<at::Tensor> tensors;
  std::vector<torch::autograd::edge_list> edges;
  bool empty() const { return tensors.empty() && edges.empty(); }
  void clear() {
    tensors.clear();
    edges.clear();
  }
};

/// Everything that lives for one step only.
struct Step {
  Step(std::size_t chunks, int micro_batches)
      : micro_batches(micro_batches),
        slots(chunks * static_cast<std::size_t>(micro_batches)),
        in_links(chunks),
        header_sent(chunks, false) {}

  int micro_batches;
  MicroBatchPlan plan;
  bool plan_known = false;
  std::vector<at::Tensor> input_chunks;
  std::vector<at::Tensor> target_chunks;
  at::Tensor targets;
  std::vector<Slot> slots;
  std::vector<InLink> in_links;
  std::vector<bool> header_sent;
  PendingRequests pending_sends;
  Released released;
  double loss_sum = 0.0;

  Slot& slot(int chunk, int micro_batch) {
    return slots[static_cast<std::size_t>(chunk) * static_cast<std::size_t>(micro_batches) +
                 static_cast<std::size_t>(micro_batch)];
  }
  InLink& in_link(int chunk) { return in_links[static_cast<std::size_t>(chunk)]; }

  /// Splits a batch of `batch` samples into the step's micro-batches (`schedule` for messages).
  void set_plan(std::int64_t batch, const std::string& schedule) {
    plan = plan_micro_batches(batch, micro_batches, schedule);
    plan_known = true;
  }

  /// Before blocking on `r`: if it has not completed yet, free the finished micro-batches now,
  /// in time this rank would spend waiting anyway.
  void free_released_while(const Request& r) {
    if (!released.empty() && !r.ready()) released.clear();
  }
};

}  // namespace mpp::detail
