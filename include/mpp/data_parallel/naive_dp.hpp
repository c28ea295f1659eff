#pragma once
// Naive data parallelism: every rank runs forward and backward on its shard of the batch, then —
// only once backward is completely done — the gradients are averaged across the ranks and every
// replica takes the same optimizer step. Nothing overlaps: the whole reduction is added to the
// step time. Two ways to reduce:
//
//   NaiveDP<Comm, PerTensor>  one all_reduce_mean per gradient tensor (the textbook loop; many
//                             small messages, each paying the per-call latency)
//   NaiveDP<Comm, Coalesced>  all gradients copied into one flat buffer, one all-reduce, copied
//                             back (one latency, one big message, two extra copies)
//
//   mpp::NaiveDP<mpp::Blocking<mpp::Gloo>, mpp::Coalesced> dp(*model, group);
//   loss.backward();
//   dp.sync_gradients();
//   optimizer.step();
#include <torch/nn/module.h>

#include <ATen/ATen.h>

#include <chrono>
#include <string_view>
#include <vector>

#include "mpp/comm/policy.hpp"
#include "mpp/comm/process_group.hpp"
#include "mpp/data_parallel/replicas.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// NaiveDP reduction layout: one all_reduce_mean per gradient tensor.
struct PerTensor {
  /// Display name.
  static constexpr std::string_view name = "PerTensor";
};
/// NaiveDP reduction layout: every gradient copied into one flat buffer, one all-reduce, copied
/// back (one dtype only).
struct Coalesced {
  /// Display name.
  static constexpr std::string_view name = "Coalesced";
};

/// A NaiveDP reduction layout: PerTensor or Coalesced.
template <class R>
concept gradient_reduction = std::same_as<R, PerTensor> || std::same_as<R, Coalesced>;

/// Data parallelism without overlap: after backward, sync_gradients() averages every gradient over
/// the group.
template <comm_policy Comm = Blocking<Gloo>, gradient_reduction Reduction = PerTensor>
class NaiveDP {
 public:
  /// With PerTensor, Async posts every reduction before waiting for them, Blocking runs them one by
  /// one; Coalesced always blocks.
  using comm_type = Comm;
  /// PerTensor or Coalesced.
  using reduction_type = Reduction;

  /// A group of another backend than Comm's (or one whose type does not say it) does not compile.
  template <class Params, other_group<typename Comm::backend> Given>
  NaiveDP(Params&&, Given&&, bool = true) {
    reject_group<typename Comm::backend, Given>();
  }

  /// A collective: checks that every rank holds the same model, then copies rank 0's weights.
  NaiveDP(torch::nn::Module& module, Group<typename Comm::backend> group, bool broadcast = true)
      : NaiveDP(detail::named_parameters(module, /*trainable_only=*/true), std::move(group),
                broadcast) {}

  /// The same over any list of parameters, e.g. those of a pipeline stage (DP x PP).
  NaiveDP(std::vector<NamedTensor> params, Group<typename Comm::backend> group,
          bool broadcast = true)
      : group_(std::move(group)), params_(std::move(params)) {
    if (params_.empty())
      throw InvalidArgument("mpp: NaiveDP needs a module with at least one trainable parameter");
    check_same_structure(params_, group_, "NaiveDP");
    if (broadcast) broadcast_tensors(params_, group_);
    if constexpr (std::same_as<Reduction, Coalesced>) {
      std::int64_t total = 0;
      for (const auto& p : params_) {
        if (p.tensor.scalar_type() != params_.front().tensor.scalar_type())
          throw InvalidArgument(
              "mpp: NaiveDP<..., Coalesced> packs every gradient into one "
              "buffer and needs one dtype, but " +
              detail::describe_param(p) + " differs from " +
              detail::describe_param(params_.front()) +
              "; use PerTensor or DDP (one bucket per dtype)");
        total += p.tensor.numel();
      }
      flat_ = at::zeros({total}, params_.front().tensor.options());
    }
  }

  /// Averages every parameter's gradient over the group. Call after backward, before the step.
  void sync_gradients() {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& p : params_)
      if (!p.tensor.grad().defined())
        throw RuntimeError("mpp: NaiveDP parameter '" + p.name +
                           "' has no gradient; every trainable parameter must take part in "
                           "the loss on every rank (freeze unused ones with "
                           "requires_grad(false) before building NaiveDP)");
    at::NoGradGuard no_grad;
    if constexpr (std::same_as<Reduction, PerTensor>) {
      if constexpr (Comm::semantics == CommSemantics::buffered) {
        std::vector<Request> pending;
        pending.reserve(params_.size());
        for (const auto& p : params_) pending.push_back(group_.iall_reduce_mean(p.tensor.grad()));
        wait_all(pending);
      } else {
        for (const auto& p : params_) group_.all_reduce_mean(p.tensor.grad());
      }
    } else {
      std::int64_t offset = 0;
      for (const auto& p : params_) {
        const auto n = p.tensor.numel();
        flat_.narrow(0, offset, n).copy_(p.tensor.grad().reshape({-1}));
        offset += n;
      }
      group_.all_reduce_mean(flat_);
      offset = 0;
      for (const auto& p : params_) {
        const auto n = p.tensor.numel();
        p.tensor.mutable_grad().copy_(flat_.narrow(0, offset, n).view(p.tensor.sizes()));
        offset += n;
      }
    }
    comm_time_ += std::chrono::steady_clock::now() - start;
  }

  /// The data-parallel group.
  const Group<typename Comm::backend>& group() const { return group_; }
  /// Time spent in sync_gradients() since the last reset.
  double comm_seconds() const { return std::chrono::duration<double>(comm_time_).count(); }
  /// Sets comm_seconds() back to zero.
  void reset_comm_time() { comm_time_ = {}; }

 private:
  Group<typename Comm::backend> group_;
  std::vector<NamedTensor> params_;
  at::Tensor flat_;
  std::chrono::steady_clock::duration comm_time_{};
};

}  // namespace mpp
