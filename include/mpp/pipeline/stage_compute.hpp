#pragma once
// The autograd side of one rank's stages: F, B, I and W on a micro-batch's Slot, the recompute
// of a Recompute<...> partition, the activation bytes each micro-batch keeps, and the in-memory
// hand-over between two stages of one rank. It sends and receives nothing: the executor gives it
// the forward's input and the backward's output gradient, wherever they came from.
//
// `Recompute`: the forward runs without a graph and keeps, per micro-batch, the input of each of
// `Segments` consecutive runs of the stage's modules (and the generator's state there); the
// backward runs them again one at a time, last first, each right before its own backward, so
// that one segment's graph is alive at a time. `SplitBackward`: the rows hold I and W, so a
// forward keeps each layer's output edge for W. All three come from the Pipeline's types.
#include <ATen/core/Tensor.h>
#include <ATen/ops/ones_like.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mpp/partition/errors.hpp"
#include "mpp/partition/model.hpp"
#include "mpp/pipeline/chunk_shapes.hpp"
#include "mpp/pipeline/layer_call.hpp"
#include "mpp/pipeline/rng_state.hpp"
#include "mpp/pipeline/step_state.hpp"
#include "mpp/schedule/action.hpp"
#include "mpp/schedule/rank_row.hpp"
#include "mpp/trace/recorder.hpp"

namespace mpp::detail {

template <bool Recompute, bool SplitBackward, int Segments = 1>
class StageCompute {
  static_assert(Segments >= 1, "mpp: a stage is recomputed in at least one segment");
  static_assert(Recompute || Segments == 1, "mpp: segments only mean something under Recompute");
  static_assert(!(SplitBackward && Segments > 1),
                "mpp: a split backward (I then W) keeps the stage's whole graph until W, so "
                "recomputing it in several segments saves nothing; use Recompute<Partition> (one "
                "segment) with this schedule, or a schedule without a split backward");

 public:
  /// `row` (the compiler's data) and `recorder` (the executor's) outlive this object.
  StageCompute(std::vector<LocalPiece> pieces, const RankRow& row, trace::Recorder& recorder)
      : pieces_(std::move(pieces)), row_(&row), recorder_(&recorder) {
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
      if (Segments > 1 && static_cast<int>(layers.size()) < Segments)
        throw PartitionError("mpp: Recompute with " + std::to_string(Segments) +
                             " segments per stage needs at least that many layers with parameters "
                             "in each stage, but " +
                             stage_text(row_->chunk(piece.chunk).stage, row_->rank) + " has " +
                             std::to_string(layers.size()) +
                             "; use fewer segments or fewer stages");
      // Segment k > 0 starts at a layer with parameters: where a layer of the model begins, so
      // that its input is the tensor that layer keeps anyway (cutting between a Linear and its
      // ReLU would keep one activation more).
      std::vector<int> starts{0};
      for (int k = 1; k < Segments; ++k)
        starts.push_back(layers[static_cast<std::size_t>(k) * layers.size() / Segments].index);
      starts.push_back(static_cast<int>(calls.size()));
      segment_starts_.push_back(std::move(starts));
      param_layers_.push_back(std::move(layers));
      layer_calls_.push_back(std::move(calls));
    }
  }

  const std::vector<LocalPiece>& pieces() const { return pieces_; }

  /// Modules [first, end) of local `chunk` that recompute segment `k` runs: the stage's modules
  /// in `Segments` consecutive runs with (nearly) as many layers with parameters each.
  std::pair<int, int> segment_layers(int chunk, int k) const {
    const auto& starts = segment_starts_[static_cast<std::size_t>(chunk)];
    return {starts[static_cast<std::size_t>(k)], starts[static_cast<std::size_t>(k) + 1]};
  }

  /// F on `x`, the stage's input for this micro-batch.
  template <class LossFn>
  void forward(const Action& a, at::Tensor x, Slot& s, Step& step, LossFn& loss_fn) {
    const auto t0 = recorder_->now();
    const ChunkPlace& place = row_->chunk(a.chunk);
    const bool last = place.is_last();
    at::Tensor out;
    if constexpr (Recompute) {
      c10::NoGradGuard no_grad;
      s.graph.checkpoints.clear();
      out = std::move(x);
      for (int k = 0; k < Segments; ++k) {
        s.graph.checkpoints.push_back({out, capture_rng_state()});
        const auto [first, end] = segment_layers(a.chunk, k);
        out = run_layers(a.chunk, first, end, out, false, s);
      }
      if (last)
        step.loss_sum += weighted_loss(loss_fn, out, a.micro_batch, step).template item<double>();
      pending_weak_.clear();
      hold(s, measure_held(s, {}));
      s.graph.ready = false;
    } else {
      if (!place.is_first()) x.requires_grad_(true);
      s.graph.input = x;
      out = run_layers(a.chunk, 0, layer_count(a.chunk), x, SplitBackward, s);
      if (last) {
        s.graph.loss = weighted_loss(loss_fn, out, a.micro_batch, step);
        step.loss_sum += s.graph.loss.template item<double>();
      }
      hold(s, measure_held(s, last ? at::Tensor() : out));
      s.graph.ready = true;
    }
    if (!last) {
      s.produced.output = out;
      s.produced.output_shape = out.sizes().vec();
      s.produced.output_dtype = out.scalar_type();
    }
    s.in_flight = true;
    recorder_->enter_flight();
    recorder_->record(trace::EventKind::forward, Op::F, a.micro_batch, a.chunk, -1, t0,
                      recorder_->now());
  }

  /// B (`Split` false): input and weight gradients. I (`Split` true, only in a split-backward
  /// schedule): input gradient and the gradient at every layer output, keeping the graph for W.
  /// `grad_out` is the gradient of the stage's output (undefined on the last stage, whose root
  /// is the loss).
  template <bool Split, class LossFn>
  void backward(const Action& a, const at::Tensor& grad_out, Slot& s, Step& step, LossFn& loss_fn) {
    static_assert(SplitBackward || !Split, "mpp: I runs only in a split-backward schedule");
    if constexpr (Recompute)
      if (!s.graph.ready) rebuild_segment<Split>(a, Segments - 1, s, step, loss_fn);
    const auto t0 = recorder_->now();
    const ChunkPlace& place = row_->chunk(a.chunk);
    const bool last = place.is_last();
    const bool want_input = !place.is_first();
    if constexpr (!Split) {
      // One graph per recompute segment, last first: each segment's input gradient is the
      // output gradient of the one before it. Without Recompute there is one, the whole stage.
      at::Tensor grad = grad_out;
      for (int k = Recompute ? Segments - 1 : 0;; --k) {
        if (last && k == (Recompute ? Segments - 1 : 0))
          torch::autograd::backward({s.graph.loss});
        else
          torch::autograd::backward({s.produced.output}, {grad});
        if (k == 0) break;
        grad = s.graph.input.grad();
        s.graph.input = at::Tensor();
        s.produced.output = at::Tensor();
        s.graph.loss = at::Tensor();
        // Inside B's span, which records it: a recompute event of its own would count it twice.
        rebuild_segment<false>(a, k - 1, s, step, loss_fn, /*traced=*/false);
      }
      if (want_input) s.produced.input_grad = s.graph.input.grad();
      recorder_->record(trace::EventKind::backward, Op::B, a.micro_batch, a.chunk, -1, t0,
                        recorder_->now());
      finish(s, step);
    } else {
      input_grad(a, grad_out, s, last, want_input, t0);
    }
  }

  // [quote:weight_grad]
  /// W: each layer's parameter gradients from its own output gradient, through its local graph.
  void weight_grad(const Action& a, Slot& s, Step& step) {
    const auto t0 = recorder_->now();
    const auto& layers = param_layers_[static_cast<std::size_t>(a.chunk)];
    auto& engine = torch::autograd::Engine::get_default_engine();
    for (std::size_t j = 0; j < s.graph.layer_edges.size(); ++j) {
      if (!s.graph.layer_grads[j].defined()) continue;  // the layer does not reach the root
      engine.execute({s.graph.layer_edges[j]}, {s.graph.layer_grads[j]}, /*keep_graph=*/false,
                     /*create_graph=*/false, /*accumulate_grad=*/true, layers[j].param_edges);
    }
    recorder_->record(trace::EventKind::weight_grad, Op::W, a.micro_batch, a.chunk, -1, t0,
                      recorder_->now());
    const at::Tensor keep_input_grad = s.produced.input_grad;  // SEND_B may still come after W
    finish(s, step);
    s.produced.input_grad = keep_input_grad;
  }
  // [/quote:weight_grad]

  /// The input of F when the previous stage is on this rank too: its output, handed over in
  /// memory (detached: each stage's backward runs on its own graph, as across ranks).
  at::Tensor take_local_activation(const Action& a, const ChunkPlace& place, Step& step,
                                   const ActivationSpec& expected) const {
    Slot& prev = step.slot(place.before.chunk, a.micro_batch);
    at::Tensor x = prev.produced.output.detach();
    check_fit(spec_of(x), expected, place.before, place.stage, row_->rank);
    if constexpr (Recompute) prev.produced.output = at::Tensor();  // its backward recomputes it
    return x;
  }

  /// The output gradient of B/I when the next stage is on this rank too: that stage's input
  /// gradient.
  at::Tensor take_local_gradient(const Action& a, const ChunkPlace& place, Step& step) const {
    Slot& next = step.slot(place.after.chunk, a.micro_batch);
    return std::exchange(next.produced.input_grad, at::Tensor());
  }

 private:
  /// I: gradients w.r.t. the input and at every layer output, nothing accumulated into the
  /// parameters; the graph is kept for W.
  void input_grad(const Action& a, const at::Tensor& grad_out, Slot& s, bool last, bool want_input,
                  trace::Recorder::clock::time_point t0) {
    const at::Tensor root = last ? s.graph.loss : s.produced.output;
    const torch::autograd::Edge root_edge = torch::autograd::impl::gradient_edge(root);
    torch::autograd::edge_list wrt;
    if (want_input) wrt.push_back(torch::autograd::impl::gradient_edge(s.graph.input));
    std::size_t root_index = s.graph.layer_edges.size();  // a layer output that is the root itself
    for (std::size_t j = 0; j < s.graph.layer_edges.size(); ++j) {
      if (!last && s.graph.layer_edges[j] == root_edge)
        root_index = j;
      else
        wrt.push_back(s.graph.layer_edges[j]);
    }
    std::vector<at::Tensor> grads;
    if (!wrt.empty())
      grads = torch::autograd::Engine::get_default_engine().execute(
          {root_edge}, {last ? at::ones_like(root) : grad_out}, /*keep_graph=*/true,
          /*create_graph=*/false, /*accumulate_grad=*/false, wrt);
    std::size_t g = 0;
    if (want_input) s.produced.input_grad = grads[g++];
    s.graph.layer_grads.assign(s.graph.layer_edges.size(), at::Tensor());
    std::int64_t grad_bytes = 0;
    for (std::size_t j = 0; j < s.graph.layer_edges.size(); ++j) {
      s.graph.layer_grads[j] = j == root_index ? grad_out : grads[g++];
      if (s.graph.layer_grads[j].defined())
        grad_bytes += static_cast<std::int64_t>(s.graph.layer_grads[j].nbytes());
    }
    hold(s, grad_bytes);
    s.graph.input_grad_done = true;
    s.graph.input = at::Tensor();  // the input gradient is out; only W's local graphs remain
    recorder_->record(trace::EventKind::input_grad, Op::I, a.micro_batch, a.chunk, -1, t0,
                      recorder_->now());
  }

  struct LayerParams {
    int index;                               // position in the piece's Sequential
    std::vector<at::Tensor> params;          // what W accumulates into
    torch::autograd::edge_list param_edges;  // their gradient accumulators
  };

  int layer_count(int chunk) const {
    return static_cast<int>(layer_calls_[static_cast<std::size_t>(chunk)].size());
  }

  /// Runs layers [first, end) of piece `chunk` on x. With `record`, keeps the output edge of
  /// every layer with parameters (what a split backward needs; only for the whole piece). Notes
  /// the storages it produced, for measure_held.
  at::Tensor run_layers(int chunk, int first, int end, at::Tensor x, bool record, Slot& s) {
    const auto& calls = layer_calls_[static_cast<std::size_t>(chunk)];
    const auto& layers = param_layers_[static_cast<std::size_t>(chunk)];
    pending_weak_.clear();  // reused: no allocation per forward once it has grown
    std::size_t next_param_layer = 0;
    if (record) s.graph.layer_edges.clear();
    for (int index = first; index < end; ++index) {
      x = calls[static_cast<std::size_t>(index)](x);
      if (x.has_storage()) pending_weak_.push_back(x.storage().getWeakStorageImpl());
      if (record && next_param_layer < layers.size() && layers[next_param_layer].index == index) {
        s.graph.layer_edges.push_back(torch::autograd::impl::gradient_edge(x));
        ++next_param_layer;
      }
    }
    return x;
  }

  template <class LossFn>
  at::Tensor weighted_loss(LossFn& loss_fn, const at::Tensor& out, int micro_batch,
                           const Step& step) const {
    at::Tensor loss = loss_fn(out, step.target_chunks.at(static_cast<std::size_t>(micro_batch)));
    if (loss.numel() != 1)
      throw PipelineError(
          "mpp: the loss function must return one value per micro-batch (a mean), got a tensor "
          "of " +
          std::to_string(loss.numel()) + " elements; reduce it with .mean()");
    return loss * step.plan.weight(micro_batch);
  }

  // [quote:rebuild_graph]
  /// Under Recompute: segment `k`'s forward again from its checkpoint, this time with the graph
  /// (and the layer outputs if split), drawing the same random numbers as the first time.
  /// `Split`: for an I (keeps the layer outputs for W). `traced`: recorded as a recompute event
  /// (not when it runs inside a recorded backward).
  template <bool Split, class LossFn>
  void rebuild_segment(const Action& a, int k, Slot& s, const Step& step, LossFn& loss_fn,
                       bool traced = true) {
    const ChunkPlace& place = row_->chunk(a.chunk);
    const auto t0 = recorder_->now();
    Checkpoint from = std::move(s.graph.checkpoints.back());  // segments are rebuilt last first
    s.graph.checkpoints.pop_back();
    at::Tensor x = from.input.detach();
    if (k > 0 || !place.is_first()) x.requires_grad_(true);
    s.graph.input = x;
    at::Tensor out;
    {
      RngReplay same_draws(from.rng_state);
      const auto [first, end] = segment_layers(a.chunk, k);
      out = run_layers(a.chunk, first, end, x, Split, s);
    }
    const bool root_is_loss = place.is_last() && k == Segments - 1;
    if (root_is_loss)
      s.graph.loss = weighted_loss(loss_fn, out, a.micro_batch, step);
    else
      s.produced.output = out;
    recorder_->release(s.graph.held_bytes);
    s.graph.held_bytes = 0;
    hold(s, measure_held(s, root_is_loss ? at::Tensor() : out));
    s.graph.ready = true;
    if (traced)
      recorder_->record(trace::EventKind::recompute, Op::F, a.micro_batch, a.chunk, -1, t0,
                        recorder_->now());
  }
  // [/quote:rebuild_graph]

  /// Bytes of the activations kept for the backward of this slot: the input, the checkpoints
  /// not yet rebuilt, whatever the graph still references among the tensors the last run
  /// produced, and `keep_output`.
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
    add_tensor(s.graph.input);
    for (const Checkpoint& c : s.graph.checkpoints) add_tensor(c.input);
    add_tensor(keep_output);
    for (auto& weak : pending_weak_) {
      auto strong = weak.lock();
      if (strong) add(strong.get(), static_cast<std::int64_t>(strong->nbytes()));
    }
    pending_weak_.clear();
    return bytes;
  }

  void hold(Slot& s, std::int64_t bytes) {
    s.graph.held_bytes += bytes;
    recorder_->hold(bytes);
  }

  /// The micro-batch's backward is done: its activations no longer count, and what it holds
  /// (the autograd graph's nodes, its input and output) goes to the step's `released` list
  /// instead of being freed here, between a backward and the send its peer waits for. It is freed
  /// while this rank waits for a message anyway, or with the step's state when train_step
  /// returns, after the step's last message.
  void finish(Slot& s, Step& step) {
    recorder_->release(s.graph.held_bytes);
    s.graph.held_bytes = 0;
    if (s.in_flight) {
      recorder_->leave_flight();
      s.in_flight = false;
    }
    Released& r = step.released;
    for (at::Tensor* t : {&s.graph.input, &s.produced.output, &s.graph.loss})
      if (t->defined()) r.tensors.push_back(std::exchange(*t, at::Tensor()));
    for (auto& g : s.graph.layer_grads)
      if (g.defined()) r.tensors.push_back(std::move(g));
    s.graph.layer_grads.clear();
    s.graph.checkpoints.clear();
    if (!s.graph.layer_edges.empty()) r.edges.push_back(std::exchange(s.graph.layer_edges, {}));
    s.graph.ready = false;
    s.graph.input_grad_done = false;
  }

  std::vector<LocalPiece> pieces_;
  std::vector<std::vector<LayerParams>> param_layers_;
  std::vector<std::vector<LayerCall>> layer_calls_;  // per piece, one per module, in order
  std::vector<std::vector<int>> segment_starts_;     // per piece: Segments + 1 module indices
  const RankRow* row_;
  trace::Recorder* recorder_;
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> pending_weak_;
  std::vector<const c10::StorageImpl*> seen_storages_;
};

}  // namespace mpp::detail
