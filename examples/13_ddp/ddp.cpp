// Lab 13 — DDP: the all-reduce hidden behind backward.
//
// Naive DP waits for backward to finish before it sends a single byte. But backward produces the
// gradients from the last layer to the first, so the last layers' gradients are final long
// before backward ends. DDP puts a hook on every parameter's gradient accumulator, packs the
// gradients into buckets (in that reverse order, up to --bucket-mb each) and starts an
// asynchronous all-reduce the moment a bucket is full; backward keeps computing meanwhile, and
// only the tail of the communication is left to wait for at the end.
//
// Both sides do the same work: the same forward and backward, the same gradients averaged over
// Gloo with asynchronous all-reduces, the same Adam step. What differs is when the all-reduces
// start: naive DP posts them after backward (NaiveDP<Async<Gloo>, PerTensor>: one per gradient
// tensor), DDP as its buckets fill. The compared span is backward plus averaging, from the start
// of backward() to the moment every gradient holds the mean; forward and the Adam step, the same
// on both sides, are timed apart. The lab also measures backward alone (DDP's no_sync()) and the
// buckets' all-reduces alone: if nothing overlapped, DDP's span would be their sum.
//
//   mpprun --nproc-per-node 2 ./ddp [--hidden 1024] [--global-batch 128] [--bucket-mb 1]
//                                   [--steps 8] [--svg overlap.svg [--link "what joins them"]]
#include <torch/csrc/autograd/function_hook.h>
#include <torch/nn/modules/loss.h>
#include <torch/optim/adam.h>
#include <CLI/CLI.hpp>

#include <ATen/Parallel.h>

#include <algorithm>
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
double ms_since(Clock::time_point start, Clock::time_point t = Clock::now()) {
  return std::chrono::duration<double, std::milli>(t - start).count();
}

struct Setup {
  mpp::models::MlpConfig cfg;
  std::int64_t local_batch = 64;
  int steps = 8;
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

/// One step's landmarks, in milliseconds from the step's start. `averaged` is the moment every
/// gradient holds the mean: the end of the all-reduce after backward (naive DP), the return of
/// backward() (DDP).
struct StepTimes {
  Clock::time_point start;
  double forward_end = 0, backward_end = 0, averaged = 0, step_end = 0;
  double last_gradient = 0;      // DDP: when the last gradient was ready
  std::vector<double> launched;  // DDP: bucket b's all-reduce started
};

/// Per-step averages over the timed steps (milliseconds).
struct Averages {
  double forward = 0, backward = 0, averaging = 0, adam = 0;
  double span() const {
    return backward + averaging;
  }  // backward plus averaging: the compared span
  double step() const { return forward + span() + adam; }
};

// Naive DP's step and DDP's step on one time axis, up to the moment the gradients are averaged
// (the Adam step that follows is the same on both sides and is left out).
void draw_overlap(const std::string& path, const StepTimes& naive, const StepTimes& ddp,
                  const std::string& subtitle) {
  const std::string forward = "#4e79a7", backward = "#59a14f", reduce = "#bab0ac",
                    launch = "#79706e", wait = "#e15759";
  const std::vector<std::string> lanes{"naive DP: compute", "naive DP: all-reduce", "DDP: compute",
                                       "DDP: all-reduce"};
  std::vector<mpp::trace::LaneSpan> spans{
      {0, 0, naive.forward_end, "forward", forward, ""},
      {0, naive.forward_end, naive.backward_end, "backward", backward, ""},
      {1, naive.backward_end, naive.averaged, "all-reduce", reduce,
       "posted when backward() has returned, waited until every gradient holds the mean"},
      {2, 0, ddp.forward_end, "forward", forward, ""},
      {2, ddp.forward_end, ddp.last_gradient, "backward", backward,
       "backward, its hooks launching the buckets"},
      {2, ddp.last_gradient, ddp.averaged, "", wait,
       "backward() waiting for the all-reduces after the last gradient"}};
  if (!ddp.launched.empty()) {
    spans.push_back(
        {3, ddp.launched.front(), ddp.averaged,
         std::to_string(ddp.launched.size()) + " buckets in flight", reduce,
         "from the first bucket's launch to the end of backward(), by which all are done"});
    // A thin mark where each bucket went out.
    const double mark = std::max(0.3, 0.002 * ddp.averaged);
    for (std::size_t b = 0; b < ddp.launched.size(); ++b)
      spans.push_back({3, ddp.launched[b], ddp.launched[b] + mark, "", launch,
                       "bucket " + std::to_string(b) + " launched"});
  }
  const std::vector<mpp::trace::LegendEntry> legend{{"forward", forward},
                                                    {"backward", backward},
                                                    {"all-reduce", reduce},
                                                    {"a bucket launched", launch},
                                                    {"blocked on all-reduce", wait}};
  mpp::trace::PlotOptions plot;
  plot.title = "Lab 13: one step on rank 0 up to averaged gradients, naive DP against DDP";
  plot.subtitle = subtitle;
  plot.x_label = "milliseconds since the step began (the Adam step that follows is left out)";
  plot.width = 900;
  std::ofstream(path) << mpp::trace::render_lanes(lanes, spans, legend, plot);
}

int run(int argc, char** argv) {
  CLI::App app{"Lab 13: DDP, gradient buckets all-reduced during backward"};
  Setup s;
  s.cfg.hidden = 1024;
  std::int64_t global_batch = 128;
  double bucket_mb = 1;
  app.add_option("--hidden", s.cfg.hidden, "width of the 16 Linear layers");
  app.add_option("--global-batch", global_batch, "samples per step over all ranks");
  app.add_option("--bucket-mb", bucket_mb, "bucket cap in MiB");
  app.add_option("--steps", s.steps, "timed steps per measurement");
  std::string svg, link = "loopback";
  app.add_option("--svg", svg, "draw one naive DP step and one DDP step of rank 0 here (SVG)");
  app.add_option("--link", link, "what joins the ranks, for the picture's subtitle");
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
  // [quote:ddp]
  mpp::DDP<mpp::Async<mpp::Gloo>> ddp(
      *model, world, {.bucket_bytes = static_cast<std::size_t>(bucket_mb * 1024 * 1024)});
  // [/quote:ddp]
  // [quote:naive]
  // Naive DP on the same replica: every gradient's all-reduce posted after backward, then waited.
  mpp::NaiveDP<mpp::Async<mpp::Gloo>, mpp::PerTensor> naive_dp(*model, world);
  // [/quote:naive]
  const auto& plan = ddp.buckets();

  // [quote:train_step]
  // One training step, its landmarks timed. Naive DP runs backward with DDP's hooks switched off
  // and averages afterwards; DDP's hooks have averaged every gradient when backward() returns.
  auto train_step = [&](int step, bool naive) {
    StepTimes t;
    t.start = Clock::now();
    opt.zero_grad();
    const auto b = local_batch(s, world, step);
    auto loss = torch::mse_loss(model->forward(b.inputs), b.targets);
    t.forward_end = ms_since(t.start);
    if (naive) {
      auto hooks_off = ddp.no_sync();
      loss.backward();
      t.backward_end = ms_since(t.start);
      naive_dp.sync_gradients();  // the all-reduce of every gradient, after backward
    } else {
      loss.backward();  // the buckets go out as they fill, and are waited for at its end
      t.backward_end = ms_since(t.start);
    }
    t.averaged = ms_since(t.start);
    opt.step();  // the same Adam step on both sides, outside the compared span
    t.step_end = ms_since(t.start);
    return t;
  };
  // [/quote:train_step]

  // When each gradient was ready (hooks registered after DDP's), hence when each bucket went out.
  const auto params = model->parameters();
  std::vector<Clock::time_point> ready(params.size());  // outlives the hooks' last use
  // [quote:ready_clock]
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  for (std::size_t i = 0; i < params.size(); ++i) {
    accumulators.push_back(torch::autograd::impl::grad_accumulator(params[i]));
    accumulators.back()->add_post_hook(std::make_unique<ReadyClock>(&ready, i));
  }
  // [/quote:ready_clock]

  // Buffers the size of the buckets, for their all-reduces alone.
  std::vector<at::Tensor> buffers;
  for (const auto& bucket : plan.buckets)
    buffers.push_back(at::ones({static_cast<std::int64_t>(bucket.elements)}));

  // Warm-up: DDP's first step also moves every .grad into its bucket.
  train_step(-2, false);
  train_step(-1, true);

  // Rounds of four measurements side by side, so that whatever else loads the machine weighs
  // on all four alike: a naive DP step, a DDP step, backward alone, the all-reduces alone.
  Averages naive, overlapped;
  double backward_alone_ms = 0, comm_alone_ms = 0, ddp_wait_ms = 0;
  StepTimes naive_drawn, ddp_drawn;  // the last round's, for the picture
  auto add = [&](Averages& a, const StepTimes& t) {
    a.forward += t.forward_end / s.steps;
    a.backward += (t.backward_end - t.forward_end) / s.steps;
    a.averaging += (t.averaged - t.backward_end) / s.steps;
    a.adam += (t.step_end - t.averaged) / s.steps;
  };
  for (int i = 0; i < s.steps; ++i) {
    world.barrier();
    naive_drawn = train_step(2 * i, true);
    add(naive, naive_drawn);

    world.barrier();
    ddp.reset_comm_wait();
    ddp_drawn = train_step(2 * i + 1, false);
    add(overlapped, ddp_drawn);
    ddp_wait_ms += 1e3 * ddp.comm_wait_seconds() / s.steps;
    double launched = 0;
    for (const auto& bucket : plan.buckets) {
      for (std::size_t p : bucket.params)
        launched = std::max(launched, ms_since(ddp_drawn.start, ready[p]));
      ddp_drawn.launched.push_back(launched);  // buckets go out in plan order
    }
    ddp_drawn.last_gradient = launched;

    world.barrier();
    {
      auto hooks_off = ddp.no_sync();  // no optimizer step: these gradients are the rank's own
      opt.zero_grad();
      const auto b = local_batch(s, world, 2 * i);
      auto loss = torch::mse_loss(model->forward(b.inputs), b.targets);
      const auto t = Clock::now();
      loss.backward();
      backward_alone_ms += ms_since(t) / s.steps;
    }

    world.barrier();
    const auto t = Clock::now();
    std::vector<mpp::Request> pending;
    for (auto& buffer : buffers) pending.push_back(world.iall_reduce(buffer));
    mpp::wait_all(pending);
    comm_alone_ms += ms_since(t) / s.steps;
  }
  const auto report = mpp::compare_replicas(*model, world);
  if (root) {
    const double mib = 1024.0 * 1024.0;
    std::size_t smallest = plan.buckets.front().bytes, largest = smallest;
    for (const auto& b : plan.buckets) {
      smallest = std::min(smallest, b.bytes);
      largest = std::max(largest, b.bytes);
    }
    std::printf("%zu buckets, %.3f to %.1f MiB\n", plan.buckets.size(),
                static_cast<double>(smallest) / mib, static_cast<double>(largest) / mib);
    std::printf("per step on rank 0, in ms (mean of %d):\n", s.steps);
    std::printf("  backward alone                        %8.1f\n", backward_alone_ms);
    std::printf("  all-reduce of the buckets alone       %8.1f\n", comm_alone_ms);
    std::printf("  the two one after the other           %8.1f\n",
                backward_alone_ms + comm_alone_ms);
    std::printf(
        "  naive DP, backward + all-reduce       %8.1f   (backward %.1f, all-reduce %.1f)\n",
        naive.span(), naive.backward, naive.averaging);
    std::printf("  DDP, backward with the buckets        %8.1f   (waiting at its end %.1f)\n",
                overlapped.span(), ddp_wait_ms);
    std::printf(
        "  left to wait for after the last gradient: naive DP %.1f, DDP %.1f (%.0f%% hidden)\n",
        naive.averaging, ddp_wait_ms, 100.0 * (naive.averaging - ddp_wait_ms) / naive.averaging);
    std::printf("  span saved                            %8.1f   (%.0f%% of naive DP's span)\n",
                naive.span() - overlapped.span(),
                100.0 * (naive.span() - overlapped.span()) / naive.span());
    std::printf("  forward: naive DP %.1f, DDP %.1f; Adam step: naive DP %.1f, DDP %.1f\n",
                naive.forward, overlapped.forward, naive.adam, overlapped.adam);
    std::printf("whole step: naive DP %.1f ms, DDP %.1f ms, speedup %.2fx\n", naive.step(),
                overlapped.step(), naive.step() / overlapped.step());
    std::printf("replicas bit-identical after training: %s\n",
                report ? "yes" : report.first_difference.c_str());
    if (!svg.empty()) {
      std::printf(
          "drawn step: naive DP backward ends at %.1f ms, gradients averaged at %.1f ms; DDP "
          "first bucket out at %.1f ms, last gradient at %.1f ms, gradients averaged at %.1f "
          "ms\n",
          naive_drawn.backward_end, naive_drawn.averaged, ddp_drawn.launched.front(),
          ddp_drawn.last_gradient, ddp_drawn.averaged);
      char subtitle[256];
      std::snprintf(subtitle, sizeof subtitle,
                    "%d ranks over Gloo (%s), 16 x Linear(%lld), global batch %lld, %zu buckets "
                    "of at most %.0f MiB; one thread per rank",
                    world.size(), link.c_str(), static_cast<long long>(s.cfg.hidden),
                    static_cast<long long>(global_batch), plan.buckets.size(), bucket_mb);
      draw_overlap(svg, naive_drawn, ddp_drawn, subtitle);
      std::printf("one naive DP step and one DDP step drawn in %s\n", svg.c_str());
    }
  }
  return report ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::guarded_main("ddp", [&] { return run(argc, argv); });
}
