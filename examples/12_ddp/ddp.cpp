// Lab 12 — DDP: the all-reduce hidden behind backward.
//
// Naive DP waits for backward to finish before it sends a single byte. But backward produces the
// gradients from the last layer to the first, so the last layers' gradients are final long
// before backward ends. DDP puts a hook on every parameter's gradient accumulator, packs the
// gradients into buckets (in that reverse order, up to --bucket-mb each) and starts an
// asynchronous all-reduce the moment a bucket is full; backward keeps computing meanwhile, and
// only the tail of the communication is left to wait for at the end.
//
// The lab measures, per step: backward alone (no communication), the all-reduce alone (no
// compute), and backward under DDP. If nothing overlapped, the last would be the sum of the first
// two; the difference is the communication DDP hid. Then it compares whole training steps with
// naive DP.
//
//   mpprun --nproc-per-node 2 ./ddp [--hidden 1024] [--global-batch 128] [--bucket-mb 25] [--steps
//   20]
#include <torch/nn/modules/loss.h>
#include <torch/optim/adam.h>
#include <CLI/CLI.hpp>

#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>

#include "mpp/comm/process_group.hpp"
#include "mpp/data_parallel.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/util/blas.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Setup {
  mpp::models::MlpConfig cfg;
  std::int64_t local_batch = 64;
  int steps = 20;
};

mpp::models::Batch local_batch(const Setup& s, const mpp::ProcessGroup& world, int step) {
  // each rank makes its own shard (a different stream per rank and step)
  return mpp::models::make_regression_batch(s.cfg, s.local_batch,
                                            step * world.size() + world.rank());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 12: DDP, gradient buckets all-reduced during backward"};
  Setup s;
  s.cfg.hidden = 1024;
  std::int64_t global_batch = 128;
  double bucket_mb = 25;
  app.add_option("--hidden", s.cfg.hidden, "width of the 16 Linear layers");
  app.add_option("--global-batch", global_batch, "samples per step over all ranks");
  app.add_option("--bucket-mb", bucket_mb, "bucket cap in MiB");
  app.add_option("--steps", s.steps, "timed steps per measurement");
  CLI11_PARSE(app, argc, argv);

  at::set_num_threads(1);
  auto world = mpp::init_process_group();
  s.local_batch = global_batch / world.size();
  const bool root = world.rank() == 0;
  if (root) {
    mpp::util::print_blas_report(at::get_num_threads());
    std::printf(
        "%d ranks, %d x Linear(%lld), global batch %lld, bucket cap %.1f MiB, %d steps per "
        "measurement\n\n",
        world.size(), s.cfg.layers, static_cast<long long>(s.cfg.hidden),
        static_cast<long long>(global_batch), bucket_mb, s.steps);
  }

  auto model = mpp::models::make_full_mlp(s.cfg);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-4));
  // [quote:train_step]
  auto train_step = [&](int step, auto&& sync) {
    opt.zero_grad();
    const auto b = local_batch(s, world, step);
    auto loss = torch::mse_loss(model->forward(b.inputs), b.targets);
    const auto t = Clock::now();
    loss.backward();
    sync();
    const double backward_s = seconds_since(t);
    opt.step();
    return std::pair{loss.item<double>(), backward_s};
  };
  // [/quote:train_step]

  // 1. Naive DP: backward, then one all-reduce per gradient tensor.
  double naive_step_s = 0, naive_comm_s = 0;
  {
    mpp::NaiveDP<mpp::Blocking<mpp::Gloo>, mpp::PerTensor> naive(*model, world);
    train_step(-1, [&] { naive.sync_gradients(); });  // warm-up
    naive.reset_comm_time();
    world.barrier();
    const auto t = Clock::now();
    for (int i = 0; i < s.steps; ++i) train_step(i, [&] { naive.sync_gradients(); });
    naive_step_s = seconds_since(t) / s.steps;
    naive_comm_s = naive.comm_seconds() / s.steps;
  }

  // [quote:ddp]
  mpp::DDP<mpp::Async<mpp::Gloo>> ddp(
      *model, world, {.bucket_bytes = static_cast<std::size_t>(bucket_mb * 1024 * 1024)});
  // [/quote:ddp]
  const auto& plan = ddp.buckets();

  // 2. Backward alone: DDP's no_sync() turns the hooks off.
  double backward_alone_s = 0;
  {
    auto guard = ddp.no_sync();
    for (int i = 0; i < s.steps; ++i) {
      opt.zero_grad();
      const auto b = local_batch(s, world, i);
      auto loss = torch::mse_loss(model->forward(b.inputs), b.targets);
      const auto t = Clock::now();
      loss.backward();
      backward_alone_s += seconds_since(t);
    }
    backward_alone_s /= s.steps;
  }

  // 3. The same all-reduces alone: one per bucket, launched together, then waited.
  double comm_alone_s = 0;
  {
    std::vector<at::Tensor> buffers;
    for (const auto& bucket : plan.buckets)
      buffers.push_back(at::ones({static_cast<std::int64_t>(bucket.elements)}));
    world.barrier();
    for (int i = 0; i < s.steps; ++i) {
      const auto t = Clock::now();
      std::vector<mpp::Request> pending;
      for (auto& b : buffers) pending.push_back(world.iall_reduce(b));
      mpp::wait_all(pending);
      comm_alone_s += seconds_since(t);
    }
    comm_alone_s /= s.steps;
  }

  // 4. DDP: backward with the buckets going out as they fill.
  double ddp_backward_s = 0, ddp_step_s = 0, last_loss = 0;
  {
    train_step(-1, [] {});  // warm-up (the first step also moves .grad into the buckets)
    ddp.reset_comm_wait();
    world.barrier();
    const auto t = Clock::now();
    for (int i = 0; i < s.steps; ++i) {
      auto [loss, backward_s] = train_step(i, [] {});
      ddp_backward_s += backward_s;
      last_loss = loss;
    }
    ddp_step_s = seconds_since(t) / s.steps;
    ddp_backward_s /= s.steps;
  }
  const double exposed_s = ddp.comm_wait_seconds() / s.steps;

  std::printf("rank %d  last loss on my shard %.5f (ranks differ: each sees its own samples)\n",
              world.rank(), last_loss);
  const auto report = mpp::compare_replicas(*model, world);
  if (root) {
    const double ms = 1e3;
    std::printf("\n%zu buckets:", plan.buckets.size());
    for (const auto& b : plan.buckets)
      std::printf(" %.1f MiB", static_cast<double>(b.bytes) / (1024.0 * 1024.0));
    std::printf("\nper step (rank 0):\n");
    std::printf("  backward alone                    %8.1f ms\n", backward_alone_s * ms);
    std::printf("  all-reduce of the buckets alone   %8.1f ms\n", comm_alone_s * ms);
    std::printf("  sum (if nothing overlapped)       %8.1f ms\n",
                (backward_alone_s + comm_alone_s) * ms);
    std::printf(
        "  backward with DDP                 %8.1f ms   (of which waiting at the end %.1f ms)\n",
        ddp_backward_s * ms, exposed_s * ms);
    std::printf("  communication hidden by overlap   %8.1f ms (%.0f%% of the all-reduce time)\n",
                (backward_alone_s + comm_alone_s - ddp_backward_s) * ms,
                100.0 * (backward_alone_s + comm_alone_s - ddp_backward_s) / comm_alone_s);
    std::printf(
        "\nwhole training step: naive DP %.1f ms (%.1f ms of it all-reduce) -> DDP %.1f ms\n",
        naive_step_s * ms, naive_comm_s * ms, ddp_step_s * ms);
    std::printf("throughput: naive DP %.0f samples/s, DDP %.0f samples/s, speedup %.2fx\n",
                static_cast<double>(global_batch) / naive_step_s,
                static_cast<double>(global_batch) / ddp_step_s, naive_step_s / ddp_step_s);
    std::printf("replicas bit-identical after training: %s\n",
                report ? "yes" : report.first_difference.c_str());
  }
  return report ? 0 : 1;
}
