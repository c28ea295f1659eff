// Recompute keeps the random-number state each forward started from: a stage with dropout
// recomputes the same masks, so training with Recompute<...> equals training without it, bit for
// bit, and the generator continues as if nothing had been recomputed; in one segment per stage
// or in several. Segments trade the checkpoints kept per micro-batch in flight against the one
// graph rebuilt at a time: the measured peak follows the formula docs/10-recompute.md gives.
#include <doctest/doctest.h>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
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
  train_and_print<mpp::Pipeline<mpp::Recompute<mpp::Uniform<2>, 2>, mpp::OneFOneB<4>, Comm>>(
      world, "recompute-2-segments");
  train_and_print<mpp::Pipeline<mpp::Recompute<mpp::Uniform<2>, 3>, mpp::GPipe<4>, Comm>>(
      world, "recompute-3-segments-gpipe");
  train_and_print<mpp::Pipeline<mpp::Uniform<2>, mpp::GPipe<4>, Comm>>(world, "plain-gpipe");
  train_and_print<mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<4>, Comm>>(world, "other-masks", 8);
  return 0;
}

/// `layers` Linear(width, width) and nothing else: each layer's output is what the next one
/// keeps for its backward, so a stage's graph holds one activation per layer plus its input.
struct LinearStack {
  int layers = 16;
  int num_layers() const { return layers; }
  std::int64_t layer_parameters(int) const { return width * width + width; }
  std::vector<std::int64_t> input_shape(int) const { return {width}; }
  c10::ScalarType dtype() const { return c10::kFloat; }
  torch::nn::Sequential build(int begin, int end) const {
    torch::nn::Sequential seq;
    for (int i = begin; i < end; ++i) seq->push_back(torch::nn::Linear(width, width));
    return seq;
  }
};
static_assert(mpp::layered_model<LinearStack>);

template <class Stages>
void print_peak(const auto& world, const char* label) {
  using Pipe = mpp::Pipeline<Stages, mpp::OneFOneB<4>, mpp::Async<mpp::Gloo>>;
  Pipe pipe(world, LinearStack{});
  torch::manual_seed(3);
  const at::Tensor inputs = torch::randn({8, width});
  const at::Tensor targets = torch::randn({8, width});
  pipe.train_step(pipe.is_first() ? inputs : at::Tensor(), pipe.is_last() ? targets : at::Tensor(),
                  [](const at::Tensor& out, const at::Tensor& target) {
                    return torch::nn::functional::mse_loss(out, target);
                  });
  // A rank computes one thing at a time: no compute event may start before the one before it
  // ended (a recompute recorded inside a backward's span would count its time twice and push
  // the measured bubble below zero).
  std::vector<std::pair<double, double>> spans;
  for (const auto& e : pipe.last_trace().events)
    if (mpp::trace::is_compute(e.kind)) spans.emplace_back(e.begin_us, e.end_us);
  std::sort(spans.begin(), spans.end());
  int overlaps = 0;
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) ++overlaps;
  std::printf("%s peak=%lld in_flight=%d overlaps=%d\n", label,
              static_cast<long long>(pipe.last_trace().peak_activation_bytes),
              pipe.last_trace().peak_in_flight, overlaps);
}

MPP_TEST_WORKER("recompute/segments-memory") {
  auto world = mpp::init_process_group();
  print_peak<mpp::Recompute<mpp::Uniform<2>, 1>>(world, "segments=1");
  print_peak<mpp::Recompute<mpp::Uniform<2>, 2>>(world, "segments=2");
  print_peak<mpp::Recompute<mpp::Uniform<2>, 4>>(world, "segments=4");
  print_peak<mpp::Recompute<mpp::Uniform<2>, 8>>(world, "segments=8");
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
  for (int r = 0; r < 2; ++r) {
    const std::string& out = world.output(r);
    INFO(out);
    CHECK(after(out, "recompute-2-segments") == after(out, "plain"));
    CHECK(after(out, "recompute-3-segments-gpipe") == after(out, "plain-gpipe"));
  }
  // Dropout did draw: other masks (another seed) give another loss.
  CHECK(after(world.output(1), "plain") != after(world.output(1), "other-masks"));
}

TEST_CASE(
    "Recompute segments: the measured peak is k*S + n/S activations, compute never overlaps") {
  // n = 8 layers per stage, a = one activation of a micro-batch (2 samples x 16 floats). A
  // micro-batch in flight keeps S checkpoints; the one in its backward keeps its S - 1 not yet
  // rebuilt and the rebuilt segment's graph (its input and n/S outputs): with k micro-batches in
  // flight at the peak, k*S + n/S activations. Under 1F1B rank 0 has k = 2 = P, rank 1 has k = 1.
  auto world = mpp::test::run_world(2, "recompute/segments-memory");
  REQUIRE_MESSAGE(world.ok(), world.report());
  constexpr long long a = 2 * width * 4;
  const int n = 8;
  for (int r = 0; r < 2; ++r) {
    const std::string& out = world.output(r);
    INFO(out);
    const int k = r == 0 ? 2 : 1;
    for (int s : {1, 2, 4, 8}) {
      const std::string line = after(out, "segments=" + std::to_string(s));
      CHECK(line.rfind(" peak=" + std::to_string((k * s + n / s) * a) + " ", 0) == 0);
      CHECK(line.find(" overlaps=0") != std::string::npos);
    }
  }
}
