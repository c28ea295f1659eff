// Lab 3 — distributed basics: two ranks bounce a tensor back and forth.
//
// Start it through a launcher, which starts two separate processes (each with its own memory,
// scheduled on its own core) and tells each one who it is through environment variables:
//
//   mpprun --nproc-per-node 2 ./pingpong [--max-bytes 16777216] [--iters-scale 1] [--svg p.svg]
//
// Each process joins the process group (rank 0 hosts the rendezvous, everyone connects to
// everyone through Gloo over a socket), then rank 0 sends a tensor to rank 1, which sends it
// straight back. Half the round trip is the one-way time; bytes / one-way time is the bandwidth
// (computed from the median one-way time).
// Rank 0 is the coordinator: it alone prints the table.
#include <ATen/Parallel.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "mpp/comm.hpp"
#include "mpp/trace/plot.hpp"
#include "mpp/util/blas.hpp"

#include "../common/lab_main.hpp"

namespace {

struct Args {
  std::int64_t max_bytes = 16 << 20;
  double iters_scale = 1.0;
  std::string svg;  // rank 0 draws the one-way times here
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--max-bytes")
      a.max_bytes = std::atoll(argv[i + 1]);
    else if (flag == "--iters-scale")
      a.iters_scale = std::atof(argv[i + 1]);
    else if (flag == "--svg")
      a.svg = argv[i + 1];
    else {
      std::fprintf(stderr, "pingpong: unknown flag %s (use --max-bytes --iters-scale --svg)\n",
                   argv[i]);
      std::exit(2);
    }
  }
  return a;
}

std::string human_bytes(std::int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1 << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

}  // namespace

namespace {

int run(int argc, char** argv) {
  const Args args = parse(argc, argv);
  at::set_num_threads(1);

  // [quote:join]
  // Join the call: who am I (rank), how many are we (world size)?
  mpp::Group<mpp::Gloo> world = mpp::init_process_group();
  // [/quote:join]
  const mpp::Environment env = mpp::environment();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::printf("rank %d of %d (local rank %d on %s, pid %d), launched by %s\n", world.rank(),
              world.size(), env.local_rank, host, static_cast<int>(::getpid()),
              std::string(mpp::launcher_name(env.launcher)).c_str());
  std::fflush(stdout);
  if (world.size() != 2) {
    if (world.rank() == 0)
      std::fprintf(stderr,
                   "pingpong needs exactly 2 ranks (got %d): mpprun --nproc-per-node 2 %s\n",
                   world.size(), argv[0]);
    return 2;
  }
  world.barrier();  // the greetings above come before the table
  const bool coordinator = world.rank() == 0;
  const int peer = 1 - world.rank();
  if (coordinator) {
    mpp::util::print_blas_report(at::get_num_threads());
    std::printf("\none-way time = half a round trip; median and best of `iters` round trips\n");
    std::printf("%10s %8s %12s %12s %12s %12s\n", "size", "iters", "median (us)", "best (us)",
                "MB/s median", "MB/s best");
  }

  std::vector<mpp::trace::Series> one_way{{"median", {}, {}}, {"best", {}, {}}};
  for (std::int64_t bytes = 4; bytes <= args.max_bytes; bytes *= 4) {
    const std::int64_t elements = bytes / 4;  // float32
    auto buffer =
        coordinator ? at::arange(elements, at::kFloat) : at::zeros({elements}, at::kFloat);
    const auto original = buffer.clone();
    // Enough round trips to last ~0.1 s at the expected speed; both ranks compute the same count.
    const int iters =
        std::max(5, static_cast<int>(args.iters_scale *
                                     std::min<std::int64_t>(1000, (64 << 20) / (bytes * 8))));
    // [quote:bounce]
    auto bounce = [&] {
      if (coordinator) {
        world.send(buffer, peer, 0);
        world.recv(buffer, peer, 1);
      } else {
        world.recv(buffer, peer, 0);
        world.send(buffer, peer, 1);
      }
    };
    // [/quote:bounce]
    for (int i = 0; i < 3; ++i) bounce();  // warm-up: first-touch of buffers, socket windows
    // Each round trip is timed on its own: the median shrugs off the moments when another
    // process had the core, the best shows what the path can do when nothing interferes.
    std::vector<double> round_trips(static_cast<std::size_t>(iters));
    for (auto& seconds : round_trips) {
      const auto start = std::chrono::steady_clock::now();
      bounce();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (coordinator) {
      if (!buffer.equal(original)) {
        std::fprintf(stderr, "pingpong: the tensor came back changed at %lld bytes\n",
                     static_cast<long long>(bytes));
        return 1;
      }
      std::sort(round_trips.begin(), round_trips.end());
      const double median = round_trips[round_trips.size() / 2] / 2;  // one way
      const double best = round_trips.front() / 2;
      for (auto& s : one_way) s.x.push_back(static_cast<double>(bytes));
      one_way[0].y.push_back(median * 1e6);
      one_way[1].y.push_back(best * 1e6);
      std::printf("%10s %8d %12.1f %12.1f %12.1f %12.1f\n", human_bytes(bytes).c_str(), iters,
                  median * 1e6, best * 1e6, static_cast<double>(bytes) / median / 1e6,
                  static_cast<double>(bytes) / best / 1e6);
    }
  }
  if (coordinator && !args.svg.empty()) {
    mpp::trace::PlotOptions plot;
    plot.title = "Lab 03: one-way time of a tensor between two ranks (Gloo over loopback)";
    plot.subtitle = "half a round trip, median and best of the round trips at each size";
    plot.x_label = "message size (bytes)";
    plot.y_label = "one-way time (microseconds)";
    plot.log_x = plot.log_y = true;
    std::ofstream(args.svg) << mpp::trace::render_line_plot(one_way, plot);
    std::printf("one-way times drawn in %s\n", args.svg.c_str());
  }

  // Both ranks now send to each other at the same time. Gloo's send completes only when the peer
  // receives, so two blocking sends would wait on each other until the deadline; posting both
  // operations before waiting on either lets each rank's receive meet the other's send.
  // [quote:exchange]
  const auto out = at::full({4}, static_cast<float>(world.rank()));
  const auto in = at::zeros({4}, at::kFloat);
  mpp::Request r = world.irecv(in, peer, /*tag=*/2);
  mpp::Request s = world.isend(out, peer, /*tag=*/2);
  s.wait();
  r.wait();
  // [/quote:exchange]
  world.barrier();  // the table above comes first
  std::printf("rank %d: exchanged with rank %d at the same time, received %.0f\n", world.rank(),
              peer, in[0].item<double>());
  std::fflush(stdout);
  world.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return lab::guarded_main("pingpong", [&] { return run(argc, argv); });
}
