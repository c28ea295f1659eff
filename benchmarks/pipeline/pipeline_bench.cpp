// Pipeline throughput: every Schedule x Comm x Partition of the one policy list
// (tests/support/policies.hpp), instantiated through Boost.Hana, on P = 2 ranks and three
// configurations; next to them, the same GPipe step written as a plain loop over raw c10d calls
// of each transport (no library) and the single-process model that "ideal = 2 x M/(M+1) x
// single" refers to.
// Samples/s are items_per_second; counters give the measured bubble next to the verifier's
// prediction (unit costs, and the measured F/B/I/W costs), medians over 15 untimed steps after
// the timed ones (5 for h1024 b512).
//
//   mpprun --nproc-per-node 2 ./pipeline_bench [--benchmark_filter=...] [--benchmark_format=json]
//
// On 4 ranks it runs the search matrix only (search_matrix.cpp: searched schedules against the
// built-ins); `--costs-out DIR` measures the costs those schedules are searched from, on 2 or 4
// ranks, writes them into DIR and stops.
//
// Every rank runs the same benchmarks with fixed iteration counts (the ranks must exchange the
// same messages); only rank 0 reports. The single-process baseline runs on rank 0 alone while
// rank 1 waits at a barrier, so it has a core to itself.
#include <benchmark/benchmark.h>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <boost/hana/for_each.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/paired.hpp"
#include "../common/thread_times.hpp"
#include "../common/transports.hpp"
#include "configs.hpp"
#include "library_step.hpp"
#include "mpp/util/blas.hpp"
#include "search_matrix.hpp"

namespace hana = boost::hana;

namespace {

using mpp::bench::compute_bound;
using mpp::bench::compute_large;
using mpp::bench::Config;
using mpp::bench::course;
using mpp::bench::LibraryStep;
using mpp::bench::MeanSquaredError;
using mpp::bench::model_of;
using mpp::bench::thread_times;
using mpp::bench::ThreadTimes;
using mpp::bench::warmup_steps;
constexpr int M = mpp::bench::micro_batches;
constexpr int P = 2;

const mpp::bench::Transports* transports = nullptr;
const mpp::Group<mpp::Gloo>* world = nullptr;  // over Gloo

template <class Backend>
const mpp::Group<Backend>& group_of() {
  return transports->group<Backend>();
}

/// Steps measured after the timed ones, each followed by its report: one step's bubble is one
/// sample of a noisy quantity (a hiccup of a few hundred microseconds is 5 % of a course step).
/// Five for the configurations whose steps take a second.
int reported_steps(const Config& c) { return c.iterations >= 10 ? 15 : 5; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : mpp::bench::median_of_sorted(v);
}

/// A counter of the library's benchmarks: its name and how one step's report gives it.
struct ReportedFigure {
  const char* counter;
  double (*of)(const mpp::StepReport&);
};

/// The measured bubble next to the verifier's predictions from each step's own measured costs,
/// where the bubble goes (shares of the ranks' step time that add up to `bubble`), and each rank's
/// compute per step: a stage slower than the other paces the pipeline.
constexpr ReportedFigure reported_figures[] = {
    {"bubble", [](const mpp::StepReport& r) { return r.figures.bubble; }},
    {"bubble_pred_unit",
     [](const mpp::StepReport& r) { return r.predicted_unit.bubble_fraction(); }},
    {"bubble_pred_meas",
     [](const mpp::StepReport& r) { return r.predicted_measured.bubble_fraction(); }},
    {"bubble_pred_lat",
     [](const mpp::StepReport& r) { return r.predicted_latency.bubble_fraction(); }},
    {"msg_latency_us", [](const mpp::StepReport& r) { return r.figures.message_latency_us; }},
    {"peak_act_MiB_r0",
     [](const mpp::StepReport& r) {
       return static_cast<double>(r.figures.peak_activation_bytes[0]) / (1 << 20);
     }},
    {"bubble_recv_wait", [](const mpp::StepReport& r) { return r.figures.recv_wait_share; }},
    {"bubble_send", [](const mpp::StepReport& r) { return r.figures.send_share; }},
    {"bubble_recv_post", [](const mpp::StepReport& r) { return r.figures.recv_post_share; }},
    {"send_overhead_us", [](const mpp::StepReport& r) { return r.figures.send_overhead_us; }},
    {"recv_overhead_us", [](const mpp::StepReport& r) { return r.figures.recv_overhead_us; }},
    {"bubble_step_end", [](const mpp::StepReport& r) { return r.figures.step_end_share; }},
    {"bubble_untraced", [](const mpp::StepReport& r) { return r.figures.untraced_share; }},
    {"step_us", [](const mpp::StepReport& r) { return r.figures.step_us; }},
    {"compute_us_r0", [](const mpp::StepReport& r) { return r.traces[0].compute_us(); }},
    {"compute_us_r1", [](const mpp::StepReport& r) { return r.traces[1].compute_us(); }},
};

/// Per timed step on this rank, from the scheduler's statistics between `before` and `after`:
/// the CPU its other threads (the transport's) took, and how long the compute thread was
/// runnable while another thread had its core.
void thread_counters(benchmark::State& state, const ThreadTimes& before, const ThreadTimes& after) {
  const double steps =
      static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  state.counters["other_threads_cpu_us"] = (after.others_run_us - before.others_run_us) / steps;
  state.counters["compute_thread_waiting_us"] = (after.own_wait_us - before.own_wait_us) / steps;
}

template <class Pipe>
void library(benchmark::State& state, const Config& c) {
  world->barrier();
  LibraryStep<Pipe> step(c, group_of<typename Pipe::comm_type::backend>());
  for (int i = 0; i < warmup_steps; ++i) step();
  // The timed steps run back to back, as training does; the reported ones below each follow a
  // report, which lines the ranks up. This rank's own step and its share of sharing the loss, as
  // its trace timed them, tell the two apart (reading them costs a few loads per step).
  std::vector<double> step_us, loss_sync_us;
  step_us.reserve(static_cast<std::size_t>(state.max_iterations));
  loss_sync_us.reserve(static_cast<std::size_t>(state.max_iterations));
  const ThreadTimes before = thread_times();
  for (auto _ : state) {
    step();
    const mpp::trace::RankTrace& trace = step.pipe.last_trace();
    step_us.push_back(trace.step_us);
    double sync = 0.0;
    for (const auto& e : trace.events)
      if (e.kind == mpp::trace::EventKind::loss_sync) sync += e.duration_us();
    loss_sync_us.push_back(sync);
  }
  thread_counters(state, before, thread_times());
  state.SetItemsProcessed(state.iterations() * c.batch);
  state.counters["step_us_timed"] = median(std::move(step_us));
  state.counters["loss_sync_us_timed"] = median(std::move(loss_sync_us));
  // Untimed: the medians over reported steps of what each step's report says.
  std::vector<std::vector<double>> samples(std::size(reported_figures));
  for (int i = 0; i < reported_steps(c); ++i) {
    step();
    if (const auto report = mpp::report_last_step(step.pipe))
      for (std::size_t k = 0; k < samples.size(); ++k)
        samples[k].push_back(reported_figures[k].of(*report));
  }
  if (!samples.front().empty())
    for (std::size_t k = 0; k < samples.size(); ++k)
      state.counters[reported_figures[k].counter] = median(samples[k]);
}

/// GPipe over two ranks written by hand on raw c10d calls of `group` (Gloo or Shm): what
/// Pipeline<Uniform<2>, GPipe<8>, Async<...>> does, with nothing general about it (known shapes,
/// no header, no trace).
struct HandWrittenStep {
  HandWrittenStep(const Config& c, const mpp::ProcessGroup& group)
      : cfg(model_of(c)),
        rank(world->rank()),
        stage(
            mpp::models::make_mlp_layers(cfg, rank * cfg.layers / 2, (rank + 1) * cfg.layers / 2)),
        adam(stage->parameters(), torch::optim::AdamOptions(1e-4)),
        pg(group.c10d_group()),
        mb(c.batch / M) {
    const auto batch = mpp::models::make_regression_batch(cfg, c.batch, 0);
    xs = batch.inputs.chunk(M);
    ys = batch.targets.chunk(M);
  }
  void operator()() {
    adam.zero_grad();
    std::vector<c10::intrusive_ptr<c10d::Work>> sends;
    std::vector<at::Tensor> outs(M), ins(M), bufs(M);
    double loss_sum = 0.0;
    if (rank == 0) {
      for (int i = 0; i < M; ++i) {
        outs[i] = stage->forward(xs[i]);
        std::vector<at::Tensor> t{outs[i].detach()};
        sends.push_back(pg.send(t, 1, i));
      }
      std::vector<c10::intrusive_ptr<c10d::Work>> recvs;
      for (int i = 0; i < M; ++i) {
        bufs[i] = at::empty({mb, cfg.hidden});
        std::vector<at::Tensor> t{bufs[i]};
        recvs.push_back(pg.recv(t, 1, M + i));
      }
      for (int i = 0; i < M; ++i) {
        recvs[i]->wait();
        outs[i].backward(bufs[i]);
      }
    } else {
      std::vector<c10::intrusive_ptr<c10d::Work>> recvs;
      for (int i = 0; i < M; ++i) {
        bufs[i] = at::empty({mb, cfg.hidden});
        std::vector<at::Tensor> t{bufs[i]};
        recvs.push_back(pg.recv(t, 0, i));
      }
      std::vector<at::Tensor> losses(M);
      for (int i = 0; i < M; ++i) {
        recvs[i]->wait();
        ins[i] = bufs[i].requires_grad_(true);
        losses[i] = torch::nn::functional::mse_loss(stage->forward(ins[i]), ys[i]) / M;
        loss_sum += losses[i].item<double>();
      }
      for (int i = 0; i < M; ++i) {
        losses[i].backward();
        std::vector<at::Tensor> t{ins[i].grad()};
        sends.push_back(pg.send(t, 0, M + i));
      }
    }
    for (auto& s : sends) s->wait();
    std::vector<at::Tensor> loss{at::scalar_tensor(loss_sum, at::kDouble)};
    pg.broadcast(loss, {1, 0})->wait();
    adam.step();
  }
  mpp::models::MlpConfig cfg;
  int rank;
  torch::nn::Sequential stage;
  torch::optim::Adam adam;
  c10d::ProcessGroup& pg;
  std::int64_t mb;
  std::vector<at::Tensor> xs, ys;
};

template <class Backend>
void hand_written_gpipe(benchmark::State& state, const Config& c) {
  world->barrier();
  HandWrittenStep step(c, group_of<Backend>());
  for (int i = 0; i < warmup_steps; ++i) step();
  const ThreadTimes before = thread_times();
  for (auto _ : state) step();
  thread_counters(state, before, thread_times());
  state.SetItemsProcessed(state.iterations() * c.batch);
}

/// The library's overhead over the hand-written loop, paired: one iteration is a block of four
/// steps, library and loop twice each in the order ABBA or BAAB (alternating), each timed on
/// rank 0; the block's ratio is the library's two steps over the loop's two. Reports the median
/// ratio with a distribution-free 95 % interval (`overhead_pct`, `ci_lo_pct`, `ci_hi_pct`).
template <class Backend>
void paired_overhead(benchmark::State& state, const Config& c) {
  using Pipe = mpp::Pipeline<mpp::Uniform<P>, mpp::GPipe<M>, mpp::Async<Backend>>;
  world->barrier();
  LibraryStep<Pipe> library_step(c, group_of<Backend>());
  HandWrittenStep loop_step(c, group_of<Backend>());
  for (int i = 0; i < warmup_steps; ++i) {
    library_step();
    loop_step();
  }
  using Clock = std::chrono::steady_clock;
  auto timed = [](auto& step) {
    const auto t = Clock::now();
    step();
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  std::vector<double> ratios;
  bool library_first = true;
  for (auto _ : state) {
    double lib = 0, loop = 0;
    if (library_first) {
      lib += timed(library_step);
      loop += timed(loop_step);
      loop += timed(loop_step);
      lib += timed(library_step);
    } else {
      loop += timed(loop_step);
      lib += timed(library_step);
      lib += timed(library_step);
      loop += timed(loop_step);
    }
    library_first = !library_first;
    ratios.push_back(lib / loop);
  }
  const auto overhead = mpp::bench::median_with_interval(std::move(ratios));
  state.counters["overhead_pct"] = (overhead.median - 1) * 100;
  state.counters["ci_lo_pct"] = (overhead.lo - 1) * 100;
  state.counters["ci_hi_pct"] = (overhead.hi - 1) * 100;
  state.SetItemsProcessed(state.iterations() * 4 * c.batch);
}

/// The whole model on one process and one core (rank 0; rank 1 waits).
void single_process(benchmark::State& state, const Config& c) {
  world->barrier();
  if (world->rank() == 0) {
    const auto cfg = model_of(c);
    auto model = mpp::models::make_full_mlp(cfg);
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-4));
    const auto batch = mpp::models::make_regression_batch(cfg, c.batch, 0);
    auto step = [&] {
      adam.zero_grad();
      torch::nn::functional::mse_loss(model->forward(batch.inputs), batch.targets).backward();
      adam.step();
    };
    for (int i = 0; i < warmup_steps; ++i) step();
    for (auto _ : state) step();
    state.counters["ideal_P2_M8"] =
        benchmark::Counter(static_cast<double>(state.iterations() * c.batch) * P * M / (M + 1.0),
                           benchmark::Counter::kIsRate);
  } else {
    for (auto _ : state) {
    }
  }
  state.SetItemsProcessed(state.iterations() * c.batch);
  world->barrier();
}

/// The pipeline's compute without the pipeline: what limits it on this machine besides the
/// bubble and the messages. `micro_batched` runs the whole model on rank 0 alone (rank 1 waits),
/// split into the same M micro-batches with the gradient accumulated, the work of both stages
/// done by one core; `both_stages_no_comm` runs each rank's own stage on its own core at the same
/// time (rank 1 on a local input of the right shape), the same F and B work as the pipeline with
/// no message and no wait. The first shows the cost of small micro-batches (a 16-row GEMM is
/// slower per row than a 128-row one), the second adds the two cores competing for the memory
/// and the caches; a two-stage GPipe step can at best take (M+1)/M times the second.
void compute_only(benchmark::State& state, const Config& c, bool both_stages) {
  world->barrier();
  const auto cfg = model_of(c);
  const int rank = world->rank();
  const bool runs = both_stages || rank == 0;
  if (runs) {
    auto model = both_stages ? mpp::models::make_mlp_layers(cfg, rank * cfg.layers / 2,
                                                            (rank + 1) * cfg.layers / 2)
                             : mpp::models::make_full_mlp(cfg);
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-4));
    const auto batch = mpp::models::make_regression_batch(cfg, c.batch, 0);
    const auto xs = batch.inputs.chunk(M);
    const auto ys = batch.targets.chunk(M);
    auto step = [&] {
      adam.zero_grad();
      for (int i = 0; i < M; ++i) {
        const at::Tensor out = model->forward(xs[i]);
        if (both_stages && rank == 0)
          out.backward(at::ones_like(out) / out.numel());
        else
          (torch::nn::functional::mse_loss(out, ys[i]) / M).backward();
      }
      adam.step();
    };
    for (int i = 0; i < warmup_steps; ++i) step();
    for (auto _ : state) step();
    const double samples = static_cast<double>(state.iterations() * c.batch);
    state.counters["pipeline_bound_P2_M8"] =
        benchmark::Counter((both_stages ? 1.0 : static_cast<double>(P)) * samples * M / (M + 1.0),
                           benchmark::Counter::kIsRate);
  } else {
    for (auto _ : state) {
    }
  }
  state.SetItemsProcessed(state.iterations() * c.batch);
  world->barrier();
}

template <class F>
void add(const std::string& name, const Config& c, int iterations, F function) {
  benchmark::RegisterBenchmark(name.c_str(), function, c)
      ->Iterations(iterations)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

void register_all() {
  for (const Config* c : {&course, &compute_bound, &compute_large}) {
    const std::string suffix = std::string("/") + c->name;
    const bool large = c == &compute_large;
    add("single_process" + suffix, *c, c->iterations, single_process);
    add("compute_only/micro_batched" + suffix, *c, c->iterations,
        [](benchmark::State& state, const Config& config) { compute_only(state, config, false); });
    add("compute_only/both_stages_no_comm" + suffix, *c, c->iterations,
        [](benchmark::State& state, const Config& config) { compute_only(state, config, true); });
    hana::for_each(hana::tuple_t<mpp::Gloo, mpp::Shm>, [&](auto backend) {
      using Backend = typename decltype(backend)::type;
      const std::string transport(Backend::name);
      add("hand_written/GPipe<8>/raw c10d " + transport + "/P=2" + suffix, *c, c->iterations,
          hand_written_gpipe<Backend>);
      if (!large)
        add("paired/GPipe<8>/Async<" + transport + ">/Uniform<2>_over_hand_written" + suffix, *c,
            c->paired_blocks, paired_overhead<Backend>);
    });
    // The matrix: one line per Schedule x Comm x Partition, from the policy list.
    hana::for_each(mpp::test::hana_types<mpp::test::schedules<M>>, [&](auto schedule) {
      using Sched = typename decltype(schedule)::type;
      hana::for_each(mpp::test::hana_types<mpp::test::comm_policies>, [&](auto comm) {
        using Comm = typename decltype(comm)::type;
        hana::for_each(mpp::test::hana_types<mpp::test::partitions<P, Sched::chunks_per_rank>>,
                       [&](auto part) {
                         using Part = typename decltype(part)::type;
                         using Pipe = mpp::Pipeline<Part, Sched, Comm>;
                         if (large && (Comm::semantics != mpp::CommSemantics::buffered ||
                                       !std::is_same_v<Part, mpp::Uniform<P>>))
                           return;
                         add(mpp::schedule_display_name<Sched>() + "/" +
                                 mpp::comm_display_name<Comm>() + "/" + Part::name() + suffix,
                             *c, c->iterations, library<Pipe>);
                       });
      });
    });
  }
}

class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  const mpp::bench::Transports both;
  transports = &both;
  world = &both.gloo();
  const auto& group = both.gloo();
  // --costs-out DIR: measure the costs the searched schedules are found from, and stop.
  std::string costs_out;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string arg(argv[i]);
    if (arg == "--costs-out" && i + 1 < argc)
      costs_out = argv[++i];
    else if (arg.rfind("--costs-out=", 0) == 0)
      costs_out = arg.substr(12);
    // Only rank 0 reports: the other ranks drop --benchmark_out so that they do not write the
    // same file at the same time.
    else if (group.rank() == 0 || arg.rfind("--benchmark_out", 0) != 0)
      args.push_back(argv[i]);
  }
  if (group.size() != P && group.size() != 4) {
    std::fprintf(stderr,
                 "pipeline_bench runs on 2 ranks (every benchmark) or 4 (the search matrix): "
                 "mpprun --nproc-per-node 2 ./pipeline_bench\n");
    return 2;
  }
  if (group.rank() == 0)
    std::fprintf(stderr, "%s\n",
                 mpp::util::blas_report(mpp::util::detect_blas(), at::get_num_threads()).c_str());
  if (!costs_out.empty()) {
    mpp::bench::write_measured_costs(both, costs_out);
    return 0;
  }
  if (group.size() == P) register_all();
  mpp::bench::register_search_matrix(both);
  int arg_count = static_cast<int>(args.size());
  benchmark::Initialize(&arg_count, args.data());
  if (group.rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  return 0;
}
