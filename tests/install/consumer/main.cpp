// A program of a project outside mpp's tree, built against the installed package: it trains a
// model of its own through mpp::Pipeline (1F1B, and a schedule this project's build searched
// with mpp::mpp-schedule) and through mpp::DDP, and checks each against training the same model
// in one process. Run on 2 ranks:
//   mpprun --nproc-per-node 2 ./mpp_consumer
// docs/using-mpp.md quotes its model.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpp/comm.hpp"
#include "mpp/data_parallel.hpp"
#include "mpp/pipeline.hpp"
#include "searched_schedule.hpp"  // consumer::Searched, emitted by mpp-schedule at build time

namespace {

// [quote:model]
/// The user's layer: a Linear followed by tanh (the model's last layer stays linear).
struct DenseImpl : torch::nn::Module {
  DenseImpl(std::int64_t in, std::int64_t out, bool activate)
      : linear(register_module("linear", torch::nn::Linear(in, out))), activate(activate) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = linear(x);
    return activate ? torch::tanh(y) : y;
  }
  torch::nn::Linear linear;
  bool activate;
};
TORCH_MODULE(Dense);

/// The user's model, 8 -> 32 -> 32 -> 32 -> 4, described layer by layer (mpp::layered_model) so
/// that a pipeline stage builds its own layers only. Each layer is seeded by its index: it gets the
/// same weights whichever rank builds it, and the same as in the one-process reference.
struct Regressor {
  std::vector<std::int64_t> widths{8, 32, 32, 32, 4};

  int num_layers() const { return static_cast<int>(widths.size()) - 1; }
  std::int64_t layer_parameters(int layer) const {
    return widths[layer] * widths[layer + 1] + widths[layer + 1];
  }
  std::vector<std::int64_t> input_shape(int layer) const { return {widths[layer]}; }
  c10::ScalarType dtype() const { return torch::kFloat; }
  torch::nn::Sequential build(int begin, int end) const {
    torch::nn::Sequential layers;
    for (int layer = begin; layer < end; ++layer) {
      torch::manual_seed(1000 + layer);
      layers->push_back(Dense(widths[layer], widths[layer + 1], layer + 1 < num_layers()));
    }
    return layers;
  }
};
static_assert(mpp::layered_model<Regressor>);
// [/quote:model]

constexpr int steps = 5;
constexpr std::int64_t batch_size = 16;
constexpr double learning_rate = 0.05;

struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

/// The batch of `step`, the same on every rank: targets from a fixed random teacher.
Batch make_batch(int step) {
  torch::manual_seed(7);
  const auto teacher = torch::randn({8, 4});
  torch::manual_seed(100 + step);
  const auto x = torch::randn({batch_size, 8});
  return {x, torch::sin(x.matmul(teacher))};
}

/// The reference: the whole model trained in this one process on the whole batches. Returns the
/// model and writes each step's loss.
torch::nn::Sequential train_alone(std::vector<double>& losses) {
  const Regressor model;
  auto net = model.build(0, model.num_layers());
  torch::optim::SGD opt(net->parameters(), learning_rate);
  for (int step = 0; step < steps; ++step) {
    const auto batch = make_batch(step);
    opt.zero_grad();
    auto loss = torch::mse_loss(net->forward(batch.inputs), batch.targets);
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return net;
}

void require_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                   const std::string& what) {
  if (got.size() != want.size())
    throw std::runtime_error(what + ": " + std::to_string(got.size()) + " parameters, expected " +
                             std::to_string(want.size()));
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!torch::allclose(got[i], want[i], 1e-5, 1e-6))
      throw std::runtime_error(what + ": parameter " + std::to_string(i) +
                               " differs from one-process training by " +
                               std::to_string((got[i] - want[i]).abs().max().item<double>()));
}

/// Two stages of two layers each over 4 micro-batches (the schedule of `Pipe`), sends posted over
/// Gloo.
template <class Pipe>
void train_pipeline(const mpp::Group<mpp::Gloo>& world) {
  std::vector<double> expected;
  auto reference = train_alone(expected);

  Pipe pipe(world, Regressor{});
  torch::optim::SGD opt(pipe.parameters(), learning_rate);
  for (int step = 0; step < steps; ++step) {
    const auto batch = make_batch(step);
    opt.zero_grad();
    const double loss =
        pipe.train_step(pipe.is_first() ? batch.inputs : torch::Tensor(),
                        pipe.is_last() ? batch.targets : torch::Tensor(), torch::nn::MSELoss());
    opt.step();
    if (std::abs(loss - expected[step]) > 1e-5 * std::max(1.0, expected[step]))
      throw std::runtime_error(Pipe::name() + ": step " + std::to_string(step) + " loss " +
                               std::to_string(loss) +
                               ", one process: " + std::to_string(expected[step]));
  }
  for (const auto& piece : pipe.pieces()) {
    std::vector<torch::Tensor> want;
    for (int layer = piece.layers.begin; layer < piece.layers.end; ++layer)
      for (const auto& p : reference->ptr(layer)->parameters()) want.push_back(p);
    require_close(piece.module->parameters(), want,
                  Pipe::name() + " layers [" + std::to_string(piece.layers.begin) + ", " +
                      std::to_string(piece.layers.end) + ")");
  }
  if (world.rank() == 0)
    std::printf("pipeline ok: %s on %d ranks trains as one process (loss %.4f -> %.4f)\n",
                Pipe::name().c_str(), world.size(), expected.front(), expected.back());
}

/// One replica per rank, each on its share of the batch, gradients averaged by DDP's hooks.
void train_ddp(const mpp::Group<mpp::Gloo>& world) {
  std::vector<double> expected;
  auto reference = train_alone(expected);

  const Regressor model;
  auto net = model.build(0, model.num_layers());
  mpp::DDP<mpp::Async<mpp::Gloo>> ddp(*net, world);
  torch::optim::SGD opt(net->parameters(), learning_rate);
  const std::int64_t share = batch_size / world.size();
  for (int step = 0; step < steps; ++step) {
    const auto batch = make_batch(step);
    opt.zero_grad();
    const auto inputs = batch.inputs.narrow(0, world.rank() * share, share);
    const auto targets = batch.targets.narrow(0, world.rank() * share, share);
    torch::mse_loss(net->forward(inputs), targets).backward();
    opt.step();
  }
  require_close(net->parameters(), reference->parameters(), "DDP");
  if (world.rank() == 0)
    std::printf("ddp ok: DDP<%s> on %d ranks trains as one process\n",
                mpp::comm_display_name<mpp::Async<mpp::Gloo>>().c_str(), world.size());
}

}  // namespace

int main() {
  try {
    auto world = mpp::init_process_group();
    if (world.size() != 2) throw std::runtime_error("run on 2 ranks: mpprun --nproc-per-node 2");
    train_pipeline<mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<4>, mpp::Async<mpp::Gloo>>>(world);
    train_pipeline<mpp::Pipeline<mpp::Uniform<2>, consumer::Searched, mpp::Async<mpp::Gloo>>>(
        world);
    train_ddp(world);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpp consumer: %s\n", e.what());
    return 1;
  }
}
