#pragma once
// What the pipeline labs 06-10 share: their options, training the course MLP through a pipeline
// with measurement, the measured timeline as SVG, and the start-up on 2 or 4 ranks over the
// transport --transport names (shared memory by default, Gloo's TCP on request). Labs 09-10 also
// share `compare`: train two pipelines and print them side by side (bubble measured vs predicted,
// samples/s, rank 0's peak activations), with the second's last-step timeline, Chrome trace and SVG
// picture on request.
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>

#include <ATen/Parallel.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "mpp/comm.hpp"
#include "mpp/comm/shared_cores.hpp"
#include "mpp/pipeline.hpp"
#include "mpp/pipeline/measure.hpp"
#include "mpp/pipeline/with_ranks.hpp"
#include "mpp/trace/core_time_while_shared.hpp"
#include "mpp/trace/costs_json.hpp"
#include "mpp/trace/recorder.hpp"
#include "mpp/util/blas.hpp"

#include "lab_main.hpp"
#include "lab_options.hpp"

namespace lab {

inline constexpr int micro_batches = 8;

/// The transport the lab's pipelines send their messages through: `typename T::backend` is the
/// backend of their comm policy (`mpp::Async<typename T::backend>`).
template <class Backend>
struct Transport {
  using backend = Backend;
};

struct MeanSquaredError {
  at::Tensor operator()(const at::Tensor& out, const at::Tensor& target) const {
    return torch::nn::functional::mse_loss(out, target);
  }
};

template <class Pipe>
mpp::RunFigures train(const mpp::Group<typename Pipe::comm_type::backend>& world,
                      const Options& o) {
  Pipe pipe(world, mpp::MlpModel{o.model});
  torch::optim::Adam adam(pipe.parameters(), 1e-3);
  auto batch = [&](int step) { return mpp::models::make_regression_batch(o.model, o.batch, step); };
  // Costs for `mpp-schedule search --costs`, with the cores the ranks share: where they outnumber
  // the cores, computes are timed in core time, which the cost model asks for there.
  const int cores = o.costs_out.empty() ? 0 : mpp::shared_cores(world);
  const mpp::trace::CoreTimeWhileShared core_time(world.size(), cores);
  auto figures = mpp::train_and_measure(pipe, adam, batch, MeanSquaredError{}, o.steps);
  if (figures.report) std::printf("%s\n", figures.describe().c_str());
  if (figures.report && !o.costs_out.empty()) {
    std::ofstream(o.costs_out) << mpp::measured_costs_json(figures.report->figures, cores);
    std::printf("measured costs of %s written to %s", Pipe::name().c_str(), o.costs_out.c_str());
    if (core_time.cores() > 0 && mpp::trace::Recorder::core_time_from_env())
      std::printf(" (computes timed in core time: %d ranks, %d cores)", world.size(), cores);
    std::printf("\n");
  }
  return figures;
}

/// Draws the last step as every rank measured it, with the library's timeline renderer (the one
/// mpp-schedule draws predictions with): compute boxes, and in grey the sends and the time spent
/// blocked on a receive.
inline void write_svg(const mpp::StepReport& r, const Options& o, const std::string& name) {
  mpp::SvgOptions svg;
  svg.title = name + " on " + std::to_string(r.figures.ranks) +
              " ranks: the last training step as measured (microseconds)";
  char subtitle[256];
  std::snprintf(
      subtitle, sizeof subtitle,
      "step %.1f ms, bubble measured %.1f%%, predicted %.1f%% (measured costs, free "
      "communication); %d x Linear(%lld), batch %lld, one thread per rank, 2 shared cores",
      r.figures.step_us / 1e3, 100.0 * r.figures.bubble,
      100.0 * r.predicted_measured.bubble_fraction(), o.model.layers,
      static_cast<long long>(o.model.hidden), static_cast<long long>(o.batch));
  svg.subtitle = subtitle;
  std::ofstream out(o.svg);
  out << mpp::trace::svg_timeline(r.traces, svg);
  if (out)
    std::printf("measured timeline of the last %s step drawn in %s\n", name.c_str(), o.svg.c_str());
}

struct Comparison {
  const char* title;  // "ZB-H1 against 1F1B:"
  const char* first;  // display names of the two pipelines
  const char* second;
};

inline void print_row(const char* name, const mpp::RunFigures& run) {
  const auto& r = *run.report;
  std::printf(
      "  %-22s bubble %5.1f%% (predicted %5.1f%%), %7.0f samples/s, rank 0 peak activations %s\n",
      name, 100.0 * r.figures.bubble, 100.0 * r.predicted_measured.bubble_fraction(),
      run.samples_per_second, mpp::trace::format_bytes(r.figures.peak_activation_bytes[0]).c_str());
}

/// Trains First then Second (every rank), and prints the comparison on the rank holding reports.
template <class First, class Second, class World>
void compare(const World& world, const Options& o, const Comparison& c) {
  const auto first = train<First>(world, o);
  const auto second = train<Second>(world, o);
  if (!second.report) return;
  std::printf("%s\n", c.title);
  print_row(c.first, first);
  print_row(c.second, second);
  const auto& b = *second.report;
  if (o.timeline)
    std::printf("\n%s, last step, measured (microseconds):\n%s", c.second, b.timeline().c_str());
  if (!o.trace.empty() && b.write_chrome_trace(o.trace))
    std::printf("Chrome trace of the last %s step written to %s (open it in ui.perfetto.dev)\n",
                c.second, o.trace.c_str());
  if (!o.svg.empty()) write_svg(b, o, c.second);
}

/// Parses the common options, starts the process group over the chosen transport and calls
/// run(world, options, std::integral_constant<int, P>, Transport<Backend>) for P = 2 or 4 ranks
/// (mpp::with_ranks); on any other world size it prints the supported sizes and returns 2.
/// `batching` says how the lab cuts the batch, for the header line (default: "in 8 micro-batches").
/// `extra` are the lab's own options.
template <class Run>
int run_lab(int argc, char** argv, const char* lab, const char* description, Run run,
            const char* batching, const std::vector<ExtraOption>& extra) {
  Options o;
  if (const int code = parse_options(argc, argv, description, o, extra); code >= 0) return code;

  at::set_num_threads(1);
  const bool gloo = o.transport == "gloo";
  // Each transport's world is a group of its own type (mpp::Group<Gloo>, mpp::Group<Shm>): the
  // pipelines' comm policies take the group of their backend.
  auto start = [&](auto transport) {
    using Backend = typename decltype(transport)::backend;
    auto world = mpp::init_process_group<Backend>();
    if (world.rank() == 0)
      std::printf(
          "%s\n%s: %d ranks over %s, %d x Linear(%lld), batch %lld %s\n\n",
          mpp::util::blas_report(mpp::util::detect_blas(), at::get_num_threads()).c_str(), lab,
          world.size(), std::string(Backend::name).c_str(), o.model.layers,
          static_cast<long long>(o.model.hidden), static_cast<long long>(o.batch),
          batching ? batching : ("in " + std::to_string(micro_batches) + " micro-batches").c_str());
    // One binary for 2 and 4 ranks: each size's pipelines are compiled (and proven) separately,
    // and the world's size picks one; any other size is refused with the list.
    try {
      mpp::with_ranks<2, 4>(world.size(), [&](auto ranks) { run(world, o, ranks, transport); });
    } catch (const mpp::WorldSizeError& error) {
      if (world.rank() == 0) std::fprintf(stderr, "%s: %s\n", lab, error.what());
      return 2;
    }
    return 0;
  };
  return gloo ? start(Transport<mpp::Gloo>{}) : start(Transport<mpp::Shm>{});
}

/// run_lab under lab::guarded_main: any other error the library throws (a time-out, a peer that
/// died) ends the rank with its message and exit code 1, not an abort.
template <class Run>
int main(int argc, char** argv, const char* lab, const char* description, Run run,
         const char* batching = nullptr, const std::vector<ExtraOption>& extra = {}) {
  return guarded_main(lab,
                      [&] { return run_lab(argc, argv, lab, description, run, batching, extra); });
}

}  // namespace lab
