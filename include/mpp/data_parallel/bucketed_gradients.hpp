#pragma once
// The engine of DDP, independent of how a bucket is reduced: gradient hooks, bucket buffers,
// in-order launching, the end-of-backward wait and the per-step reset.
//
// A post hook on each parameter's grad accumulator fires as soon as autograd has accumulated
// that parameter's gradient. When every gradient of a bucket has arrived the bucket is handed
// to the launcher (which starts an all-reduce); buckets are launched strictly in plan order so
// that every rank issues the same sequence of collectives. A callback queued on the autograd
// engine runs when backward() finishes: it waits for every bucket, checks that every parameter
// got a gradient, and resets the state for the next step.
//
// A parameter without a gradient on some rank (unused in that rank's loss) must not leave the
// others waiting on a bucket that rank never launches. So every rank always launches every
// bucket: one that misses gradients launches the rest at the end of backward. The last bucket
// carries one extra element, "this rank missed a gradient", summed with the rest; when the sum is
// not zero every rank learns it from the same reduction, and only then one more all-reduce of a
// per-rank bitmap tells every rank which parameters were missing where, so all of them fail at
// once naming the parameters. On the normal path that costs one element and one read.
//
// Gradients live inside the bucket buffers: after the first synchronised step each `.grad` is an
// alias of its slice of a flat buffer, so accumulation writes straight into the bucket and the
// averaged result is already in `.grad` when the wait returns — no copy in or out. The alias is
// made with set_() rather than a view so that Optimizer::zero_grad()'s detach_() stays legal.
// If the user replaces a `.grad` (or it is still unset on the first step), the hook copies it into
// the bucket and the end of backward points `.grad` back at the bucket.
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <ATen/ATen.h>

#include <concepts>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mpp/data_parallel/buckets.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// What the bucket engine asks of a reduction backend: start summing one flat buffer across the
/// replicas, and later block until that sum has landed in the same buffer. Bucket indices run
/// from 0 to the number of buckets (that last one is the rare check of missing gradients).
template <class L>
concept bucket_launcher = requires(L& l, std::size_t bucket, at::Tensor& flat) {
  l.launch(bucket, flat);
  l.wait(bucket);
};

/// A launcher that also knows this replica's place among the replicas (to name ranks).
template <class L>
concept ranked_bucket_launcher = bucket_launcher<L> && requires(const L& l) {
  { l.replica() } -> std::convertible_to<int>;
  { l.replicas() } -> std::convertible_to<int>;
};

/// A parameter (or buffer) with the name used in messages.
struct NamedTensor {
  /// Name in messages (the module's dotted parameter name).
  std::string name;
  /// The parameter or buffer itself (shared, not copied).
  at::Tensor tensor;
};

namespace detail {

/// One planning entry per parameter, as plan_buckets() wants it.
inline std::vector<GradSpec> grad_specs(const std::vector<NamedTensor>& params) {
  std::vector<GradSpec> specs;
  specs.reserve(params.size());
  for (const auto& p : params)
    specs.push_back({static_cast<std::size_t>(p.tensor.numel()),
                     static_cast<std::size_t>(p.tensor.element_size()),
                     static_cast<int>(p.tensor.scalar_type())});
  return specs;
}

/// A tensor that shares `flat`'s storage for elements [offset, offset + numel(shape)), made
/// with set_() so that autograd does not treat it as a view.
inline at::Tensor alias_slice(const at::Tensor& flat, std::size_t offset, at::IntArrayRef sizes) {
  at::Tensor out = at::empty({0}, flat.options());
  out.set_(flat.storage(), flat.storage_offset() + static_cast<std::int64_t>(offset), sizes);
  return out;
}

template <bucket_launcher Launcher>
class BucketedGradients {
 public:
  /// `divisor` scales every bucket before its reduction (the number of replicas: sum of the
  /// pre-divided gradients is their mean).
  BucketedGradients(std::vector<NamedTensor> params, std::size_t cap_bytes, double divisor,
                    Launcher launcher)
      : params_(std::move(params)), divisor_(divisor), launcher_(std::move(launcher)) {
    plan_ = plan_buckets(grad_specs(params_), cap_bytes);
    buffers_.reserve(plan_.buckets.size());
    for (std::size_t b = 0; b < plan_.buckets.size(); ++b) {
      const auto& first = params_[plan_.buckets[b].params.front()].tensor;
      // The last bucket has one more element: the "missed a gradient" flag (see the top).
      const bool last = b + 1 == plan_.buckets.size();
      buffers_.push_back(at::zeros({static_cast<std::int64_t>(plan_.buckets[b].elements + last)},
                                   first.options()));
    }
    slices_.resize(params_.size());
    for (std::size_t b = 0; b < plan_.buckets.size(); ++b)
      for (std::size_t s = 0; s < plan_.buckets[b].params.size(); ++s) {
        const std::size_t p = plan_.buckets[b].params[s];
        slices_[p] =
            alias_slice(buffers_[b], plan_.buckets[b].offsets[s], params_[p].tensor.sizes());
      }
    ready_.assign(params_.size(), false);
    pending_.resize(plan_.buckets.size());
    reset_step();
    // The tensor holds its accumulator weakly: keep the shared_ptr, or the hook never fires.
    accumulators_.reserve(params_.size());
    hook_keys_.reserve(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params_[i].tensor);
      if (!acc)
        throw InvalidArgument(
            "mpp: DDP parameter '" + params_[i].name +
            "' is not a leaf that requires grad; pass only trainable leaf parameters");
      hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(this, i)));
      accumulators_.push_back(std::move(acc));
    }
  }

  BucketedGradients(const BucketedGradients&) = delete;
  BucketedGradients& operator=(const BucketedGradients&) = delete;

  ~BucketedGradients() {
    for (std::size_t i = 0; i < accumulators_.size(); ++i)
      accumulators_[i]->del_post_hook(hook_keys_[i]);
  }

  const BucketPlan& plan() const { return plan_; }
  const std::vector<NamedTensor>& params() const { return params_; }
  const at::Tensor& bucket_buffer(std::size_t b) const { return buffers_[b]; }
  Launcher& launcher() { return launcher_; }

  /// Off inside no_sync(): hooks then leave gradients to accumulate locally.
  void set_sync(bool on) { sync_ = on; }
  bool sync() const { return sync_; }

  /// Buckets launched in the current (or last) backward pass.
  std::size_t launched() const { return next_launch_; }

  /// Whether `.grad` of parameter i currently lives in its bucket (no copy needed).
  bool grad_in_bucket(std::size_t i) const {
    const auto& g = params_[i].tensor.grad();
    return g.defined() && g.data_ptr() == slices_[i].data_ptr();
  }

  // Called by the hook of parameter i, right after its gradient was accumulated.
  void mark_ready(std::size_t i) {
    if (!sync_) return;
    if (!in_backward_) {
      in_backward_ = true;
      torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_backward(); });
    }
    if (ready_[i]) {
      reset_step();
      throw LogicError("mpp: DDP parameter '" + params_[i].name +
                       "' received a gradient twice in one backward pass; call backward once "
                       "per step, or use no_sync() for the extra passes");
    }
    ready_[i] = true;
    if (!grad_in_bucket(i)) {
      at::NoGradGuard no_grad;
      slices_[i].copy_(params_[i].tensor.grad());
    }
    const std::size_t b = plan_.bucket_of[i];
    if (--pending_[b] == 0) {
      // Launch every consecutive full bucket from the next one in plan order.
      while (next_launch_ < pending_.size() && pending_[next_launch_] == 0)
        launch_next(/*missed=*/false);
    }
  }

  // Runs once backward() has finished (queued on the autograd engine).
  void finish_backward() {
    in_backward_ = false;
    bool someone_missed = false;
    try {
      if (next_launch_ < plan_.buckets.size()) {
        // Some gradient never came: launch the rest anyway (the other ranks wait on them), with
        // the missing slices zeroed and the flag raised.
        at::NoGradGuard no_grad;
        for (std::size_t i = 0; i < params_.size(); ++i)
          if (!ready_[i]) slices_[i].zero_();
        while (next_launch_ < plan_.buckets.size()) launch_next(/*missed=*/true);
      }
      for (std::size_t b = 0; b < next_launch_; ++b) launcher_.wait(b);
      someone_missed = buffers_.back()[-1].template item<double>() != 0.0;
    } catch (...) {
      reset_step();
      throw;
    }
    if (someone_missed) report_missing();  // throws on every rank
    // Every gradient now holds the mean; point any replaced .grad back at its bucket.
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (!grad_in_bucket(i)) params_[i].tensor.mutable_grad() = slices_[i];
    reset_step();
  }

 private:
  void launch_next(bool missed) {
    at::NoGradGuard no_grad;
    at::Tensor& flat = buffers_[next_launch_];
    if (divisor_ != 1.0) flat.div_(divisor_);
    if (next_launch_ + 1 == buffers_.size()) flat[-1].fill_(missed ? 1.0 : 0.0);
    launcher_.launch(next_launch_, flat);
    ++next_launch_;
  }

  /// Some rank missed a gradient (every rank knows it from the same reduction): agree on which
  /// parameters, on which ranks, and throw the same error everywhere.
  [[noreturn]] void report_missing() {
    const std::size_t n = params_.size();
    int me = 0, replicas = 1;
    if constexpr (ranked_bucket_launcher<Launcher>) {
      me = launcher_.replica();
      replicas = launcher_.replicas();
    }
    // had[r * n + i] = 1 if rank r got parameter i's gradient.
    at::Tensor had = at::zeros({static_cast<std::int64_t>(replicas * n)}, at::kFloat);
    for (std::size_t i = 0; i < n; ++i)
      if (ready_[i]) had[static_cast<std::int64_t>(me * n + i)].fill_(1.0);
    const std::size_t check = plan_.buckets.size();
    std::string failure;
    try {
      launcher_.launch(check, had);
      launcher_.wait(check);
    } catch (const std::exception& e) {
      failure = std::string(" (naming them failed: ") + e.what() + ")";
    }
    const auto* counts = had.data_ptr<float>();
    std::string names;
    std::vector<bool> missed_on(static_cast<std::size_t>(replicas), false);
    std::size_t missing = 0;
    for (std::size_t i = 0; i < n; ++i) {
      bool missed = failure.empty() ? false : !ready_[i];
      for (int r = 0; r < replicas && failure.empty(); ++r)
        if (counts[static_cast<std::size_t>(r) * n + i] == 0.0f) {
          missed = true;
          missed_on[static_cast<std::size_t>(r)] = true;
        }
      if (missed && missing++ < 8) names += (names.empty() ? "'" : ", '") + params_[i].name + "'";
    }
    if (missing > 8) names += " and " + std::to_string(missing - 8) + " more";
    std::string where;
    for (int r = 0; r < replicas; ++r)
      if (missed_on[static_cast<std::size_t>(r)])
        where += (where.empty() ? "" : ", ") + std::to_string(r);
    reset_step();
    throw RuntimeError(
        "mpp: DDP parameter(s) " + names + " got no gradient in this backward pass" +
        (where.empty() ? std::string() : " on rank(s) [" + where + "] of the DDP group") + failure +
        "; every trainable parameter must take part in the loss on every rank (freeze unused "
        "ones with requires_grad(false) before building DDP)");
  }

  struct ReadyHook final : torch::autograd::FunctionPostHook {
    ReadyHook(BucketedGradients* owner, std::size_t index) : owner(owner), index(index) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      owner->mark_ready(index);
      return outputs;
    }
    BucketedGradients* owner;
    std::size_t index;
  };

  void reset_step() {
    std::fill(ready_.begin(), ready_.end(), false);
    for (std::size_t b = 0; b < plan_.buckets.size(); ++b)
      pending_[b] = plan_.buckets[b].params.size();
    next_launch_ = 0;
    in_backward_ = false;
  }

  std::vector<NamedTensor> params_;
  double divisor_;
  Launcher launcher_;
  BucketPlan plan_;
  std::vector<at::Tensor> buffers_;
  std::vector<at::Tensor> slices_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<std::uintptr_t> hook_keys_;
  std::vector<bool> ready_;
  std::vector<std::size_t> pending_;
  std::size_t next_launch_ = 0;
  bool in_backward_ = false;
  bool sync_ = true;
};

}  // namespace detail
}  // namespace mpp
