#pragma once
// The executor of one rank's lowered action table.
//
// One loop over plain `Action`s and a `switch` on the op: no virtual call and no type erasure of
// our own in the hot path. The comm policy, Recompute (and its segments) and the split backward
// are template parameters, chosen with `if constexpr`; partition and schedule only change the
// data this loop runs over (the rows, the pieces), so the loop is compiled once per (comm policy,
// recompute, split) and not once per combination.
//
// Its only schedule input is the proven row (RankRow: the actions and where each chunk sits, all
// computed by the compiler); it re-checks nothing the verifier proved. It is glue between two parts
// that do not know each other: StageCompute (stage_compute.hpp), the autograd side of F, B, I and
// W, and StageLinks (stage_links.hpp), the messages. The loop decides where F's input and B's
// output gradient come from (the user's batch, a stage of this rank, or a message) and what happens
// to their results; the step's state (step_state.hpp) is on train_step's frame.
#include <ATen/core/Tensor.h>
#include <ATen/ops/scalar_tensor.h>

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mpp/comm/communicator.hpp"
#include "mpp/partition/model.hpp"
#include "mpp/pipeline/chunk_shapes.hpp"
#include "mpp/pipeline/micro_batch.hpp"
#include "mpp/pipeline/pipeline_names.hpp"
#include "mpp/pipeline/shape_header.hpp"
#include "mpp/pipeline/stage_compute.hpp"
#include "mpp/pipeline/stage_links.hpp"
#include "mpp/pipeline/step_state.hpp"
#include "mpp/schedule/action.hpp"
#include "mpp/schedule/rank_row.hpp"
#include "mpp/trace/recorder.hpp"

namespace mpp::detail {

/// Runs one rank's rows. `Recompute`: keep only each micro-batch's input (of each of `Segments`
/// segments) and rebuild the graph before its backward (a Recompute<...> partition).
/// `SplitBackward`: the rows hold I and W, so a forward keeps each layer's output edge for W.
/// All three come from the Pipeline's types.
template <comm_policy C, bool Recompute = false, bool SplitBackward = false, int Segments = 1>
class Executor {
 public:
  /// `row` is the compiler's (CompiledRows::rank_row); `shapes` (one per local chunk) come from
  /// the model, `names` are for messages.
  Executor(Communicator<C> comm, const RankRow& row, std::vector<LocalPiece> pieces,
           std::vector<ChunkShapes> shapes, PipelineNames names)
      : row_(row),
        shapes_(std::move(shapes)),
        names_(std::move(names)),
        chunk_stages_([&row] {
          std::vector<int> stages;
          for (const ChunkPlace& c : row.chunks) stages.push_back(c.stage);
          return stages;
        }()),
        compute_(std::move(pieces), row_, recorder_),
        links_(std::move(comm), row_, shapes_, names_.schedule, recorder_) {}
  // The parts keep pointers to the row, the shapes and the recorder: the executor stays put.
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const std::vector<LocalPiece>& pieces() const { return compute_.pieces(); }
  const Communicator<C>& comm() const { return links_.comm(); }
  const trace::RankTrace& last_trace() const { return recorder_.trace(); }
  std::span<const Action> actions() const { return row_.actions; }

  template <class LossFn>
  double train_step(const at::Tensor& inputs, const at::Tensor& targets, LossFn& loss_fn) {
    recorder_.begin_step(row_.rank, row_.actions.size() + 8, chunk_stages_);
    // The step's state lives on this frame: if anything throws, its pending receives and sends
    // are abandoned while the error unwinds (Request's rule) instead of being waited on.
    Step step(compute_.pieces().size(), row_.micro_batches);
    begin_step(step, inputs, targets);
    {
      // [quote:dispatch]
      for (const Action& a : row_.actions) {
        switch (a.op) {
          case Op::F:
            forward(a, step, loss_fn);
            break;
          case Op::B:
            backward<false>(a, step, loss_fn);
            break;
          case Op::I:
            if constexpr (SplitBackward) backward<true>(a, step, loss_fn);
            break;
          case Op::W:
            if constexpr (SplitBackward)
              compute_.weight_grad(a, step.slot(a.chunk, a.micro_batch), step);
            break;
          case Op::SEND_F:
            links_.send_activation(a, step, /*drop_output=*/Recompute);
            break;
          case Op::SEND_B:
            links_.send_gradient(a, step);
            break;
          case Op::RECV_F:
            links_.post_activation_recv(a, step);
            break;
          case Op::RECV_B:
            links_.post_gradient_recv(a, step);
            break;
        }
      }
      // [/quote:dispatch]
      const auto t0 = recorder_.now();
      step.pending_sends.wait_all();
      recorder_.record(trace::EventKind::send_wait, Op::SEND_F, -1, 0, -1, t0, recorder_.now());
    }
    const auto t0 = recorder_.now();
    at::Tensor loss = at::scalar_tensor(step.loss_sum, at::kDouble);
    if (row_.ranks > 1) links_.comm().broadcast(loss, row_.last_stage_rank);
    recorder_.record(trace::EventKind::loss_sync, Op::SEND_F, -1, 0, -1, t0, recorder_.now());
    recorder_.end_step();
    return loss.item<double>();
  }

 private:
  /// Checks the batch this rank was given, splits it into micro-batches and, async, announces
  /// the outgoing links' shapes at once.
  void begin_step(Step& step, const at::Tensor& inputs, const at::Tensor& targets) {
    if (row_.holds_first_stage()) {
      if (!inputs.defined())
        throw PipelineError(
            "mpp: " + names_.pipeline +
            ": rank 0 holds stage 0 and needs the inputs; pass "
            "the batch's inputs to train_step on rank 0 (other ranks may pass an empty tensor)");
      check_fit(spec_of(inputs), shapes_[0].input, StageLink{}, 0, row_.rank);
      step.set_plan(inputs.size(0), names_.schedule);
      step.input_chunks = split_micro_batches(inputs, step.plan);
    }
    if (row_.holds_last_stage()) {
      if (!targets.defined() || targets.dim() < 1)
        throw PipelineError(
            "mpp: " + names_.pipeline + ": rank " + std::to_string(row_.rank) +
            " holds the last stage and needs the targets; pass the batch's targets to "
            "train_step on rank " +
            std::to_string(row_.rank));
      if (step.plan_known && targets.size(0) != step.plan.batch)
        throw PipelineError("mpp: the inputs have " + std::to_string(step.plan.batch) +
                            " samples but the targets have " + std::to_string(targets.size(0)) +
                            "; pass inputs and targets of the same batch");
      step.targets = targets;
      if (!step.plan_known) step.set_plan(targets.size(0), names_.schedule);
      step.target_chunks = split_micro_batches(targets, step.plan);
    }
    if constexpr (!StageLinks<C>::blocking) {
      if (step.plan_known) links_.send_headers(step);
    }
  }

  /// F: its input is the user's micro-batch on stage 0, the previous stage's output handed over
  /// in memory when that stage is on this rank, a received message otherwise.
  template <class LossFn>
  void forward(const Action& a, Step& step, LossFn& loss_fn) {
    Slot& s = step.slot(a.chunk, a.micro_batch);
    const ChunkPlace& place = row_.chunk(a.chunk);
    at::Tensor x;
    switch (place.before.kind) {
      case LinkKind::edge:
        x = step.input_chunks[static_cast<std::size_t>(a.micro_batch)];
        break;
      case LinkKind::same_rank:
        x = compute_.take_local_activation(a, place, step,
                                           shapes_[static_cast<std::size_t>(a.chunk)].input);
        break;
      case LinkKind::message:
        x = links_.take_activation(a, place, step);
        break;
    }
    compute_.forward(a, std::move(x), s, step, loss_fn);
    if (s.posted.gradient_deferred) links_.post_deferred_gradient(a, s);
  }

  /// B or I (`Split`): the output gradient is none on the last stage (the loss is the root), the
  /// next stage's input gradient when that stage is on this rank, a received message otherwise.
  template <bool Split, class LossFn>
  void backward(const Action& a, Step& step, LossFn& loss_fn) {
    Slot& s = step.slot(a.chunk, a.micro_batch);
    const ChunkPlace& place = row_.chunk(a.chunk);
    at::Tensor grad_out;
    switch (place.after.kind) {
      case LinkKind::edge:
        break;
      case LinkKind::same_rank:
        grad_out = compute_.take_local_gradient(a, place, step);
        break;
      case LinkKind::message:
        grad_out = links_.take_gradient(a, place, step);
        break;
    }
    compute_.template backward<Split>(a, grad_out, s, step, loss_fn);
  }

  RankRow row_;  // spans into the compiler's constant data
  std::vector<ChunkShapes> shapes_;
  PipelineNames names_;
  trace::Recorder recorder_;
  std::vector<int> chunk_stages_;  // the stage of each local chunk, for the trace
  StageCompute<Recompute, SplitBackward, Segments> compute_;
  StageLinks<C> links_;
};

}  // namespace mpp::detail
