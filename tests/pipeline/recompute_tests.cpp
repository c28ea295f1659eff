// Recompute keeps the random-number state each forward started from: a stage with dropout
// recomputes the same masks, so training with Recompute<...> equals training without it, bit for
// bit, and the generator continues as if nothing had been recomputed.
#include <doctest/doctest.h>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mpp/comm.hpp"
#include "mpp/partition.hpp"
#include "mpp/pipeline.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

namespace {

constexpr std::int64_t width = 16;

/// Linear, then dropout with p = 0.5, per layer; weights seeded per layer.
struct DropoutMlp {
  int num_layers() const { return 6; }
  std::int64_t layer_parameters(int) const { return width * width + width; }
  std::vector<std::int64_t> input_shape(int) const { return {width}; }
  c10::ScalarType dtype() const { return c10::kFloat; }
  torch::nn::Sequential build(int begin, int end) const {
    torch::nn::Sequential seq;
    for (int i = begin; i < end; ++i) {
      torch::manual_seed(100 + static_cast<std::uint64_t>(i));
      seq->push_back(torch::nn::Linear(width, width));
      seq->push_back(torch::nn::Dropout(0.5));
    }
    return seq;
  }
};
static_assert(mpp::layered_model<DropoutMlp>);

/// Two steps; prints the losses, a checksum of every gradient's bytes, and the generator's next
/// draw (which recomputing must not have moved).
template <class Pipe>
void train_and_print(const auto& world, const char* label, int seed = 7) {
  Pipe pipe(world, DropoutMlp{});
  std::string line = label;
  for (int step = 0; step < 2; ++step) {
    torch::manual_seed(1000 + static_cast<std::uint64_t>(step));  // the same data on every rank
    const at::Tensor inputs = torch::randn({8, width});
    const at::Tensor targets = torch::randn({8, width});
    torch::manual_seed(static_cast<std::uint64_t>(seed + world.rank() * 10 + step));
    for (auto& p : pipe.parameters()) p.mutable_grad() = at::Tensor();
    const double loss = pipe.train_step(pipe.is_first() ? inputs : at::Tensor(),
                                        pipe.is_last() ? targets : at::Tensor(),
                                        [](const at::Tensor& out, const at::Tensor& target) {
                                          return torch::nn::functional::mse_loss(out, target);
                                        });
    char text[64];
    std::snprintf(text, sizeof text, " loss%d=%a", step, loss);
    line += text;
  }
  std::uint64_t sum = 1469598103934665603ull;  // FNV-1a over the gradients' bytes
  for (const auto& p : pipe.parameters()) {
    const at::Tensor g = p.grad().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(g.data_ptr());
    for (std::size_t i = 0; i < g.nbytes(); ++i) sum = (sum ^ bytes[i]) * 1099511628211ull;
  }
  char text[96];
  std::snprintf(text, sizeof text, " grads=%016llx next=%a", static_cast<unsigned long long>(sum),
                torch::rand({1}).item<double>());
  std::printf("%s%s\n", line.c_str(), text);
}

MPP_TEST_WORKER("recompute/dropout") {
  auto world = mpp::init_process_group();
  using Comm = mpp::Async<mpp::Gloo>;
  train_and_print<mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<4>, Comm>>(world, "plain");
  train_and_print<mpp::Pipeline<mpp::Recompute<mpp::Uniform<2>>, mpp::OneFOneB<4>, Comm>>(
      world, "recompute");
  train_and_print<mpp::Pipeline<mpp::Recompute<mpp::Uniform<2>>, mpp::ZeroBubbleH1<4>, Comm>>(
      world, "recompute-zb");
  train_and_print<mpp::Pipeline<mpp::Uniform<2>, mpp::ZeroBubbleH1<4>, Comm>>(world, "plain-zb");
  train_and_print<mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<4>, Comm>>(world, "other-masks", 8);
  return 0;
}

std::string after(const std::string& output, const std::string& label) {
  const auto at = output.find(label + " ");
  if (at == std::string::npos) return "(no line " + label + ")";
  return output.substr(at + label.size(), output.find('\n', at) - at - label.size());
}

}  // namespace

TEST_CASE("Recompute with dropout equals the run without recompute, bit for bit") {
  auto world = mpp::test::run_world(2, "recompute/dropout");
  REQUIRE_MESSAGE(world.ok(), world.report());
  for (int r = 0; r < 2; ++r) {
    const std::string& out = world.output(r);
    INFO(out);
    CHECK(after(out, "recompute") == after(out, "plain"));
    CHECK(after(out, "recompute-zb") == after(out, "plain-zb"));
  }
  // Dropout did draw: other masks (another seed) give another loss.
  CHECK(after(world.output(1), "plain") != after(world.output(1), "other-masks"));
}
