// Lab 13 — DDP: the all-reduce hidden behind backward.
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
// naive DP, and finally the optimizer step replicated on every rank against sharded over the
// ranks (ShardedOptimizer: each rank steps its share of the parameters, then shares them).
//
//   mpprun --nproc-per-node 2 ./ddp [--hidden 1024] [--global-batch 128] [--bucket-mb 25] [--steps
//   20] [--svg overlap.svg]
#include <torch/csrc/autograd/function_hook.h>
#include <torch/nn/modules/loss.h>
#include <torch/optim/adam.h>
#include <CLI/CLI.hpp>

#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "mpp/comm/init.hpp"
#include "mpp/data_parallel.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/trace/plot.hpp"
#include "mpp/util/blas.hpp"

#include "../common/lab_main.hpp"

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

// When each parameter's gradient is ready: a post hook on its gradient accumulator, the mechanism
// DDP itself uses. Registered after DDP's hooks, it fires right after DDP has counted the
// gradient, i.e. when the bucket it completes has been launched.
struct ReadyClock final : torch::autograd::FunctionPostHook {
  ReadyClock(std::vector<Clock::time_point>* ready, std::size_t index)
      : ready(ready), index(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    (*ready)[index] = Clock::now();
    return outputs;
  }
  std::vector<Clock::time_point>* ready;
  std::size_t index;
};

/// One step's landmarks on rank 0, in milliseconds from the step's start.
struct StepTimes {
  double forward_end = 0, backward_end = 0, step_end = 0;
  double last_gradient = 0;             // DDP: when the last gradient was ready
  std::vector<double> launched;         // DDP: bucket b's all-reduce started
  double sync_begin = 0, sync_end = 0;  // naive DP: the all-reduce after backward
};

double ms_since(Clock::time_point start, Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(t - start).count();
}

// Naive DP's step and DDP's step on one time axis: compute in one lane, communication below.
void draw_overlap(const std::string& path, const StepTimes& naive, const StepTimes& ddp,
                  const std::string& subtitle) {
  const std::string compute = "#4e79a7", reduce = "#bab0ac", wait = "#e15759", adam = "#76b7b2";
  std::vector<std::string> lanes{"naive DP: compute", "naive DP: all-reduce", "DDP: compute"};
  std::vector<mpp::trace::LaneSpan> spans{
      {0, 0, naive.forward_end, "forward", compute, ""},
      {0, naive.forward_end, naive.sync_begin, "backward", "#59a14f", ""},
      {1, naive.sync_begin, naive.sync_end, "all-reduce, every gradient", reduce, ""},
      {0, naive.sync_end, naive.step_end, "", adam, "Adam step"},
      {2, 0, ddp.forward_end, "forward", compute, ""},
      {2, ddp.last_gradient, ddp.backward_end, "", wait,
       "backward() waiting for the all-reduces after the last gradient"},
      {2, ddp.backward_end, ddp.step_end, "", adam, "Adam step"}};
  // The backward in pieces: from one bucket's launch to the next, it computes that bucket's
  // gradients.
  double from = ddp.forward_end;
  for (std::size_t b = 0; b < ddp.launched.size(); ++b) {
    spans.push_back({2, from, ddp.launched[b], "bucket " + std::to_string(b), "#59a14f",
                     "backward: the gradients of bucket " + std::to_string(b)});
    from = ddp.launched[b];
  }
  for (std::size_t b = 0; b < ddp.launched.size(); ++b) {
    lanes.push_back("DDP: bucket " + std::to_string(b));
    spans.push_back({static_cast<int>(lanes.size()) - 1, ddp.launched[b], ddp.backward_end,
                     "all-reduce", reduce,
                     "bucket " + std::to_string(b) +
                         ": from its launch to the end of backward(), by which it is done"});
  }
  const std::vector<mpp::trace::LegendEntry> legend{{"forward", compute},
                                                    {"backward", "#59a14f"},
                                                    {"all-reduce", reduce},
                                                    {"blocked on all-reduce", wait},
                                                    {"optimizer", adam}};
  mpp::trace::PlotOptions plot;
  plot.title = "Lab 13: one training step on rank 0, naive DP against DDP (milliseconds)";
  plot.subtitle = subtitle;
  plot.x_label = "milliseconds since the step began";
  plot.width = 900;
  std::ofstream(path) << mpp::trace::render_lanes(lanes, spans, legend, plot);
}

}  // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{"Lab 13: DDP, gradient buckets all-reduced during backward"};
  Setup s;
  s.cfg.hidden = 1024;
  std::int64_t global_batch = 128;
  double bucket_mb = 25;
  app.add_option("--hidden", s.cfg.hidden, "width of the 16 Linear layers");
  app.add_option("--global-batch", global_batch, "samples per step over all ranks");
  app.add_option("--bucket-mb", bucket_mb, "bucket cap in MiB");
  app.add_option("--steps", s.steps, "timed steps per measurement");
  std::string svg;
  app.add_option("--svg", svg, "draw one naive DP step and one DDP step of rank 0 here (SVG)");
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
  StepTimes naive_times;
  {
    mpp::NaiveDP<mpp::Blocking<mpp::Gloo>, mpp::PerTensor> naive(*model, world);
    train_step(-1, [&] { naive.sync_gradients(); });  // warm-up
    naive.reset_comm_time();
    world.barrier();
    const auto t = Clock::now();
    for (int i = 0; i < s.steps; ++i) train_step(i, [&] { naive.sync_gradients(); });
    naive_step_s = seconds_since(t) / s.steps;
    naive_comm_s = naive.comm_seconds() / s.steps;
    // One more step, its landmarks timed for the picture.
    const auto start = Clock::now();
    opt.zero_grad();
    const auto b = local_batch(s, world, s.steps);
    auto loss = torch::mse_loss(model->forward(b.inputs), b.targets);
    naive_times.forward_end = ms_since(start, Clock::now());
    loss.backward();
    naive_times.sync_begin = ms_since(start, Clock::now());
    naive.sync_gradients();
    naive_times.sync_end = ms_since(start, Clock::now());
    opt.step();
    naive_times.step_end = ms_since(start, Clock::now());
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

  // 5. One more DDP step, its landmarks timed for the picture: when each gradient was ready
  // (hooks registered after DDP's), hence when each bucket was launched.
  StepTimes ddp_times;
  const auto params = model->parameters();
  std::vector<Clock::time_point> ready(params.size());  // outlives the hooks' last use
  {
    // [quote:ready_clock]
    std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
    for (std::size_t i = 0; i < params.size(); ++i) {
      accumulators.push_back(torch::autograd::impl::grad_accumulator(params[i]));
      accumulators.back()->add_post_hook(std::make_unique<ReadyClock>(&ready, i));
    }
    // [/quote:ready_clock]
    const auto start = Clock::now();
    opt.zero_grad();
    const auto b = local_batch(s, world, s.steps);
    auto loss = torch::mse_loss(model->forward(b.inputs), b.targets);
    ddp_times.forward_end = ms_since(start, Clock::now());
    loss.backward();
    ddp_times.backward_end = ms_since(start, Clock::now());
    opt.step();
    ddp_times.step_end = ms_since(start, Clock::now());
    double launched = 0;
    for (const auto& bucket : plan.buckets) {
      for (std::size_t p : bucket.params) launched = std::max(launched, ms_since(start, ready[p]));
      ddp_times.launched.push_back(launched);  // buckets go out in plan order
    }
    ddp_times.last_gradient = launched;
  }

  // 6. The optimizer step itself, replicated (every rank runs Adam on the whole model) and
  // sharded (each rank runs it on its share, then the updated parameters are exchanged). On
  // fresh replicas whose all-reduces go through shared memory (ranks of one host).
  double replicated_step_s = 0, sharded_step_s = 0;
  std::int64_t replicated_state = 0, sharded_state = 0;
  {
    auto shm = world.new_group<mpp::Shm>();
    const auto cap = static_cast<std::size_t>(bucket_mb * 1024 * 1024);
    for (const bool shard : {false, true}) {
      auto replica = mpp::models::make_full_mlp(s.cfg);
      mpp::DDP<mpp::Async<mpp::Shm>> shm_ddp(*replica, shm, {.bucket_bytes = cap});
      // [quote:sharded]
      std::unique_ptr<torch::optim::Adam> whole;  // replicated: the whole model on every rank
      std::unique_ptr<mpp::ShardedOptimizer<torch::optim::Adam, mpp::Async<mpp::Shm>>> part;
      if (shard)
        part = std::make_unique<mpp::ShardedOptimizer<torch::optim::Adam, mpp::Async<mpp::Shm>>>(
            *replica, shm, torch::optim::AdamOptions(1e-4));
      else
        whole = std::make_unique<torch::optim::Adam>(replica->parameters(),
                                                     torch::optim::AdamOptions(1e-4));
      auto step = [&](int i) {
        shard ? part->zero_grad() : whole->zero_grad();
        const auto b = local_batch(s, world, i);
        torch::mse_loss(replica->forward(b.inputs), b.targets).backward();
        if (shard)
          part->step();
        else
          whole->step();
      };
      // [/quote:sharded]
      step(-1);
      world.barrier();
      const auto t = Clock::now();
      for (int i = 0; i < s.steps; ++i) step(i);
      (shard ? sharded_step_s : replicated_step_s) = seconds_since(t) / s.steps;
      // Adam keeps two tensors the size of each parameter it steps.
      std::int64_t state = 0;
      for (const auto& p : shard ? part->local_parameters() : replica->parameters())
        state += 2 * static_cast<std::int64_t>(p.numel() * p.element_size());
      (shard ? sharded_state : replicated_state) = state;
      const auto same = mpp::compare_replicas(*replica, shm);
      if (!same) {
        std::fprintf(stderr, "rank %d: %s replicas differ: %s\n", world.rank(),
                     shard ? "sharded" : "replicated", same.first_difference.c_str());
        return 1;
      }
    }
  }

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
    const double mib = 1024.0 * 1024.0;
    std::printf(
        "\noptimizer step over shared memory (Shm), DDP<Async<Shm>> + Adam:\n"
        "  replicated (Adam on the whole model)  %8.1f ms per step, Adam state %6.1f MiB per rank\n"
        "  sharded (ShardedOptimizer<Adam>)      %8.1f ms per step, Adam state %6.1f MiB per "
        "rank\n",
        replicated_step_s * ms, static_cast<double>(replicated_state) / mib, sharded_step_s * ms,
        static_cast<double>(sharded_state) / mib);
    if (!svg.empty()) {
      char subtitle[256];
      std::snprintf(
          subtitle, sizeof subtitle,
          "%d ranks, 16 x Linear(%lld), global batch %lld, %zu buckets of at most %.0f MiB; "
          "one thread per rank on a shared 2-core machine",
          world.size(), static_cast<long long>(s.cfg.hidden), static_cast<long long>(global_batch),
          plan.buckets.size(), bucket_mb);
      draw_overlap(svg, naive_times, ddp_times, subtitle);
      std::printf("one naive DP step and one DDP step drawn in %s\n", svg.c_str());
    }
  }
  return report ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::guarded_main("ddp", [&] { return run(argc, argv); });
}
