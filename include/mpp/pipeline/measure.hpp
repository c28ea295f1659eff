#pragma once
// Train a pipeline for some steps and measure it: loss, samples/s, and the last step's report.
// What the labs print, in one place, so that each lab is about its one idea.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "mpp/models/mlp.hpp"
#include "mpp/pipeline/report.hpp"

namespace mpp {

/// What train_and_measure() measured on this rank.
struct RunFigures {
  std::string pipeline;              ///< the Pipeline type's name
  int steps = 0;                     ///< timed steps (after the warm-up)
  double first_loss = 0.0;           ///< loss of the first step
  double last_loss = 0.0;            ///< loss of the last step
  double seconds_per_step = 0.0;     ///< mean over the timed steps
  double samples_per_second = 0.0;   ///< samples over the timed steps per second
  std::optional<StepReport> report;  ///< the last step's, on the report's root rank only

  /// One paragraph: the figures, then measured vs predicted bubble and memory per rank.
  std::string describe() const {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s\n  loss %.4f -> %.4f, %.1f ms/step, %.0f samples/s\n",
                  pipeline.c_str(), first_loss, last_loss, 1e3 * seconds_per_step,
                  samples_per_second);
    std::string out = buf;
    if (report) {
      const std::string summary = report->summary();
      std::size_t begin = 0;
      while (begin < summary.size()) {
        const auto end = summary.find('\n', begin);
        out += "  " + summary.substr(begin, end - begin) + "\n";
        begin = end == std::string::npos ? summary.size() : end + 1;
      }
    }
    return out;
  }
};

/// Runs `warmup + steps` training steps of `pipe` on batches from make_batch(step) (a
/// models::Batch), stepping `optimizer` after each; times the last `steps`. Every rank calls it.
template <class Pipe, class Optimizer, class MakeBatch, class LossFn>
RunFigures train_and_measure(Pipe& pipe, Optimizer& optimizer, MakeBatch&& make_batch,
                             LossFn&& loss_fn, int steps, int warmup = 2) {
  using clock = std::chrono::steady_clock;
  RunFigures figures;
  figures.pipeline = Pipe::name();
  figures.steps = steps;
  std::int64_t samples = 0;
  clock::time_point start = clock::now();
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      start = clock::now();
      samples = 0;
    }
    const models::Batch batch = make_batch(step);
    optimizer.zero_grad();
    const double loss = pipe.train_step(pipe.is_first() ? batch.inputs : at::Tensor(),
                                        pipe.is_last() ? batch.targets : at::Tensor(), loss_fn);
    optimizer.step();
    if (step == 0) figures.first_loss = loss;
    figures.last_loss = loss;
    samples += batch.inputs.defined() ? batch.inputs.size(0) : batch.targets.size(0);
  }
  const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
  figures.seconds_per_step = steps > 0 ? elapsed / steps : 0.0;
  figures.samples_per_second = elapsed > 0.0 ? static_cast<double>(samples) / elapsed : 0.0;
  figures.report = report_last_step(pipe);
  return figures;
}

}  // namespace mpp
