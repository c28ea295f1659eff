// The README's example, quoted there by tools/docs/mpp-docs (so the README shows this file as it
// is) and built and run on 4 ranks by CTest (docs.readme_example), so that it cannot rot. The
// quoted region stays within 20 lines.
// [quote:readme]
#include <torch/torch.h>
#include "mpp/pipeline.hpp"

using Pipe = mpp::Pipeline<mpp::Uniform<4>, mpp::OneFOneB<8>, mpp::Async<mpp::Gloo>>;
// Replayed by the compiler: no deadlock even with blocking sends; rank 0 holds <= 4 micro-batches.
constexpr auto proof = mpp::verify<Pipe::schedule_type, mpp::Blocking<mpp::Gloo>>(Pipe::ranks);
static_assert(proof.ok && proof.peak_in_flight[0] == 4);
int main() {
  auto world = mpp::init_process_group();  // RANK, WORLD_SIZE, ... as mpprun or torchrun set them
  const mpp::models::MlpConfig cfg{.hidden = 64, .layers = 16, .seed = 1};
  Pipe pipe(world, mpp::MlpModel{cfg});  // builds this rank's 4 layers, and only those
  torch::optim::Adam opt(pipe.parameters(), 1e-3);
  const auto batch = mpp::models::make_regression_batch(cfg, 64, 0);
  for (int step = 1; step <= 20; ++step) {
    opt.zero_grad();
    const double loss = pipe.train_step(batch.inputs, batch.targets, torch::nn::MSELoss());
    opt.step();
    if (world.rank() == 0 && step % 5 == 0) std::printf("step %2d  loss %.5f\n", step, loss);
  }
}
// [/quote:readme]
