// Data-parallel throughput: naive DP (per tensor, coalesced) and DDP (bucket caps 1-100 MiB,
// async and blocking) on the course's model and on a compute-bound one, plus the single-process
// baseline that "ideal = world size x single" refers to, and the bound of them all (NoComm: every
// rank's own work with nothing exchanged). Samples/s are global samples
// (items_per_second). DDP over Shm (all-reduce through shared memory) runs on a second group of
// the same ranks; AllReduce<...>/64MiB compares the two backends on the compute-bound model's
// gradient volume alone, with the CPU time the whole process spends per all-reduce.
//
//   mpprun --nproc-per-node 2 ./dp_bench [--benchmark_filter=...] [--benchmark_out=dp.json]
//
// Every rank runs the same benchmarks with fixed iteration counts (the ranks must issue the
// same collectives); only rank 0 reports. The single-process baseline runs on rank 0 alone
// while the other ranks wait at a barrier, so it has a core to itself.
#include <benchmark/benchmark.h>
#include <torch/nn/modules/loss.h>
#include <torch/optim/adam.h>

#include <ATen/Parallel.h>
#include <ATen/ops/ones.h>

#include <time.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../common/transports.hpp"
#include "mpp/comm/process_group.hpp"
#include "mpp/data_parallel.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/util/blas.hpp"

namespace {

struct Config {
  const char* name;
  std::int64_t hidden;
  std::int64_t global_batch;
  int iterations;
};

// The course's model, and the compute-bound one (the pipeline benchmarks use the same two).
constexpr Config course{"course_h128_b32", 128, 32, 300};
constexpr Config compute_bound{"compute_h1024_b128", 1024, 128, 12};
constexpr int warmup_steps = 3;

const mpp::bench::Transports* transports = nullptr;
const mpp::Group<mpp::Gloo>* world = nullptr;  // over Gloo

template <class Backend>
const mpp::Group<Backend>& group_for() {
  return transports->group<Backend>();
}

/// CPU seconds of the whole process (every thread: compute, Gloo's, the Shm worker).
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Trainer {
  torch::nn::Sequential model;
  mpp::models::Batch batch;
  std::function<void()> sync;  // after backward (naive DP); empty for DDP and single
  std::shared_ptr<void> keep;  // the NaiveDP / DDP object
  // The optimizer: Adam over every parameter unless a benchmark installs another one.
  std::shared_ptr<void> optimizer;
  std::function<void()> zero_grad, optimizer_step;

  Trainer(const Config& c, std::int64_t batch_size) {
    model = mpp::models::make_full_mlp({.hidden = c.hidden, .layers = 16, .seed = 1});
    batch = mpp::models::make_regression_batch({.hidden = c.hidden, .layers = 16, .seed = 1},
                                               batch_size, 0);
    use_optimizer(
        std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-4)));
  }
  template <class Optimizer>
  void use_optimizer(std::shared_ptr<Optimizer> opt) {
    zero_grad = [o = opt.get()] { o->zero_grad(); };
    optimizer_step = [o = opt.get()] { o->step(); };
    optimizer = std::move(opt);
  }
  void step() {
    zero_grad();
    torch::mse_loss(model->forward(batch.inputs), batch.targets).backward();
    if (sync) sync();
    optimizer_step();
  }
};

void run(benchmark::State& state, Trainer& t, const Config& c) {
  for (int i = 0; i < warmup_steps; ++i) t.step();
  world->barrier();
  for (auto _ : state) t.step();
  state.SetItemsProcessed(state.iterations() * c.global_batch);
  state.counters["ranks"] = world->size();
}

template <class DP>
void naive(benchmark::State& state, const Config& c) {
  world->barrier();
  Trainer t(c, c.global_batch / world->size());
  auto dp = std::make_shared<DP>(*t.model, *world);
  t.sync = [dp] { dp->sync_gradients(); };
  t.keep = dp;
  run(state, t, c);
  state.counters["comm_ms_per_step"] =
      1e3 * dp->comm_seconds() / static_cast<double>(state.iterations() + warmup_steps);
}

/// How the optimizer step is split: not at all (Adam on every rank), sharded (ShardedOptimizer,
/// ZeRO stage 1: each rank runs Adam on its share of the parameters, then the updated shares are
/// exchanged), or sharded with each gradient reduce-scattered to the rank that steps it.
enum class Step { replicated, sharded, sharded_to_owners };

/// DDP over `Comm` with the optimizer step split as `S` says.
template <class Comm, Step S = Step::replicated>
void ddp(benchmark::State& state, const Config& c) {
  world->barrier();
  Trainer t(c, c.global_batch / world->size());
  const auto cap = static_cast<std::size_t>(state.range(0)) * 1024 * 1024;
  const auto& group = group_for<typename Comm::backend>();
  std::shared_ptr<mpp::ShardedOptimizer<torch::optim::Adam, Comm>> sharded;
  if constexpr (S != Step::replicated)
    sharded = std::make_shared<mpp::ShardedOptimizer<torch::optim::Adam, Comm>>(
        *t.model, group, torch::optim::AdamOptions(1e-4));
  mpp::DdpOptions options{.bucket_bytes = cap};
  if constexpr (S == Step::sharded_to_owners) options.gradient_owners = sharded->plan().owner;
  auto d = std::make_shared<mpp::DDP<Comm>>(*t.model, group, options);
  t.keep = d;
  if (sharded) t.use_optimizer(sharded);
  run(state, t, c);
  state.counters["buckets"] = static_cast<double>(d->buckets().buckets.size());
  state.counters["exposed_comm_ms_per_step"] =
      1e3 * d->comm_wait_seconds() / static_cast<double>(state.iterations() + warmup_steps);
}

/// The ranks' own work with nothing exchanged, a bound for every scheme above on these ranks:
/// all ranks at once run forward and backward on their share of the global batch and Adam on
/// every parameter (as DDP does) or, with `Sharded`, on the share ShardedOptimizer would give
/// them. What it reaches is what the ranks' compute and the machine's shared caches and memory
/// allow; the gap to it is the cost of communicating.
template <bool Sharded>
void no_comm(benchmark::State& state, const Config& c) {
  world->barrier();
  Trainer t(c, c.global_batch / world->size());
  if constexpr (Sharded) {
    const auto params = t.model->parameters();
    std::vector<std::int64_t> bytes;
    for (const auto& p : params) bytes.push_back(p.numel() * p.element_size());
    const auto plan = mpp::plan_shards(bytes, world->size());
    std::vector<at::Tensor> mine;
    for (std::size_t i = 0; i < params.size(); ++i)
      if (plan.owner[i] == world->rank()) mine.push_back(params[i]);
    t.use_optimizer(std::make_shared<torch::optim::Adam>(mine, torch::optim::AdamOptions(1e-4)));
    t.zero_grad = [m = t.model]() mutable { m->zero_grad(); };  // every gradient, as DDP's ranks do
  }
  run(state, t, c);
}

/// One all-reduce (sum) of `state.range(0)` MiB of float32, as DDP's buckets of the
/// compute-bound model add up to (16 x 1024 x 1024 weights = 64 MiB).
template <class Backend>
void all_reduce(benchmark::State& state) {
  const auto& group = group_for<Backend>();
  const auto floats = state.range(0) * 1024 * 1024 / 4;
  at::Tensor t = at::ones({floats});
  group.all_reduce(t);  // first touch of the buffers
  world->barrier();
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) group.all_reduce(t);
  state.counters["process_cpu_ms_per_op"] =
      1e3 * (process_cpu_seconds() - cpu_start) / static_cast<double>(state.iterations());
  state.SetBytesProcessed(state.iterations() * floats * 4);
}

void single(benchmark::State& state, const Config& c) {
  Trainer t(c, c.global_batch);
  for (int i = 0; i < warmup_steps; ++i) t.step();
  for (auto _ : state) t.step();
  state.SetItemsProcessed(state.iterations() * c.global_batch);
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

/// Registers `fn` on `c` under `name/<config>`, one run per bucket cap in MiB (none: no argument).
template <class Fn>
void add(const std::string& name, Fn fn, const Config& c,
         std::vector<std::int64_t> bucket_mb = {}) {
  auto* b = benchmark::RegisterBenchmark((name + "/" + c.name).c_str(), fn, c);
  if (!bucket_mb.empty()) b->ArgNames({"bucket_mb"});
  for (auto mb : bucket_mb) b->Arg(mb);
  b->Iterations(c.iterations)->Unit(benchmark::kMillisecond)->UseRealTime();
}

void register_all(const Config& c) {
  // the single-process baseline: rank 0 alone, the others wait at the next barrier
  if (world->rank() == 0) add("Single/global_batch", single, c);
  add("NaiveDP<Blocking<Gloo>,PerTensor>",
      naive<mpp::NaiveDP<mpp::Blocking<mpp::Gloo>, mpp::PerTensor>>, c);
  add("NaiveDP<Blocking<Gloo>,Coalesced>",
      naive<mpp::NaiveDP<mpp::Blocking<mpp::Gloo>, mpp::Coalesced>>, c);
  add("DDP<Async<Gloo>>", ddp<mpp::Async<mpp::Gloo>>, c, {1, 5, 25, 100});
  add("DDP<Async<Shm>>", ddp<mpp::Async<mpp::Shm>>, c, {1, 5, 25, 100});
  add("DDP<Async<Gloo>>+ShardedOptimizer<Adam>", ddp<mpp::Async<mpp::Gloo>, Step::sharded>, c,
      {25, 100});
  add("DDP<Async<Shm>>+ShardedOptimizer<Adam>", ddp<mpp::Async<mpp::Shm>, Step::sharded>, c,
      {25, 100});
  add("DDP<Async<Shm>,to_owners>+ShardedOptimizer<Adam>",
      ddp<mpp::Async<mpp::Shm>, Step::sharded_to_owners>, c, {5, 25, 100});
  add("DDP<Blocking<Gloo>>", ddp<mpp::Blocking<mpp::Gloo>>, c, {25});
  add("NoComm/local_batch,Adam", no_comm<false>, c);
  add("NoComm/local_batch,Adam_on_shard", no_comm<true>, c);
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  const mpp::bench::Transports both;
  transports = &both;
  world = &both.gloo();
  const auto& group = both.gloo();
  if (group.rank() != 0) {  // only rank 0 writes --benchmark_out
    int kept = 1;
    for (int i = 1; i < argc; ++i)
      if (std::string_view(argv[i]).substr(0, 15) != "--benchmark_out") argv[kept++] = argv[i];
    argc = kept;
  }
  benchmark::Initialize(&argc, argv);
  register_all(course);
  register_all(compute_bound);
  for (auto [name, fn] : {std::pair{"AllReduce<Gloo>", &all_reduce<mpp::Gloo>},
                          std::pair{"AllReduce<Shm>", &all_reduce<mpp::Shm>}})
    benchmark::RegisterBenchmark(name, fn)
        ->ArgNames({"mib"})
        ->Arg(64)
        ->Iterations(20)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  if (group.rank() == 0) {
    mpp::util::print_blas_report(at::get_num_threads());
    std::printf("ranks: %d, one thread each; samples/s = global samples per second\n",
                group.size());
    std::fflush(stdout);
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  group.barrier();
  benchmark::Shutdown();
  return 0;
}
