#pragma once
// Pipeline<Stages, Schedule, Comm>: the course's central type.
//
//   using Pipe = mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<8>, mpp::Async<mpp::Gloo>>;
//   auto world = mpp::init_process_group();
//   Pipe pipe(world, mpp::MlpModel{cfg});                   // builds only this rank's layers
//   torch::optim::Adam opt(pipe.parameters(), 1e-3);        // the optimizer stays yours
//   opt.zero_grad();
//   double loss = pipe.train_step(x, y, mse);               // x on the first rank, y on the last
//   opt.step();
//
// Everything that decides what happens when is fixed by the three types: the partition says which
// layers each stage owns, the schedule's table (lowered for the comm policy's semantics and
// proved sound by the verifier in a static_assert) says in what order each rank computes and
// talks, and the comm policy says whether a send blocks. train_step runs the rank's table.
#include <ATen/core/Tensor.h>

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mpp/comm/communicator.hpp"
#include "mpp/comm/policy.hpp"
#include "mpp/partition/concepts.hpp"
#include "mpp/partition/explicit.hpp"
#include "mpp/partition/model.hpp"
#include "mpp/pipeline/executor.hpp"
#include "mpp/pipeline/shape_header.hpp"
#include "mpp/schedule/compiled_rows.hpp"
#include "mpp/schedule/plan.hpp"
#include "mpp/schedule/policies.hpp"
#include "mpp/trace/event.hpp"

namespace mpp {

namespace detail {
template <class P>
concept has_fixed_pieces = requires {
  { P::pieces } -> std::convertible_to<int>;
};

template <class P, int V>
constexpr bool pieces_fit_chunks() {
  if constexpr (has_fixed_pieces<P>)
    return P::pieces % V == 0;
  else
    return true;
}
}  // namespace detail

/// A model trained by pipeline parallelism: the partition `Stages` says which layers each stage
/// owns, the schedule `Sched` in what order each rank computes and talks (verified for `Comm` at
/// compile time), the comm policy `Comm` whether a send blocks. Each rank builds and holds its own
/// stages only.
template <partition Stages, schedule Sched, comm_policy Comm>
class Pipeline {
 public:
  /// The partition policy.
  using partition_type = Stages;
  /// The schedule policy.
  using schedule_type = Sched;
  /// The comm policy.
  using comm_type = Comm;

  /// Model pieces per rank (V): more than 1 under an interleaved schedule.
  static constexpr int chunks_per_rank = Sched::chunks_per_rank;
  /// Micro-batches per step (M).
  static constexpr int micro_batches = Sched::micro_batches;
  /// Whether the partition asks for activations to be recomputed in backward (Recompute<...>).
  static constexpr bool recompute = recomputes_v<Stages>;
  /// Segments each stage is recomputed in (Recompute<Partition, Segments>); 1 otherwise.
  static constexpr int recompute_segments = recompute ? recompute_segments_v<Stages> : 1;

  static_assert(
      detail::pieces_fit_chunks<Stages, chunks_per_rank>(),
      "mpp: an Explicit<n...> partition under a schedule with V chunks per rank lists one size per "
      "model piece, stages x V of them in model order; make the number of sizes a multiple of V");

  /// Pipeline ranks (P): the size of the pipeline's group.
  static constexpr int ranks = Stages::ranks_for(chunks_per_rank);
  static_assert(ranks >= 1, "mpp: the partition gives no pipeline rank");
  /// Pipeline stages (P · V): the model pieces, V on each rank.
  static constexpr int stages = ranks * chunks_per_rank;

  // [quote:verified]
  // The compiler runs the schedule's simulator: a table that can deadlock, or that forgets or
  // misorders a backward, does not compile. The diagnostic prints the verifier's message.
  static_assert(
      sound<verify<Sched, Comm>(ranks)>,
      "mpp: this schedule does not run under this comm policy (see the verifier's message above)");
  // [/quote:verified]

  /// Every rank's lowered row and the verifier's figures, as the compiler proved them: the
  /// executor runs its rank's row from this constant data.
  using rows = CompiledRows<Sched, Comm, ranks>;

  /// The executor of this rank's rows: recompute and the split backward chosen by the types.
  static_assert(recompute_segments == 1 || !rows::split_backward,
                "mpp: this schedule splits the backward (I then W) and keeps each stage's whole "
                "graph until W, so recomputing a stage in several segments saves nothing; use "
                "Recompute<Partition> (one segment) with it, or a schedule with a fused backward");
  using executor_type = detail::Executor<Comm, recompute, rows::split_backward, recompute_segments>;

  /// The type's display name, "Pipeline<partition, schedule, comm policy>".
  static std::string name() {
    return "Pipeline<" + Stages::name() + ", " + schedule_display_name<Sched>() + ", " +
           comm_display_name<Comm>() + ">";
  }

  /// Builds this rank's pieces of `model` (and only those) and its lowered table. `group` is the
  /// pipeline's process group, of the comm policy's backend: its size must be `ranks`.
  template <layered_model Model>
  Pipeline(Group<typename Comm::backend> group, const Model& model)
      : executor_(make_executor(std::move(group), model)) {}
  /// A group of another backend than Comm's (or one whose type does not say it) does not compile.
  template <other_group<typename Comm::backend> Given, class Model>
  Pipeline(Given&&, const Model&) {
    reject_group<typename Comm::backend, Given>();
  }

  /// One training step over a batch: inputs are needed on rank 0 only, targets on the last rank
  /// only (pass an undefined tensor elsewhere). Gradients are accumulated into the parameters'
  /// .grad as loss.backward() would; zero them and step the optimizer yourself. Returns the batch's
  /// mean loss — loss_fn(output, target) must return a micro-batch's mean — on every rank.
  template <class LossFn>
  double train_step(const at::Tensor& inputs, const at::Tensor& targets, LossFn&& loss_fn) {
    return executor_->train_step(inputs, targets, loss_fn);
  }

  /// Parameters of this rank's pieces, for the optimizer.
  std::vector<at::Tensor> parameters() const {
    std::vector<at::Tensor> params;
    for (const auto& piece : executor_->pieces())
      for (auto& p : piece.module->parameters()) params.push_back(p);
    return params;
  }

  /// This rank's model pieces (V of them), with their layers and modules.
  const std::vector<LocalPiece>& pieces() const { return executor_->pieces(); }
  /// This rank in the pipeline's group.
  int rank() const { return executor_->comm().rank(); }
  /// Whether this rank holds the first stage and takes the inputs (rank 0).
  bool is_first() const { return rank() == rows::placement.rank_of(0); }
  /// Whether this rank holds the last stage, takes the targets and computes the loss: the last
  /// rank, or rank 0 under a v-shaped schedule (ZeroBubbleV).
  bool is_last() const { return rank() == rows::placement.rank_of(stages - 1); }
  /// The pipeline's group under its comm policy.
  const Communicator<Comm>& comm() const { return executor_->comm(); }

  /// This rank's lowered row, as the executor runs it (the compiler's constant data).
  std::span<const Action> actions() const { return executor_->actions(); }
  /// What the verifier proved and predicts for this schedule and comm policy, at unit costs:
  /// computed by the compiler (see `rows`).
  static constexpr const VerifyResult& predicted() { return rows::figures; }
  /// Every rank's table, lowered for the comm policy's semantics, with the verifier's figures,
  /// for analysis (e.g. predictions from measured costs). It generates, lowers and verifies the
  /// schedule again on each call; training never calls it, it runs `rows`.
  static std::unique_ptr<Plan> plan() { return make_plan(Sched::table(ranks), Comm::semantics); }
  /// What the last train_step did on this rank: timed events, step time, activation memory.
  const trace::RankTrace& last_trace() const { return executor_->last_trace(); }

 private:
  template <layered_model Model>
  std::unique_ptr<executor_type> make_executor(Group<typename Comm::backend> group,
                                               const Model& model) {
    if (group.size() != ranks) {
      std::string fix = group.size() % ranks == 0
                            ? "; for data parallelism over pipelines give each Pipeline its own "
                              "pipeline group of " +
                                  std::to_string(ranks) + " ranks (a DP x PP mesh)"
                            : "";
      throw PipelineError("mpp: " + name() + " runs on " + std::to_string(ranks) +
                          " ranks but its process group has " + std::to_string(group.size()) +
                          "; launch " + std::to_string(ranks) + " ranks (mpprun --nproc-per-node " +
                          std::to_string(ranks) + ")" + fix);
    }
    const int rank = group.rank();
    auto pieces = build_local_pieces<Stages>(model, rank, chunks_per_rank, &rows::placement);

    std::vector<detail::ChunkShapes> shapes;
    for (const auto& piece : pieces)
      shapes.push_back({ActivationSpec{model.dtype(), model.input_shape(piece.layers.begin)},
                        piece.layers.end < model.num_layers()
                            ? ActivationSpec{model.dtype(), model.input_shape(piece.layers.end)}
                            : ActivationSpec{}});
    auto executor = std::make_unique<executor_type>(
        Communicator<Comm>(std::move(group)), rows::rank_row(rank), std::move(pieces),
        std::move(shapes), detail::PipelineNames{name(), schedule_display_name<Sched>()});
    return executor;
  }

  std::unique_ptr<executor_type> executor_;
};

}  // namespace mpp
