// Lab 14 — DP x PP: data parallelism over pipelines.
//
// Four ranks form a 2 x 2 mesh: two pipeline replicas of two stages each. Within a replica the
// stages pass activations forward and gradients back (1F1B over 4 micro-batches); across
// replicas, the two ranks that hold the same stage average their gradients after every step.
// Each replica reads its own half of the global batch (a DistributedSampler over the replicas).
//
//                stage 0   stage 1
//   replica 0    rank 0 -> rank 1      pipeline group {0, 1}
//   replica 1    rank 2 -> rank 3      pipeline group {2, 3}
//                  |          |
//             data {0, 2}  data {1, 3}   (gradient all-reduce per stage)
//
//   mpprun --nproc-per-node 4 ./hybrid [steps=30] [global_batch=64] [--svg step.svg]
//
// On a world size that is not a multiple of 2 every rank prints why and exits with code 1.
#include <torch/nn/modules/loss.h>
#include <torch/optim/adam.h>

#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "mpp/comm/init.hpp"
#include "mpp/data_parallel/hybrid.hpp"
#include "mpp/data_parallel/replicas.hpp"
#include "mpp/data_parallel/sampler.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/pipeline/report.hpp"
#include "mpp/util/blas.hpp"

#include "../common/lab_main.hpp"

// [quote:pipe]
using Pipe = mpp::Pipeline<mpp::Uniform<2>, mpp::OneFOneB<4>, mpp::Async<mpp::Gloo>>;
// [/quote:pipe]

namespace {

int run(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string svg;  // rank 0 draws its pipeline's last step here, if given
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--svg" && i + 1 < argc)
      svg = argv[++i];
    else
      positional.emplace_back(argv[i]);
  }
  const int steps = positional.size() > 0 ? std::atoi(positional[0].c_str()) : 30;
  const std::int64_t global_batch = positional.size() > 1 ? std::atoll(positional[1].c_str()) : 64;
  at::set_num_threads(1);
  auto world = mpp::init_process_group();
  const mpp::models::MlpConfig cfg;  // 16 x Linear(128)

  // [quote:mesh]
  mpp::DataPipelineMesh mesh(world, Pipe::ranks);  // throws if the world is not a multiple of 2
  mpp::DataParallelPipeline<Pipe> hybrid(mesh, mpp::MlpModel{cfg});
  torch::optim::Adam opt(hybrid.parameters(), torch::optim::AdamOptions(1e-3));
  // [/quote:mesh]
  if (world.rank() == 0) {
    mpp::util::print_blas_report(at::get_num_threads());
    std::printf("%s x %d replicas on %d ranks, global batch %lld\n", Pipe::name().c_str(),
                mesh.data_degree(), world.size(), static_cast<long long>(global_batch));
  }
  std::printf("rank %d: replica %d, stage %d, layers [%d, %d)\n", world.rank(), mesh.replica(),
              mesh.pipeline_rank(), hybrid.pipeline().pieces().front().layers.begin,
              hybrid.pipeline().pieces().back().layers.end);

  // A dataset every rank can generate; each replica reads its own shard of it.
  const std::int64_t dataset_size = 4096;
  const auto data = mpp::models::make_regression_batch(cfg, dataset_size, 0);
  mpp::DistributedSampler sampler(dataset_size, mesh.data_degree(), mesh.replica());
  const auto shard = global_batch / mesh.data_degree();
  auto order = sampler.indices();

  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  for (int step = 0; step < steps; ++step) {
    const auto first =
        static_cast<std::size_t>(step * shard) % (order.size() - static_cast<std::size_t>(shard));
    std::vector<std::int64_t> rows(order.begin() + static_cast<std::ptrdiff_t>(first),
                                   order.begin() + static_cast<std::ptrdiff_t>(first) + shard);
    const auto index = torch::tensor(rows);
    // [quote:step]
    opt.zero_grad();
    loss = hybrid.train_step(
        mesh.pipeline_rank() == 0 ? data.inputs.index_select(0, index) : at::Tensor(),
        mesh.pipeline_rank() == Pipe::ranks - 1 ? data.targets.index_select(0, index)
                                                : at::Tensor(),
        [](const at::Tensor& out, const at::Tensor& y) { return torch::mse_loss(out, y); });
    opt.step();
    // [/quote:step]
    if (world.rank() == 0 && (step % 10 == 0 || step + 1 == steps))
      std::printf("step %3d  global mean loss %.5f\n", step, loss);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Each pipeline's last step as its ranks measured it (a collective within each pipeline; the
  // replica's stage 0 gets the report), drawn by rank 0 for replica 0.
  const auto report = mpp::report_last_step(hybrid.pipeline());
  if (report && world.rank() == 0 && !svg.empty()) {
    mpp::SvgOptions picture;
    picture.title = Pipe::name() + ", replica 0 of " + std::to_string(mesh.data_degree()) +
                    ": the last step as measured (microseconds)";
    char subtitle[256];
    std::snprintf(subtitle, sizeof subtitle,
                  "pipeline bubble measured %.1f%%, predicted %.1f%%; then %.1f ms per step "
                  "averaging each stage's gradients with its replica; 4 ranks on 2 shared cores",
                  100.0 * report->figures.bubble,
                  100.0 * report->predicted_measured.bubble_fraction(),
                  1e3 * hybrid.grad_sync_seconds() / steps);
    picture.subtitle = subtitle;
    std::ofstream(svg) << mpp::trace::svg_timeline(report->traces, picture);
    std::printf("rank 0: replica 0's last step drawn in %s\n", svg.c_str());
  }

  // The two replicas of each stage must hold the same weights.
  bool identical = true;
  for (const auto& piece : hybrid.pipeline().pieces())
    identical =
        identical && static_cast<bool>(mpp::compare_replicas(*piece.module, mesh.data_group()));
  std::printf(
      "rank %d: %.0f samples/s, %.1f ms per step averaging gradients across replicas, stage "
      "replicas "
      "identical: %s\n",
      world.rank(), static_cast<double>(steps * global_batch) / seconds,
      1e3 * hybrid.grad_sync_seconds() / steps, identical ? "yes" : "NO");
  return identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::guarded_main("hybrid", [&] { return run(argc, argv); });
}
