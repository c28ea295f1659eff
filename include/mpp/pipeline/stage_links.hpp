#pragma once
// The message side of one rank's stages: each link's shape header, the receives posted for
// activations (RECV_F) and gradients (RECV_B), waiting for them, and the sends. It computes
// nothing: what it sends is what the compute left in the Slot, what it receives is handed to the
// compute by the executor. Under a blocking comm policy a receive is complete when posted; under
// an asynchronous one it is posted early and waited for where the value is needed.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mpp/comm/communicator.hpp"
#include "mpp/pipeline/chunk_shapes.hpp"
#include "mpp/pipeline/message_tags.hpp"
#include "mpp/pipeline/shape_header.hpp"
#include "mpp/pipeline/step_state.hpp"
#include "mpp/schedule/action.hpp"
#include "mpp/schedule/rank_row.hpp"
#include "mpp/trace/recorder.hpp"

namespace mpp::detail {

template <comm_policy C>
class StageLinks {
 public:
  /// Whether a send returns only once its message is out (and a receive once it is in).
  static constexpr bool blocking = Communicator<C>::blocking;

  /// `row` (the compiler's data), `shapes`, `schedule_name` and `recorder` (the executor's)
  /// outlive this object.
  StageLinks(Communicator<C> comm, const RankRow& row, const std::vector<ChunkShapes>& shapes,
             const std::string& schedule_name, trace::Recorder& recorder)
      : comm_(std::move(comm)),
        row_(&row),
        shapes_(&shapes),
        schedule_name_(&schedule_name),
        recorder_(&recorder) {}

  Communicator<C>& comm() { return comm_; }
  const Communicator<C>& comm() const { return comm_; }

  /// Announces every outgoing link's shape (the next stage's declared input) and the step's plan.
  /// Async: as soon as the plan is known, before any compute, so that the receivers can post
  /// their data receives while this rank computes (a receive posted before the send arrives
  /// saves the sender's transport thread a wake-up). Blocking: right before the link's first
  /// data message, where the lowering put the first SEND_F. Each SEND_F then checks that what
  /// the stage really produces is what was announced.
  void send_headers(Step& step, int only_chunk = -1) {
    for (std::size_t c = 0; c < step.in_links.size(); ++c) {
      const int chunk = static_cast<int>(c);
      const ChunkPlace& place = row_->chunk(chunk);
      if ((only_chunk >= 0 && chunk != only_chunk) || !place.after.is_message() ||
          step.header_sent[c])
        continue;
      ShapeHeader h;
      h.sender_stage = place.stage;
      h.batch = step.plan.batch;
      h.micro_batches = row_->micro_batches;
      h.spec = (*shapes_)[c].output;
      step.pending_sends.add(comm_.send(h.encode(), place.after.rank, header_tag(place.stage)));
      step.header_sent[c] = true;
    }
  }

  /// SEND_F: the micro-batch's output to the next stage, checked against the announced shape.
  void send_activation(const Action& a, Step& step, bool drop_output) {
    Slot& s = step.slot(a.chunk, a.micro_batch);
    const auto t0 = recorder_->now();
    const std::size_t chunk = static_cast<std::size_t>(a.chunk);
    at::Tensor wire = s.produced.output.detach();
    const ActivationSpec produced = spec_of(wire);
    if (produced != (*shapes_)[chunk].output)
      throw PipelineError(
          "mpp: " + stage_text(a.stage + 1, a.peer) + " expects activations " +
          to_string((*shapes_)[chunk].output) + " but " + stage_text(a.stage, row_->rank) +
          " produces " + to_string(produced) +
          "; the stages do not fit together: check the partition and the layer sizes at the cut "
          "(the model's input_shape of the next stage's first layer)");
    if (!step.header_sent[chunk]) send_headers(step, a.chunk);
    step.pending_sends.add(
        comm_.send(wire, a.peer, activation_tag(a.stage, a.micro_batch, row_->stages)));
    if (drop_output) s.produced.output = at::Tensor();  // the Request keeps the bytes until sent
    recorder_->record(trace::EventKind::send, Op::SEND_F, a.micro_batch, a.chunk, a.peer, t0,
                      recorder_->now());
  }

  /// SEND_B: the micro-batch's input gradient to the previous stage.
  void send_gradient(const Action& a, Step& step) {
    Slot& s = step.slot(a.chunk, a.micro_batch);
    const auto t0 = recorder_->now();
    step.pending_sends.add(comm_.send(s.produced.input_grad, a.peer,
                                      gradient_tag(a.stage - 1, a.micro_batch, row_->stages)));
    s.produced.input_grad = at::Tensor();
    recorder_->record(trace::EventKind::send, Op::SEND_B, a.micro_batch, a.chunk, a.peer, t0,
                      recorder_->now());
  }

  /// RECV_F: post the receive now if the link's shape is known; otherwise post (async) or
  /// receive (blocking) the link's header first and defer the data until it is read.
  void post_activation_recv(const Action& a, Step& step) {
    Slot& s = step.slot(a.chunk, a.micro_batch);
    InLink& link = step.in_link(a.chunk);
    const auto t0 = recorder_->now();
    if (!link.known) {
      if (!link.header_posted) {
        link.header_buffer = ShapeHeader::buffer();
        link.header_request = comm_.recv(link.header_buffer, a.peer, header_tag(a.stage - 1));
        link.header_posted = true;
      }
      // Blocking, or the rank's first chunk (it can compute nothing before this input
      // arrives): read the header now and post the data receive at once. A later chunk's
      // header is read when that chunk first needs its input.
      if (blocking || a.chunk == 0) {
        read_header(a.chunk, a.peer, step);
      } else {
        s.posted.activation_deferred = true;
        record_post(Op::RECV_F, a, t0);
        return;
      }
      if constexpr (!blocking) {
        // Async: the wait for the header is a wait for the peer, not the cost of a post.
        const auto read = recorder_->now();
        recorder_->record(trace::EventKind::header_wait, Op::RECV_F, a.micro_batch, a.chunk, a.peer,
                          t0, read);
        post_activation_buffer(a.chunk, a.micro_batch, a.peer, s, step);
        record_post(Op::RECV_F, a, read);
        return;
      }
    }
    post_activation_buffer(a.chunk, a.micro_batch, a.peer, s, step);
    if constexpr (blocking)
      recorder_->record(trace::EventKind::recv_wait, Op::RECV_F, a.micro_batch, a.chunk, a.peer, t0,
                        recorder_->now());
    else
      record_post(Op::RECV_F, a, t0);
  }

  /// The input of F(stage > 0) from another rank: waits for the receive (reading the header
  /// first if needed).
  at::Tensor take_activation(const Action& a, const ChunkPlace& place, Step& step) {
    Slot& s = step.slot(a.chunk, a.micro_batch);
    const int peer = place.before.rank;
    const auto t0 = recorder_->now();
    if (!step.in_link(a.chunk).known) read_header(a.chunk, peer, step);
    step.free_released_while(s.posted.activation_request);
    s.posted.activation_request.wait();
    if constexpr (!blocking)
      recorder_->record(trace::EventKind::recv_wait, Op::RECV_F, a.micro_batch, a.chunk, peer, t0,
                        recorder_->now());
    return std::exchange(s.posted.activation, at::Tensor());
  }

  /// RECV_B: the gradient has the shape of this micro-batch's output, known once F ran.
  void post_gradient_recv(const Action& a, Step& step) {
    Slot& s = step.slot(a.chunk, a.micro_batch);
    if (!s.in_flight) {  // async only: blocking rows receive after the forward (proven)
      s.posted.gradient_deferred = true;
      return;
    }
    const auto t0 = recorder_->now();
    post_gradient_buffer(a.chunk, a.micro_batch, s);
    if constexpr (blocking)
      recorder_->record(trace::EventKind::recv_wait, Op::RECV_B, a.micro_batch, a.chunk, a.peer, t0,
                        recorder_->now());
    else
      record_post(Op::RECV_B, a, t0);
  }

  /// The receive of a gradient that RECV_B deferred until the micro-batch's forward `a` ran.
  void post_deferred_gradient(const Action& a, Slot& s) {
    const auto t0 = recorder_->now();
    post_gradient_buffer(a.chunk, a.micro_batch, s);
    record_post(Op::RECV_B, a, t0);
  }

  /// Posts the receive of the micro-batch's output gradient (its forward has run).
  void post_gradient_buffer(int chunk, int micro_batch, Slot& s) {
    const ChunkPlace& place = row_->chunk(chunk);
    s.posted.gradient =
        at::empty(s.produced.output_shape, at::TensorOptions().dtype(s.produced.output_dtype));
    s.posted.gradient_request = comm_.recv(s.posted.gradient, place.after.rank,
                                           gradient_tag(place.stage, micro_batch, row_->stages));
    s.posted.gradient_deferred = false;
  }

  /// The output gradient of B/I from another rank: waits for the receive.
  at::Tensor take_gradient(const Action& a, const ChunkPlace& place, Step& step) {
    Slot& s = step.slot(a.chunk, a.micro_batch);
    const auto t0 = recorder_->now();
    step.free_released_while(s.posted.gradient_request);
    s.posted.gradient_request.wait();
    if constexpr (!blocking)
      recorder_->record(trace::EventKind::recv_wait, Op::RECV_B, a.micro_batch, a.chunk,
                        place.after.rank, t0, recorder_->now());
    return std::exchange(s.posted.gradient, at::Tensor());
  }

 private:
  /// Async: the time from `begin` to now went into posting `a`'s receive (a transport's CPU cost
  /// per message, which the cost model charges as Costs::recv_overhead).
  void record_post(Op op, const Action& a, trace::Recorder::clock::time_point begin) {
    recorder_->record(
        trace::EventKind::recv_post, op, a.micro_batch, a.chunk,
        op == Op::RECV_F ? row_->chunk(a.chunk).before.rank : row_->chunk(a.chunk).after.rank,
        begin, recorder_->now());
  }

  /// Reads the link's shape header: checks it, learns the step's plan from it if this rank had
  /// no batch, and posts the data receives that waited for it.
  void read_header(int chunk, int peer, Step& step) {
    InLink& link = step.in_link(chunk);
    link.header_request.wait();
    const ChunkPlace& place = row_->chunk(chunk);
    const int stage = place.stage;
    const ShapeHeader h = ShapeHeader::decode(link.header_buffer, stage - 1, stage);
    check_fit(h.spec, (*shapes_)[static_cast<std::size_t>(chunk)].input, place.before, stage,
              row_->rank);
    // Another rank's type is run-time input: a rank built with another Pipeline type says so.
    if (h.micro_batches != row_->micro_batches)
      throw PipelineError("mpp: " + stage_text(stage, row_->rank) + " runs " +
                          std::to_string(row_->micro_batches) + " micro-batches but " +
                          stage_text(stage - 1, peer) + " runs " + std::to_string(h.micro_batches) +
                          "; every rank must build the same Pipeline type");
    if (!step.plan_known) {
      step.set_plan(h.batch, *schedule_name_);
      if constexpr (!blocking) send_headers(step);  // pass the plan on at once
    } else if (h.batch != step.plan.batch) {
      throw PipelineError(
          "mpp: " + stage_text(stage - 1, peer) + " sends a batch of " + std::to_string(h.batch) +
          " samples but " + stage_text(stage, row_->rank) + " has " +
          std::to_string(step.plan.batch) + (row_->holds_last_stage() ? " targets" : " inputs") +
          "; pass inputs and targets of the same batch on every rank");
    }
    if (row_->holds_last_stage() && step.target_chunks.empty())
      step.target_chunks = split_micro_batches(step.targets, step.plan);
    link.spec = h.spec;
    link.known = true;
    // The link's shape is known: post the data receives that waited for it.
    for (int mb = 0; mb < row_->micro_batches; ++mb) {
      Slot& other = step.slot(chunk, mb);
      if (other.posted.activation_deferred) post_activation_buffer(chunk, mb, peer, other, step);
    }
  }

  void post_activation_buffer(int chunk, int micro_batch, int peer, Slot& s, Step& step) {
    const InLink& link = step.in_link(chunk);
    std::vector<std::int64_t> shape{step.plan.sizes[static_cast<std::size_t>(micro_batch)]};
    shape.insert(shape.end(), link.spec.per_sample.begin(), link.spec.per_sample.end());
    s.posted.activation = at::empty(shape, at::TensorOptions().dtype(link.spec.dtype));
    s.posted.activation_request =
        comm_.recv(s.posted.activation, peer,
                   activation_tag(row_->chunk(chunk).stage - 1, micro_batch, row_->stages));
    s.posted.activation_deferred = false;
  }

  Communicator<C> comm_;
  const RankRow* row_;
  const std::vector<ChunkShapes>* shapes_;
  const std::string* schedule_name_;
  trace::Recorder* recorder_;
};

}  // namespace mpp::detail
