// The README's example, quoted there by tools/docs/mpp-docs (so the README shows this file as it
// is) and built and run on 4 ranks by CTest (docs.readme_example), so that it cannot rot.
// [quote:readme]
#include <torch/torch.h>

#include <cstdio>

#include "mpp/comm.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/pipeline.hpp"

// 16 Linear layers cut into 4 stages, 1F1B over 8 micro-batches, sends posted over Gloo.
using Pipe = mpp::Pipeline<mpp::Uniform<4>, mpp::OneFOneB<8>, mpp::Async<mpp::Gloo>>;

// The compiler replays the schedule: it would also run with blocking sends (no deadlock, every
// micro-batch once) and holds at most 4 micro-batches on rank 0, where GPipe holds all 8.
constexpr auto proof = mpp::verify<Pipe::schedule_type, mpp::Blocking<mpp::Gloo>>(Pipe::stages);
static_assert(proof.ok && proof.peak_in_flight[0] == 4);
static_assert(
    mpp::verify<mpp::GPipe<8>, mpp::Blocking<mpp::Gloo>>(Pipe::stages).peak_in_flight[0] == 8);

int main() {
  auto world = mpp::init_process_group();  // RANK, WORLD_SIZE, ... as mpprun or torchrun set them
  const mpp::models::MlpConfig cfg{.hidden = 64, .layers = 16, .seed = 1};
  Pipe pipe(world, mpp::MlpModel{cfg});  // builds this rank's 4 layers, and only those
  torch::optim::Adam opt(pipe.parameters(), torch::optim::AdamOptions(1e-3));
  const auto batch = mpp::models::make_regression_batch(cfg, 64, 0);
  auto mse = [](const at::Tensor& out, const at::Tensor& y) { return torch::mse_loss(out, y); };
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    const double loss = pipe.train_step(batch.inputs, batch.targets, mse);  // the batch's mean loss
    opt.step();
    if (world.rank() == 0 && step % 5 == 4) std::printf("step %2d  loss %.5f\n", step + 1, loss);
  }
}
// [/quote:readme]
