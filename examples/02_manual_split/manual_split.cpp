// Lab 2 — the manual split: the monolith cut in two inside one process.
//
// part1 holds layers 0..7 and part2 layers 8..15 of the same 16-layer MLP, with the same initial
// weights as the monolith. Nothing crosses a process boundary yet, but the hand-off is made by
// hand exactly as it will be between two ranks:
//   forward : part1's output is *detached* (it becomes a leaf, as a tensor received from another
//             process would be) and marked as requiring grad, then fed to part2;
//   backward: part2's backward fills that leaf's .grad — the gradient of the loss with respect
//             to the activation — and part1's backward is started *with that gradient*.
// The lab trains the split model next to the monolith on the same batches and checks that the
// parameters stay equal.
//
//   ./manual_split [--steps 5] [--batch 64] [--hidden 256] [--cut 8]
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mpp/models/mlp.hpp"

namespace {

struct Args {
  int steps = 5;
  std::int64_t batch = 64;
  std::int64_t hidden = 256;
  int cut = 8;
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
    else if (flag == "--cut")
      a.cut = std::atoi(value);
    else {
      std::fprintf(stderr, "manual_split: unknown flag %s (use --steps --batch --hidden --cut)\n",
                   argv[i]);
      std::exit(2);
    }
  }
  return a;
}

double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  at::set_num_threads(1);
  mpp::models::MlpConfig cfg;
  cfg.hidden = args.hidden;

  // The baseline, and the same layers built as two parts (each layer's weights depend only on
  // the seed and its index, so part1 + part2 start equal to the monolith).
  // [quote:parts]
  auto monolith = mpp::models::make_full_mlp(cfg);
  auto part1 = mpp::models::make_mlp_layers(cfg, 0, args.cut);
  auto part2 = mpp::models::make_mlp_layers(cfg, args.cut, cfg.layers);
  // [/quote:parts]
  torch::optim::Adam monolith_opt(monolith->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::Adam opt1(part1->parameters(), torch::optim::AdamOptions(1e-3));
  torch::optim::Adam opt2(part2->parameters(), torch::optim::AdamOptions(1e-3));
  std::printf("monolith: %d layers; part1: layers [0, %d); part2: layers [%d, %d)\n", cfg.layers,
              args.cut, args.cut, cfg.layers);

  for (int step = 0; step < args.steps; ++step) {
    const auto batch = mpp::models::make_regression_batch(cfg, args.batch, step);

    // The monolith, as in lab 1.
    monolith_opt.zero_grad();
    auto full_loss =
        torch::nn::functional::mse_loss(monolith->forward(batch.inputs), batch.targets);
    full_loss.backward();
    monolith_opt.step();

    // The split model.
    opt1.zero_grad();
    opt2.zero_grad();
    // [quote:handoff]
    // Forward through part1; cut the graph at its output.
    torch::Tensor activation = part1->forward(batch.inputs);
    torch::Tensor received = activation.detach().requires_grad_(true);
    // Forward through part2 and the loss.
    auto loss = torch::nn::functional::mse_loss(part2->forward(received), batch.targets);
    // Backward through part2: fills part2's parameter grads and received.grad().
    loss.backward();
    // Hand the activation's gradient back to part1 and continue its backward from there.
    activation.backward(received.grad());
    // [/quote:handoff]
    opt1.step();
    opt2.step();

    std::printf("step %d  loss monolith %.6f  split %.6f  |activation grad| %.3e\n", step,
                full_loss.item<double>(), loss.item<double>(),
                received.grad().norm().item<double>());
  }

  // Compare every parameter: the split model must have followed the monolith exactly.
  std::vector<torch::Tensor> split = part1->parameters();
  for (const auto& p : part2->parameters()) split.push_back(p);
  const double diff = max_difference(monolith->parameters(), split);
  std::printf("after %d steps: max |monolith - split| over all %zu parameter tensors = %.3e\n",
              args.steps, split.size(), diff);
  if (diff > 1e-6) {
    std::fprintf(stderr, "manual_split: the split model drifted from the monolith\n");
    return 1;
  }
  std::printf("the split model equals the monolith\n");
  return 0;
}
