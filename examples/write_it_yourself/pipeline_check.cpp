// check_pipeline (harness.hpp): the learner's pipeline step against the monolith and against the
// mpp::Pipeline of the same schedule, on the same ranks.
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include "mpp/pipeline.hpp"
#include "mpp/pipeline/with_ranks.hpp"

#include "comparison.hpp"

namespace lab {

namespace {

struct MeanSquaredError {
  at::Tensor operator()(const at::Tensor& out, const at::Tensor& target) const {
    return torch::nn::functional::mse_loss(out, target);
  }
};

/// The learner's step, this rank's layers only.
check::Record train_learner(const World& world, const PipelineStep& step, const check::Options& o) {
  const auto cfg = check::model_config();
  const auto [begin, end] = check::stage_layers(cfg.layers, world.rank(), world.size());
  Stage stage{mpp::models::make_mlp_layers(cfg, begin, end), check::micro_batches,
              o.both_send_first};
  auto optimizer = check::make_optimizer(stage.layers->parameters());
  check::Record r;
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, check::batch_rows, s);
    optimizer.zero_grad();
    const double loss = step(world, stage, batch);
    optimizer.step();
    if (world.rank() == world.size() - 1) r.losses.push_back(loss);
  }
  check::record_layers(r, *stage.layers, begin);
  return r;
}

/// mpp's pipeline of the same schedule.
template <class Pipe>
check::Record train_pipeline(const World& world, const check::Options& o, std::string& name) {
  const auto cfg = check::model_config();
  Pipe pipe(world, mpp::MlpModel{cfg});
  name = Pipe::name();
  auto optimizer = check::make_optimizer(pipe.parameters());
  check::Record r;
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, check::batch_rows, s);
    optimizer.zero_grad();
    r.losses.push_back(pipe.train_step(pipe.is_first() ? batch.inputs : at::Tensor(),
                                       pipe.is_last() ? batch.targets : at::Tensor(),
                                       MeanSquaredError{}));
    optimizer.step();
  }
  for (const auto& piece : pipe.pieces())
    check::record_layers(r, *piece.module, piece.layers.begin);
  return r;
}

template <int P>
check::Record train_reference(const World& world, PipelineReference reference,
                              const check::Options& o, std::string& name) {
  using Stages = mpp::Uniform<P>;
  constexpr int M = check::micro_batches;
  switch (reference) {
    case PipelineReference::naive:
      return train_pipeline<mpp::Pipeline<Stages, mpp::Naive, mpp::Blocking<mpp::Gloo>>>(world, o,
                                                                                         name);
    case PipelineReference::gpipe:
      return train_pipeline<mpp::Pipeline<Stages, mpp::GPipe<M>, mpp::Blocking<mpp::Gloo>>>(
          world, o, name);
    case PipelineReference::one_f_one_b:
      return train_pipeline<mpp::Pipeline<Stages, mpp::OneFOneB<M>, mpp::Blocking<mpp::Gloo>>>(
          world, o, name);
    case PipelineReference::one_f_one_b_async:
      return train_pipeline<mpp::Pipeline<Stages, mpp::OneFOneB<M>, mpp::Async<mpp::Gloo>>>(
          world, o, name);
  }
  throw std::logic_error("unknown pipeline reference");
}

}  // namespace

int check_pipeline(int argc, char** argv, const char* lab, PipelineReference reference,
                   const PipelineStep& step) {
  return guarded_main(lab, [&] {
    const auto o = check::parse(argc, argv, lab);
    at::set_num_threads(1);
    auto world = mpp::init_process_group();
    if (world.size() != 2 && world.size() != 4)
      throw std::invalid_argument("runs on 2 or 4 ranks (got " + std::to_string(world.size()) +
                                  "): mpprun --nproc-per-node 2 <this program>");
    const auto mine = train_learner(world, step, o);
    const auto monolith = check::train_monolith(o);
    std::string name;
    check::Record pipeline;
    mpp::with_ranks<2, 4>(world.size(), [&](auto ranks) {
      pipeline = train_reference<decltype(ranks)::value>(world, reference, o, name);
    });
    std::string problems;
    check::compare(mine, monolith, "the monolith", problems);
    check::compare(mine, pipeline, name, problems);
    if (world.rank() == world.size() - 1)
      check::print_losses(world.rank(), mine, monolith, pipeline, "mpp");
    return check::verdict(world, lab, problems,
                          std::string(lab) + " on " + std::to_string(world.size()) + " ranks, " +
                              std::to_string(o.steps) +
                              " steps: the loss and every parameter equal the monolith's and " +
                              name + "'s");
  });
}

}  // namespace lab
