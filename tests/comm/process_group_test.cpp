// Process groups over Gloo between real processes (world sizes 2 and 4): p2p values for every
// dtype and for non-contiguous tensors, tag matching, every collective, sub-groups, and the two
// comm policies driving the same code.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mpp/comm.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

// In a namespace of its own: the directory's files compile as one unit (tests/CMakeLists.txt).
namespace process_group_test {

namespace {

using namespace std::chrono_literals;

const std::vector<at::ScalarType> all_dtypes{at::kFloat, at::kDouble, at::kBFloat16,    at::kHalf,
                                             at::kLong,  at::kInt,    at::kShort,       at::kChar,
                                             at::kByte,  at::kBool,   at::kComplexFloat};

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

/// Small integers (exact in every dtype, no overflow in a 4-rank product) that depend on `seed`.
at::Tensor values(at::ScalarType dtype, int seed, at::IntArrayRef shape = {3, 5}) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  auto base = (at::arange(n, at::kLong) * 3 + seed * 7) % 3 + 1;  // 1..3
  if (dtype == at::kBool) return ((at::arange(n, at::kLong) + seed) % 2 == 0).reshape(shape);
  if (at::isComplexType(dtype))
    return at::complex(base.to(at::kFloat), (base + seed).to(at::kFloat)).to(dtype).reshape(shape);
  return base.to(dtype).reshape(shape);
}

bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && at::equal(a, b);
}

mpp::Group<mpp::Gloo> join() {
  torch::set_num_threads(1);
  return mpp::init_process_group();
}

mpp::test::WorldOptions bounded() {
  mpp::test::WorldOptions o;
  o.timeout = 90s;
  o.env = {{"MPP_INIT_TIMEOUT_S", "30"}, {"MPP_TIMEOUT_S", "30"}};
  return o;
}

}  // namespace

// Each rank sends to the next on a ring and receives from the previous one: blocking (even ranks
// send first) and non-blocking, contiguous and transposed, for every dtype.
MPP_TEST_WORKER("comm_p2p_ring") {
  auto world = join();
  const auto topo = world.topology();
  const int next = topo.ring_next(), prev = topo.ring_prev();
  for (auto dtype : all_dtypes) {
    const std::string what = dtype_name(dtype) + " on rank " + std::to_string(world.rank());
    // Blocking: alternate the order so that no two neighbours both send first.
    auto out = values(dtype, world.rank());
    auto in = at::zeros_like(out);
    if (world.rank() % 2 == 0) {
      world.send(out, next, 1);
      world.recv(in, prev, 1);
    } else {
      world.recv(in, prev, 1);
      world.send(out, next, 1);
    }
    expect(same(in, values(dtype, prev)), "blocking " + what);

    // Non-blocking, non-contiguous both ways: send a transposed view, receive into one.
    auto out_t = values(dtype, world.rank() + 10, {5, 3}).t();
    auto in_storage = at::zeros({5, 3}, at::TensorOptions().dtype(dtype));
    auto in_t = in_storage.t();
    expect(!out_t.is_contiguous() && !in_t.is_contiguous(), "views are strided");
    auto r = world.irecv(in_t, prev, 2);
    auto s = world.isend(out_t, next, 2);
    expect(r.pending() && s.pending(), "requests start pending");
    s.wait();
    r.wait();
    expect(!r.pending(), "waited request is done");
    expect(same(in_t, values(dtype, prev + 10, {5, 3}).t()), "strided " + what);
  }
  // Zero-element tensors complete without touching Gloo.
  auto empty = at::empty({0});
  world.isend(empty, next, 3).wait();
  world.irecv(empty, prev, 3).wait();
  std::printf("rank %d ok\n", world.rank());
  return 0;
}

// Messages with different tags are matched by tag, not by arrival order; messages with the same
// tag arrive in the order sent. Pairs (0,1), (2,3), ...
MPP_TEST_WORKER("comm_tags") {
  auto world = join();
  const bool sender = world.rank() % 2 == 0;
  const int peer = sender ? world.rank() + 1 : world.rank() - 1;
  constexpr int tags = 5;
  if (sender) {
    std::vector<mpp::Request> sends;
    for (int tag = 0; tag < tags; ++tag)
      sends.push_back(world.isend(at::full({4}, tag * 10.0), peer, tag));
    // Two more on tag 7: FIFO within a tag.
    sends.push_back(world.isend(at::full({4}, 71.0), peer, 7));
    sends.push_back(world.isend(at::full({4}, 72.0), peer, 7));
    mpp::wait_all(sends);
  } else {
    std::vector<at::Tensor> got;
    std::vector<mpp::Request> recvs;
    for (int tag = tags - 1; tag >= 0; --tag) {  // posted in reverse order of the sends
      got.push_back(at::zeros({4}));
      recvs.push_back(world.irecv(got.back(), peer, tag));
    }
    auto first7 = at::zeros({4}), second7 = at::zeros({4});
    recvs.push_back(world.irecv(first7, peer, 7));
    recvs.push_back(world.irecv(second7, peer, 7));
    // Wait in yet another order.
    for (auto it = recvs.rbegin(); it != recvs.rend(); ++it) it->wait();
    for (int i = 0; i < tags; ++i) {
      const int tag = tags - 1 - i;
      expect(same(got[static_cast<std::size_t>(i)], at::full({4}, tag * 10.0)),
             "tag " + std::to_string(tag));
    }
    expect(same(first7, at::full({4}, 71.0)) && same(second7, at::full({4}, 72.0)),
           "FIFO on one tag");
  }
  return 0;
}

namespace {

at::Tensor expected_reduce(const std::vector<at::Tensor>& per_rank, mpp::ReduceOp op) {
  const auto dtype = per_rank.front().scalar_type();
  if (dtype == at::kBool) {
    auto stacked = at::stack(per_rank);
    switch (op) {
      case mpp::ReduceOp::sum:
      case mpp::ReduceOp::max:
      case mpp::ReduceOp::bor:
        return stacked.any(0);
      case mpp::ReduceOp::product:
      case mpp::ReduceOp::min:
      case mpp::ReduceOp::band:
        return stacked.all(0);
      case mpp::ReduceOp::bxor:
        return stacked.to(at::kLong).sum(0).remainder(2).to(at::kBool);
    }
  }
  if (op == mpp::ReduceOp::band || op == mpp::ReduceOp::bor || op == mpp::ReduceOp::bxor) {
    at::Tensor acc = per_rank.front().clone();
    for (std::size_t i = 1; i < per_rank.size(); ++i)
      acc = op == mpp::ReduceOp::band  ? at::bitwise_and(acc, per_rank[i])
            : op == mpp::ReduceOp::bor ? at::bitwise_or(acc, per_rank[i])
                                       : at::bitwise_xor(acc, per_rank[i]);
    return acc;
  }
  const auto wide = at::isComplexType(dtype)    ? at::kComplexDouble
                    : at::isFloatingType(dtype) ? at::kDouble
                                                : at::kLong;
  std::vector<at::Tensor> widened;
  for (const auto& t : per_rank) widened.push_back(t.to(wide));
  auto stacked = at::stack(widened);
  at::Tensor r;
  switch (op) {
    case mpp::ReduceOp::sum:
      r = stacked.sum(0);
      break;
    case mpp::ReduceOp::product:
      r = stacked.prod(0);
      break;
    case mpp::ReduceOp::min:
      r = stacked.amin(0);
      break;
    case mpp::ReduceOp::max:
      r = stacked.amax(0);
      break;
    default:
      break;
  }
  return r.to(dtype);
}

std::vector<mpp::ReduceOp> ops_for(at::ScalarType dtype) {
  using mpp::ReduceOp;
  if (at::isComplexType(dtype)) return {ReduceOp::sum};
  std::vector<ReduceOp> ops{ReduceOp::sum, ReduceOp::product, ReduceOp::min, ReduceOp::max};
  if (at::isIntegralType(dtype, /*includeBool=*/true))
    ops.insert(ops.end(), {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor});
  return ops;
}

}  // namespace

// Every collective, every op, every dtype, contiguous and not, blocking and not.
MPP_TEST_WORKER("comm_collectives") {
  auto world = join();
  const int n = world.size(), me = world.rank();
  for (auto dtype : all_dtypes) {
    std::vector<at::Tensor> per_rank;
    for (int r = 0; r < n; ++r) per_rank.push_back(values(dtype, r));
    for (auto op : ops_for(dtype)) {
      const std::string what =
          "all_reduce(" + std::string(mpp::reduce_op_name(op)) + ") of " + dtype_name(dtype);
      const auto want = expected_reduce(per_rank, op);
      auto t = per_rank[static_cast<std::size_t>(me)].clone();
      world.all_reduce(t, op);
      expect(same(t, want), what);
      // Strided: reduce a transposed view in place; the storage must hold the transposed result.
      auto storage = per_rank[static_cast<std::size_t>(me)].t().contiguous();
      auto view = storage.t();
      auto req = world.iall_reduce(view, op);
      req.wait();
      expect(same(view, want), "strided " + what);
    }
    // Broadcast from each root.
    for (int root = 0; root < n; ++root) {
      auto t = values(dtype, me);
      world.broadcast(t, root);
      expect(same(t, values(dtype, root)), "broadcast of " + dtype_name(dtype));
      auto storage = values(dtype, me, {5, 3});
      auto view = storage.t();
      world.ibroadcast(view, root).wait();
      expect(same(storage, values(dtype, root, {5, 3})),
             "strided broadcast of " + dtype_name(dtype));
    }
  }
  // Mean over ranks for floating and complex dtypes; integers are refused.
  for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kComplexFloat}) {
    auto t = at::full({6}, static_cast<double>(2 * me + 2)).to(dtype);  // 2, 4, 6, 8
    world.all_reduce_mean(t);
    expect(same(t, at::full({6}, static_cast<double>(n + 1)).to(dtype)),
           "mean of " + dtype_name(dtype));
  }
  {
    auto t = at::full({2}, 1.0);
    auto req = world.iall_reduce_mean(t);
    req.wait();
    expect(same(t, at::full({2}, 1.0)), "iall_reduce_mean");
  }
  bool refused = false;
  try {
    world.all_reduce_mean(at::ones({2}, at::kLong));
  } catch (const std::invalid_argument& e) {
    refused = std::string(e.what()).find("needs a floating-point tensor") != std::string::npos;
  }
  expect(refused, "integer mean refused");
  for (int i = 0; i < 3; ++i) world.barrier();
  return 0;
}

// Sub-groups of a 2 x 2 mesh (rows and columns), p2p inside a sub-group, and the membership
// rules.
MPP_TEST_WORKER("comm_subgroups") {
  auto world = join();
  const int me = world.rank();
  expect(world.size() == 4, "needs 4 ranks");
  auto row = world.split({{0, 1}, {2, 3}});
  auto column = world.split({{0, 2}, {1, 3}});
  expect(row.is_member() && column.is_member(), "member of one row and one column");
  expect(row.size() == 2 && row.rank() == me % 2, "row rank");
  expect(column.rank() == me / 2 && column.global_rank_of(1) == me % 2 + 2, "column ranks");

  auto t = at::full({3}, static_cast<double>(me));
  row.all_reduce(t);
  const double row_sum = me < 2 ? 0 + 1 : 2 + 3;
  expect(same(t, at::full({3}, row_sum)), "row all_reduce");
  auto c = at::full({3}, static_cast<double>(me));
  column.all_reduce_mean(c);
  expect(same(c, at::full({3}, me % 2 + 1.0)), "column mean");

  // p2p ranks are group ranks: inside a column, rank 0 sends to rank 1.
  auto msg = at::full({2}, 100.0 + me);
  if (column.rank() == 0) {
    column.send(msg, 1, 0);
  } else {
    column.recv(msg, 0, 0);
    expect(same(msg, at::full({2}, 100.0 + column.global_rank_of(0))), "column p2p");
  }

  // A group with only some ranks: the others get a non-member handle that refuses to be used.
  auto trio = world.new_group({3, 1, 0});
  if (me == 2) {
    expect(!trio.is_member(), "rank 2 is outside");
    bool refused = false;
    try {
      trio.barrier();
    } catch (const std::logic_error& e) {
      refused = std::string(e.what()).find("not a member") != std::string::npos;
    }
    expect(refused, "non-member refused");
  } else {
    expect(trio.rank() == (me == 3 ? 0 : me == 1 ? 1 : 2), "order given defines the ranks");
    auto x = at::full({1}, 1.0);
    trio.all_reduce(x);
    expect(same(x, at::full({1}, 3.0)), "trio sum");
  }
  world.barrier();
  return 0;
}

namespace {

/// The same code for both policies: a value travels down a chain of ranks and back up, each
/// rank adding its rank number, with the sends of the step waited at its end.
template <mpp::comm_policy C>
double chain_round_trip(const mpp::Communicator<C>& comm, int tag) {
  mpp::PendingRequests pending;
  auto x = at::zeros({8});
  if (!comm.is_first()) comm.recv(x, comm.prev_rank(), tag).wait();
  x += comm.rank();
  if (!comm.is_last()) {
    pending.add(comm.send(x, comm.next_rank(), tag));
    auto back = at::zeros({8});
    comm.recv(back, comm.next_rank(), tag + 1).wait();
    x = back;
  }
  x += comm.rank();
  if (!comm.is_first()) pending.add(comm.send(x.clone(), comm.prev_rank(), tag + 1));
  pending.wait_all();
  return x[0].item<double>();
}

}  // namespace

MPP_TEST_WORKER("comm_policies") {
  auto world = join();
  static_assert(mpp::Communicator<mpp::Blocking<mpp::Gloo>>::blocking);
  static_assert(!mpp::Communicator<mpp::Async<mpp::Gloo>>::blocking);
  mpp::Communicator<mpp::Blocking<mpp::Gloo>> blocking(world);
  mpp::Communicator<mpp::Async<mpp::Gloo>> async(world);
  const int n = world.size();
  const double full = n * (n - 1);  // each rank adds its number on the way down and back up
  for (int round = 0; round < 3; ++round) {
    const double b = chain_round_trip(blocking, 10 * round);
    const double a = chain_round_trip(async, 10 * round + 5);
    if (world.is_first()) {
      expect(b == full, "blocking chain");
      expect(a == full, "async chain");
    }
  }
  // Blocking requests are complete on return; async ones are pending until waited.
  if (n >= 2 && world.rank() < 2) {
    auto t = at::ones({4});
    if (world.rank() == 0) {
      auto r = async.send(t, 1, 99);
      expect(r.pending(), "async send pending");
      r.wait();
      auto rb = blocking.send(t, 1, 98);
      expect(!rb.pending(), "blocking send done");
    } else {
      auto r = async.recv(t, 0, 99);
      r.wait();
      expect(!blocking.recv(t, 0, 98).pending(), "blocking recv done");
    }
  }
  async.barrier();
  return 0;
}

// The threads the group started run as CommOptions::transport_threads says (argv: "batch" or
// "normal"); the threads that were there before, this one among them, keep their policy.
MPP_TEST_WORKER("comm_transport_threads") {
  const std::string expected = argv[argc - 1];
  torch::set_num_threads(1);
  const std::vector<int> before = mpp::detail::thread_ids();
  auto world = mpp::init_process_group();
  int started = 0, batch = 0;
  for (const int id : mpp::detail::thread_ids()) {
    const bool is_batch = ::sched_getscheduler(id) == SCHED_BATCH;
    if (std::binary_search(before.begin(), before.end(), id)) {
      expect(!is_batch, "thread " + std::to_string(id) + ", there before the group, is not batch");
      continue;
    }
    ++started;
    batch += is_batch ? 1 : 0;
  }
  expect(::sched_getscheduler(0) == SCHED_OTHER, "the calling thread keeps SCHED_OTHER");
  // Gloo's event loop and its two collective workers at least.
  expect(started >= 3, "the group started " + std::to_string(started) + " threads");
  if (expected == "batch")
    expect(batch >= 3, std::to_string(batch) + " of them run SCHED_BATCH, expected 3 or more");
  else
    expect(batch == 0, std::to_string(batch) + " of them run SCHED_BATCH, expected none");
  auto x = at::full({4}, static_cast<float>(world.rank() + 1));
  world.all_reduce(x);
  expect(x.equal(at::full({4}, 3.0f)), "the group still reduces");
  return 0;
}

TEST_CASE("comm: the transport's threads run SCHED_BATCH unless MPP_TRANSPORT_THREADS=normal") {
  for (const std::string policy : {"batch", "normal"}) {
    CAPTURE(policy);
    auto options = bounded();
    if (policy == "normal") options.env.emplace_back("MPP_TRANSPORT_THREADS", "normal");
    options.args = {policy};
    auto world = mpp::test::run_world(2, "comm_transport_threads", options);
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

// Rank 0 computes without ever waiting and sends a message every 400 us; rank 1 posts each
// receive before rank 0 starts the 400 us that precede the matching send (rank 0 spins on a
// counter in a shared file, not on the transport), so its "ready to receive" note reaches rank 0
// while rank 0 computes. Each rank runs on one CPU with its transport's threads. The time from a
// send to its delivery is Gloo's loopback latency only if the send lets rank 0's batch event loop
// read the note; otherwise the message waits in Gloo until rank 0's core is taken from it at a
// scheduler tick (4 ms at 250 Hz), in every round. Rank 0 waits for the post because a note that
// arrived after the send would leave that message, and every later one of the round, to the next
// send (a backlog one send period deep that the fixed pace never drains). Three rounds of 40
// messages, and the best round's median is bounded.
MPP_TEST_WORKER("comm_send_while_computing") {
  torch::set_num_threads(1);
  cpu_set_t one;
  CPU_ZERO(&one);
  const int rank = std::atoi(std::getenv("RANK"));
  CPU_SET(rank % std::max(1, static_cast<int>(std::thread::hardware_concurrency())), &one);
  ::sched_setaffinity(0, sizeof one, &one);  // the group's threads, started next, inherit it
  // How many receives rank 1 has posted, in the file the test made for this run.
  const int fd = ::open(argv[argc - 1], O_RDWR);
  expect(fd >= 0, std::string("cannot open ") + argv[argc - 1]);
  void* shared = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  expect(shared != MAP_FAILED, std::string("cannot map ") + argv[argc - 1]);
  std::atomic_ref<std::int64_t> posted(*static_cast<std::int64_t*>(shared));
  auto world = mpp::init_process_group();
  const auto now_us = [] {
    return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
  };
  // Rank 1's core never idles: a SCHED_IDLE thread spins on it, which every other thread there
  // preempts at once. A virtual CPU left idle can take milliseconds to wake for a message (seen
  // on one machine kind, in 9 of 10 runs with nothing else running), which is not the sender's
  // doing. A jthread: however this function ends (a failed check throws), its destructor stops
  // and joins the spinner, so the failure reaches the report.
  std::jthread keep_awake;
  if (rank == 1)
    keep_awake = std::jthread([](std::stop_token stop) {
      const sched_param param{};
      (void)::sched_setscheduler(0, SCHED_IDLE, &param);
      while (!stop.stop_requested()) {
      }
    });
  constexpr int messages = 40, rounds = 3;
  double best = 0.0;  // the best round's median (rank 1)
  for (int round = 0; round < rounds; ++round) {
    world.barrier();
    if (rank == 0) {
      mpp::PendingRequests pending;
      for (int i = 0; i < messages; ++i) {
        const int tag = round * messages + i;
        while (posted.load(std::memory_order_acquire) <= tag) {
        }
        const double until = now_us() + 400.0;
        while (now_us() < until) {
        }
        pending.add(world.isend(at::full({1}, now_us(), at::kDouble), 1, tag));
      }
      pending.wait_all();
    } else {
      std::vector<double> delays;
      for (int i = 0; i < messages; ++i) {
        const int tag = round * messages + i;
        at::Tensor t = at::empty({1}, at::kDouble);
        mpp::Request request = world.irecv(t, 0, tag);
        posted.store(tag + 1, std::memory_order_release);
        request.wait();
        delays.push_back(now_us() - t.item<double>());
      }
      std::sort(delays.begin(), delays.end());
      const double median = delays[delays.size() / 2];
      std::printf("rank 1: round %d: median delivery %.0f us, slowest %.0f us\n", round, median,
                  delays.back());
      best = round == 0 || median < best ? median : best;
    }
  }
  if (rank == 1)
    expect(best < 1000.0, "the median message took at least " + std::to_string(std::lround(best)) +
                              " us from send to delivery in each of " + std::to_string(rounds) +
                              " rounds; a send must let the sender's transport threads read the "
                              "receiver's note (1 ms at most)");
  world.barrier();
  ::munmap(shared, sizeof(std::int64_t));
  return 0;
}

// A time bound on delivery: the test suite "alone" runs as a CTest test of its own, with nothing
// else on the machine's cores (tests/CMakeLists.txt).
TEST_CASE("comm: a rank that computes without waiting still delivers its sends at once" *
          doctest::test_suite("alone")) {
  namespace fs = std::filesystem;
  const auto counter =
      fs::temp_directory_path() / ("mpp_send_while_computing_" + std::to_string(::getpid()));
  std::ofstream(counter, std::ios::binary).write("\0\0\0\0\0\0\0\0", 8);
  auto options = bounded();
  options.args = {counter.string()};
  auto world = mpp::test::run_world(2, "comm_send_while_computing", options);
  fs::remove(counter);
  CHECK_MESSAGE(world.ok(), world.report());
}

TEST_CASE("comm: MPP_TRANSPORT_THREADS is read and checked") {
  const auto read = [](const char* value) {
    if (value)
      ::setenv("MPP_TRANSPORT_THREADS", value, 1);
    else
      ::unsetenv("MPP_TRANSPORT_THREADS");
    return mpp::CommOptions::from_env().transport_threads;
  };
  CHECK(read(nullptr) == mpp::TransportThreads::batch);
  CHECK(read("normal") == mpp::TransportThreads::normal);
  CHECK(read("batch") == mpp::TransportThreads::batch);
  try {
    read("fast");
    FAIL("MPP_TRANSPORT_THREADS=fast was accepted");
  } catch (const mpp::EnvironmentError& e) {
    CHECK(e.variable() == "MPP_TRANSPORT_THREADS");
    CHECK(std::string(e.what()).find("'fast' is neither 'batch' nor 'normal'") !=
          std::string::npos);
  }
  ::unsetenv("MPP_TRANSPORT_THREADS");
}

TEST_CASE("comm: p2p between 2 and 4 ranks, every dtype, strided tensors") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    auto world = mpp::test::run_world(n, "comm_p2p_ring", bounded());
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE("comm: isend/irecv are matched by tag, FIFO within a tag") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    auto world = mpp::test::run_world(n, "comm_tags", bounded());
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE("comm: all_reduce (every op), all_reduce_mean, broadcast, barrier") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    auto world = mpp::test::run_world(n, "comm_collectives", bounded());
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE("comm: sub-groups of a 2 x 2 mesh") {
  auto world = mpp::test::run_world(4, "comm_subgroups", bounded());
  CHECK_MESSAGE(world.ok(), world.report());
}

TEST_CASE("comm: Blocking<Gloo> and Async<Gloo> run the same code") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    auto world = mpp::test::run_world(n, "comm_policies", bounded());
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

}  // namespace process_group_test
