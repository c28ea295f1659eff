// The tiny transformer under DDP: two ranks, each on its half of every global batch (through the
// distributed sampler), end with the parameters of one process trained on the whole batches.
#include <doctest/doctest.h>

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../support/worker.hpp"
#include "../support/world.hpp"
#include "mpp/comm/process_group.hpp"
#include "mpp/data_parallel/ddp.hpp"
#include "mpp/data_parallel/sampler.hpp"
#include "mpp/models/char_corpus.hpp"
#include "mpp/models/tiny_transformer.hpp"

using namespace mpp::models;

namespace {

TinyTransformerConfig ddp_config() {
  TinyTransformerConfig cfg;
  cfg.model.num_hidden_layers = 2;
  cfg.model.hidden_size = 16;
  cfg.model.num_attention_heads = 2;
  cfg.model.intermediate_size = 32;
  cfg.model.max_position_embeddings = 16;
  cfg.training.batch_size = 8;  // global
  cfg.training.sequence_length = 16;
  cfg.data.train_characters = 16 * 8 * 3 + 1;  // 3 global batches per epoch
  cfg.data.validation_characters = 33;
  return cfg;
}

constexpr int ddp_steps = 5;  // crosses an epoch boundary (the sampler reshuffles)

/// Trains `steps` steps as `rank` of `world` (local batch = global / world), averaging gradients
/// through `ddp` when given. Returns this rank's losses.
std::vector<double> train(TinyTransformer& model, torch::optim::AdamW& optimizer,
                          const TinyTransformerConfig& cfg, const CharCorpus& corpus, int rank,
                          int world, int steps) {
  const auto local_batch = cfg.training.batch_size / world;
  mpp::DistributedSampler sampler(static_cast<std::size_t>(corpus.train.size()), world, rank,
                                  {true, cfg.training.seed, mpp::Remainder::drop});
  const auto per_epoch = static_cast<std::int64_t>(sampler.size()) / local_batch;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    sampler.set_epoch(static_cast<std::uint64_t>(step / per_epoch));
    const auto order = sampler.indices();
    const auto position = step % per_epoch;
    std::vector<std::int64_t> idx(order.begin() + position * local_batch,
                                  order.begin() + (position + 1) * local_batch);
    auto b = corpus.train.batch(idx);
    auto loss = language_model_loss(model->forward(b.inputs), b.targets);
    optimizer.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.training.grad_clip);
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

}  // namespace

MPP_TEST_WORKER("tiny_transformer_ddp") {
  torch::set_num_threads(1);
  auto group = mpp::init_process_group();
  const auto cfg = ddp_config();
  const auto corpus = make_char_corpus(cfg.data, cfg.training.sequence_length);
  TinyTransformer model(cfg.model);
  torch::optim::AdamW optimizer(model->parameters(),
                                torch::optim::AdamWOptions(cfg.training.learning_rate)
                                    .weight_decay(cfg.training.weight_decay));
  mpp::DDP<> ddp(*model, group);
  const auto local = train(model, optimizer, cfg, corpus, group.rank(), group.size(), ddp_steps);

  // The global batch's loss is the mean of the ranks' losses (equal shares).
  auto global = torch::tensor(local, torch::kDouble);
  group.all_reduce_mean(global);
  std::printf("rank %d local losses:", group.rank());
  for (double l : local) std::printf(" %.6f", l);
  std::printf("\n");
  if (group.rank() != 0) return 0;

  // The reference: one process, the whole global batches, the same initial weights.
  TinyTransformer single(cfg.model);
  torch::optim::AdamW single_opt(single->parameters(),
                                 torch::optim::AdamWOptions(cfg.training.learning_rate)
                                     .weight_decay(cfg.training.weight_decay));
  const auto reference = train(single, single_opt, cfg, corpus, 0, 1, ddp_steps);
  int failures = 0;
  for (int s = 0; s < ddp_steps; ++s) {
    const double g = global[s].item<double>();
    if (std::abs(g - reference[static_cast<std::size_t>(s)]) > 1e-5) {
      std::printf("step %d: DDP global loss %.8f, single process %.8f\n", s + 1, g,
                  reference[static_cast<std::size_t>(s)]);
      ++failures;
    }
  }
  const auto single_params = single->named_parameters();
  double worst = 0;
  for (const auto& item : model->named_parameters()) {
    const double diff = (item.value() - single_params[item.key()]).abs().max().item<double>();
    worst = std::max(worst, diff);
    if (diff > 1e-5) {
      std::printf("parameter %s differs by %.3g after %d steps\n", item.key().c_str(), diff,
                  ddp_steps);
      ++failures;
    }
  }
  std::printf("largest parameter difference DDP vs single process: %.3g\n", worst);
  // Different data per rank: the per-rank losses differ, the model does not.
  return failures == 0 ? 0 : 1;
}

TEST_CASE("models: TinyTransformer under DDP on 2 ranks equals one process on the global batch") {
  auto world = mpp::test::run_world(2, "tiny_transformer_ddp");
  INFO(world.report());
  REQUIRE(world.ok());
  CHECK(world.output(0).find("largest parameter difference") != std::string::npos);
  // The lesson of the distributed lab: each rank saw other samples, so its losses differ.
  const auto losses = [&](int r) {
    const auto& out = world.output(r);
    const auto at = out.find("local losses:");
    return out.substr(at, out.find('\n', at) - at).substr(13);
  };
  CHECK(losses(0) != losses(1));
}
