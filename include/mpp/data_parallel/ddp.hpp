#pragma once
// DistributedDataParallel: gradients all-reduced by buckets while backward still runs.
//
//   mpp::DDP<mpp::Async<mpp::Gloo>> ddp(*model, group);   // broadcast from rank 0 + structure
//   check loss.backward();                                       // buckets go out as they fill
//   optimizer.step();                                      // every .grad already holds the mean
//
//   { auto guard = ddp.no_sync(); loss1.backward(); }     // accumulate locally, no communication
//   loss2.backward();                                      // reduces the accumulated gradients
//
// The comm policy decides when a bucket's reduction is waited: Async<...> launches it and waits
// for all of them when backward() ends (communication overlaps the rest of backward);
// Blocking<...> reduces each bucket inside the hook, before backward continues (no overlap;
// the baseline the overlap is measured against). The policy is a template parameter: no virtual
// call of ours between a hook and Gloo.
#include <torch/nn/module.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpp/comm/policy.hpp"
#include "mpp/comm/process_group.hpp"
#include "mpp/data_parallel/bucketed_gradients.hpp"
#include "mpp/data_parallel/buckets.hpp"
#include "mpp/data_parallel/replicas.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// Options of DistributedDataParallel; every rank passes the same.
struct DdpOptions {
  /// Cap of one gradient bucket in bytes (PyTorch's default: 25 MiB).
  std::size_t bucket_bytes = default_bucket_bytes;
  /// Copy rank 0's parameters and buffers to every rank at construction.
  bool broadcast_parameters = true;
  /// Average each gradient only on the rank that steps its parameter (ZeRO stage 2's exchange):
  /// per trainable parameter, in registration order, its owner -- a ShardedOptimizer's
  /// plan().owner, each rank owning one contiguous range. Each bucket is then reduce-scattered
  /// instead of all-reduced: after backward a rank's `.grad` holds the average for the
  /// parameters it owns and, for the others, something else (over Shm its own share of the sum,
  /// over other backends the average). Only for a step that reads its own parameters' gradients
  /// (ShardedOptimizer); leave it empty when anything reads every gradient (clipping by the
  /// global norm, logging them). Over Shm each rank reads only its own part of the others'
  /// buckets; over other backends it is an all-reduce.
  std::vector<int> gradient_owners{};
};

namespace detail {

using OwnedRuns = std::vector<std::pair<std::int64_t, std::int64_t>>;  // {offset, numel} per rank

/// Per bucket of `plan`, the run of its flat buffer each rank owns under `owners` (one per
/// parameter, as DdpOptions::gradient_owners): the parameters of one owner sit side by side in a
/// bucket (buckets hold them in reverse order), and a rank with none there owns an empty run.
inline std::vector<OwnedRuns> owned_runs(const BucketPlan& plan, const std::vector<int>& owners,
                                         int ranks) {
  for (std::size_t i = 0; i < owners.size(); ++i)
    if (owners[i] < 0 || owners[i] >= ranks)
      throw InvalidArgument("mpp: DdpOptions::gradient_owners[" + std::to_string(i) +
                            "] = " + std::to_string(owners[i]) +
                            " is not a rank of this group of " + std::to_string(ranks));
  std::vector<OwnedRuns> out;
  for (const auto& bucket : plan.buckets) {
    OwnedRuns runs(static_cast<std::size_t>(ranks), {0, 0});
    std::vector<bool> seen(static_cast<std::size_t>(ranks), false);
    int current = -1;
    std::int64_t start = 0;
    auto close = [&](std::int64_t end) {
      if (current >= 0) runs[static_cast<std::size_t>(current)] = {start, end - start};
    };
    for (std::size_t s = 0; s < bucket.params.size(); ++s) {
      const int o = owners[bucket.params[s]];
      if (o == current) continue;
      if (seen[static_cast<std::size_t>(o)])
        throw InvalidArgument(
            "mpp: DdpOptions::gradient_owners gives rank " + std::to_string(o) +
            " parameters that are not side by side (each rank must own one contiguous range of "
            "parameters in registration order, as ShardedOptimizer's plan() does)");
      const auto at = static_cast<std::int64_t>(current < 0 ? 0 : bucket.offsets[s]);
      close(at);
      seen[static_cast<std::size_t>(o)] = true;
      current = o;
      start = at;
    }
    close(static_cast<std::int64_t>(bucket.elements));
    out.push_back(std::move(runs));
  }
  return out;
}

/// Reduces buckets through a process group, as the comm policy says: all-reduces, or with
/// `owned` (one entry per bucket) reduce-scatters to the owners.
template <comm_policy Comm>
struct GroupBucketLauncher {
  ProcessGroup group;
  std::vector<OwnedRuns> owned;                  // empty: every bucket is all-reduced
  std::vector<std::vector<Request>> pending;     // per bucket, in flight
  std::chrono::steady_clock::duration waited{};  // time blocked on communication, this step

  void launch(std::size_t bucket, at::Tensor& flat) {
    if (pending.size() <= bucket) pending.resize(bucket + 1);
    auto& requests = pending[bucket];
    requests.clear();
    if (bucket < owned.size()) {
      std::int64_t covered = 0;
      for (const auto& run : owned[bucket]) covered += run.second;
      requests.push_back(group.ireduce_scatter_runs(flat.narrow(0, 0, covered), owned[bucket]));
      if (covered < flat.numel())  // the last bucket's "missed a gradient" flag: for every rank
        requests.push_back(group.iall_reduce(flat.narrow(0, covered, flat.numel() - covered)));
    } else {  // every bucket without owners, and the rare check of missing gradients
      requests.push_back(group.iall_reduce(flat, ReduceOp::sum));
    }
    if constexpr (Comm::semantics != CommSemantics::buffered) finish(bucket);
  }
  int replica() const { return group.rank(); }
  int replicas() const { return group.size(); }
  void wait(std::size_t bucket) {
    if constexpr (Comm::semantics == CommSemantics::buffered) finish(bucket);
  }

 private:
  void finish(std::size_t bucket) {
    const auto start = std::chrono::steady_clock::now();
    for (auto& request : pending[bucket]) request.wait();
    pending[bucket].clear();
    waited += std::chrono::steady_clock::now() - start;
  }
};

}  // namespace detail

/// Data parallelism that averages gradients by buckets while backward still runs: build it over the
/// module and call backward() as usual; when backward() returns, every `.grad` holds the mean over
/// the group (with DdpOptions::gradient_owners, only those of the parameters this rank owns).
template <comm_policy Comm = Async<Gloo>>
class DistributedDataParallel {
 public:
  /// Async: buckets are reduced while backward runs and waited when it ends; Blocking: each bucket
  /// is reduced inside its hook.
  using comm_type = Comm;

  /// A group of another backend than Comm's (or one whose type does not say it) does not compile.
  template <other_group<typename Comm::backend> Given>
  DistributedDataParallel(torch::nn::Module&, Given&&, DdpOptions = {}) {
    reject_group<typename Comm::backend, Given>();
  }

  /// Attaches to `module`'s trainable parameters (those with requires_grad) on every rank of
  /// `group`. A collective: every rank constructs its DDP at the same point.
  DistributedDataParallel(torch::nn::Module& module, Group<typename Comm::backend> group,
                          DdpOptions options = {})
      : group_(group), options_(options) {
    auto params = detail::named_parameters(module, /*trainable_only=*/true);
    if (params.empty())
      throw InvalidArgument("mpp: DDP needs a module with at least one trainable parameter");
    check_same_structure(params, group_, "DDP");
    if (options.broadcast_parameters) broadcast_parameters(module, group_);
    const auto count = params.size();
    engine_ = std::make_unique<Engine>(std::move(params), options.bucket_bytes,
                                       static_cast<double>(group_.size()),
                                       detail::GroupBucketLauncher<Comm>{group_, {}, {}, {}});
    if (!options.gradient_owners.empty()) {
      if (options.gradient_owners.size() != count)
        throw InvalidArgument(
            "mpp: DdpOptions::gradient_owners has " +
            std::to_string(options.gradient_owners.size()) + " entries but the module has " +
            std::to_string(count) +
            " trainable parameters; pass plan().owner of a ShardedOptimizer over this module");
      engine_->launcher().owned =
          detail::owned_runs(engine_->plan(), options.gradient_owners, group_.size());
    }
  }

  /// Inside this scope backward() accumulates gradients locally without communicating; the
  /// first backward() after it reduces everything accumulated (gradient accumulation).
  class [[nodiscard]] NoSync {
   public:
    /// Turns gradient synchronisation off until the guard dies, which restores the previous
    /// setting.
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp), previous_(ddp.engine_->sync()) {
      ddp.engine_->set_sync(false);
    }
    /// Not copyable: one guard restores the setting once.
    NoSync(const NoSync&) = delete;
    /// Not copyable: one guard restores the setting once.
    NoSync& operator=(const NoSync&) = delete;
    /// Restores the setting the guard found.
    ~NoSync() { ddp_->engine_->set_sync(previous_); }

   private:
    DistributedDataParallel* ddp_;
    bool previous_;
  };
  /// A guard for gradient accumulation: `{ auto guard = ddp.no_sync(); loss.backward(); }`.
  NoSync no_sync() { return NoSync(*this); }

  /// How the trainable parameters were cut into buckets.
  const BucketPlan& buckets() const { return engine_->plan(); }
  /// The data-parallel group.
  const Group<typename Comm::backend>& group() const { return group_; }
  /// The options it was built with.
  const DdpOptions& options() const { return options_; }

  /// Time this rank spent blocked on gradient communication since the last reset (with Async,
  /// only what backward could not hide).
  double comm_wait_seconds() const {
    return std::chrono::duration<double>(engine_->launcher().waited).count();
  }
  /// Sets comm_wait_seconds() back to zero.
  void reset_comm_wait() { engine_->launcher().waited = {}; }

 private:
  using Engine = detail::BucketedGradients<detail::GroupBucketLauncher<Comm>>;
  Group<typename Comm::backend> group_;
  DdpOptions options_;
  std::unique_ptr<Engine> engine_;  // on the heap: hooks point at it, DDP itself may move
};

/// Short name of DistributedDataParallel.
template <comm_policy Comm = Async<Gloo>>
using DDP = DistributedDataParallel<Comm>;

}  // namespace mpp
