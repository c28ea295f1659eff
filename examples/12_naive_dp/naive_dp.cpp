// Lab 12 — naive data parallelism across processes.
//
// Every rank holds a full replica (rank 0's weights are broadcast, whatever seed the others
// used), reads its own shard of each epoch through a DistributedSampler, runs forward and
// backward on it, and only then averages every gradient over the ranks before the optimizer
// step. The ranks print different losses — they see different samples — but take identical
// steps, so their weights never drift apart (checked at the end, bit for bit).
//
//   mpprun --nproc-per-node 2 ./naive_dp [--coalesced] [--hidden 128] [--global-batch 64]
#include <torch/nn/modules/loss.h>
#include <torch/optim/adam.h>
#include <CLI/CLI.hpp>

#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>

#include "mpp/comm/init.hpp"
#include "mpp/data_parallel.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/util/blas.hpp"

#include "../common/lab_main.hpp"

namespace {

using Clock = std::chrono::steady_clock;

template <class DP>
int train(const mpp::Group<typename DP::comm_type::backend>& world,
          const mpp::models::MlpConfig& cfg, std::int64_t dataset_size, std::int64_t global_batch,
          int epochs) {
  // [quote:replica]
  // Each rank builds its replica with its own seed: the broadcast inside NaiveDP fixes that.
  auto model = mpp::models::make_full_mlp(
      {cfg.hidden, cfg.layers, cfg.seed + static_cast<std::uint64_t>(world.rank())});
  DP dp(*model, world);
  // [/quote:replica]
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));

  // The dataset: the same on every rank (here generated; in practice read from disk).
  const auto data = mpp::models::make_regression_batch(cfg, dataset_size, /*step=*/0);
  mpp::DistributedSampler sampler(static_cast<std::size_t>(dataset_size), world.size(),
                                  world.rank());
  const std::int64_t local_batch = global_batch / world.size();

  double compute_s = 0;
  std::int64_t samples = 0;
  const auto start = Clock::now();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    const auto order = sampler.indices();
    const auto index = torch::tensor(std::vector<std::int64_t>(order.begin(), order.end()));
    double epoch_loss = 0;
    int batches = 0;
    for (std::int64_t first = 0; first + local_batch <= index.size(0); first += local_batch) {
      const auto rows = index.narrow(0, first, local_batch);
      const auto t0 = Clock::now();
      // [quote:step]
      opt.zero_grad();
      auto loss = torch::mse_loss(model->forward(data.inputs.index_select(0, rows)),
                                  data.targets.index_select(0, rows));
      loss.backward();
      compute_s += std::chrono::duration<double>(Clock::now() - t0).count();
      dp.sync_gradients();  // the whole all-reduce happens here, after backward
      opt.step();
      // [/quote:step]
      epoch_loss += loss.item<double>();
      ++batches;
      samples += global_batch;
    }
    std::printf("rank %d  epoch %d  mean loss on my shard %.5f\n", world.rank(), epoch,
                epoch_loss / batches);
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  const auto report = mpp::compare_replicas(*model, world);
  std::printf(
      "rank %d  %s: %.0f samples/s | backward+forward %.3f s, all-reduce %.3f s (%.0f%% of the "
      "run)\n",
      world.rank(), DP::reduction_type::name.data(), samples / total_s, compute_s,
      dp.comm_seconds(), 100.0 * dp.comm_seconds() / total_s);
  std::printf("rank %d  replicas bit-identical: %s\n", world.rank(),
              report ? "yes" : report.first_difference.c_str());
  return report ? 0 : 1;
}

}  // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"Lab 12: naive data parallelism (all-reduce after backward)"};
  bool coalesced = false;
  mpp::models::MlpConfig cfg;
  std::int64_t dataset_size = 2048, global_batch = 64;
  int epochs = 3;
  app.add_flag("--coalesced", coalesced,
               "one all-reduce of one flat buffer instead of one per tensor");
  app.add_option("--hidden", cfg.hidden, "width of the 16 Linear layers");
  app.add_option("--dataset", dataset_size, "samples in the dataset");
  app.add_option("--global-batch", global_batch, "samples per step over all ranks");
  app.add_option("--epochs", epochs);
  CLI11_PARSE(app, argc, argv);

  at::set_num_threads(1);
  auto world = mpp::init_process_group();
  if (global_batch % world.size() != 0) {
    std::fprintf(stderr, "mpp: --global-batch %lld must be a multiple of the %d ranks\n",
                 static_cast<long long>(global_batch), world.size());
    return 2;
  }
  if (world.rank() == 0) {
    mpp::util::print_blas_report(at::get_num_threads());
    std::printf("%d ranks, %d x Linear(%lld), global batch %lld (%lld per rank), dataset %lld\n",
                world.size(), cfg.layers, static_cast<long long>(cfg.hidden),
                static_cast<long long>(global_batch),
                static_cast<long long>(global_batch / world.size()),
                static_cast<long long>(dataset_size));
  }
  return coalesced ? train<mpp::NaiveDP<mpp::Blocking<mpp::Gloo>, mpp::Coalesced>>(
                         world, cfg, dataset_size, global_batch, epochs)
                   : train<mpp::NaiveDP<mpp::Blocking<mpp::Gloo>, mpp::PerTensor>>(
                         world, cfg, dataset_size, global_batch, epochs);
}

}  // namespace

int main(int argc, char** argv) {
  return lab::guarded_main("naive_dp", [&] { return run(argc, argv); });
}
