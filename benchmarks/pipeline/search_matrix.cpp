// The searched schedules against the built-ins at the same activation memory. For each model (the
// course's, and h1024 b512) on the world's ranks (2 or 4) over Shm, six pipelines train side by
// side: 1F1B, ZB-H1 and ZB-V, and the three tables `mpp-schedule search` found from this machine's
// measured costs (benchmarks/pipeline/costs/, written by `pipeline_bench --costs-out`): one chunk
// per rank capped at P activations in flight (1F1B's and ZB-H1's peak), two chunks in a V capped
// at 2P chunk activations (ZB-V's peak, the same bytes), and the one the search chose with the
// chunk count (one or two per rank, from the costs of each) and the map of stages to ranks free,
// at the same memory. The headers are emitted at build time (CMakeLists.txt), so each searched
// table is proven by its static_assert like a built-in.
//
// One benchmark iteration is a round: each pipeline runs a few steps in turn, in an order that
// rotates by one every round, and its round time is the median of its steps. Then each runs a few
// traced steps, in rotating rounds too, each right after an untraced step of its own as in the
// timed rounds (computes in core time where ranks share cores), whose span
// (`<name>_span_ms`: from the last rank's start to the last rank's end, as the verifier replays a
// step, without the optimizer's step) the predictions are compared with. Counters, per pipeline:
// the median round time (`<name>_ms`); the verifier's prediction from the costs of this run
// (`<name>_pred_ms`, `<name>_pred_err_pct` against the span), which the built-ins' traced steps
// give (one chunk per rank: ZB-H1's F, I, W and messages with 1F1B's B; two chunks: ZB-V's), so
// that a searched table is predicted from actions of other tables; the prediction from the
// committed costs the search ran from (`<name>_searched_from_ms`, `_searched_from_err_pct`: the
// machine's drift since they were measured included); the same from each traced step's own costs
// (`<name>_model_err_pct`, the cost model alone); its chunks per rank (`<name>_chunks`) and the
// peak of activations on any rank (`<name>_peak_MiB`). And the searched tables' step time over the
// best built-in's, the median of the per-round ratios with a distribution-free 95 % interval
// (`searched_<placement>_vs_best_pct`, `_lo`, `_hi`). A searched table whose rows are a built-in's
// (the built-ins are candidates of the search) is not timed a second time: it takes that
// built-in's figures and says so (`<name>_is_builtin`, the label).
#include "search_matrix.hpp"

#include <benchmark/benchmark.h>

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
#include "mpp/comm/shared_cores.hpp"
#include "mpp/trace/core_time_while_shared.hpp"
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

/// A costs file as the search read it, with its unit and the step's end after the last action.
struct MeasuredCosts {
  Costs costs;
  double unit_us = 0.0;
  double step_end_us = 0.0;
};

MeasuredCosts read_costs(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("pipeline_bench: cannot read " + path +
                             "; write it with mpprun --nproc-per-node P ./pipeline_bench "
                             "--costs-out <dir>");
  std::stringstream text;
  text << in.rdbuf();
  return {costs_from_json(text.str()), costs_unit_us(text.str()), costs_step_end_us(text.str())};
}

/// `plan`'s predicted step in milliseconds under `measured`: the verifier's makespan, then the
/// step's end.
double predicted_ms(const Plan& plan, const MeasuredCosts& measured) {
  return (verify(plan.table, plan.semantics(), measured.costs).makespan * measured.unit_us +
          measured.step_end_us) /
         1e3;
}

/// One pipeline of the comparison, type-erased: its steps, its report and its prediction.
struct Contestant {
  std::string name;
  bool searched = false;
  std::function<void()> step;
  std::function<std::optional<StepReport>()> report;
  /// The verifier's makespan under the committed costs, those the search was run from.
  double searched_from_ms = 0.0;
  std::shared_ptr<const Plan> plan;  ///< the rows it runs
  /// The medians of its traced steps' figures (rank 0, once traced): the costs of this run.
  std::optional<trace::StepFigures> traced;
  double span_ms = 0.0;  ///< the median span of its traced steps
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
  const double searched_from_ms = predicted_ms(*plan, measured);
  return {name,
          searched,
          [s] { (*s)(); },
          [s] { return report_last_step(s->pipe); },
          searched_from_ms,
          std::move(plan),
          std::nullopt,
          0.0,
          std::nullopt};
}

/// One step of `one` (a Contestant or a Measured) as the timed rounds mostly run them, right after
/// a step of the same pipeline, and its report. A step after another pipeline's starts with that
/// one's weights and activations in the caches: on the course model at P = 2, its first
/// micro-batch's forwards took 2 to 3 times as long as the others, and its span 10 to 20 % more.
template <class Stepper>
std::optional<StepReport> warm_step_report(Stepper& one) {
  one.step();
  one.step();
  return one.report();
}

/// Traced steps after the rounds, per pipeline, one of each per round (each after an untraced one
/// of its own, warm_step_report): their medians are the span and the costs of the run (five, each
/// pipeline's in a row, moved them by a fifth).
constexpr int traced_steps = 11;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return median_of_sorted(v);
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
  out.send_overhead_us = of([](const trace::StepFigures& f) { return f.send_overhead_us; });
  out.recv_overhead_us = of([](const trace::StepFigures& f) { return f.recv_overhead_us; });
  out.step_end_us = of([](const trace::StepFigures& f) { return f.step_end_us; });
  for (std::size_t s = 0; s < out.stage_us.size(); ++s)
    for (std::size_t k = 0; k < 4; ++k)
      out.stage_us[s][k] = of([&](const trace::StepFigures& f) {
        return s < f.stage_us.size() ? f.stage_us[s][k] : 0.0;
      });
  return out;
}

/// The figures of a split backward's steps with the whole backwards (B) of another table of the
/// same stages (a stage's layers do not depend on where it lives), which a split backward's
/// I + W overstates: the search then weighs what splitting really costs.
trace::StepFigures with_whole_backwards(trace::StepFigures split, const trace::StepFigures& whole) {
  split.backward_us = whole.backward_us;
  for (std::size_t s = 0; s < split.stage_us.size() && s < whole.stage_us.size(); ++s)
    split.stage_us[s][1] = whole.stage_us[s][1];
  return split;
}

/// The cost model of measured figures on `cores` cores (0: a core per rank), with its unit.
MeasuredCosts costs_of(const trace::StepFigures& f, int cores) {
  Costs costs = trace::measured_costs_with_latency(f);
  costs.cores = cores;
  return {costs, trace::measured_cost_unit_us(f), f.step_end_us};
}

/// What the traced steps of one pipeline measured (rank 0).
struct TracedSteps {
  std::vector<double> span, peak_bytes, model_err;
  std::vector<trace::StepFigures> figures;
};

/// One more traced step of `one` (warm_step_report; every rank calls report), into `into`: the
/// pipeline's part of the step, which the prediction is for (the span: every rank in its step;
/// the optimizer's step is outside it), the peak of activations, and the figures its costs are
/// made of. The model error predicts the step from its own costs on `cores` cores.
void trace_step(Contestant& one, TracedSteps& into, int cores) {
  const auto report = warm_step_report(one);
  if (!report) return;
  const auto& peaks = report->figures.peak_activation_bytes;
  into.span.push_back(report->figures.span_us / 1e3);
  into.model_err.push_back(
      predicted_ms(*one.plan, costs_of(report->figures, cores)) / into.span.back() - 1);
  into.peak_bytes.push_back(
      peaks.empty() ? 0.0 : static_cast<double>(*std::max_element(peaks.begin(), peaks.end())));
  into.figures.push_back(report->figures);
}

/// The medians of `one`'s traced steps, as counters and as the costs of the run.
void record_traced_steps(benchmark::State& state, Contestant& one, const TracedSteps& traced) {
  if (traced.span.empty()) return;
  one.traced = median_figures(traced.figures);
  one.span_ms = median(traced.span);
  state.counters[one.name + "_span_ms"] = one.span_ms;
  state.counters[one.name + "_peak_MiB"] = median(traced.peak_bytes) / (1 << 20);
  state.counters[one.name + "_model_err_pct"] = median(traced.model_err) * 100;
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

  // Traced steps of each timed pipeline, in rounds that rotate as the timed ones (a machine that
  // drifts moves them all alike), computes in core time where the ranks share cores.
  // Nothing below times a step: the variable holds to the end of this benchmark.
  const trace::CoreTimeWhileShared core_time(P, shared_cores(transports->gloo()));
  const int model_cores = core_time.cores();
  std::vector<TracedSteps> traced(all.size());
  for (int n = 0; n < traced_steps; ++n)
    for (std::size_t k = 0; k < all.size(); ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(n)) % all.size();
      if (!all[i].same_as) trace_step(all[i], traced[i], model_cores);
    }
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!all[i].same_as) record_traced_steps(state, all[i], traced[i]);
  // The costs of this run, from the built-ins' traced steps: of one chunk per rank ZB-H1's (F, I,
  // W, messages) with 1F1B's whole backwards, of two chunks in a V ZB-V's. Every table of that
  // chunk count is predicted from them: the searched ones from actions of other tables.
  std::optional<MeasuredCosts> this_run[2];
  if (all[0].traced && all[1].traced)
    this_run[0] = costs_of(with_whole_backwards(*all[1].traced, *all[0].traced), model_cores);
  if (all[2].traced) this_run[1] = costs_of(*all[2].traced, model_cores);

  // The best built-in by its median; each searched table over it, round by round.
  std::size_t best = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!all[i].searched && median(rounds[i]) < median(rounds[best])) best = i;
  std::string label = "best built-in " + all[best].name;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::string& name = all[i].name;
    if (all[i].same_as) {  // the built-in's rounds and figures, which come before it in `all`
      const Contestant& builtin = all[*all[i].same_as];
      rounds[i] = rounds[*all[i].same_as];
      all[i].span_ms = builtin.span_ms;
      state.counters[name + "_is_builtin"] = 1;
      for (const char* figure : {"_span_ms", "_peak_MiB", "_model_err_pct"})
        if (const auto found = state.counters.find(builtin.name + figure);
            found != state.counters.end())
          state.counters[name + figure] = found->second;
      label += "; " + name + " is " + builtin.name + "'s table";
    }
    state.counters[name + "_ms"] = median(rounds[i]);
    const double span = all[i].span_ms;
    state.counters[name + "_searched_from_ms"] = all[i].searched_from_ms;
    if (span > 0)
      state.counters[name + "_searched_from_err_pct"] = (all[i].searched_from_ms / span - 1) * 100;
    const int v = all[i].plan->table.chunks_per_rank;
    if (v >= 1 && v <= 2 && this_run[v - 1]) {
      const double predicted = predicted_ms(*all[i].plan, *this_run[v - 1]);
      state.counters[name + "_pred_ms"] = predicted;
      if (span > 0) state.counters[name + "_pred_err_pct"] = (predicted / span - 1) * 100;
    }
    state.counters[name + "_chunks"] = v;
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

/// A pipeline whose costs are measured: its steps, its reports, and the figures of its steps.
struct Measured {
  std::string name;
  std::function<void()> step;
  std::function<std::optional<StepReport>()> report;
  std::vector<trace::StepFigures> figures;  ///< of each measured step (rank 0)
};

template <class Sched, int P>
Measured measured(const Config& c, const Group<Shm>& group) {
  using Pipe = Pipeline<Uniform<P>, Sched, Async<Shm>>;
  auto s = std::make_shared<LibraryStep<Pipe>>(c, group);
  return {schedule_display_name<Sched>(),
          [s] { (*s)(); },
          [s] { return report_last_step(s->pipe); },
          {}};
}

/// Rounds of the cost measurement: one measured step of each pipeline per round (after one of the
/// same pipeline, warm_step_report), as many as give the medians a few seconds of steps on a fast
/// model.
int measured_rounds(const Config& c) { return c.iterations >= 10 ? 60 : 20; }

/// Writes the costs of `split` (F, I, W and the messages) with the whole backwards of `whole`
/// (with_whole_backwards) as "<model>_p<P>_<looped|v>.json" in `dir`.
void write_costs(const Measured& whole, const Measured& split, const Config& c, int ranks,
                 int chunks, const std::string& dir, int cores) {
  if (whole.figures.empty() || split.figures.empty()) return;  // not rank 0
  const trace::StepFigures f =
      with_whole_backwards(median_figures(split.figures), median_figures(whole.figures));
  const std::string path = dir + "/" + c.name + "_p" + std::to_string(ranks) +
                           (chunks == 2 ? "_v" : "_looped") + ".json";
  std::ofstream out(path);
  if (!out)
    throw std::runtime_error("pipeline_bench --costs-out: cannot write " + path +
                             "; give a directory that exists");
  out << measured_costs_json(f, cores);
  std::printf(
      "measured costs of %s (whole backwards of %s) on %s, %d ranks on %d cores%s, %zu steps, "
      "written to %s\n",
      split.name.c_str(), whole.name.c_str(), c.name, ranks, cores,
      trace::Recorder::core_time_from_env() ? " (computes in core time)" : "", split.figures.size(),
      path.c_str());
}

/// Each model's costs: 1F1B, ZB-H1, interleaved 1F1B and ZB-V in rounds, one measured step of each
/// per round in an order that rotates, as the search matrix times its pipelines (a machine that
/// drifts moves them all alike), and the medians of their figures.
template <int P>
void measure_all(const Transports& transports, const std::string& dir, int cores) {
  for (const Config* c : models) {
    const Group<Shm>& group = transports.group<Shm>();
    std::vector<Measured> all;
    all.push_back(measured<OneFOneB<M>, P>(*c, group));
    all.push_back(measured<ZeroBubbleH1<M>, P>(*c, group));
    all.push_back(measured<Interleaved1F1B<M, 2>, P>(*c, group));
    all.push_back(measured<ZeroBubbleV<M>, P>(*c, group));
    for (auto& each : all)
      for (int i = 0; i < warmup_steps; ++i) each.step();
    const int rounds = measured_rounds(*c);
    for (int round = 0; round < rounds; ++round)
      for (std::size_t k = 0; k < all.size(); ++k) {
        Measured& each = all[(k + static_cast<std::size_t>(round)) % all.size()];
        if (const auto report = warm_step_report(each)) each.figures.push_back(report->figures);
      }
    write_costs(all[0], all[1], *c, P, 1, dir, cores);
    write_costs(all[2], all[3], *c, P, 2, dir, cores);
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
  // the cost model charges itself (Costs::cores), so computes are timed in core time.
  const int cores = shared_cores(transports.gloo());
  const trace::CoreTimeWhileShared core_time(transports.gloo().size(), cores);
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
