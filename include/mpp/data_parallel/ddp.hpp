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

namespace mpp {

struct DdpOptions {
  /// Cap of one gradient bucket in bytes (PyTorch's default: 25 MiB).
  std::size_t bucket_bytes = default_bucket_bytes;
  /// Copy rank 0's parameters and buffers to every rank at construction.
  bool broadcast_parameters = true;
};

namespace detail {

/// Reduces buckets through a process group, as the comm policy says.
template <comm_policy Comm>
struct GroupBucketLauncher {
  ProcessGroup group;
  std::vector<Request> pending;
  std::chrono::steady_clock::duration waited{};  // time blocked on communication, this step

  void launch(std::size_t bucket, at::Tensor& flat) {
    if constexpr (Comm::semantics == CommSemantics::buffered) {
      if (pending.size() <= bucket) pending.resize(bucket + 1);
      pending[bucket] = group.iall_reduce(flat, ReduceOp::sum);
    } else {
      const auto start = std::chrono::steady_clock::now();
      group.all_reduce(flat, ReduceOp::sum);
      waited += std::chrono::steady_clock::now() - start;
    }
  }
  int replica() const { return group.rank(); }
  int replicas() const { return group.size(); }
  void wait(std::size_t bucket) {
    if constexpr (Comm::semantics == CommSemantics::buffered) {
      const auto start = std::chrono::steady_clock::now();
      pending[bucket].wait();
      waited += std::chrono::steady_clock::now() - start;
    }
  }
};

}  // namespace detail

template <comm_policy Comm = Async<Gloo>>
class DistributedDataParallel {
 public:
  using comm_type = Comm;

  /// Attaches to `module`'s trainable parameters (those with requires_grad) on every rank of
  /// `group`. A collective: every rank constructs its DDP at the same point.
  DistributedDataParallel(torch::nn::Module& module, ProcessGroup group, DdpOptions options = {})
      : group_(group), options_(options) {
    require_backend<Comm>(group_, "DDP<" + comm_display_name<Comm>() + ">");
    auto params = detail::named_parameters(module, /*trainable_only=*/true);
    if (params.empty())
      throw std::invalid_argument("mpp: DDP needs a module with at least one trainable parameter");
    check_same_structure(params, group_, "DDP");
    if (options.broadcast_parameters) broadcast_parameters(module, group_);
    engine_ = std::make_unique<Engine>(std::move(params), options.bucket_bytes,
                                       static_cast<double>(group_.size()),
                                       detail::GroupBucketLauncher<Comm>{group_, {}, {}});
  }

  /// Inside this scope backward() accumulates gradients locally without communicating; the
  /// first backward() after it reduces everything accumulated (gradient accumulation).
  class [[nodiscard]] NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp), previous_(ddp.engine_->sync()) {
      ddp.engine_->set_sync(false);
    }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    ~NoSync() { ddp_->engine_->set_sync(previous_); }

   private:
    DistributedDataParallel* ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  const BucketPlan& buckets() const { return engine_->plan(); }
  const ProcessGroup& group() const { return group_; }
  const DdpOptions& options() const { return options_; }

  /// Time this rank spent blocked on gradient communication since the last reset (with Async,
  /// only what backward could not hide).
  double comm_wait_seconds() const {
    return std::chrono::duration<double>(engine_->launcher().waited).count();
  }
  void reset_comm_wait() { engine_->launcher().waited = {}; }

 private:
  using Engine = detail::BucketedGradients<detail::GroupBucketLauncher<Comm>>;
  ProcessGroup group_;
  DdpOptions options_;
  std::unique_ptr<Engine> engine_;  // on the heap: hooks point at it, DDP itself may move
};

template <comm_policy Comm = Async<Gloo>>
using DDP = DistributedDataParallel<Comm>;

}  // namespace mpp
