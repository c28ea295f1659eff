#pragma once
// A data-parallel optimizer whose state and step are split across the replicas (ZeRO stage 1).
//
//   mpp::DDP<mpp::Async<mpp::Shm>> ddp(*model, group);        // every .grad holds the mean
//   mpp::ShardedOptimizer<torch::optim::Adam, mpp::Async<mpp::Shm>> opt(
//       *model, group, torch::optim::AdamOptions(1e-3));
//   opt.zero_grad();
//   loss.backward();
//   opt.step();   // this rank steps its shard, then every rank gets every updated parameter
//
// Under plain DDP every replica runs the whole optimizer step on the whole model: P ranks do the
// same update P times, and each keeps the whole optimizer state (Adam: two more copies of the
// model). Here each parameter has one owner: the parameters, in registration order, are cut into
// P contiguous ranges of about the same number of bytes, and rank r's inner optimizer holds and
// steps range r only.
//
// After the step the updated parameters travel to the other ranks with ProcessGroup's
// all_gather_runs: every replica receives the owner's bits and the replicas stay bit-identical
// (over Shm the owner's run is copied into shared memory and out again; over Gloo it is an
// all-reduce in which every rank but the owner contributes zeros, x + 0 = x). So that this is one
// collective per dtype and not one per tensor (a small collective costs a round trip whatever
// its size), the parameters are moved at construction into one flat buffer per dtype, in
// registration order, and stay there as views (`set_data`, as DDP keeps gradients in its
// buckets): each rank's parameters are one run of that buffer, exchanged in place.
//
// Training follows the same path as with an unsharded optimizer: the owner's update uses the
// averaged gradient DDP (or NaiveDP) left in .grad, exactly as a replica of plain DDP would.
// Changing the parameters' dtype or storage afterwards (module.to(...)) takes them out of the
// buffers: build the ShardedOptimizer after that.
#include <torch/nn/module.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mpp/comm/policy.hpp"
#include "mpp/comm/process_group.hpp"
#include "mpp/data_parallel/replicas.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// Which rank owns which parameter: contiguous ranges in registration order, balanced by bytes.
struct ShardPlan {
  std::vector<int> owner;                   ///< per parameter
  std::vector<std::int64_t> bytes_of_rank;  ///< per rank: bytes of the parameters it owns

  /// Number of ranks planned for.
  int ranks() const { return static_cast<int>(bytes_of_rank.size()); }
};

/// Cuts `bytes` (one entry per parameter, in order) into `ranks` contiguous ranges: range r ends
/// at the parameter boundary nearest to (r + 1) / ranks of the total. A rank may own nothing
/// when there are fewer parameters than ranks.
inline ShardPlan plan_shards(const std::vector<std::int64_t>& bytes, int ranks) {
  if (ranks < 1) throw InvalidArgument("mpp: plan_shards needs at least one rank");
  ShardPlan plan;
  plan.owner.assign(bytes.size(), ranks - 1);
  plan.bytes_of_rank.assign(static_cast<std::size_t>(ranks), 0);
  std::int64_t total = 0;
  for (auto b : bytes) total += b;
  std::int64_t before = 0;  // bytes of the parameters before i
  int rank = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    // Move on to the next rank while the boundary of `rank` lies nearer to the start of i than
    // to its end.
    while (rank < ranks - 1) {
      const std::int64_t boundary = total * (rank + 1) / ranks;
      if (2 * boundary > 2 * before + bytes[i]) break;
      ++rank;
    }
    plan.owner[i] = rank;
    plan.bytes_of_rank[static_cast<std::size_t>(rank)] += bytes[i];
    before += bytes[i];
  }
  return plan;
}

/// ZeRO stage 1: each rank holds the optimizer state of, and steps, only its contiguous range of
/// the parameters; step() then hands every updated parameter to every rank.
template <class Optimizer, comm_policy Comm = Async<Gloo>>
class ShardedOptimizer {
 public:
  /// The inner optimizer, e.g. torch::optim::Adam.
  using optimizer_type = Optimizer;
  /// Async posts the gathers of every dtype before waiting for them; Blocking runs them one by one.
  using comm_type = Comm;

  /// A group of another backend than Comm's (or one whose type does not say it) does not compile.
  template <class Options, other_group<typename Comm::backend> Given>
  ShardedOptimizer(torch::nn::Module&, Given&&, const Options&) {
    reject_group<typename Comm::backend, Given>();
  }

  /// Shards `module`'s trainable parameters over the ranks of `group` and builds this rank's
  /// inner optimizer, `Optimizer(its parameters, options)`. A collective: every rank constructs
  /// it at the same point, over the same model (checked; the difference is named otherwise).
  template <class Options>
  ShardedOptimizer(torch::nn::Module& module, Group<typename Comm::backend> group,
                   const Options& options)
      : group_(std::move(group)) {
    const auto named = detail::named_parameters(module, /*trainable_only=*/true);
    if (named.empty())
      throw InvalidArgument(
          "mpp: ShardedOptimizer needs a module with at least one trainable parameter");
    check_same_structure(named, group_, "ShardedOptimizer");
    std::vector<std::int64_t> bytes;
    for (const auto& p : named) {
      params_.push_back(p.tensor);
      bytes.push_back(static_cast<std::int64_t>(p.tensor.numel() * p.tensor.element_size()));
    }
    plan_ = plan_shards(bytes, group_.size());
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (plan_.owner[i] == group_.rank()) local_.push_back(params_[i]);
    flatten();
    if (!local_.empty()) inner_ = std::make_unique<Optimizer>(local_, options);
  }

  /// Zeroes the gradient of every parameter (not only this rank's shard: DDP reduces them all).
  void zero_grad() {
    for (auto& p : params_) {
      auto& g = p.mutable_grad();
      if (g.defined()) {  // as torch::optim::Optimizer::zero_grad does
        g.detach_();
        g.zero_();
      }
    }
  }

  /// Steps this rank's shard with its inner optimizer, then hands every updated parameter to
  /// every rank. Call it on every rank, after the gradients were averaged (by DDP or NaiveDP).
  void step() {
    if (inner_) inner_->step();
    gather_parameters();
  }

  /// Hands every rank's shard to every other rank (the second half of step(); also what a
  /// restored checkpoint needs, where each rank read its own shard only). A collective.
  void gather_parameters() {
    at::NoGradGuard no_grad;
    if constexpr (Comm::semantics == CommSemantics::buffered) {
      std::vector<Request> pending;
      for (auto& flat : flats_) pending.push_back(group_.iall_gather_runs(flat.buffer, flat.runs));
      wait_all(pending);
    } else {
      for (auto& flat : flats_) group_.all_gather_runs(flat.buffer, flat.runs);
    }
  }

  /// This rank's inner optimizer (learning rate, state); null when it owns no parameter.
  Optimizer* local_optimizer() { return inner_.get(); }
  /// The parameters this rank steps.
  const std::vector<at::Tensor>& local_parameters() const { return local_; }
  /// Which rank owns which parameter; plan().owner is what DdpOptions::gradient_owners takes.
  const ShardPlan& plan() const { return plan_; }
  /// The data-parallel group.
  const Group<typename Comm::backend>& group() const { return group_; }

 private:
  /// The parameters of one dtype, back to back; `runs[r]` = (offset, numel) of rank r's
  /// parameters in it (one run each: owners follow registration order).
  struct Flat {
    at::Tensor buffer;
    std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  };

  void flatten() {
    at::NoGradGuard no_grad;
    std::vector<bool> placed(params_.size(), false);
    for (std::size_t first = 0; first < params_.size(); ++first) {
      if (placed[first]) continue;
      const auto dtype = params_[first].scalar_type();
      std::int64_t total = 0;
      for (std::size_t i = first; i < params_.size(); ++i)
        if (params_[i].scalar_type() == dtype) total += params_[i].numel();
      Flat flat{at::empty({total}, params_[first].options().requires_grad(false)),
                std::vector<std::pair<std::int64_t, std::int64_t>>(
                    static_cast<std::size_t>(group_.size()), {0, 0})};
      std::int64_t offset = 0;
      for (std::size_t i = first; i < params_.size(); ++i) {
        if (placed[i] || params_[i].scalar_type() != dtype) continue;
        auto& p = params_[i];
        const std::int64_t n = p.numel();
        at::Tensor view = flat.buffer.narrow(0, offset, n).view(p.sizes());
        view.copy_(p);
        p.set_data(view);
        auto& run = flat.runs[static_cast<std::size_t>(plan_.owner[i])];
        if (run.second == 0) run.first = offset;
        run.second += n;
        placed[i] = true;
        offset += n;
      }
      // A rank with nothing of this dtype owns the empty run where its range would start.
      for (std::size_t r = 0; r < flat.runs.size(); ++r)
        if (flat.runs[r].second == 0)
          flat.runs[r].first = r == 0 ? 0 : flat.runs[r - 1].first + flat.runs[r - 1].second;
      flats_.push_back(std::move(flat));
    }
  }

  Group<typename Comm::backend> group_;
  std::vector<Flat> flats_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> local_;
  ShardPlan plan_;
  std::unique_ptr<Optimizer> inner_;
};

}  // namespace mpp
