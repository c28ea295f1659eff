// Point-to-point latency and bandwidth between two ranks, through each layer of mpp's comm
// stack next to the raw c10d Gloo calls it wraps, in one binary and one process pair:
//
//   raw_c10d_gloo     ProcessGroupGloo::send/recv + Work::wait()        (the floor)
//   ProcessGroup      mpp::ProcessGroup::send/recv (deadlines, staging checks, error mapping)
//   Blocking<Gloo>    mpp::Communicator<Blocking<Gloo>>
//   Async<Gloo>       mpp::Communicator<Async<Gloo>> (isend/irecv handles, then wait)
//
// One iteration is a round trip: rank 0 sends `bytes`, rank 1 sends them back. Both ranks run
// the same registered benchmarks with fixed iteration counts (so they stay in step); rank 0
// reports. bytes_per_second is the one-way bandwidth from the mean (2 x bytes per round trip);
// best_one_way_us and median_one_way_us are half the fastest and the median round trip. After the
// runs rank 0 prints each layer's overhead over raw Gloo from those two, taking for each the best
// repetition (the least disturbed by other load on the machine).
//
//   mpprun --nproc-per-node 2 ./comm_bench [--benchmark_repetitions=5] [--benchmark_filter=...]
//
// Both ranks must run the same benchmarks in the same order: a --benchmark_filter applies to
// both, but --benchmark_enable_random_interleaving would shuffle each rank differently.
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "mpp/comm.hpp"
#include "mpp/util/blas.hpp"

namespace {

mpp::ProcessGroup* world = nullptr;

/// How many round trips for a message size: ~64 MiB moved per run, between 20 and 2000 trips.
int iterations_for(std::int64_t bytes) {
  return static_cast<int>(std::clamp<std::int64_t>((64 << 20) / (2 * bytes), 20, 2000));
}

struct RawGloo {
  static constexpr const char* name = "raw_c10d_gloo";
  static void round_trip(at::Tensor& buf, bool first) {
    auto& pg = world->c10d_group();
    std::vector<at::Tensor> v{buf};
    if (first) {
      pg.send(v, 1, 0)->wait();
      pg.recv(v, 1, 1)->wait();
    } else {
      pg.recv(v, 0, 0)->wait();
      pg.send(v, 0, 1)->wait();
    }
  }
};

struct PlainGroup {
  static constexpr const char* name = "ProcessGroup";
  static void round_trip(at::Tensor& buf, bool first) {
    if (first) {
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
  static void round_trip(at::Tensor& buf, bool first) {
    static const mpp::Communicator<C> comm(*world);
    if (first) {
      comm.send(buf, 1, 0).wait();
      comm.recv(buf, 1, 1).wait();
    } else {
      comm.recv(buf, 0, 0).wait();
      comm.send(buf, 0, 1).wait();
    }
  }
};

template <class Layer>
void bm_round_trip(benchmark::State& state) {
  const std::int64_t bytes = state.range(0);
  auto buf = at::zeros({bytes / 4}, at::kFloat);
  const bool first = world->rank() == 0;
  for (int i = 0; i < 3; ++i) Layer::round_trip(buf, first);  // warm-up
  // Each round trip is also timed on its own: on a shared machine the mean mixes the path's cost
  // with waits for a core; the best and the median separate the two.
  std::vector<double> trips;
  trips.reserve(static_cast<std::size_t>(state.max_iterations));
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    Layer::round_trip(buf, first);
    trips.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(trips.begin(), trips.end());
  state.SetBytesProcessed(state.iterations() * 2 * bytes);
  state.counters["best_one_way_us"] = trips.front() * 1e6 / 2;
  state.counters["median_one_way_us"] = trips[trips.size() / 2] * 1e6 / 2;
}

/// Console output as usual, plus the fastest repetition of every run kept for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const std::string key = run.run_name.function_name + "|" + run.run_name.args;
      for (auto [table, counter] :
           {std::pair{&best_, "best_one_way_us"}, std::pair{&median_, "median_one_way_us"}}) {
        const double value = run.counters.at(counter).value;
        auto [it, inserted] = table->emplace(key, value);
        if (!inserted) it->second = std::min(it->second, value);  // best repetition
      }
    }
  }

  void print_overheads(const std::vector<std::int64_t>& sizes,
                       const std::vector<std::string>& layers) const {
    print_table("best round trip", best_, sizes, layers);
    print_table("median round trip (best repetition)", median_, sizes, layers);
  }

 private:
  static void print_table(const char* what, const std::map<std::string, double>& times,
                          const std::vector<std::int64_t>& sizes,
                          const std::vector<std::string>& layers) {
    std::printf("\nOverhead over raw c10d Gloo, %s; raw one-way time in us:\n", what);
    std::printf("%10s %12s", "bytes", "raw (us)");
    for (const auto& l : layers) std::printf(" %16s", l.c_str());
    std::printf("\n");
    for (auto bytes : sizes) {
      const std::string args = "bytes:" + std::to_string(bytes);
      auto raw = times.find("p2p/raw_c10d_gloo|" + args);
      if (raw == times.end()) continue;
      std::printf("%10lld %12.1f", static_cast<long long>(bytes), raw->second);
      for (const auto& l : layers) {
        auto it = times.find("p2p/" + l + "|" + args);
        if (it == times.end())
          std::printf(" %16s", "-");
        else
          std::printf(" %+15.1f%%", 100.0 * (it->second / raw->second - 1.0));
      }
      std::printf("\n");
    }
  }

  std::map<std::string, double> median_;

 private:
  std::map<std::string, double> best_;
};

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  mpp::ProcessGroup group = mpp::init_process_group();
  world = &group;
  if (group.size() != 2) {
    if (group.rank() == 0)
      std::fprintf(stderr, "comm_bench needs exactly 2 ranks: mpprun --nproc-per-node 2 %s\n",
                   argv[0]);
    return 2;
  }
  // Rank 1 only echoes: it reports nothing and must not write rank 0's --benchmark_out file.
  std::vector<char*> args(argv, argv + argc);
  if (group.rank() != 0)
    args.erase(std::remove_if(
                   args.begin() + 1, args.end(),
                   [](const char* a) { return std::string(a).rfind("--benchmark_out", 0) == 0; }),
               args.end());
  int arg_count = static_cast<int>(args.size());
  benchmark::Initialize(&arg_count, args.data());

  const std::vector<std::int64_t> sizes{4,         64,      1024,    16 << 10,
                                        256 << 10, 1 << 20, 4 << 20, 16 << 20};
  const std::vector<std::string> layers{"ProcessGroup", Policy<mpp::Blocking<mpp::Gloo>>::name,
                                        Policy<mpp::Async<mpp::Gloo>>::name};
  // Size by size, the layers one after the other, so that load changes hit them alike.
  for (auto bytes : sizes) {
    auto add = [&](const char* layer, void (*fn)(benchmark::State&)) {
      benchmark::RegisterBenchmark((std::string("p2p/") + layer).c_str(), fn)
          ->ArgNames({"bytes"})
          ->Arg(bytes)
          ->Iterations(iterations_for(bytes))
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    };
    add(RawGloo::name, bm_round_trip<RawGloo>);
    add(PlainGroup::name, bm_round_trip<PlainGroup>);
    add(Policy<mpp::Blocking<mpp::Gloo>>::name, bm_round_trip<Policy<mpp::Blocking<mpp::Gloo>>>);
    add(Policy<mpp::Async<mpp::Gloo>>::name, bm_round_trip<Policy<mpp::Async<mpp::Gloo>>>);
  }

  if (group.rank() == 0) {
    mpp::util::print_blas_report(at::get_num_threads());
    std::printf("ranks: 2 processes on %s, Gloo over %s\n",
                mpp::environment().single_host() ? "one host" : "several hosts",
                mpp::environment().single_host() ? "loopback" : "the network");
    SummaryReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    reporter.print_overheads(sizes, layers);
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  group.barrier();
  benchmark::Shutdown();
  return 0;
}
