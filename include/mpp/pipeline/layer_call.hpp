#pragma once
// One layer of a piece, called the way the executor calls it: once per micro-batch, tensor in,
// tensor out.
//
// `torch::nn::AnyModule::forward` (what a Sequential stores) pays, on every call, for its type
// erasure: a vector of AnyValue, a heap-held copy of the argument and of the result, a type check
// by hashing the type's name and, in LibTorch 1.13, an error hint built with c10::demangle before
// the call. For the layers the library's models and most MLPs are made of (Linear, ReLU, GELU,
// Tanh, Sigmoid, LayerNorm, Dropout, Identity) the concrete module is found once, when the piece
// is set up, and its forward is called directly: the same function on the same module, so the
// result is the same bit for bit. Any other module goes through AnyModule as before.
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <memory>

namespace mpp::detail {

class LayerCall {
 public:
  /// The call for `module`; `module` must outlive it (the piece's Sequential holds it).
  static LayerCall of(torch::nn::AnyModule& module) {
    LayerCall call;
    call.any_ = &module;
    (call.bind<torch::nn::LinearImpl>() || call.bind<torch::nn::ReLUImpl>() ||
     call.bind<torch::nn::GELUImpl>() || call.bind<torch::nn::TanhImpl>() ||
     call.bind<torch::nn::SigmoidImpl>() || call.bind<torch::nn::LayerNormImpl>() ||
     call.bind<torch::nn::DropoutImpl>() || call.bind<torch::nn::IdentityImpl>());
    return call;
  }

  at::Tensor operator()(const at::Tensor& x) const {
    return direct_ ? direct_(self_, x) : any_->forward<at::Tensor>(x);
  }

  /// True when the module is called directly rather than through AnyModule.
  bool is_direct() const { return direct_ != nullptr; }

 private:
  template <class Impl>
  bool bind() {
    // The exact type only: a subclass may hide `forward` with its own (it is not virtual), and
    // AnyModule would call the subclass's.
    if (any_->type_info() != typeid(Impl)) return false;
    self_ = dynamic_cast<Impl*>(any_->ptr().get());  // a virtual base: found once, here
    if (self_ == nullptr) return false;
    direct_ = [](void* self, const at::Tensor& x) { return static_cast<Impl*>(self)->forward(x); };
    return true;
  }

  torch::nn::AnyModule* any_ = nullptr;
  void* self_ = nullptr;
  at::Tensor (*direct_)(void*, const at::Tensor&) = nullptr;
};

}  // namespace mpp::detail
