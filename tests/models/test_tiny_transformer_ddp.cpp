// The tiny transformer under DDP and under a pipeline: two ranks, each on its half of every global
// batch (through the distributed sampler), end with the parameters of one process trained on the
// whole batches.
#include <doctest/doctest.h>

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../support/worker.hpp"
#include "../support/world.hpp"
#include "mpp/checkpoint/sharded.hpp"
#include "mpp/comm/init.hpp"
#include "mpp/data_parallel/ddp.hpp"
#include "mpp/data_parallel/sampler.hpp"
#include "mpp/models/char_corpus.hpp"
#include "mpp/models/tiny_transformer.hpp"
#include "mpp/partition/uniform.hpp"
#include "mpp/pipeline/pipeline.hpp"

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

// A checkpoint written by two ranks that each hold half of the model's parts (as pipeline
// stages do): each rank writes its part, rank 0 the manifest; every rank reads it back whole.
MPP_TEST_WORKER("tiny_transformer_sharded_checkpoint") {
  namespace fs = std::filesystem;
  namespace ckpt = mpp::checkpoint;
  torch::set_num_threads(1);
  auto group = mpp::init_process_group();
  const auto cfg = ddp_config();
  const int parts = num_parts(cfg.model), half = parts / 2;
  const int begin = group.rank() == 0 ? 0 : half, end = group.rank() == 0 ? half : parts;
  TinyTransformer stage(cfg.model, begin, end);
  torch::optim::AdamW optimizer(stage->parameters(), torch::optim::AdamWOptions(1e-2));
  for (auto& p : stage->parameters()) p.mutable_grad() = torch::ones_like(p);
  optimizer.step();
  const fs::path dir = fs::path(argv[argc - 1]) / "step_1";
  const std::string mine = "stage_" + std::to_string(group.rank()) + ".pt";
  ckpt::write_sharded_checkpoint(
      dir, group, ckpt::training_state_file(ckpt::model_tensors(*stage), optimizer, {}, mine),
      {{"progress", ckpt::to_json({1, 0, 1})}, {"world_size", 2}});
  const auto loaded = ckpt::read_checkpoint(dir);  // checks both files and the manifest
  if (loaded.files.size() != 2 || !fs::exists(dir / "manifest.json") ||
      fs::exists(dir.string() + ".tmp"))
    throw std::runtime_error("expected two state files and a manifest in place");
  TinyTransformer fresh(cfg.model, begin, end);  // same init; the step must come from the file
  torch::optim::AdamW fresh_opt(fresh->parameters(), torch::optim::AdamWOptions(1e-2));
  ckpt::restore_training_state(loaded.files.at(mine), *fresh, fresh_opt, dir.string());
  for (const auto& item : stage->named_parameters())
    if (!torch::equal(item.value(), fresh->named_parameters()[item.key()]))
      throw std::runtime_error("parameter " + item.key() + " not restored");
  std::printf("rank %d restored %zu tensors of %s\n", group.rank(),
              fresh->named_parameters().size(), mine.c_str());
  return 0;
}

TEST_CASE("checkpoint: two ranks write one sharded checkpoint (a file each plus the manifest)") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("mpp_sharded_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  mpp::test::WorldOptions options;
  options.args = {dir.string()};
  auto world = mpp::test::run_world(2, "tiny_transformer_sharded_checkpoint", options);
  INFO(world.report());
  REQUIRE(world.ok());
  const auto loaded = mpp::checkpoint::read_checkpoint(dir / "step_1");
  CHECK(loaded.files.count("stage_0.pt") == 1);
  CHECK(loaded.files.count("stage_1.pt") == 1);
  CHECK(loaded.files.at("stage_0.pt").groups.at("model").count("embed.token.weight") == 1);
  CHECK(loaded.files.at("stage_1.pt").groups.at("model").count("head.lm_head.weight") == 1);
  // A torn checkpoint (one stage's file cut short) is refused as a whole.
  fs::resize_file(dir / "step_1" / "stage_1.pt", 100);
  CHECK_THROWS_WITH_AS(mpp::checkpoint::read_checkpoint(dir / "step_1"),
                       doctest::Contains("stage_1.pt has 100 bytes"),
                       mpp::checkpoint::CheckpointError);
  fs::remove_all(dir);
}

// Two pipeline stages (embedding + block 0 | block 1 + head) trained with 1F1B on the global
// batches end with the parameters of the whole model trained in one process.
MPP_TEST_WORKER("tiny_transformer_pipeline") {
  torch::set_num_threads(1);
  auto group = mpp::init_process_group();
  const auto cfg = ddp_config();
  const auto corpus = make_char_corpus(cfg.data, cfg.training.sequence_length);
  const TinyTransformerLayers layers{cfg.model, cfg.training.sequence_length};
  mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<4>, mpp::Async<mpp::Gloo>> pipe(group, layers);
  torch::optim::AdamW optimizer(pipe.parameters(),
                                torch::optim::AdamWOptions(cfg.training.learning_rate)
                                    .weight_decay(cfg.training.weight_decay));
  mpp::DistributedSampler sampler(static_cast<std::size_t>(corpus.train.size()), 1, 0,
                                  {true, cfg.training.seed, mpp::Remainder::drop});
  const auto batch = cfg.training.batch_size;
  const auto per_epoch = static_cast<std::int64_t>(sampler.size()) / batch;
  std::vector<double> losses;
  for (int step = 0; step < ddp_steps; ++step) {
    sampler.set_epoch(static_cast<std::uint64_t>(step / per_epoch));
    const auto order = sampler.indices();
    const auto first = order.begin() + (step % per_epoch) * batch;
    auto b = corpus.train.batch(std::vector<std::int64_t>(first, first + batch));
    optimizer.zero_grad();
    losses.push_back(pipe.train_step(pipe.is_first() ? b.inputs.to(torch::kFloat) : torch::Tensor(),
                                     pipe.is_last() ? b.targets : torch::Tensor(),
                                     [](const torch::Tensor& logits, const torch::Tensor& t) {
                                       return language_model_loss(logits, t);
                                     }));
    // The whole model's gradient norm, as clip_grad_norm_ computes it on one process.
    auto sum_sq = torch::zeros({1}, torch::kDouble);
    for (const auto& p : pipe.parameters()) sum_sq += p.grad().to(torch::kDouble).pow(2).sum();
    group.all_reduce(sum_sq);
    const double coef = cfg.training.grad_clip / (std::sqrt(sum_sq.item<double>()) + 1e-6);
    if (coef < 1) {
      torch::NoGradGuard no_grad;
      for (const auto& p : pipe.parameters()) p.grad().mul_(coef);
    }
    optimizer.step();
  }
  TinyTransformer single(cfg.model);
  torch::optim::AdamW single_opt(single->parameters(),
                                 torch::optim::AdamWOptions(cfg.training.learning_rate)
                                     .weight_decay(cfg.training.weight_decay));
  const auto reference = train(single, single_opt, cfg, corpus, 0, 1, ddp_steps);
  int failures = 0;
  for (int s = 0; s < ddp_steps; ++s)
    if (std::abs(losses[static_cast<std::size_t>(s)] - reference[static_cast<std::size_t>(s)]) >
        1e-5) {
      std::printf("step %d: pipeline loss %.8f, single process %.8f\n", s + 1,
                  losses[static_cast<std::size_t>(s)], reference[static_cast<std::size_t>(s)]);
      ++failures;
    }
  const auto whole = single->named_parameters();
  double worst = 0;
  std::size_t compared = 0;
  for (const auto& piece : pipe.pieces())
    for (const auto& item : piece.module->named_parameters()) {
      const auto name = global_parameter_name(item.key());
      const double diff = (item.value() - whole[name]).abs().max().item<double>();
      worst = std::max(worst, diff);
      ++compared;
      if (diff > 1e-5) {
        std::printf("parameter %s differs by %.3g\n", name.c_str(), diff);
        ++failures;
      }
    }
  std::printf("stage %d: %zu parameters compared, largest difference %.3g\n", group.rank(),
              compared, worst);
  return failures == 0 && compared > 0 ? 0 : 1;
}

TEST_CASE("models: TinyTransformer as a 2-stage 1F1B pipeline equals one process") {
  auto world = mpp::test::run_world(2, "tiny_transformer_pipeline");
  INFO(world.report());
  REQUIRE(world.ok());
  CHECK(world.output(0).find("stage 0: 14 parameters compared") !=
        std::string::npos);  // embed + block 0
  CHECK(world.output(1).find("stage 1: 15 parameters compared") !=
        std::string::npos);  // block 1 + head
}
