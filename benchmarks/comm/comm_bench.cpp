// Point-to-point latency and bandwidth between two ranks, through each layer of mpp's comm
// stack next to the raw c10d Gloo calls it wraps, in one binary and one process pair:
//
//   raw_c10d_gloo     ProcessGroupGloo::send/recv + Work::wait(deadline)   (the floor)
//   ProcessGroup      mpp::ProcessGroup::send/recv (deadlines, staging checks, error mapping)
//   Blocking<Gloo>    mpp::Communicator<Blocking<Gloo>>
//   Async<Gloo>       mpp::Communicator<Async<Gloo>> (isend/irecv handles, then wait)
//
// Roles: rank 0 starts every round trip (send `bytes`, then receive them back) and times it with
// a steady clock; rank 1 only echoes (receive, send back) through the same layer. Both ranks run
// the same registered benchmarks with fixed iteration counts and the same pseudo-random order,
// so they stay in step; rank 0 reports.
//
// Method: paired and interleaved. One iteration of `p2p/bytes:N` is a block of ten round trips:
// the five slots raw, control, ProcessGroup, Blocking, Async in a shuffled order, then the same
// order reversed, so every slot sits on average in the middle of the block. The control is raw
// Gloo again, timed apart. A layer's block ratio is (its two trips) / (the two raw trips): a load
// change slower than a block hits both alike and cancels, and a hiccup spoils one block, which
// the median ignores. All layers share every block, so they see the same machine. Per size, for
// each layer: the median round trip and the median of its block ratios with a distribution-free
// 95 % interval (order statistics of the binomial). The control's true overhead is zero: its
// interval shows what the method resolves.
//
// Idle CPUs of this VM halt, and a wake-up can then wait for the next 4 ms timer tick, which
// hides any per-message cost under a constant round trip. While measuring, every rank therefore
// holds /dev/cpu_dma_latency at 0 (idle CPUs poll instead of halting; what cyclictest does) when
// it may open it; --comm_keep_cpus_awake=0 turns that off. The binary says which it did. CPUs
// busy with other processes delay wake-ups to a tick as well: the summary then gives no verdict
// for the sizes it finds tick-bound. Measure on an otherwise quiet machine. The transport family
// releases the hold (see bm_transport).
//
//   mpprun --nproc-per-node 2 ./comm_bench [--comm_blocks_scale=0.2] [--comm_trips_out=DIR]
//                                          [--benchmark_filter=...]
//
// `transport/bytes:N` compares the transports themselves, Gloo over loopback and Shm's rings,
// through mpp::ProcessGroup's blocking send/recv (ping-pong: the echoing rank is already waiting
// when a message arrives). A block is a run of 16 round trips over each, in alternating order;
// per size: the median one-way time and one-way bandwidth of each, and the median of the
// per-block ratios Gloo/Shm with its 95 % interval (`shm_speedup`), from 4 B to 64 MiB.
//
// Both ranks must run the same benchmarks in the same order: a --benchmark_filter applies to
// both, but --benchmark_enable_random_interleaving would shuffle each rank differently.
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../common/paired.hpp"
#include "mpp/comm.hpp"
#include "mpp/launch/cpu_latency.hpp"
#include "mpp/util/blas.hpp"

namespace {

mpp::Group<mpp::Gloo>* world = nullptr;             // the two ranks over Gloo
mpp::Group<mpp::Shm>* shm_world = nullptr;          // the same ranks over Shm
std::optional<mpp::launch::CpuLatencyLimit> awake;  // held for the p2p family only
double blocks_scale = 1.0;                          // --comm_blocks_scale: fewer (or more) blocks
std::string trips_dir;  // --comm_trips_out: every round trip, one CSV per size

/// Blocks of ten round trips for a message size: about 25 s of round trips (estimated at 60 us
/// plus 2 GB/s each way), between 300 and 3000 blocks. The interval narrows as 1/sqrt(blocks):
/// 3000 blocks resolve ~1 % for the small sizes, whose round trips are cheap.
int blocks_for(std::int64_t bytes) {
  const double round_trip_s = 60e-6 + 2.0 * static_cast<double>(bytes) / 2e9;
  const double blocks = std::clamp(25.0 / (10 * round_trip_s), 300.0, 3000.0);
  return std::max(10, static_cast<int>(std::lround(blocks * blocks_scale)));
}

// Every layer does the same work per round trip: the same tensor, tags 0 (there) and 1 (back),
// one std::vector per call, and each wait bounded by the same deadline.
struct RawGloo {
  static constexpr const char* name = "raw_c10d_gloo";
  static void round_trip(const at::Tensor& buf, bool initiator) {
    auto& pg = world->c10d_group();
    const auto deadline = world->options().timeout;
    const int peer = initiator ? 1 : 0;
    auto send = [&](int tag) {
      std::vector<at::Tensor> v{buf};
      pg.send(v, peer, tag)->wait(deadline);
    };
    auto recv = [&](int tag) {
      std::vector<at::Tensor> v{buf};
      pg.recv(v, peer, tag)->wait(deadline);
    };
    if (initiator) {
      send(0);
      recv(1);
    } else {
      recv(0);
      send(1);
    }
  }
};

struct PlainGroup {
  static constexpr const char* name = "ProcessGroup";
  static void round_trip(const at::Tensor& buf, bool initiator) {
    if (initiator) {
      world->send(buf, 1, 0);
      world->recv(buf, 1, 1);
    } else {
      world->recv(buf, 0, 0);
      world->send(buf, 0, 1);
    }
  }
};

template <mpp::comm_policy C>
struct Policy {
  static inline const std::string label =
      std::string(C::name) + "<" + std::string(C::backend::name) + ">";
  static inline const char* name = label.c_str();
  static void round_trip(const at::Tensor& buf, bool initiator) {
    static const mpp::Communicator<C> comm(*world);
    if (initiator) {
      comm.send(buf, 1, 0).wait();
      comm.recv(buf, 1, 1).wait();
    } else {
      comm.recv(buf, 0, 0).wait();
      comm.send(buf, 0, 1).wait();
    }
  }
};

/// The slots of a block. Slot 0 is the reference every other slot is divided by; slot 1 runs the
/// same raw calls as slot 0 (the control).
struct Slot {
  const char* name;   // counter prefix
  const char* layer;  // what the summary calls it
  void (*round_trip)(const at::Tensor&, bool);
};
const std::array<Slot, 5> slots{{
    {"raw", RawGloo::name, &RawGloo::round_trip},
    {"control", "raw (control)", &RawGloo::round_trip},
    {"ProcessGroup", PlainGroup::name, &PlainGroup::round_trip},
    {"Blocking", "Blocking<Gloo>", &Policy<mpp::Blocking<mpp::Gloo>>::round_trip},
    {"Async", "Async<Gloo>", &Policy<mpp::Async<mpp::Gloo>>::round_trip},
}};

using mpp::bench::median_of_sorted;
using mpp::bench::median_with_interval;

void bm_p2p(benchmark::State& state) {
  const std::int64_t bytes = state.range(0);
  const auto buf = at::zeros({bytes / 4}, at::kFloat);
  const bool initiator = world->rank() == 0;  // rank 0 starts and times; rank 1 echoes
  constexpr std::size_t n_slots = slots.size();
  for (int i = 0; i < 3; ++i)  // warm-up: connections, allocator, caches, every code path
    for (const auto& s : slots) s.round_trip(buf, initiator);

  // The same seed on both ranks: both shuffle alike.
  std::mt19937 shuffler(static_cast<std::uint32_t>(12345 + bytes));
  std::array<std::size_t, n_slots> order{};
  const auto blocks = static_cast<std::size_t>(state.max_iterations);
  std::array<std::vector<double>, n_slots> trips;  // per slot, two per block
  for (auto& t : trips) t.reserve(2 * blocks);
  std::vector<std::array<std::size_t, n_slots>> orders;
  orders.reserve(blocks);
  for (auto _ : state) {
    for (std::size_t i = 0; i < n_slots; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), shuffler);
    double block_time = 0;
    for (std::size_t position = 0; position < 2 * n_slots; ++position) {
      const std::size_t slot = order[position < n_slots ? position : 2 * n_slots - 1 - position];
      const auto start = std::chrono::steady_clock::now();
      slots[slot].round_trip(buf, initiator);
      const double t =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      trips[slot].push_back(t);
      block_time += t;
    }
    orders.push_back(order);
    state.SetIterationTime(block_time / (2 * n_slots));  // reported: the mean round trip
  }
  // One-way bandwidth from the mean round trip (over all slots).
  state.SetBytesProcessed(state.iterations() * 2 * bytes);

  if (!trips_dir.empty() && initiator) {
    std::ofstream out(trips_dir + "/p2p_" + std::to_string(bytes) + ".csv");
    out << "block,slot,position,trip1_s,trip2_s\n";  // position in the first half
    for (std::size_t b = 0; b < orders.size(); ++b)
      for (std::size_t p = 0; p < n_slots; ++p) {
        const std::size_t s = orders[b][p];
        out << b << "," << slots[s].name << "," << p << "," << trips[s][2 * b] << ","
            << trips[s][2 * b + 1] << "\n";
      }
  }

  const std::size_t n = trips[0].size() / 2;
  for (std::size_t s = 0; s < n_slots; ++s) {
    std::vector<double> ratios(n);
    for (std::size_t b = 0; b < n; ++b)
      ratios[b] = (trips[s][2 * b] + trips[s][2 * b + 1]) / (trips[0][2 * b] + trips[0][2 * b + 1]);
    std::vector<double> sorted = trips[s];
    std::sort(sorted.begin(), sorted.end());
    const std::string prefix = slots[s].name;
    state.counters[prefix + "_one_way_us"] = median_of_sorted(sorted) * 1e6 / 2;
    if (s == 0) continue;
    const auto overhead = median_with_interval(std::move(ratios));
    state.counters[prefix + "_overhead_pct"] = (overhead.median - 1) * 100;
    state.counters[prefix + "_ci_lo"] = (overhead.lo - 1) * 100;
    state.counters[prefix + "_ci_hi"] = (overhead.hi - 1) * 100;
  }
}

/// Round trips per transport in one block of the transport comparison: a run of them, so that
/// what one transport leaves running after its last message (Gloo's threads) only touches the
/// first trip of the other's run, which the medians ignore.
constexpr int trips_per_run = 16;

/// Blocks for the transport comparison: about 4 s per size (estimated with Gloo at 60 us plus
/// 2 GB/s and Shm at 5 us plus 6 GB/s each way), between 2 and 200 blocks.
int transport_blocks_for(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const double block_s = trips_per_run * (2 * (60e-6 + b / 2e9) + 2 * (5e-6 + b / 6e9));
  const double blocks = std::clamp(4.0 / block_s, 2.0, 200.0);
  return std::max(2, static_cast<int>(std::lround(blocks * blocks_scale)));
}

void group_round_trip(const mpp::ProcessGroup& group, const at::Tensor& buf, bool initiator) {
  if (initiator) {
    group.send(buf, 1, 0);
    group.recv(buf, 1, 1);
  } else {
    group.recv(buf, 0, 0);
    group.send(buf, 0, 1);
  }
}

/// One block: a run of round trips over each transport, Gloo's run first in every other block.
/// Per size: each transport's median round trip (over every trip) as one-way time and
/// bandwidth, and the median over blocks of (Gloo's median trip / Shm's) with its interval.
void bm_transport(benchmark::State& state) {
  // Not with idle CPUs polling: on the VMs measured here that made a receiver spinning on shared
  // memory take 27 us per message instead of 1.2 (both ranks busy, nothing left idle to poll),
  // and Gloo's 42 instead of 36.
  awake.reset();
  const std::int64_t bytes = state.range(0);
  const auto buf = at::zeros({std::max<std::int64_t>(1, bytes / 4)}, at::kFloat);
  const bool initiator = world->rank() == 0;
  const std::array<const mpp::ProcessGroup*, 2> groups{world, shm_world};
  for (int i = 0; i < 3; ++i)
    for (const auto* g : groups) group_round_trip(*g, buf, initiator);
  std::array<std::vector<double>, 2> trips;
  std::vector<double> ratios;
  bool gloo_first = true;
  for (auto _ : state) {
    std::array<std::vector<double>, 2> run;
    double block_time = 0;
    for (int k = 0; k < 2; ++k) {
      const std::size_t which = gloo_first ? static_cast<std::size_t>(k) : 1 - k;
      for (int i = 0; i < trips_per_run; ++i) {
        const auto start = std::chrono::steady_clock::now();
        group_round_trip(*groups[which], buf, initiator);
        const double t =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        run[which].push_back(t);
        trips[which].push_back(t);
        block_time += t;
      }
    }
    gloo_first = !gloo_first;
    for (auto& r : run) std::sort(r.begin(), r.end());
    ratios.push_back(median_of_sorted(run[0]) / median_of_sorted(run[1]));
    state.SetIterationTime(block_time / (2 * trips_per_run));
  }
  state.SetBytesProcessed(state.iterations() * 2 * trips_per_run * bytes);
  const std::array<const char*, 2> names{"gloo", "shm"};
  for (std::size_t g = 0; g < 2; ++g) {
    std::sort(trips[g].begin(), trips[g].end());
    const double one_way = median_of_sorted(trips[g]) / 2;
    state.counters[std::string(names[g]) + "_one_way_us"] = one_way * 1e6;
    state.counters[std::string(names[g]) + "_GBps"] = static_cast<double>(bytes) / one_way / 1e9;
  }
  const auto speedup = median_with_interval(std::move(ratios));
  state.counters["shm_speedup"] = speedup.median;
  state.counters["shm_speedup_lo"] = speedup.lo;
  state.counters["shm_speedup_hi"] = speedup.hi;
}

/// Console output as usual, plus every run kept for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& run : runs)
      if (run.run_type == Run::RT_Iteration && !run.error_occurred) runs_.push_back(run);
  }

  /// One line per size and layer: the overhead over raw Gloo, its interval, and whether the
  /// interval lies within +-limit_pct.
  void print_summary(double limit_pct) const {
    std::printf(
        "\nOverhead over raw c10d Gloo: median of the per-block ratios layer/raw, 95%% interval"
        "\nfrom order statistics; one-way times are median round trips / 2. The control is raw"
        "\nGloo timed as if it were a layer: its true overhead is 0.\n");
    std::printf("%9s %-15s %9s %9s %9s  %-18s %6s  %s\n", "bytes", "layer", "raw us", "layer us",
                "overhead", "95% interval", "blocks", "within 5%");
    int within = 0, beyond = 0, unresolved = 0, tick_bound_sizes = 0;
    for (const auto& run : runs_) {
      if (run.run_name.function_name != "p2p") continue;
      auto counter = [&](const std::string& key) { return run.counters.at(key).value; };
      const std::string bytes = run.run_name.args.substr(run.run_name.args.find(':') + 1);
      // A small message normally crosses in tens of us. Taking 250 us or more, many waited
      // for a scheduler tick (CPUs busy with other work, or halted): every layer then shows the
      // same quantum and a per-message cost is hidden, so no verdict is given.
      const bool tick_bound = std::stoll(bytes) <= (16 << 10) && counter("raw_one_way_us") >= 250;
      tick_bound_sizes += tick_bound;
      for (std::size_t s = 1; s < slots.size(); ++s) {
        const std::string p = slots[s].name;
        const double lo = counter(p + "_ci_lo"), hi = counter(p + "_ci_hi");
        const bool inside = !tick_bound && lo > -limit_pct && hi < limit_pct;
        const bool outside = !tick_bound && (lo > limit_pct || hi < -limit_pct);
        const char* verdict = inside    ? "yes"
                              : outside ? "NO"
                                        : (tick_bound ? "hidden: tick-bound" : "unresolved");
        if (s >= 2) (inside ? within : outside ? beyond : unresolved) += 1;
        char interval[48];
        std::snprintf(interval, sizeof interval, "[%+.1f%%, %+.1f%%]", lo, hi);
        std::printf("%9s %-15s %9.1f %9.1f %+8.1f%%  %-18s %6lld  %s\n", bytes.c_str(),
                    slots[s].layer, counter("raw_one_way_us"), counter(p + "_one_way_us"),
                    counter(p + "_overhead_pct"), interval, static_cast<long long>(run.iterations),
                    verdict);
      }
    }
    std::printf(
        "layers (sizes x policies) within %.0f%% of raw Gloo: %d; beyond: %d; "
        "unresolved: %d\n",
        limit_pct, within, beyond, unresolved);
    if (tick_bound_sizes)
      std::printf(
          "WARNING: at %d size(s) a small message took >= 250 us one way: wake-ups waited for "
          "a scheduler tick; measure on a quiet machine\n",
          tick_bound_sizes);
  }

 private:
  std::vector<Run> runs_;
};

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  auto group = mpp::init_process_group();
  world = &group;
  auto shm_group = group.new_group<mpp::Shm>();
  shm_world = &shm_group;
  if (group.size() != 2) {
    if (group.rank() == 0)
      std::fprintf(stderr, "comm_bench needs exactly 2 ranks: mpprun --nproc-per-node 2 %s\n",
                   argv[0]);
    return 2;
  }
  // Our own flags, taken out before Google Benchmark sees the arguments. Rank 1 only echoes: it
  // reports nothing and must not write rank 0's --benchmark_out file.
  std::vector<char*> args{argv[0]};
  bool keep_awake = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string value = a.substr(a.find('=') + 1);
    if (a.rfind("--comm_blocks_scale=", 0) == 0) {
      blocks_scale = std::atof(value.c_str());
      if (!(blocks_scale > 0)) {
        std::fprintf(stderr, "comm_bench: --comm_blocks_scale needs a positive number (got %s)\n",
                     a.c_str());
        return 2;
      }
    } else if (a.rfind("--comm_trips_out=", 0) == 0) {
      trips_dir = value;
    } else if (a.rfind("--comm_keep_cpus_awake=", 0) == 0) {
      keep_awake = value != "0" && value != "false";
    } else if (group.rank() == 0 || a.rfind("--benchmark_out", 0) != 0) {
      args.push_back(argv[i]);
    }
  }
  int arg_count = static_cast<int>(args.size());
  benchmark::Initialize(&arg_count, args.data());

  for (std::int64_t bytes : {std::int64_t{4}, std::int64_t{64}, std::int64_t{1024},
                             std::int64_t{16} << 10, std::int64_t{256} << 10, std::int64_t{1} << 20,
                             std::int64_t{4} << 20, std::int64_t{16} << 20})
    benchmark::RegisterBenchmark("p2p", bm_p2p)
        ->ArgNames({"bytes"})
        ->Arg(bytes)
        ->Iterations(blocks_for(bytes))
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();

  for (std::int64_t bytes = 4; bytes <= (std::int64_t{64} << 20); bytes *= 4)
    benchmark::RegisterBenchmark("transport", bm_transport)
        ->ArgNames({"bytes"})
        ->Arg(bytes)
        ->Iterations(transport_blocks_for(bytes))
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();

  if (keep_awake) awake.emplace(0);
  if (group.rank() == 0) {
    mpp::util::print_blas_report(at::get_num_threads());
    std::printf("ranks: 2 processes on %s, Gloo over %s\n",
                mpp::environment().single_host() ? "one host" : "several hosts",
                mpp::environment().single_host() ? "loopback" : "the network");
    std::printf("%s\n", awake ? (awake->status() + " (p2p family; released for transport)").c_str()
                              : "/dev/cpu_dma_latency not held (--comm_keep_cpus_awake=0): idle "
                                "CPUs may halt");
    std::printf("load average before: %s\n", load_average().c_str());
    SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    reporter.print_summary(5.0);
    std::printf("load average after: %s\n", load_average().c_str());
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  group.barrier();
  benchmark::Shutdown();
  return 0;
}
