#pragma once
// The harness's side of a check (harness.hpp): the model and data every run shares, a training
// run's record (its losses and the parameters of the layers it holds), the comparison of two
// records, and the verdict gathered over the ranks.
#include <ATen/Parallel.h>
#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mpp/models/mlp.hpp"

#include "../common/lab_main.hpp"
#include "harness.hpp"

namespace lab::check {

/// 8 x Linear(32): small enough that a check takes a second, deep enough for 4 stages.
inline mpp::models::MlpConfig model_config() { return {.hidden = 32, .layers = 8, .seed = 7}; }

/// Rows of a data-parallel global batch (split evenly over 2 or 4 ranks) and of a pipeline batch:
/// 10 rows do not split evenly into 4 micro-batches, so a micro-batch's loss must be weighted by
/// its share of the rows (dividing by M gives another loss).
inline constexpr std::int64_t batch_rows = 16;
inline constexpr std::int64_t pipeline_rows = 10;
inline constexpr int micro_batches = 4;
/// Losses and parameters agree when |a - b| <= tolerance * max(1, |b|).
inline constexpr double tolerance = 1e-6;

struct Options {
  int steps = 3;
  bool both_send_first = false;
};

inline Options parse(int argc, char** argv, const char* lab) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--steps" && i + 1 < argc)
      o.steps = std::atoi(argv[++i]);
    else if (flag == "--both-send-first")
      o.both_send_first = true;
    else
      throw std::invalid_argument(std::string("unknown option ") + argv[i] +
                                  " (use --steps N, --both-send-first)");
  }
  if (o.steps < 1) throw std::invalid_argument(std::string(lab) + ": --steps must be >= 1");
  return o;
}

/// What a training run left on this rank.
struct Record {
  std::vector<double> losses;  ///< one per step (empty when this rank does not know the loss)
  std::map<int, std::vector<at::Tensor>> layers;  ///< model layer index -> {weight, bias}
};

/// Records the parameters of `module`, which holds the model's layers [first, ...).
inline void record_layers(Record& r, const torch::nn::Module& module, int first) {
  const auto params = module.parameters();
  for (std::size_t i = 0; i + 1 < params.size(); i += 2)
    r.layers[first + static_cast<int>(i / 2)] = {params[i].detach().clone(),
                                                 params[i + 1].detach().clone()};
}

/// The optimizer of every training the check compares: SGD with momentum.
inline torch::optim::SGD make_optimizer(const std::vector<at::Tensor>& params) {
  return torch::optim::SGD(params, torch::optim::SGDOptions(0.05).momentum(0.9));
}

/// The monolith: the whole model on the whole batch of `rows` rows, on this process.
inline Record train_monolith(const Options& o, std::int64_t rows) {
  const auto cfg = model_config();
  auto model = mpp::models::make_full_mlp(cfg);
  auto optimizer = make_optimizer(model->parameters());
  Record r;
  for (int s = 0; s < o.steps; ++s) {
    const auto batch = mpp::models::make_regression_batch(cfg, rows, s);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::mse_loss(model->forward(batch.inputs), batch.targets);
    loss.backward();
    optimizer.step();
    r.losses.push_back(loss.item<double>());
  }
  record_layers(r, *model, 0);
  return r;
}

inline bool close(double value, double expected) {
  return std::abs(value - expected) <= tolerance * std::max(1.0, std::abs(expected));
}

/// The monolith's first-step loss as a pipeline gets it when it divides each micro-batch's mean
/// loss by M instead of weighting it by its share of the rows (the mistake the uneven batch of
/// `pipeline_rows` exposes).
inline double loss_divided_by_m() {
  const auto cfg = model_config();
  auto model = mpp::models::make_full_mlp(cfg);
  const auto batch = mpp::models::make_regression_batch(cfg, pipeline_rows, 0);
  c10::NoGradGuard no_grad;
  const auto outputs = model->forward(batch.inputs).chunk(micro_batches);
  const auto targets = batch.targets.chunk(micro_batches);
  double loss = 0.0;
  for (std::size_t m = 0; m < outputs.size(); ++m)
    loss += torch::nn::functional::mse_loss(outputs[m], targets[m]).item<double>();
  return loss / static_cast<double>(outputs.size());
}

/// Puts the diagnosis first when the learner's first loss is the divided-by-M one.
inline void diagnose_divided_by_m(const Record& mine, std::string& problems) {
  if (mine.losses.empty() || !close(mine.losses[0], loss_divided_by_m())) return;
  problems.insert(
      0, "  step 0's loss is each micro-batch's mean loss divided by M = " +
             std::to_string(micro_batches) + ": the batch of " + std::to_string(pipeline_rows) +
             " rows splits into micro-batches of unequal rows, so weight each micro-batch's "
             "loss by its share of the rows (rows in it / rows in the batch)\n");
}

/// Layers [begin, end) of rank `rank` of `ranks`, as mpp::Uniform<P> cuts them.
inline std::pair<int, int> stage_layers(int layers, int rank, int ranks) {
  int begin = 0;
  for (int r = 0; r < rank; ++r) begin += layers / ranks + (r < layers % ranks ? 1 : 0);
  return {begin, begin + layers / ranks + (rank < layers % ranks ? 1 : 0)};
}

/// Appends to `problems` what differs between the learner's record and the reference `name`'s:
/// the losses of the steps both know, and every layer the learner holds.
inline void compare(const Record& mine, const Record& reference, const std::string& name,
                    std::string& problems) {
  const std::size_t steps = std::min(mine.losses.size(), reference.losses.size());
  for (std::size_t s = 0; s < steps; ++s)
    if (!close(mine.losses[s], reference.losses[s])) {
      char line[200];
      std::snprintf(line, sizeof line, "  step %zu: loss %.9f but %s's is %.9f\n", s,
                    mine.losses[s], name.c_str(), reference.losses[s]);
      problems += line;
    }
  for (const auto& [layer, mine_params] : mine.layers) {
    const auto found = reference.layers.find(layer);
    if (found == reference.layers.end()) continue;
    for (std::size_t i = 0; i < mine_params.size(); ++i) {
      const auto& want = found->second[i];
      const double worst = (mine_params[i] - want).abs().max().item<double>();
      const double scale = std::max(1.0, want.abs().max().item<double>());
      if (!(worst <= tolerance * scale)) {
        char line[200];
        std::snprintf(line, sizeof line, "  layer %d %s: differs from %s's by up to %.3e\n", layer,
                      i == 0 ? "weight" : "bias", name.c_str(), worst);
        problems += line;
      }
    }
  }
}

/// Prints the learner's losses next to the references' (on a rank that knows them).
inline void print_losses(int rank, const Record& mine, const Record& monolith,
                         const Record& reference, const std::string& name) {
  for (std::size_t s = 0; s < mine.losses.size(); ++s)
    std::printf("rank %d  step %zu  loss %.9f  (monolith %.9f, %s %.9f)\n", rank, s, mine.losses[s],
                monolith.losses[s], name.c_str(), reference.losses[s]);
  std::fflush(stdout);  // before the verdict, which another rank may print
}

/// Every rank's problems counted over the group; rank 0 prints PASS when there are none, every
/// rank with problems prints them. Returns main's exit code (the same on every rank).
template <class Group>
int verdict(const Group& world, const char* lab, const std::string& problems,
            const std::string& passed) {
  if (!problems.empty()) {
    std::fprintf(stderr, "%s: rank %d is wrong:\n%s", lab, world.rank(), problems.c_str());
    std::fflush(stderr);
  }
  auto failed = at::tensor({problems.empty() ? 0.0f : 1.0f});
  world.all_reduce(failed);
  const int failing = static_cast<int>(failed.item<float>());
  if (failing == 0) {
    if (world.rank() == 0) std::printf("PASS: %s\n", passed.c_str());
    return 0;
  }
  if (world.rank() == 0)
    std::fprintf(stderr, "FAIL: %s: %d of %d ranks failed the check\n", lab, failing, world.size());
  return 1;
}

}  // namespace lab::check
