// Uses mpp's compile-time side and LibTorch through the installed mpp::mpp target.
#include <torch/torch.h>

#include <cstdio>

#include "mpp/comm/policy.hpp"
#include "mpp/launch/environment.hpp"

static_assert(mpp::comm_policy<mpp::Blocking<mpp::Gloo>>);
static_assert(mpp::comm_policy<mpp::Async<mpp::Gloo>>);

int main() {
  mpp::launch::WorldLayout layout;
  layout.nproc_per_node = 2;
  const auto sum = torch::ones({2, 2}).sum().item<float>();
  if (sum != 4.0F || layout.world_size() != 2) return 1;
  std::printf("mpp consumer: ok (torch sum %.0f, world %d)\n", sum, layout.world_size());
  return 0;
}
