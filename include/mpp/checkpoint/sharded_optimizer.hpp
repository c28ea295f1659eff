#pragma once
// Checkpoints of training with a ShardedOptimizer<AdamW> (ZeRO stage 1). No rank holds the whole
// optimizer state, so every rank writes its own shard: the parameters it owns with their AdamW
// state and its generator (shard_<rank>.pt; rank 0 adds the module's buffers), and rank 0 writes
// the manifest with the plan (how many ranks, who owns which parameter). The directory appears
// whole or not at all (write_sharded_checkpoint), and read_checkpoint() checks every file.
//
//   mpp::checkpoint::save_sharded_optimizer(dir, *model, opt, {{"progress", ...}});
//   ...
//   mpp::checkpoint::load_sharded_optimizer(dir, *model, opt);  // same model, any number of ranks
//
// Loading is a collective. Every rank reads every shard (a shared directory), assembles the
// parameters it owns under its own plan with their AdamW state from whichever files hold them, so
// a checkpoint written by 4 ranks resumes on 2 or 8, checks that against the model, restores it
// once every rank has accepted, and then every rank receives every other shard
// (ShardedOptimizer::gather_parameters): the replicas hold the saved parameters bit for bit. If
// any rank refuses the checkpoint (corrupt file, other model), every rank throws, before anything
// is restored. Generators: rank r restores the one rank r saved; ranks beyond those that wrote the
// checkpoint keep their own.
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <ATen/ops/scalar_tensor.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "mpp/checkpoint/checkpoint.hpp"
#include "mpp/checkpoint/sharded.hpp"
#include "mpp/data_parallel/sharded_optimizer.hpp"
#include "mpp/error.hpp"

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
    throw InvalidArgument("mpp: this module has " + std::to_string(named.size()) +
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

/// This rank's shard under the current plan (`owner`), taken from the files of the ranks that
/// owned each parameter when the checkpoint was written (`saved_owner`): the parameters with
/// their AdamW state, the module's buffers on rank 0 (from shard 0) and the generator the rank of
/// the same number saved, if there was one.
inline StateFile assemble_shard(const LoadedCheckpoint& loaded,
                                const std::vector<std::string>& names,
                                const std::vector<int>& saved_owner, const std::vector<int>& owner,
                                int me) {
  StateFile mine{shard_file(me), {}};
  auto& model = mine.groups["model"];
  auto& optimizer = mine.groups["optimizer"];
  auto group_of = [&](int rank, const char* group) -> const std::map<std::string, torch::Tensor>* {
    const auto& file = loaded.files.at(shard_file(rank));  // every listed rank checked before
    auto it = file.groups.find(group);
    return it == file.groups.end() ? nullptr : &it->second;
  };
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (owner[i] != me) continue;
    const auto& name = names[i];
    if (const auto* saved = group_of(saved_owner[i], "model"); saved && saved->count(name))
      model[name] = saved->at(name);
    if (const auto* saved = group_of(saved_owner[i], "optimizer"))
      for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".step"})
        if (saved->count(name + suffix)) optimizer[name + suffix] = saved->at(name + suffix);
  }
  if (me == 0)
    if (const auto* saved = group_of(0, "model"))
      for (const auto& [name, tensor] : *saved)  // what is not a parameter is a buffer
        if (std::find(names.begin(), names.end(), name) == names.end()) model[name] = tensor;
  if (loaded.files.count(shard_file(me)))
    if (const auto* rng = group_of(me, "rng")) mine.groups["rng"] = *rng;
  return mine;
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

/// Restores what save_sharded_optimizer wrote into `model` and `opt` (the same module, and a
/// ShardedOptimizer over any number of ranks: each rank takes the parameters it owns now from the
/// shards that held them); returns the manifest (progress, config). A collective. Throws
/// CheckpointError on every rank if any rank refuses the checkpoint.
template <class Comm>
nlohmann::json load_sharded_optimizer(const std::filesystem::path& dir, torch::nn::Module& model,
                                      ShardedOptimizer<torch::optim::AdamW, Comm>& opt) {
  const auto& group = opt.group();
  const std::string refuse = "mpp: refusing checkpoint " + dir.string() + ": ";
  const std::string damaged = "; its manifest is damaged -- resume from another checkpoint";
  std::string failure;
  LoadedCheckpoint loaded;
  StateFile shard;
  try {
    loaded = read_checkpoint(dir);
    const auto& manifest = loaded.manifest;
    if (!manifest.contains("sharded_optimizer"))
      throw CheckpointError(refuse +
                            "it was not written by save_sharded_optimizer (no plan in "
                            "manifest.json); read it with read_checkpoint()");
    const auto& saved = manifest["sharded_optimizer"];
    const nlohmann::json current = detail::sharding_json(model, opt);
    if (saved.value("parameters", nlohmann::json()) != current["parameters"])
      throw CheckpointError(refuse +
                            "its parameters are not this model's (names or order differ); it "
                            "was written for a different model -- use the config it was written "
                            "with, or start a fresh run");
    const auto ranks = saved.value("ranks", nlohmann::json());
    if (!ranks.is_number_integer() || ranks.get<int>() < 1)
      throw CheckpointError(refuse + "the number of ranks that wrote it is " + ranks.dump() +
                            damaged);
    const int saved_ranks = ranks.get<int>();
    for (int r = 0; r < saved_ranks; ++r)
      if (!loaded.files.count(detail::shard_file(r)))
        throw CheckpointError(refuse + "it was written by " + std::to_string(saved_ranks) +
                              " ranks but " + detail::shard_file(r) + " is not in its manifest" +
                              damaged);
    const auto names = current["parameters"].get<std::vector<std::string>>();
    const auto saved_owner = saved.value("owners", nlohmann::json());
    if (!saved_owner.is_array() || saved_owner.size() != names.size())
      throw CheckpointError(refuse + "its plan does not give an owner to each parameter" + damaged);
    std::vector<int> owners;
    for (const auto& o : saved_owner) {
      if (!o.is_number_integer() || o.get<int>() < 0 || o.get<int>() >= saved_ranks)
        throw CheckpointError(refuse + "its plan names owner " + o.dump() + " of " +
                              std::to_string(saved_ranks) + " ranks" + damaged);
      owners.push_back(o.get<int>());
    }
    shard = detail::assemble_shard(loaded, names, owners, opt.plan().owner, group.rank());
    // Only checked here: nothing is restored anywhere unless every rank accepts its shard.
    check_training_state(shard, detail::shard_tensors(model, opt), dir.string());
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
  restore_training_state(shard, detail::shard_tensors(model, opt), inner ? *inner : none,
                         dir.string());
  opt.gather_parameters();
  auto buffers = ::mpp::detail::named_buffers(model);
  if (!buffers.empty()) broadcast_tensors(buffers, group);  // rank 0 restored them
  return loaded.manifest;
}

}  // namespace mpp::checkpoint
