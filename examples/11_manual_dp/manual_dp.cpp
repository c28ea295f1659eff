// Lab 11 — data parallelism by hand, in one process.
//
// Two copies of the same model each see one half of the batch. After backward each copy holds
// the gradient of *its* half; averaging the two gradients gives exactly the gradient of the whole
// batch (the loss is a mean, and the mean of two equal-sized halves' means is the full mean).
// Both copies then take the same step and stay identical. That averaging is all that data
// parallelism adds; the next labs only move the copies into separate processes (naive DP) and
// hide the averaging behind the backward pass (DDP).
//
//   ./manual_dp [steps=5] [batch=32] [--svg losses.svg]
#include <torch/nn/modules/loss.h>
#include <torch/optim/sgd.h>

#include <ATen/Parallel.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "mpp/models/mlp.hpp"
#include "mpp/trace/plot.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string svg;  // where to draw the losses, if anywhere
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--svg" && i + 1 < argc)
      svg = argv[++i];
    else
      positional.emplace_back(argv[i]);
  }
  const int steps = positional.size() > 0 ? std::atoi(positional[0].c_str()) : 5;
  const std::int64_t batch = positional.size() > 1 ? std::atoll(positional[1].c_str()) : 32;
  std::vector<mpp::trace::Series> losses_by_step{{"whole batch (one model)", {}, {}},
                                                 {"replica 0, first half", {}, {}},
                                                 {"replica 1, second half", {}, {}},
                                                 {"mean of the two replicas", {}, {}}};
  at::set_num_threads(1);
  const mpp::models::MlpConfig cfg;  // 16 x Linear(128, 128)

  // The baseline: one model, the whole batch.
  auto monolith = mpp::models::make_full_mlp(cfg);
  torch::optim::SGD monolith_opt(monolith->parameters(), 0.05);

  // Two replicas built from the same seed start equal (in separate processes, a broadcast
  // from rank 0 guarantees it whatever seed each process used).
  std::array replicas{mpp::models::make_full_mlp(cfg), mpp::models::make_full_mlp(cfg)};
  std::array optimizers{torch::optim::SGD(replicas[0]->parameters(), 0.05),
                        torch::optim::SGD(replicas[1]->parameters(), 0.05)};

  for (int step = 0; step < steps; ++step) {
    const auto data = mpp::models::make_regression_batch(cfg, batch, step);

    monolith_opt.zero_grad();
    auto full_loss = torch::mse_loss(monolith->forward(data.inputs), data.targets);
    full_loss.backward();
    monolith_opt.step();

    // Each replica: forward and backward on its half of the batch.
    std::array<double, 2> losses{};
    const auto half = batch / 2;
    for (int r = 0; r < 2; ++r) {
      optimizers[r].zero_grad();
      auto x = data.inputs.narrow(0, r * half, half);
      auto y = data.targets.narrow(0, r * half, half);
      auto loss = torch::mse_loss(replicas[r]->forward(x), y);
      loss.backward();
      losses[r] = loss.item<double>();
    }
    // [quote:average]
    // The "all-reduce": average each gradient and give the average to both replicas.
    {
      torch::NoGradGuard no_grad;
      auto p0 = replicas[0]->parameters();
      auto p1 = replicas[1]->parameters();
      for (std::size_t i = 0; i < p0.size(); ++i) {
        auto mean = (p0[i].grad() + p1[i].grad()) / 2;
        p0[i].mutable_grad().copy_(mean);
        p1[i].mutable_grad().copy_(mean);
      }
    }
    for (auto& opt : optimizers) opt.step();
    // [/quote:average]

    const double values[4] = {full_loss.item<double>(), losses[0], losses[1],
                              (losses[0] + losses[1]) / 2};
    for (int k = 0; k < 4; ++k) {
      losses_by_step[static_cast<std::size_t>(k)].x.push_back(step);
      losses_by_step[static_cast<std::size_t>(k)].y.push_back(values[k]);
    }
    std::printf(
        "step %d  loss: whole batch %.6f | replica 0 (rows 0-%lld) %.6f | replica 1 (rows "
        "%lld-%lld) %.6f | mean %.6f\n",
        step, full_loss.item<double>(), static_cast<long long>(half - 1), losses[0],
        static_cast<long long>(half), static_cast<long long>(batch - 1), losses[1],
        (losses[0] + losses[1]) / 2);
  }

  // Compare parameters: replicas with each other (bit for bit) and with the monolith.
  double to_monolith = 0.0;
  bool identical = true;
  auto pm = monolith->parameters();
  auto p0 = replicas[0]->parameters();
  auto p1 = replicas[1]->parameters();
  for (std::size_t i = 0; i < pm.size(); ++i) {
    identical = identical && torch::equal(p0[i], p1[i]);
    to_monolith = std::max(to_monolith, (p0[i] - pm[i]).abs().max().item<double>());
  }
  std::printf("\nreplicas bit-identical: %s\n", identical ? "yes" : "NO");
  std::printf(
      "largest difference to the monolith after %d steps: %.3g (float rounding: the sums are "
      "taken in another order)\n",
      steps, to_monolith);
  if (!svg.empty()) {
    mpp::trace::PlotOptions plot;
    plot.title = "Lab 11: two replicas on two halves of each batch, averaged by hand";
    plot.subtitle = "16 x Linear(128), batch " + std::to_string(batch) +
                    ", SGD lr 0.05, a new batch every step; the mean of the replicas' losses is "
                    "the whole batch's loss";
    plot.x_label = "step";
    plot.y_label = "mean squared error";
    plot.y_from_zero = false;
    std::ofstream(svg) << mpp::trace::render_line_plot(losses_by_step, plot);
    std::printf("losses drawn in %s\n", svg.c_str());
  }
  return identical && to_monolith < 1e-5 ? 0 : 1;
}
