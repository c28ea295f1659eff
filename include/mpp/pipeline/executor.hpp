#pragma once
// The executor of one rank's lowered action table.
//
// One loop over plain `Action`s and a `switch` on the op: no virtual call and no type erasure of
// our own in the hot path. The comm policy, Recompute and the split backward are template
// parameters, chosen with `if constexpr`; partition and schedule only change the data this loop
// runs over (the rows, the pieces), so the loop is compiled once per (comm policy, recompute,
// split) and not once per combination.
//
// Per micro-batch and chunk a Slot holds what the backward needs: the stage input, the output
// (the graph root), the weighted loss on the last stage and, for split backwards (I then W), the
// outputs of every layer with parameters and their gradients. Under Recompute a Slot holds only
// the input and the graph is rebuilt right before the micro-batch's first backward op.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mpp/comm/communicator.hpp"
#include "mpp/partition/model.hpp"
#include "mpp/pipeline/layer_call.hpp"
#include "mpp/pipeline/micro_batch.hpp"
#include "mpp/pipeline/rng_state.hpp"
#include "mpp/pipeline/shape_header.hpp"
#include "mpp/schedule/action.hpp"
#include "mpp/schedule/placement.hpp"
#include "mpp/trace/recorder.hpp"

namespace mpp::detail {

/// What the executor needs to know besides the table and the pieces.
struct ExecutorConfig {
  std::string pipeline_name;  // "Pipeline<Uniform<2>, GPipe<4>, Async<Gloo>>", for messages
  std::string schedule_name;  // "GPipe<4>"
  int ranks = 1;              // P
  int chunks_per_rank = 1;    // V
  int micro_batches = 1;      // M
  Placement placement = Placement::interleaved;  // which stages this rank holds
  std::vector<ActivationSpec> expected_inputs;   // per local chunk: what its first layer takes
  std::vector<ActivationSpec> expected_outputs;  // per local chunk: what the next stage takes
};

/// Message tags: one per (link, micro-batch, direction), plus one header tag per link.
constexpr int activation_tag(int from_stage, int micro_batch, int stages) {
  return ((micro_batch * stages + from_stage) * 3) + 0;
}
constexpr int gradient_tag(int to_stage, int micro_batch, int stages) {
  return ((micro_batch * stages + to_stage) * 3) + 1;
}
constexpr int header_tag(int from_stage) { return from_stage * 3 + 2; }

/// Runs one rank's rows. `Recompute`: keep only each micro-batch's input and rebuild its graph
/// before its first backward op (a Recompute<...> partition). `SplitBackward`: the rows hold I
/// and W, so a forward keeps each layer's output edge for W. Both come from the Pipeline's types.
template <comm_policy C, bool Recompute = false, bool SplitBackward = false>
class Executor {
 public:
  Executor(Communicator<C> comm, std::vector<Action> actions, std::vector<LocalPiece> pieces,
           ExecutorConfig config)
      : comm_(std::move(comm)),
        actions_(std::move(actions)),
        pieces_(std::move(pieces)),
        config_(std::move(config)),
        rank_(comm_.rank()),
        stages_(config_.ranks * config_.chunks_per_rank) {
    for (auto& piece : pieces_) {
      std::vector<LayerParams> layers;
      std::vector<LayerCall> calls;
      int index = 0;
      for (auto& module : *piece.module) {
        calls.push_back(LayerCall::of(module));
        auto params = module.ptr()->parameters();
        if (!params.empty()) {
          torch::autograd::edge_list edges;
          for (const auto& p : params) edges.push_back(torch::autograd::impl::gradient_edge(p));
          layers.push_back({index, std::move(params), std::move(edges)});
        }
        ++index;
      }
      param_layers_.push_back(std::move(layers));
      layer_calls_.push_back(std::move(calls));
    }
  }

  const std::vector<LocalPiece>& pieces() const { return pieces_; }
  const Communicator<C>& comm() const { return comm_; }
  const trace::RankTrace& last_trace() const { return recorder_.trace(); }
  const std::vector<Action>& actions() const { return actions_; }
  int stages() const { return stages_; }
  bool holds_first_stage() const { return rank_of_stage(0) == rank_; }
  bool holds_last_stage() const { return rank_of_stage(stages_ - 1) == rank_; }

  template <class LossFn>
  double train_step(const at::Tensor& inputs, const at::Tensor& targets, LossFn& loss_fn) {
    recorder_.begin_step(rank_, actions_.size() + 8, config_.placement);
    // The step's state lives on this frame: if anything throws, its pending receives and sends
    // are abandoned while the error unwinds (Request's rule) instead of being waited on.
    Step step(pieces_.size(), config_.micro_batches);
    const StepScope scope(this, &step);
    begin_step(inputs, targets);
    {
      // [quote:dispatch]
      for (const Action& a : actions_) {
        switch (a.op) {
          case Op::F:
            forward(a, loss_fn);
            break;
          case Op::B:
            backward(a, loss_fn, /*split=*/false);
            break;
          case Op::I:
            backward(a, loss_fn, /*split=*/true);
            break;
          case Op::W:
            weight_grad(a);
            break;
          case Op::SEND_F:
            send_activation(a);
            break;
          case Op::SEND_B:
            send_gradient(a);
            break;
          case Op::RECV_F:
            post_activation_recv(a);
            break;
          case Op::RECV_B:
            post_gradient_recv(a);
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
    if (config_.ranks > 1) comm_.broadcast(loss, rank_of_stage(stages_ - 1));
    recorder_.record(trace::EventKind::loss_sync, Op::SEND_F, -1, 0, -1, t0, recorder_.now());
    recorder_.end_step();
    return loss.item<double>();
  }

 private:
  struct LayerParams {
    int index;                               // position in the piece's Sequential
    std::vector<at::Tensor> params;          // what W accumulates into
    torch::autograd::edge_list param_edges;  // their gradient accumulators
  };

  struct Slot {
    at::Tensor input;        // stage input (leaf that requires grad, except on stage 0)
    at::Tensor rng_state;    // under Recompute: the generator's state the forward started from
    at::Tensor output;       // graph root of a middle stage; under Recompute only kept until sent
    at::Tensor loss;         // weighted loss (last stage)
    at::Tensor input_grad;   // what SEND_B sends
    at::Tensor recv_buffer;  // where RECV_F lands
    at::Tensor grad_buffer;  // where RECV_B lands
    Request recv_request;
    Request grad_request;
    bool recv_deferred = false;           // RECV_F seen before the link's shape was known
    bool grad_deferred = false;           // RECV_B seen before this micro-batch's forward
    bool graph_ready = false;             // the autograd graph for the backward exists
    bool input_grad_done = false;         // split backward: I ran, W may follow
    std::vector<std::int64_t> out_shape;  // shape of the output (what RECV_B receives)
    c10::ScalarType out_dtype = c10::kFloat;
    // Split backward: where each layer with parameters hands its output to the graph (an edge,
    // not the tensor, so that its bytes are not kept alive) and the gradient there (after I).
    torch::autograd::edge_list layer_edges;
    std::vector<at::Tensor> layer_grads;
    std::int64_t held_bytes = 0;
    bool in_flight = false;
  };

  struct InLink {
    bool known = false;  // shape header received this step
    bool header_posted = false;
    at::Tensor header_buffer;
    Request header_request;
    ActivationSpec spec;
  };

  /// What finished micro-batches held, freed off the critical path (finish_slot).
  struct Released {
    std::vector<at::Tensor> tensors;
    std::vector<torch::autograd::edge_list> edges;
  };

  /// Everything that lives for one step only.
  struct Step {
    Step(std::size_t chunks, int micro_batches)
        : slots(chunks * static_cast<std::size_t>(micro_batches)),
          in_links(chunks),
          header_sent(chunks, false) {}
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
  };

  struct StepScope {
    StepScope(Executor* e, Step* s) : executor(e) { executor->step_ = s; }
    ~StepScope() { executor->step_ = nullptr; }
    Executor* executor;
  };

  Slot& slot(int chunk, int micro_batch) {
    return step_
        ->slots[static_cast<std::size_t>(chunk) * static_cast<std::size_t>(config_.micro_batches) +
                static_cast<std::size_t>(micro_batch)];
  }
  int stage_of(int chunk) const {
    return mpp::stage_of(config_.placement, config_.ranks, rank_, chunk);
  }
  int rank_of_stage(int stage) const {
    return mpp::rank_of(config_.placement, config_.ranks, stage);
  }
  bool is_first_stage(int chunk) const { return stage_of(chunk) == 0; }
  bool is_last_stage(int chunk) const { return stage_of(chunk) == stages_ - 1; }
  /// The rank of the stage before (`step` -1) or after (+1) local `chunk`'s.
  int neighbour_rank(int chunk, int step) const { return rank_of_stage(stage_of(chunk) + step); }
  /// Whether the stage before (`step` -1) or after (+1) local `chunk`'s is on this rank too: the
  /// value is then handed over in memory, with no message (the v-shape's turn).
  bool local_neighbour(int chunk, int step) const {
    const int other = stage_of(chunk) + step;
    return other >= 0 && other < stages_ && rank_of_stage(other) == rank_;
  }
  /// The local chunk that holds the stage `step` away from `chunk`'s.
  int neighbour_chunk(int chunk, int step) const {
    return mpp::chunk_of(config_.placement, config_.ranks, stage_of(chunk) + step);
  }
  std::string stage_text(int stage) const {
    return "stage " + std::to_string(stage) + " (rank " + std::to_string(rank_of_stage(stage)) +
           ")";
  }

  // ---- step set-up -------------------------------------------------------------------------
  void begin_step(const at::Tensor& inputs, const at::Tensor& targets) {
    if (holds_first_stage()) {
      if (!inputs.defined())
        throw PipelineError(
            "mpp: " + config_.pipeline_name +
            ": rank 0 holds stage 0 and needs the inputs; pass "
            "the batch's inputs to train_step on rank 0 (other ranks may pass an empty tensor)");
      check_spec(ActivationSpec{inputs.scalar_type(), per_sample(inputs)},
                 config_.expected_inputs[0], -1, 0);
      set_plan(inputs.size(0));
      step_->input_chunks = split_micro_batches(inputs, step_->plan);
    }
    if (holds_last_stage()) {
      if (!targets.defined() || targets.dim() < 1)
        throw PipelineError(
            "mpp: " + config_.pipeline_name + ": rank " + std::to_string(rank_) +
            " holds the last stage and needs the targets; pass the batch's targets to "
            "train_step on rank " +
            std::to_string(rank_));
      if (step_->plan_known && targets.size(0) != step_->plan.batch)
        throw PipelineError("mpp: the inputs have " + std::to_string(step_->plan.batch) +
                            " samples but the targets have " + std::to_string(targets.size(0)) +
                            "; pass inputs and targets of the same batch");
      step_->targets = targets;
      if (!step_->plan_known) set_plan(targets.size(0));
      step_->target_chunks = split_micro_batches(targets, step_->plan);
    }
    if constexpr (!Communicator<C>::blocking) {
      if (step_->plan_known) send_headers();
    }
  }

  /// Announces every outgoing link's shape (the next stage's declared input) and the step's plan.
  /// Async: as soon as the plan is known, before any compute, so that the receivers can post
  /// their data receives while this rank computes (a receive posted before the send arrives
  /// saves the sender's transport thread a wake-up). Blocking: right before the link's first
  /// data message, where the lowering put the first SEND_F. Each SEND_F then checks that what
  /// the stage really produces is what was announced.
  void send_headers(int only_chunk = -1) {
    for (std::size_t c = 0; c < pieces_.size(); ++c) {
      const int chunk = static_cast<int>(c);
      if ((only_chunk >= 0 && chunk != only_chunk) || is_last_stage(chunk) ||
          local_neighbour(chunk, +1) || step_->header_sent[c])
        continue;
      ShapeHeader h;
      h.sender_stage = stage_of(chunk);
      h.batch = step_->plan.batch;
      h.micro_batches = config_.micro_batches;
      h.spec = config_.expected_outputs[c];
      const int peer = neighbour_rank(chunk, +1);
      step_->pending_sends.add(comm_.send(h.encode(), peer, header_tag(stage_of(chunk))));
      step_->header_sent[c] = true;
    }
  }

  void set_plan(std::int64_t batch) {
    step_->plan = plan_micro_batches(batch, config_.micro_batches, config_.schedule_name);
    step_->plan_known = true;
  }

  static std::vector<std::int64_t> per_sample(const at::Tensor& t) {
    auto sizes = t.sizes();
    return {sizes.begin() + 1, sizes.end()};
  }

  /// `from_stage` -1 means the user's inputs.
  void check_spec(const ActivationSpec& got, const ActivationSpec& expected, int from_stage,
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

  // ---- running a piece ----------------------------------------------------------------------
  /// Runs piece `chunk` on x. With `record`, keeps the output of every layer with parameters
  /// (what a split backward needs). Returns the output; measures the activation bytes the graph
  /// keeps alive into `held` (distinct storages still referenced once our own references drop).
  at::Tensor run_piece(int chunk, at::Tensor x, bool record, Slot& s) {
    const auto& calls = layer_calls_[static_cast<std::size_t>(chunk)];
    const auto& layers = param_layers_[static_cast<std::size_t>(chunk)];
    pending_weak_.clear();  // reused: no allocation per forward once it has grown
    std::size_t next_param_layer = 0;
    int index = 0;
    if (record) s.layer_edges.clear();
    for (const LayerCall& call : calls) {
      x = call(x);
      if (x.has_storage()) pending_weak_.push_back(x.storage().getWeakStorageImpl());
      if (record && next_param_layer < layers.size() && layers[next_param_layer].index == index) {
        s.layer_edges.push_back(torch::autograd::impl::gradient_edge(x));
        ++next_param_layer;
      }
      ++index;
    }
    return x;
  }

  /// Bytes of the activations kept for the backward of this slot: the input, whatever the
  /// graph still references among the tensors the forward produced, and the explicitly kept ones.
  std::int64_t measure_held(const Slot& s, const at::Tensor& keep_output) {
    // A handful of storages per forward: a linear scan of a reused vector, no hashing and no
    // allocation on the step's critical path.
    seen_storages_.clear();
    std::int64_t bytes = 0;
    auto add = [&](const c10::StorageImpl* impl, std::int64_t n) {
      if (impl == nullptr ||
          std::find(seen_storages_.begin(), seen_storages_.end(), impl) != seen_storages_.end())
        return;
      seen_storages_.push_back(impl);
      bytes += n;
    };
    auto add_tensor = [&](const at::Tensor& t) {
      if (t.defined() && t.has_storage())
        add(t.storage().unsafeGetStorageImpl(),
            static_cast<std::int64_t>(t.numel() * t.element_size()));
    };
    add_tensor(s.input);
    add_tensor(keep_output);
    for (auto& weak : pending_weak_) {
      auto strong = weak.lock();
      if (strong) add(strong.get(), static_cast<std::int64_t>(strong->nbytes()));
    }
    pending_weak_.clear();
    return bytes;
  }

  void hold(Slot& s, std::int64_t bytes) {
    s.held_bytes += bytes;
    recorder_.hold(bytes);
  }

  void release(Slot& s) {
    recorder_.release(s.held_bytes);
    s.held_bytes = 0;
    if (s.in_flight) {
      recorder_.leave_flight();
      s.in_flight = false;
    }
  }

  // ---- compute ------------------------------------------------------------------------------
  template <class LossFn>
  void forward(const Action& a, LossFn& loss_fn) {
    Slot& s = slot(a.chunk, a.micro_batch);
    at::Tensor x = is_first_stage(a.chunk)
                       ? step_->input_chunks.at(static_cast<std::size_t>(a.micro_batch))
                   : local_neighbour(a.chunk, -1) ? take_local_activation(a)
                                                  : take_activation(a);
    const auto t0 = recorder_.now();
    const bool last = is_last_stage(a.chunk);
    constexpr bool split = SplitBackward;
    at::Tensor out;
    if constexpr (Recompute) {
      c10::NoGradGuard no_grad;
      s.input = x;
      s.rng_state = capture_rng_state();  // the recompute draws the same dropout masks
      out = run_piece(a.chunk, x, false, s);
      if (last)
        step_->loss_sum += weighted_loss(loss_fn, out, a.micro_batch).template item<double>();
      pending_weak_.clear();
      hold(s, measure_held(s, {}));
      s.graph_ready = false;
    } else {
      if (!is_first_stage(a.chunk)) x.requires_grad_(true);
      s.input = x;
      out = run_piece(a.chunk, x, split, s);
      if (last) {
        s.loss = weighted_loss(loss_fn, out, a.micro_batch);
        step_->loss_sum += s.loss.template item<double>();
      }
      hold(s, measure_held(s, last ? at::Tensor() : out));
      s.graph_ready = true;
    }
    if (!last) {
      s.output = out;
      s.out_shape = out.sizes().vec();
      s.out_dtype = out.scalar_type();
    }
    s.in_flight = true;
    recorder_.enter_flight();
    recorder_.record(trace::EventKind::forward, Op::F, a.micro_batch, a.chunk, -1, t0,
                     recorder_.now());
    if (s.grad_deferred) post_gradient_buffer(a.chunk, a.micro_batch, s);
  }

  template <class LossFn>
  at::Tensor weighted_loss(LossFn& loss_fn, const at::Tensor& out, int micro_batch) {
    at::Tensor loss = loss_fn(out, step_->target_chunks.at(static_cast<std::size_t>(micro_batch)));
    if (loss.numel() != 1)
      throw PipelineError(
          "mpp: the loss function must return one value per micro-batch (a mean), got a tensor "
          "of " +
          std::to_string(loss.numel()) + " elements; reduce it with .mean()");
    return loss * step_->plan.weight(micro_batch);
  }

  // [quote:rebuild_graph]
  /// Under Recompute: the forward again, this time with the graph (and layer outputs if split).
  template <class LossFn>
  void rebuild_graph(const Action& a, Slot& s, LossFn& loss_fn, bool split) {
    const auto t0 = recorder_.now();
    at::Tensor x = s.input.detach();
    if (!is_first_stage(a.chunk)) x.requires_grad_(true);
    s.input = x;
    at::Tensor out;
    {
      RngReplay same_draws(s.rng_state);
      out = run_piece(a.chunk, x, split, s);
    }
    s.rng_state = at::Tensor();
    const bool last = is_last_stage(a.chunk);
    if (last)
      s.loss = weighted_loss(loss_fn, out, a.micro_batch);
    else
      s.output = out;
    recorder_.release(s.held_bytes);
    s.held_bytes = 0;
    hold(s, measure_held(s, last ? at::Tensor() : out));
    s.graph_ready = true;
    recorder_.record(trace::EventKind::recompute, Op::F, a.micro_batch, a.chunk, -1, t0,
                     recorder_.now());
  }
  // [/quote:rebuild_graph]

  /// B (split = false): input and weight gradients. I (split = true): input gradient and the
  /// gradient at every layer output, keeping the graph for W.
  template <class LossFn>
  void backward(const Action& a, LossFn& loss_fn, bool split) {
    Slot& s = slot(a.chunk, a.micro_batch);
    if (!s.in_flight)
      throw PipelineError("mpp: " + std::string(to_string(a.op)) + " of micro-batch " +
                          std::to_string(a.micro_batch) + " on " + stage_text(stage_of(a.chunk)) +
                          " before its forward; the table is invalid");
    const bool last = is_last_stage(a.chunk);
    at::Tensor grad_out = last                           ? at::Tensor()
                          : local_neighbour(a.chunk, +1) ? take_local_gradient(a)
                                                         : take_gradient(a);
    if (!s.graph_ready) rebuild_graph(a, s, loss_fn, split);
    const auto t0 = recorder_.now();
    const at::Tensor root = last ? s.loss : s.output;
    const bool want_input = !is_first_stage(a.chunk);
    if (!split) {
      if (last)
        torch::autograd::backward({root});
      else
        torch::autograd::backward({root}, {grad_out});
      if (want_input) s.input_grad = s.input.grad();
      recorder_.record(trace::EventKind::backward, Op::B, a.micro_batch, a.chunk, -1, t0,
                       recorder_.now());
      finish_slot(s);
      return;
    }
    // I: gradients w.r.t. the input and at every layer output, nothing accumulated into the
    // parameters; the graph is kept for W.
    const torch::autograd::Edge root_edge = torch::autograd::impl::gradient_edge(root);
    torch::autograd::edge_list wrt;
    if (want_input) wrt.push_back(torch::autograd::impl::gradient_edge(s.input));
    std::size_t root_index = s.layer_edges.size();  // a layer output that is the root itself
    for (std::size_t j = 0; j < s.layer_edges.size(); ++j) {
      if (!last && s.layer_edges[j] == root_edge)
        root_index = j;
      else
        wrt.push_back(s.layer_edges[j]);
    }
    std::vector<at::Tensor> grads;
    if (!wrt.empty())
      grads = torch::autograd::Engine::get_default_engine().execute(
          {root_edge}, {last ? at::ones_like(root) : grad_out}, /*keep_graph=*/true,
          /*create_graph=*/false, /*accumulate_grad=*/false, wrt);
    std::size_t g = 0;
    if (want_input) s.input_grad = grads[g++];
    s.layer_grads.assign(s.layer_edges.size(), at::Tensor());
    std::int64_t grad_bytes = 0;
    for (std::size_t j = 0; j < s.layer_edges.size(); ++j) {
      s.layer_grads[j] = j == root_index ? grad_out : grads[g++];
      if (s.layer_grads[j].defined())
        grad_bytes += static_cast<std::int64_t>(s.layer_grads[j].nbytes());
    }
    hold(s, grad_bytes);
    s.input_grad_done = true;
    s.input = at::Tensor();  // the input gradient is out; only W's local graphs remain
    recorder_.record(trace::EventKind::input_grad, Op::I, a.micro_batch, a.chunk, -1, t0,
                     recorder_.now());
  }

  // [quote:weight_grad]
  /// W: each layer's parameter gradients from its own output gradient, through its local graph.
  void weight_grad(const Action& a) {
    Slot& s = slot(a.chunk, a.micro_batch);
    if (!s.in_flight || !s.input_grad_done)
      throw PipelineError("mpp: W of micro-batch " + std::to_string(a.micro_batch) + " on " +
                          stage_text(stage_of(a.chunk)) + " before its I; the table is invalid");
    const auto t0 = recorder_.now();
    const auto& layers = param_layers_[static_cast<std::size_t>(a.chunk)];
    auto& engine = torch::autograd::Engine::get_default_engine();
    for (std::size_t j = 0; j < s.layer_edges.size(); ++j) {
      if (!s.layer_grads[j].defined()) continue;  // the layer does not reach the root
      engine.execute({s.layer_edges[j]}, {s.layer_grads[j]}, /*keep_graph=*/false,
                     /*create_graph=*/false, /*accumulate_grad=*/true, layers[j].param_edges);
    }
    recorder_.record(trace::EventKind::weight_grad, Op::W, a.micro_batch, a.chunk, -1, t0,
                     recorder_.now());
    const at::Tensor keep_input_grad = s.input_grad;  // SEND_B may still come after W
    finish_slot(s);
    s.input_grad = keep_input_grad;
  }
  // [/quote:weight_grad]

  /// The micro-batch's backward is done: its activations no longer count, and what it holds
  /// (the autograd graph's nodes, its input and output) goes to the step's `released` list
  /// instead of being freed here, between a backward and the send its peer waits for. It is freed
  /// while this rank waits for a message anyway, or with the step's state when train_step
  /// returns, after the step's last message.
  void finish_slot(Slot& s) {
    release(s);
    Released& r = step_->released;
    for (at::Tensor* t : {&s.input, &s.output, &s.loss})
      if (t->defined()) r.tensors.push_back(std::exchange(*t, at::Tensor()));
    for (auto& g : s.layer_grads)
      if (g.defined()) r.tensors.push_back(std::move(g));
    s.layer_grads.clear();
    if (!s.layer_edges.empty()) r.edges.push_back(std::exchange(s.layer_edges, {}));
    s.graph_ready = false;
    s.input_grad_done = false;
  }

  /// Frees what finished micro-batches held (see finish_slot).
  void free_released() {
    step_->released.tensors.clear();
    step_->released.edges.clear();
  }

  /// Before blocking on `r`: if it has not completed yet, free the finished micro-batches now,
  /// in time this rank would spend waiting anyway.
  void free_released_while(const Request& r) {
    if (!step_->released.tensors.empty() || !step_->released.edges.empty())
      if (!r.ready()) free_released();
  }

  // ---- communication ------------------------------------------------------------------------
  void send_activation(const Action& a) {
    Slot& s = slot(a.chunk, a.micro_batch);
    if (!s.output.defined())
      throw PipelineError("mpp: SEND_F of micro-batch " + std::to_string(a.micro_batch) + " on " +
                          stage_text(a.stage) + " before its forward; the table is invalid");
    const auto t0 = recorder_.now();
    const std::size_t chunk = static_cast<std::size_t>(a.chunk);
    at::Tensor wire = s.output.detach();
    const ActivationSpec produced{wire.scalar_type(), per_sample(wire)};
    if (produced != config_.expected_outputs[chunk])
      throw PipelineError(
          "mpp: " + stage_text(a.stage + 1) + " expects activations " +
          to_string(config_.expected_outputs[chunk]) + " but " + stage_text(a.stage) +
          " produces " + to_string(produced) +
          "; the stages do not fit together: check the partition and the layer sizes at the cut "
          "(the model's input_shape of the next stage's first layer)");
    if (!step_->header_sent[chunk]) send_headers(a.chunk);
    step_->pending_sends.add(
        comm_.send(wire, a.peer, activation_tag(a.stage, a.micro_batch, stages_)));
    if constexpr (Recompute) s.output = at::Tensor();  // the Request keeps the bytes until sent
    recorder_.record(trace::EventKind::send, Op::SEND_F, a.micro_batch, a.chunk, a.peer, t0,
                     recorder_.now());
  }

  void send_gradient(const Action& a) {
    Slot& s = slot(a.chunk, a.micro_batch);
    if (!s.input_grad.defined())
      throw PipelineError("mpp: SEND_B of micro-batch " + std::to_string(a.micro_batch) + " on " +
                          stage_text(a.stage) + " before its backward; the table is invalid");
    const auto t0 = recorder_.now();
    step_->pending_sends.add(
        comm_.send(s.input_grad, a.peer, gradient_tag(a.stage - 1, a.micro_batch, stages_)));
    s.input_grad = at::Tensor();
    recorder_.record(trace::EventKind::send, Op::SEND_B, a.micro_batch, a.chunk, a.peer, t0,
                     recorder_.now());
  }

  /// RECV_F: post the receive now if the link's shape is known; otherwise post (async) or
  /// receive (blocking) the link's header first and defer the data until it is read.
  void post_activation_recv(const Action& a) {
    Slot& s = slot(a.chunk, a.micro_batch);
    InLink& link = step_->in_links[static_cast<std::size_t>(a.chunk)];
    const auto t0 = recorder_.now();
    if (!link.known) {
      if (!link.header_posted) {
        link.header_buffer = ShapeHeader::buffer();
        link.header_request = comm_.recv(link.header_buffer, a.peer, header_tag(a.stage - 1));
        link.header_posted = true;
      }
      // Blocking, or the rank's first chunk (it can compute nothing before this input
      // arrives): read the header now and post the data receive at once. A later chunk's
      // header is read when that chunk first needs its input.
      if (Communicator<C>::blocking || a.chunk == 0) {
        read_header(a.chunk, a.peer);
      } else {
        s.recv_deferred = true;
        return;
      }
    }
    post_activation_buffer(a.chunk, a.micro_batch, a.peer, s);
    if constexpr (Communicator<C>::blocking)
      recorder_.record(trace::EventKind::recv_wait, Op::RECV_F, a.micro_batch, a.chunk, a.peer, t0,
                       recorder_.now());
  }

  void read_header(int chunk, int peer) {
    InLink& link = step_->in_links[static_cast<std::size_t>(chunk)];
    link.header_request.wait();
    const int stage = stage_of(chunk);
    const ShapeHeader h = ShapeHeader::decode(link.header_buffer, stage - 1, stage);
    check_spec(h.spec, config_.expected_inputs[static_cast<std::size_t>(chunk)], stage - 1, stage);
    if (h.micro_batches != config_.micro_batches)
      throw PipelineError("mpp: " + stage_text(stage) + " runs " +
                          std::to_string(config_.micro_batches) + " micro-batches but " +
                          stage_text(stage - 1) + " runs " + std::to_string(h.micro_batches) +
                          "; every rank must build the same Pipeline type");
    if (!step_->plan_known) {
      set_plan(h.batch);
      if constexpr (!Communicator<C>::blocking) send_headers();  // pass the plan on at once
    } else if (h.batch != step_->plan.batch) {
      throw PipelineError("mpp: " + stage_text(stage - 1) + " sends a batch of " +
                          std::to_string(h.batch) + " samples but " + stage_text(stage) + " has " +
                          std::to_string(step_->plan.batch) +
                          (holds_last_stage() ? " targets" : " inputs") +
                          "; pass inputs and targets of the same batch on every rank");
    }
    if (holds_last_stage() && step_->target_chunks.empty())
      step_->target_chunks = split_micro_batches(step_->targets, step_->plan);
    link.spec = h.spec;
    link.known = true;
    // The link's shape is known: post the data receives that waited for it.
    for (int mb = 0; mb < config_.micro_batches; ++mb) {
      Slot& other = slot(chunk, mb);
      if (other.recv_deferred) post_activation_buffer(chunk, mb, peer, other);
    }
  }

  void post_activation_buffer(int chunk, int micro_batch, int peer, Slot& s) {
    const InLink& link = step_->in_links[static_cast<std::size_t>(chunk)];
    std::vector<std::int64_t> shape{step_->plan.sizes[static_cast<std::size_t>(micro_batch)]};
    shape.insert(shape.end(), link.spec.per_sample.begin(), link.spec.per_sample.end());
    s.recv_buffer = at::empty(shape, at::TensorOptions().dtype(link.spec.dtype));
    s.recv_request =
        comm_.recv(s.recv_buffer, peer, activation_tag(stage_of(chunk) - 1, micro_batch, stages_));
    s.recv_deferred = false;
  }

  /// The input of F(stage > 0): waits for the receive (reading the header first if needed).
  at::Tensor take_activation(const Action& a) {
    Slot& s = slot(a.chunk, a.micro_batch);
    const int peer = neighbour_rank(a.chunk, -1);
    const auto t0 = recorder_.now();
    InLink& link = step_->in_links[static_cast<std::size_t>(a.chunk)];
    if (!link.known) {
      if (!link.header_posted)
        throw PipelineError("mpp: F of micro-batch " + std::to_string(a.micro_batch) + " on " +
                            stage_text(stage_of(a.chunk)) +
                            " without a RECV_F before it; the table is not lowered");
      read_header(a.chunk, peer);
    }
    if (!s.recv_buffer.defined())
      throw PipelineError("mpp: F of micro-batch " + std::to_string(a.micro_batch) + " on " +
                          stage_text(stage_of(a.chunk)) +
                          " without its RECV_F; the table is not lowered");
    free_released_while(s.recv_request);
    s.recv_request.wait();
    if constexpr (!Communicator<C>::blocking)
      recorder_.record(trace::EventKind::recv_wait, Op::RECV_F, a.micro_batch, a.chunk, peer, t0,
                       recorder_.now());
    return std::exchange(s.recv_buffer, at::Tensor());
  }

  /// RECV_B: the gradient has the shape of this micro-batch's output, known once F ran.
  void post_gradient_recv(const Action& a) {
    Slot& s = slot(a.chunk, a.micro_batch);
    if (!s.in_flight) {
      if constexpr (Communicator<C>::blocking)
        throw PipelineError("mpp: RECV_B of micro-batch " + std::to_string(a.micro_batch) + " on " +
                            stage_text(a.stage) + " before its forward; the table is invalid");
      s.grad_deferred = true;
      return;
    }
    const auto t0 = recorder_.now();
    post_gradient_buffer(a.chunk, a.micro_batch, s);
    if constexpr (Communicator<C>::blocking)
      recorder_.record(trace::EventKind::recv_wait, Op::RECV_B, a.micro_batch, a.chunk, a.peer, t0,
                       recorder_.now());
  }

  void post_gradient_buffer(int chunk, int micro_batch, Slot& s) {
    const int peer = neighbour_rank(chunk, +1);
    s.grad_buffer = at::empty(s.out_shape, at::TensorOptions().dtype(s.out_dtype));
    s.grad_request =
        comm_.recv(s.grad_buffer, peer, gradient_tag(stage_of(chunk), micro_batch, stages_));
    s.grad_deferred = false;
  }

  /// The input of F when the previous stage is on this rank too: its output, handed over in
  /// memory (detached: each stage's backward runs on its own graph, as across ranks).
  at::Tensor take_local_activation(const Action& a) {
    const int from = neighbour_chunk(a.chunk, -1);
    Slot& prev = slot(from, a.micro_batch);
    if (!prev.output.defined())
      throw PipelineError("mpp: F of micro-batch " + std::to_string(a.micro_batch) + " on " +
                          stage_text(stage_of(a.chunk)) + " before F on " +
                          stage_text(stage_of(from)) + "; the table is invalid");
    at::Tensor x = prev.output.detach();
    check_spec(ActivationSpec{x.scalar_type(), per_sample(x)},
               config_.expected_inputs[static_cast<std::size_t>(a.chunk)], stage_of(from),
               stage_of(a.chunk));
    if constexpr (Recompute) prev.output = at::Tensor();  // its backward recomputes it
    return x;
  }

  /// The output grad of B/I when the next stage is on this rank too: that stage's input grad.
  at::Tensor take_local_gradient(const Action& a) {
    Slot& next = slot(neighbour_chunk(a.chunk, +1), a.micro_batch);
    if (!next.input_grad.defined())
      throw PipelineError("mpp: " + std::string(to_string(a.op)) + " of micro-batch " +
                          std::to_string(a.micro_batch) + " on " + stage_text(stage_of(a.chunk)) +
                          " before the backward of " + stage_text(stage_of(a.chunk) + 1) +
                          "; the table is invalid");
    return std::exchange(next.input_grad, at::Tensor());
  }

  at::Tensor take_gradient(const Action& a) {
    Slot& s = slot(a.chunk, a.micro_batch);
    if (!s.grad_buffer.defined())
      throw PipelineError("mpp: " + std::string(to_string(a.op)) + " of micro-batch " +
                          std::to_string(a.micro_batch) + " on " + stage_text(stage_of(a.chunk)) +
                          " without its RECV_B; the table is not lowered");
    const auto t0 = recorder_.now();
    free_released_while(s.grad_request);
    s.grad_request.wait();
    if constexpr (!Communicator<C>::blocking)
      recorder_.record(trace::EventKind::recv_wait, Op::RECV_B, a.micro_batch, a.chunk,
                       neighbour_rank(a.chunk, +1), t0, recorder_.now());
    return std::exchange(s.grad_buffer, at::Tensor());
  }

  Communicator<C> comm_;
  std::vector<Action> actions_;
  std::vector<LocalPiece> pieces_;
  std::vector<std::vector<LayerParams>> param_layers_;
  std::vector<std::vector<LayerCall>> layer_calls_;  // per piece, one per module, in order
  ExecutorConfig config_;
  int rank_;
  int stages_;

  trace::Recorder recorder_;
  Step* step_ = nullptr;
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> pending_weak_;
  std::vector<const c10::StorageImpl*> seen_storages_;
};

}  // namespace mpp::detail
