// The searched schedules against the built-ins at the same activation memory. For each model (the
// course's, and h1024 b512) on the world's ranks (2 or 4) over Shm, six pipelines train side by
// side: 1F1B, ZB-H1 and ZB-V, and the three tables `mpp-schedule search` found from this machine's
// measured costs (benchmarks/pipeline/costs/, written by `pipeline_bench --costs-out`): one chunk
// per rank capped at P activations in flight (1F1B's and ZB-H1's peak), two chunks in a V capped
// at 2P chunk activations (ZB-V's peak, the same bytes), and two chunks per rank wherever the
// search put them, with the V's costs and cap. The headers are emitted at build time
// (CMakeLists.txt), so each searched table is proven by its static_assert like a built-in.
//
// One benchmark iteration is a round: each pipeline runs a few steps in turn, in an order that
// rotates by one every round, and its round time is the median of its steps. Counters, per
// pipeline: the median round time (`<name>_ms`), the time the verifier predicts from the measured
// costs (`<name>_pred_ms`) against the traced pipeline part of the step (`<name>_span_ms`, from
// the last rank's start to the last rank's end, as the verifier replays a step, without the
// optimizer's step; `<name>_pred_err_pct`), the same from each traced step's own
// measured costs (`<name>_model_err_pct`: the cost model alone, without the machine's drift since
// the costs were measured) and the peak of activations on any rank (`<name>_peak_MiB`). And the
// searched tables' step time over the best built-in's, the median of the per-round ratios with a
// distribution-free 95 % interval (`searched_<placement>_vs_best_pct`, `_lo`, `_hi`). A searched
// table whose rows are a built-in's (the built-ins are candidates of the search) is not timed a
// second time: it takes that built-in's figures and says so (`<name>_is_builtin`, the label).
#include "search_matrix.hpp"

#include <benchmark/benchmark.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/paired.hpp"
#include "configs.hpp"
#include "library_step.hpp"
#include "mpp/launch/cpu_binding.hpp"
#include "mpp/trace/costs_json.hpp"
#include "mpp/trace/recorder.hpp"
#include "searched/compute_h1024_b512_p2_free.hpp"
#include "searched/compute_h1024_b512_p2_looped.hpp"
#include "searched/compute_h1024_b512_p2_v.hpp"
#include "searched/compute_h1024_b512_p4_free.hpp"
#include "searched/compute_h1024_b512_p4_looped.hpp"
#include "searched/compute_h1024_b512_p4_v.hpp"
#include "searched/course_h128_b32_p2_free.hpp"
#include "searched/course_h128_b32_p2_looped.hpp"
#include "searched/course_h128_b32_p2_v.hpp"
#include "searched/course_h128_b32_p4_free.hpp"
#include "searched/course_h128_b32_p4_looped.hpp"
#include "searched/course_h128_b32_p4_v.hpp"

namespace mpp::bench {
namespace {

constexpr int M = micro_batches;
constexpr std::array<const Config*, 2> models{&course, &compute_large};

/// The searched tables of model `Model` (an index into `models`) on P ranks.
template <int P, int Model>
struct Searched;
template <>
struct Searched<2, 0> {
  using looped = searched::course_h128_b32_p2_looped;
  using v = searched::course_h128_b32_p2_v;
  using free_placement = searched::course_h128_b32_p2_free;
};
template <>
struct Searched<4, 0> {
  using looped = searched::course_h128_b32_p4_looped;
  using v = searched::course_h128_b32_p4_v;
  using free_placement = searched::course_h128_b32_p4_free;
};
template <>
struct Searched<2, 1> {
  using looped = searched::compute_h1024_b512_p2_looped;
  using v = searched::compute_h1024_b512_p2_v;
  using free_placement = searched::compute_h1024_b512_p2_free;
};
template <>
struct Searched<4, 1> {
  using looped = searched::compute_h1024_b512_p4_looped;
  using v = searched::compute_h1024_b512_p4_v;
  using free_placement = searched::compute_h1024_b512_p4_free;
};

/// Where a model's measured costs live: "<model>_p<P>_<looped|v>.json".
std::string costs_path(const Config& c, int ranks, bool v_shape) {
  return std::string(MPP_BENCH_COSTS_DIR) + "/" + c.name + "_p" + std::to_string(ranks) +
         (v_shape ? "_v" : "_looped") + ".json";
}

/// A costs file as the search read it, with its unit.
struct MeasuredCosts {
  Costs costs;
  double unit_us = 0.0;
};

MeasuredCosts read_costs(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("pipeline_bench: cannot read " + path +
                             "; write it with mpprun --nproc-per-node P ./pipeline_bench "
                             "--costs-out <dir>");
  std::stringstream text;
  text << in.rdbuf();
  return {costs_from_json(text.str()), costs_unit_us(text.str())};
}

/// One pipeline of the comparison, type-erased: its steps, its report and its prediction.
struct Contestant {
  std::string name;
  bool searched = false;
  std::function<void()> step;
  std::function<std::optional<StepReport>()> report;
  double predicted_ms = 0.0;         ///< the verifier's makespan under the measured costs
  std::shared_ptr<const Plan> plan;  ///< the rows it runs
  /// For a searched table whose rows are a built-in's: that built-in's index. It is not timed
  /// again: two copies of one table differ only by the bench's own noise.
  std::optional<std::size_t> same_as;
};

template <class Sched, int P>
Contestant contestant(const std::string& name, bool searched, const Config& c,
                      const Group<Shm>& group) {
  using Pipe = Pipeline<Uniform<P>, Sched, Async<Shm>>;
  auto s = std::make_shared<LibraryStep<Pipe>>(c, group);
  const bool v_shape = Sched::chunks_per_rank == 2;
  const MeasuredCosts measured = read_costs(costs_path(c, P, v_shape));
  std::shared_ptr<const Plan> plan = Pipe::plan();
  const VerifyResult predicted = verify(plan->table, plan->semantics(), measured.costs);
  return {name,
          searched,
          [s] { (*s)(); },
          [s] { return report_last_step(s->pipe); },
          predicted.makespan * measured.unit_us / 1e3,
          std::move(plan),
          std::nullopt};
}

/// Traced steps after the rounds, per pipeline.
constexpr int traced_steps = 5;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return median_of_sorted(v);
}

/// A few more steps of `one`, traced (every rank calls report): the pipeline's part of the step,
/// which the prediction is for (the span: every rank in its step; the optimizer's step is outside
/// it), and the peak of activations.
void record_traced_steps(benchmark::State& state, Contestant& one) {
  std::vector<double> span, peak_bytes, model_err;
  for (int n = 0; n < traced_steps; ++n) {
    one.step();
    if (const auto report = one.report()) {
      const auto& peaks = report->figures.peak_activation_bytes;
      span.push_back(report->figures.span_us / 1e3);
      model_err.push_back(report->predicted_latency.makespan *
                              trace::measured_cost_unit_us(report->figures) /
                              report->figures.span_us -
                          1);
      peak_bytes.push_back(
          peaks.empty() ? 0.0 : static_cast<double>(*std::max_element(peaks.begin(), peaks.end())));
    }
  }
  if (span.empty()) return;
  state.counters[one.name + "_span_ms"] = median(span);
  state.counters[one.name + "_pred_err_pct"] = (one.predicted_ms / median(span) - 1) * 100;
  state.counters[one.name + "_peak_MiB"] = median(peak_bytes) / (1 << 20);
  state.counters[one.name + "_model_err_pct"] = median(model_err) * 100;
}

template <int P, int Model>
void searched_against_builtins(benchmark::State& state, const Transports* transports) {
  const Config& c = *models[Model];
  const Group<Shm>& group = transports->group<Shm>();
  transports->gloo().barrier();
  using S = Searched<P, Model>;
  std::vector<Contestant> all;
  all.push_back(contestant<OneFOneB<M>, P>("1F1B", false, c, group));
  all.push_back(contestant<ZeroBubbleH1<M>, P>("ZB-H1", false, c, group));
  all.push_back(contestant<ZeroBubbleV<M>, P>("ZB-V", false, c, group));
  all.push_back(contestant<typename S::looped, P>("searched_looped", true, c, group));
  all.push_back(contestant<typename S::v, P>("searched_v", true, c, group));
  all.push_back(contestant<typename S::free_placement, P>("searched_free", true, c, group));
  for (auto& each : all) {
    if (!each.searched) continue;
    for (std::size_t b = 0; b < all.size() && !each.same_as; ++b)
      if (!all[b].searched && same_rows(each.plan->table, all[b].plan->table)) each.same_as = b;
  }
  for (auto& each : all)
    for (int i = 0; i < warmup_steps && !each.same_as; ++i) each.step();

  // Rounds: every pipeline's steps, in an order that rotates each round.
  const int steps = c.iterations >= 10 ? 5 : 1;
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> rounds(all.size());
  int round = 0;
  for (auto _ : state) {
    for (std::size_t k = 0; k < all.size(); ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(round)) % all.size();
      if (all[i].same_as) continue;
      std::vector<double> times;
      for (int n = 0; n < steps; ++n) {
        const auto t = Clock::now();
        all[i].step();
        times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
      }
      rounds[i].push_back(median(times));
    }
    ++round;
  }
  const auto timed =
      std::count_if(all.begin(), all.end(), [](const Contestant& each) { return !each.same_as; });
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(timed) * steps * c.batch);

  // The best built-in by its median; each searched table over it, round by round.
  std::size_t best = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!all[i].searched && median(rounds[i]) < median(rounds[best])) best = i;
  std::string label = "best built-in " + all[best].name;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::string& name = all[i].name;
    if (all[i].same_as) {  // the built-in's rounds and figures, which come before it in `all`
      const std::string& builtin = all[*all[i].same_as].name;
      rounds[i] = rounds[*all[i].same_as];
      state.counters[name + "_is_builtin"] = 1;
      for (const char* figure : {"_span_ms", "_pred_err_pct", "_peak_MiB", "_model_err_pct"})
        if (const auto found = state.counters.find(builtin + figure); found != state.counters.end())
          state.counters[name + figure] = found->second;
      label += "; " + name + " is " + builtin + "'s table";
    } else {
      record_traced_steps(state, all[i]);
    }
    state.counters[name + "_ms"] = median(rounds[i]);
    state.counters[name + "_pred_ms"] = all[i].predicted_ms;
    if (!all[i].searched) continue;
    std::vector<double> ratios;
    for (std::size_t r = 0; r < rounds[i].size(); ++r)
      ratios.push_back(rounds[i][r] / rounds[best][r]);
    const auto over = median_with_interval(std::move(ratios));
    state.counters[name + "_vs_best_pct"] = (over.median - 1) * 100;
    state.counters[name + "_vs_best_lo"] = (over.lo - 1) * 100;
    state.counters[name + "_vs_best_hi"] = (over.hi - 1) * 100;
  }
  state.SetLabel(label);
}

/// Rounds of each comparison: enough for a 95 % interval on the median ratio.
constexpr int comparison_rounds = 21;

template <int P, int Model>
void register_one(const Transports& transports) {
  const std::string name = std::string("searched_vs_builtins/") + models[Model]->name +
                           "/P=" + std::to_string(P) + "/Async<Shm>/Uniform<" + std::to_string(P) +
                           ">";
  benchmark::RegisterBenchmark(name.c_str(), searched_against_builtins<P, Model>, &transports)
      ->Iterations(comparison_rounds)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

/// The cores the world's ranks run on, all on one host: the union of their affinity masks. Each
/// rank's own mask is not it: mpprun binds each rank to a core of its own when they fit.
int host_cores(const Transports& transports) {
  at::Tensor used = at::zeros({CPU_SETSIZE}, at::kFloat);
  for (const int cpu : launch::allowed_cpus()) used[cpu] = 1.0f;
  transports.gloo().all_reduce(used);
  return static_cast<int>(used.gt(0).sum().item<int64_t>());
}

/// The medians of each measured figure the costs are made of, over several steps.
trace::StepFigures median_figures(const std::vector<trace::StepFigures>& steps) {
  trace::StepFigures out = steps.front();
  const auto of = [&](auto field) {
    std::vector<double> v;
    for (const auto& f : steps) v.push_back(field(f));
    return median(v);
  };
  out.forward_us = of([](const trace::StepFigures& f) { return f.forward_us; });
  out.backward_us = of([](const trace::StepFigures& f) { return f.backward_us; });
  out.input_grad_us = of([](const trace::StepFigures& f) { return f.input_grad_us; });
  out.weight_grad_us = of([](const trace::StepFigures& f) { return f.weight_grad_us; });
  out.message_latency_us = of([](const trace::StepFigures& f) { return f.message_latency_us; });
  for (std::size_t s = 0; s < out.stage_us.size(); ++s)
    for (std::size_t k = 0; k < 4; ++k)
      out.stage_us[s][k] = of([&](const trace::StepFigures& f) {
        return s < f.stage_us.size() ? f.stage_us[s][k] : 0.0;
      });
  return out;
}

/// Steps whose medians the measured costs are.
constexpr int measured_steps = 20;

/// The medians of `Sched`'s measured figures over measured_steps steps (on rank 0; empty on the
/// others).
template <class Sched, int P>
std::optional<trace::StepFigures> measured_figures(const Transports& transports, const Config& c) {
  using Pipe = Pipeline<Uniform<P>, Sched, Async<Shm>>;
  LibraryStep<Pipe> step(c, transports.group<Shm>());
  for (int i = 0; i < warmup_steps; ++i) step();
  std::vector<trace::StepFigures> figures;
  for (int i = 0; i < measured_steps; ++i) {
    step();
    if (const auto report = report_last_step(step.pipe)) figures.push_back(report->figures);
  }
  if (figures.empty()) return std::nullopt;
  return median_figures(figures);
}

/// The costs of `Split` (F, I, W and the messages; a split backward) with the whole backwards of
/// `Whole` (the same stages: a stage's layers do not depend on where it lives), which a split
/// backward's I + W overstates: the search then weighs what splitting really costs.
template <class Whole, class Split, int P>
void measure_costs(const Transports& transports, const Config& c, const std::string& dir,
                   int cores) {
  static_assert(Whole::chunks_per_rank == Split::chunks_per_rank);
  const auto whole = measured_figures<Whole, P>(transports, c);
  auto f = measured_figures<Split, P>(transports, c);
  if (!whole || !f) return;  // not rank 0
  f->backward_us = whole->backward_us;
  for (std::size_t s = 0; s < f->stage_us.size() && s < whole->stage_us.size(); ++s)
    f->stage_us[s][1] = whole->stage_us[s][1];
  const std::string path = dir + "/" + c.name + "_p" + std::to_string(P) +
                           (Split::chunks_per_rank == 2 ? "_v" : "_looped") + ".json";
  std::ofstream out(path);
  if (!out)
    throw std::runtime_error("pipeline_bench --costs-out: cannot write " + path +
                             "; give a directory that exists");
  out << measured_costs_json(*f, cores);
  std::printf(
      "measured costs of %s (whole backwards of %s) on %s, %d ranks on %d cores%s, "
      "written to %s\n",
      schedule_display_name<Split>().c_str(), schedule_display_name<Whole>().c_str(), c.name, P,
      cores, trace::Recorder::core_time_from_env() ? " (computes in core time)" : "", path.c_str());
}

template <int P>
void measure_all(const Transports& transports, const std::string& dir, int cores) {
  for (const Config* c : models) {
    measure_costs<OneFOneB<M>, ZeroBubbleH1<M>, P>(transports, *c, dir, cores);
    measure_costs<Interleaved1F1B<M, 2>, ZeroBubbleV<M>, P>(transports, *c, dir, cores);
  }
}

}  // namespace

bool register_search_matrix(const Transports& transports) {
  switch (transports.gloo().size()) {
    case 2:
      register_one<2, 0>(transports);
      register_one<2, 1>(transports);
      return true;
    case 4:
      register_one<4, 0>(transports);
      register_one<4, 1>(transports);
      return true;
    default:
      return false;
  }
}

void write_measured_costs(const Transports& transports, const std::string& dir) {
  // More ranks than cores: a compute's wall time counts the other ranks' turns on its core, which
  // the cost model charges itself (Costs::cores), so computes are timed in core time (the
  // recorder's MPP_TRACE_CORE_TIME; set to 0 to measure wall time anyway).
  const int cores = host_cores(transports);
  if (cores > 0 && cores < transports.gloo().size())
    ::setenv("MPP_TRACE_CORE_TIME", "1", /*overwrite=*/0);
  switch (transports.gloo().size()) {
    case 2:
      measure_all<2>(transports, dir, cores);
      break;
    case 4:
      measure_all<4>(transports, dir, cores);
      break;
    default:
      throw std::runtime_error("pipeline_bench --costs-out runs on 2 or 4 ranks");
  }
}

}  // namespace mpp::bench
