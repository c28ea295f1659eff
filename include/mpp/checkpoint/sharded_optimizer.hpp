#pragma once
// Checkpoints of training with a ShardedOptimizer<AdamW> (ZeRO stage 1). No rank holds the whole
// optimizer state, so every rank writes its own shard: the parameters it owns with their AdamW
// state and its generator (shard_<rank>.pt; rank 0 adds the module's buffers), and rank 0 writes
// the manifest with the plan (how many ranks, who owns which parameter). The directory appears
// whole or not at all (write_sharded_checkpoint), and read_checkpoint() checks every file.
//
//   mpp::checkpoint::save_sharded_optimizer(dir, *model, opt, {{"progress", ...}});
//   ...
//   mpp::checkpoint::load_sharded_optimizer(dir, *model, opt);  // same ranks, same model
//
// Loading is a collective: each rank checks the manifest against its own plan and its own shard
// against the model, restores its shard once every rank has accepted, and then every rank receives
// every other shard (ShardedOptimizer::gather_parameters), so the replicas hold the saved
// parameters bit for bit. If any rank refuses the checkpoint (corrupt file, other model, other
// number of ranks), every rank throws, before anything is restored. Resharding (loading on another
// number of ranks) is not supported: the message says so.
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <ATen/ops/scalar_tensor.h>

#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "mpp/checkpoint/checkpoint.hpp"
#include "mpp/checkpoint/sharded.hpp"
#include "mpp/data_parallel/sharded_optimizer.hpp"

namespace mpp::checkpoint {

namespace detail {

inline std::string shard_file(int rank) { return "shard_" + std::to_string(rank) + ".pt"; }

/// The plan as the manifest records it: the parameters' names and their owners.
template <class Comm>
nlohmann::json sharding_json(const torch::nn::Module& model,
                             const ShardedOptimizer<torch::optim::AdamW, Comm>& opt) {
  const auto named = ::mpp::detail::named_parameters(model, /*trainable_only=*/true);
  const auto& owner = opt.plan().owner;
  if (named.size() != owner.size())
    throw std::invalid_argument("mpp: this module has " + std::to_string(named.size()) +
                                " trainable parameters but the ShardedOptimizer was built over " +
                                std::to_string(owner.size()) +
                                "; pass the module the optimizer was built with");
  nlohmann::json names = nlohmann::json::array();
  for (const auto& p : named) names.push_back(p.name);
  return {{"ranks", opt.group().size()}, {"parameters", names}, {"owners", owner}};
}

/// What this rank writes and restores: the parameters it owns (the model's own tensors, which
/// live in the optimizer's flat buffer), plus the module's buffers on rank 0.
template <class Comm>
NamedTensors shard_tensors(const torch::nn::Module& model,
                           const ShardedOptimizer<torch::optim::AdamW, Comm>& opt) {
  NamedTensors out;
  const auto named = ::mpp::detail::named_parameters(model, /*trainable_only=*/true);
  const int me = opt.group().rank();
  for (std::size_t i = 0; i < named.size(); ++i)
    if (opt.plan().owner[i] == me) out[named[i].name] = named[i].tensor;
  if (me == 0)
    for (const auto& b : ::mpp::detail::named_buffers(model)) out[b.name] = b.tensor;
  return out;
}

}  // namespace detail

/// Writes the state of `model` trained with `opt` into `dir`: a collective, every rank of the
/// optimizer's group calls it at the same step. `meta` goes into the manifest as is (progress,
/// config, ...); the plan is added under "sharded_optimizer".
template <class Comm>
void save_sharded_optimizer(const std::filesystem::path& dir, const torch::nn::Module& model,
                            ShardedOptimizer<torch::optim::AdamW, Comm>& opt,
                            nlohmann::json meta = nlohmann::json::object()) {
  const auto& group = opt.group();
  meta["sharded_optimizer"] = detail::sharding_json(model, opt);
  const auto tensors = detail::shard_tensors(model, opt);
  const std::string name = detail::shard_file(group.rank());
  torch::optim::AdamW none(std::vector<torch::Tensor>{});  // for a rank that owns nothing
  auto* inner = opt.local_optimizer();
  write_sharded_checkpoint(dir, group,
                           training_state_file(tensors, inner ? *inner : none, {}, name), meta);
}

/// Restores what save_sharded_optimizer wrote into `model` and `opt` (the same module and a
/// ShardedOptimizer over the same number of ranks); returns the manifest (progress, config).
/// A collective. Throws CheckpointError on every rank if any rank refuses the checkpoint.
template <class Comm>
nlohmann::json load_sharded_optimizer(const std::filesystem::path& dir, torch::nn::Module& model,
                                      ShardedOptimizer<torch::optim::AdamW, Comm>& opt) {
  const auto& group = opt.group();
  const std::string refuse = "mpp: refusing checkpoint " + dir.string() + ": ";
  std::string failure;
  LoadedCheckpoint loaded;
  const StateFile* shard = nullptr;
  try {
    loaded = read_checkpoint(dir);
    const auto& manifest = loaded.manifest;
    if (!manifest.contains("sharded_optimizer"))
      throw CheckpointError(refuse +
                            "it was not written by save_sharded_optimizer (no plan in "
                            "manifest.json); read it with read_checkpoint()");
    const auto& saved = manifest["sharded_optimizer"];
    const auto current = detail::sharding_json(model, opt);
    if (saved.value("ranks", 0) != group.size())
      throw CheckpointError(refuse + "it was written by " +
                            saved.value("ranks", nlohmann::json(0)).dump() +
                            " ranks, each holding its shard of the optimizer state, and this "
                            "group has " +
                            std::to_string(group.size()) +
                            "; resume on as many ranks as wrote it (resharding is not supported)");
    if (saved.value("parameters", nlohmann::json()) != current["parameters"])
      throw CheckpointError(refuse +
                            "its parameters are not this model's (names or order differ); it "
                            "was written for a different model -- use the config it was written "
                            "with, or start a fresh run");
    if (saved.value("owners", nlohmann::json()) != current["owners"])
      throw CheckpointError(refuse +
                            "its parameters were split over the ranks differently than this "
                            "ShardedOptimizer splits them (parameter sizes differ?); use the "
                            "model it was written for");
    const std::string mine = detail::shard_file(group.rank());
    auto file = loaded.files.find(mine);
    if (file == loaded.files.end())
      throw CheckpointError(refuse + mine + " is not listed in its manifest");
    // Only checked here: nothing is restored anywhere unless every rank accepts its shard.
    check_training_state(file->second, detail::shard_tensors(model, opt), dir.string());
    shard = &file->second;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // Every rank learns whether any rank refused, so that none waits for a peer that gave up.
  at::Tensor first = at::scalar_tensor(failure.empty() ? group.size() : group.rank(), at::kLong);
  group.all_reduce(first, ReduceOp::min);
  if (!failure.empty()) throw CheckpointError(failure);
  if (first.item<std::int64_t>() < group.size())
    throw CheckpointError(refuse + "rank " + std::to_string(first.item<std::int64_t>()) +
                          " refused it (its log says why); no rank restored anything");
  torch::optim::AdamW none(std::vector<torch::Tensor>{});  // for a rank that owns nothing
  auto* inner = opt.local_optimizer();
  restore_training_state(*shard, detail::shard_tensors(model, opt), inner ? *inner : none,
                         dir.string());
  opt.gather_parameters();
  auto buffers = ::mpp::detail::named_buffers(model);
  if (!buffers.empty()) broadcast_tensors(buffers, group);  // rank 0 restored them
  return loaded.manifest;
}

}  // namespace mpp::checkpoint
