// Lab 1 — the monolith: one process, one model, one plain training loop.
//
// A 16-layer MLP (Linear + ReLU) fits a batch of a smooth function (tanh of a random linear map);
// with `--data fresh` it sees a new batch every step and must generalise, which a deep, narrow
// ReLU stack does far more slowly. Nothing is distributed; this is the baseline that every later
// lab is compared with: the same model, the same initial weights, the same batches, and (for the
// pipeline and data-parallel labs) the same parameters after training.
//
//   ./monolith [--steps 300] [--batch 64] [--hidden 256] [--lr 1e-3] [--data fixed|fresh]
//              [--svg loss.svg]
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "mpp/models/mlp.hpp"
#include "mpp/trace/plot.hpp"
#include "mpp/util/blas.hpp"

namespace {

struct Args {
  int steps = 300;
  std::int64_t batch = 64;
  std::int64_t hidden = 256;
  double lr = 1e-3;
  bool fresh = false;  // a new batch every step instead of one fixed batch
  std::string svg;     // where to draw the loss curve, if anywhere
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--steps")
      a.steps = std::atoi(value);
    else if (flag == "--batch")
      a.batch = std::atoll(value);
    else if (flag == "--hidden")
      a.hidden = std::atoll(value);
    else if (flag == "--lr")
      a.lr = std::atof(value);
    else if (flag == "--data")
      a.fresh = std::string(value) == "fresh";
    else if (flag == "--svg")
      a.svg = value;
    else {
      std::fprintf(stderr,
                   "monolith: unknown flag %s (use --steps --batch --hidden --lr --data --svg)\n",
                   argv[i]);
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  at::set_num_threads(1);  // the later labs run one rank per core; keep the baseline comparable
  mpp::util::print_blas_report(at::get_num_threads());

  // [quote:model]
  // The model: 16 x (Linear(hidden, hidden) + ReLU), no ReLU after the last layer.
  mpp::models::MlpConfig cfg;
  cfg.hidden = args.hidden;
  auto model = mpp::models::make_full_mlp(cfg);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(args.lr));
  // [/quote:model]
  std::printf("model: %d x Linear(%lld, %lld), %lld parameters\n", cfg.layers,
              static_cast<long long>(cfg.hidden), static_cast<long long>(cfg.hidden),
              static_cast<long long>(cfg.layers * (cfg.hidden * cfg.hidden + cfg.hidden)));

  // The training loop: forward, loss, backward, step.
  const auto fixed_batch = mpp::models::make_regression_batch(cfg, args.batch, 0);
  double first_loss = 0, last_loss = 0;
  mpp::trace::Series curve{args.fresh ? "fresh batch every step" : "one fixed batch", {}, {}};
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < args.steps; ++step) {
    const auto batch =
        args.fresh ? mpp::models::make_regression_batch(cfg, args.batch, step) : fixed_batch;
    // [quote:step]
    optimizer.zero_grad();
    auto loss = torch::nn::functional::mse_loss(model->forward(batch.inputs), batch.targets);
    loss.backward();
    optimizer.step();
    // [/quote:step]

    last_loss = loss.item<double>();
    if (step == 0) first_loss = last_loss;
    curve.x.push_back(step);
    curve.y.push_back(last_loss);
    if (step % (args.steps >= 10 ? args.steps / 10 : 1) == 0 || step == args.steps - 1)
      std::printf("step %4d  loss %.5f\n", step, last_loss);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d steps in %.2f s: %.0f samples/s (forward + backward + Adam)\n", args.steps,
              seconds, args.steps * static_cast<double>(args.batch) / seconds);
  std::printf("loss %.5f -> %.5f (%.1f%% of the first)\n", first_loss, last_loss,
              100.0 * last_loss / first_loss);
  if (!args.svg.empty()) {
    mpp::trace::PlotOptions plot;
    plot.title = "Lab 01: the monolith's training loss";
    char subtitle[160];
    std::snprintf(subtitle, sizeof subtitle,
                  "16 x Linear(%lld) + ReLU, batch %lld, Adam lr %g, one thread; %.0f samples/s",
                  static_cast<long long>(args.hidden), static_cast<long long>(args.batch), args.lr,
                  args.steps * static_cast<double>(args.batch) / seconds);
    plot.subtitle = subtitle;
    plot.x_label = "step";
    plot.y_label = "mean squared error";
    std::ofstream(args.svg) << mpp::trace::render_line_plot(std::span(&curve, 1), plot);
    std::printf("loss curve written to %s\n", args.svg.c_str());
  }
  if (!(last_loss < first_loss)) {
    std::fprintf(stderr, "monolith: the loss did not go down\n");
    return 1;
  }
  return 0;
}
