// check_data_parallel (harness.hpp): the learner's data-parallel step against the monolith
// trained on the whole global batch and against mpp::NaiveDP or mpp::DDP, on the same ranks.
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include "mpp/data_parallel/ddp.hpp"
#include "mpp/data_parallel/naive_dp.hpp"

#include "comparison.hpp"

namespace lab {

namespace {

check::Record train_learner(const World& world, const StartReplica& start,
                            const check::Options& o) {
  const auto cfg = check::model_config();
  auto model = mpp::models::make_full_mlp(cfg);
  auto step = start(world, model);
  auto optimizer = check::make_optimizer(model->parameters());
  check::Record r;
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, check::batch_rows, s);
    optimizer.zero_grad();
    r.losses.push_back(step(batch));
    optimizer.step();
  }
  check::record_layers(r, *model, 0);
  return r;
}

/// mpp's data parallelism: `sync` runs after backward (NaiveDP), or nothing does (DDP's hooks).
template <class Sync>
check::Record train_reference(const World& world, torch::nn::Sequential& model, Sync sync,
                              const check::Options& o) {
  const auto cfg = check::model_config();
  auto optimizer = check::make_optimizer(model->parameters());
  check::Record r;
  const std::int64_t rows = check::batch_rows / world.size();
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, check::batch_rows, s);
    optimizer.zero_grad();
    const auto begin = world.rank() * rows;
    auto loss = torch::nn::functional::mse_loss(model->forward(batch.inputs.narrow(0, begin, rows)),
                                                batch.targets.narrow(0, begin, rows));
    loss.backward();
    sync();
    optimizer.step();
    auto mean = loss.detach().clone();
    world.all_reduce_mean(mean);
    r.losses.push_back(mean.item<double>());
  }
  check::record_layers(r, *model, 0);
  return r;
}

}  // namespace

int check_data_parallel(int argc, char** argv, const char* lab, DataParallelReference reference,
                        const StartReplica& start) {
  return guarded_main(lab, [&] {
    const auto o = check::parse(argc, argv, lab);
    at::set_num_threads(1);
    auto world = mpp::init_process_group();
    if (check::batch_rows % world.size() != 0)
      throw std::invalid_argument("runs on 1, 2, 4, 8 or 16 ranks (the global batch has " +
                                  std::to_string(check::batch_rows) + " rows)");
    const auto mine = train_learner(world, start, o);
    const auto monolith = check::train_monolith(o, check::batch_rows);
    auto model = mpp::models::make_full_mlp(check::model_config());
    check::Record reference_record;
    std::string name;
    if (reference == DataParallelReference::naive_dp) {
      name = "mpp::NaiveDP<Blocking<Gloo>>";
      mpp::NaiveDP<mpp::Blocking<mpp::Gloo>> dp(*model, world);
      reference_record = train_reference(
          world, model, [&] { dp.sync_gradients(); }, o);
    } else {
      // Small buckets, so that several all-reduces are in flight during backward.
      name = "mpp::DDP<Async<Gloo>>";
      mpp::DDP<mpp::Async<mpp::Gloo>> ddp(*model, world, {.bucket_bytes = 8 * 1024});
      reference_record = train_reference(
          world, model, [] {}, o);
    }
    std::string problems;
    check::compare(mine, monolith, "the monolith", problems);
    check::compare(mine, reference_record, name, problems);
    if (world.rank() == 0) check::print_losses(0, mine, monolith, reference_record, "mpp");
    return check::verdict(world, lab, problems,
                          std::string(lab) + " on " + std::to_string(world.size()) + " ranks, " +
                              std::to_string(o.steps) +
                              " steps: the loss and every parameter equal the monolith's and " +
                              name + "'s");
  });
}

}  // namespace lab
