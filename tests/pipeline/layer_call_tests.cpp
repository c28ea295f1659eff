// LayerCall: the layers the executor calls directly give what AnyModule gives, bit for bit, with
// the graph for the backward; any other module still goes through AnyModule.
#include <doctest/doctest.h>

#include "mpp/pipeline/layer_call.hpp"

namespace {

/// A module LayerCall does not know: it must fall back to AnyModule.
struct ScaleImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x * 3.0; }
};
TORCH_MODULE(Scale);

}  // namespace

TEST_CASE("LayerCall calls known layers directly and equals AnyModule::forward bit for bit") {
  torch::manual_seed(7);
  torch::nn::Sequential seq(torch::nn::Linear(6, 5), torch::nn::ReLU(), torch::nn::GELU(),
                            torch::nn::Tanh(), torch::nn::Sigmoid(),
                            torch::nn::LayerNorm(torch::nn::LayerNormOptions({5})),
                            torch::nn::Dropout(0.5), torch::nn::Identity(), Scale());
  seq->eval();  // Dropout: deterministic in both paths
  const at::Tensor x = torch::randn({4, 6});
  at::Tensor via_any = x.clone().requires_grad_(true);
  at::Tensor via_call = x.clone().requires_grad_(true);
  at::Tensor a = via_any, b = via_call;
  int direct = 0;
  for (auto& module : *seq) {
    const auto call = mpp::detail::LayerCall::of(module);
    direct += call.is_direct() ? 1 : 0;
    a = module.forward<at::Tensor>(a);
    b = call(b);
    CHECK(torch::equal(a, b));
  }
  CHECK(direct == 8);  // every layer but the user's Scale
  a.sum().backward();
  b.sum().backward();
  CHECK(torch::equal(via_any.grad(), via_call.grad()));
}

TEST_CASE("LayerCall on a user's module goes through AnyModule") {
  torch::nn::AnyModule module(Scale{});
  const auto call = mpp::detail::LayerCall::of(module);
  CHECK_FALSE(call.is_direct());
  CHECK(torch::equal(call(torch::ones({2})), torch::full({2}, 3.0)));
}
