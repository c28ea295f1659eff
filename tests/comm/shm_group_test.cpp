// The Shm backend between real processes (world sizes 2, 3 and 4): all-reduce through shared
// memory equals Gloo's for every supported dtype and op, from 1 element to several chunks,
// contiguous or not; all_gather_runs gives every owner's bits to every rank; async all-reduces
// complete in order; replicas get the same bits; other dtypes and collectives go through Gloo
// (p2p and broadcast go through the rings: shm_mailbox_test.cpp); a dead or silent peer is named
// within the deadline; ranks on different hosts are refused; no segment is left in /dev/shm; DDP
// over Shm trains the same parameters as DDP over Gloo.
#include <doctest/doctest.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/loss.h>
#include <torch/optim/sgd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mpp/comm.hpp"
#include "mpp/comm/shm_group.hpp"
#include "mpp/data_parallel.hpp"
#include "mpp/models/mlp.hpp"
#include "shm_support.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

// In a namespace of its own: the directory's files compile as one unit (tests/CMakeLists.txt).
namespace shm_group_test {

namespace {

using namespace std::chrono_literals;
using namespace mpp::test::shm;
using RedOp = c10d::ReduceOp::RedOpType;

constexpr std::int64_t chunk_floats = static_cast<std::int64_t>(mpp::Shm::chunk_bytes / 4);

/// Values in [0.5, 1.5) that depend on the rank (so a product over 4 ranks stays tame).
at::Tensor values(std::int64_t n, int rank, int seed, at::ScalarType dtype = at::kFloat) {
  auto i = at::arange(n, at::kLong);
  auto v = ((i * 37 + rank * 101 + seed * 13) % 1000).to(at::kDouble) / 1000.0 + 0.5;
  return v.to(dtype);
}

/// The reduction of every rank's values(n, q, seed), computed locally in double.
at::Tensor expected(std::int64_t n, int world, int seed, RedOp op, at::ScalarType dtype) {
  at::Tensor acc = values(n, 0, seed, dtype).to(at::kDouble);
  for (int q = 1; q < world; ++q) {
    auto v = values(n, q, seed, dtype).to(at::kDouble);
    if (op == RedOp::SUM || op == RedOp::AVG) acc = acc + v;
    if (op == RedOp::PRODUCT) acc = acc * v;
    if (op == RedOp::MIN) acc = at::minimum(acc, v);
    if (op == RedOp::MAX) acc = at::maximum(acc, v);
  }
  if (op == RedOp::AVG) acc = acc / world;
  return acc;
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  const double tol = got.scalar_type() == at::kBFloat16 ? 2e-2 : 1e-5;
  const auto g = got.to(at::kDouble);
  const auto w = want.to(at::kDouble);
  if (!at::allclose(g, w, tol, tol))
    throw std::runtime_error(what + ": differs by " +
                             std::to_string((g - w).abs().max().item<double>()));
}

/// Rank 0's tensor, broadcast over `gloo`, must equal this rank's bit for bit.
void expect_same_bits(const mpp::ProcessGroup& gloo, const at::Tensor& t, const std::string& what) {
  at::Tensor root = t.clone();
  gloo.broadcast(root, 0);
  expect(at::equal(root, t), what + ": replicas differ from rank 0");
}

/// A raw c10d all-reduce on the group (reaches ops and dtypes mpp's wrapper converts first).
void c10d_all_reduce(const mpp::ProcessGroup& group, at::Tensor& t, RedOp op) {
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  group.c10d_group().allreduce(v, options)->wait(30s);
}

mpp::ReduceOp mpp_op(RedOp op) {
  switch (op) {
    case RedOp::PRODUCT:
      return mpp::ReduceOp::product;
    case RedOp::MIN:
      return mpp::ReduceOp::min;
    case RedOp::MAX:
      return mpp::ReduceOp::max;
    default:
      return mpp::ReduceOp::sum;
  }
}

std::string op_name(RedOp op) { return std::string(mpp::reduce_op_name(mpp_op(op))); }

}  // namespace

// Every supported dtype and op, sizes from 1 element to several chunks, against Gloo and the
// local expectation; replicas bit-identical; non-contiguous inputs through mpp and raw c10d.
MPP_TEST_WORKER("shm_values") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  print_segment(world);
  auto gloo = world.new_group<mpp::Gloo>();
  auto& shm = shm_of(world);
  const int W = world.size(), me = world.rank();

  const std::vector<std::int64_t> small{1, 3, 17, 1000};
  const std::vector<std::int64_t> large{chunk_floats - 3, chunk_floats + 5,
                                        2 * chunk_floats + 1000};
  int seed = 0;
  for (auto dtype : {at::kFloat, at::kDouble}) {
    for (auto op : {RedOp::SUM, RedOp::PRODUCT, RedOp::MIN, RedOp::MAX}) {
      std::vector<std::int64_t> sizes = small;
      if (op == RedOp::SUM || op == RedOp::MAX)
        sizes.insert(sizes.end(), large.begin(), large.end());
      for (auto n : sizes) {
        ++seed;
        const std::string what = std::string(c10::toString(dtype)) + "[" + std::to_string(n) +
                                 "] " + op_name(op) + " on rank " + std::to_string(me);
        auto x = values(n, me, seed, dtype);
        std::vector<at::Tensor> probe{x};
        c10d::AllreduceOptions options;
        options.reduceOp = op;
        expect(shm.handles(probe, options), what + ": should go through shared memory");
        auto y = x.clone();
        world.all_reduce(x, mpp_op(op));
        gloo.all_reduce(y, mpp_op(op));
        expect_close(x, y, what + " vs Gloo");
        expect_close(x, expected(n, W, seed, op, dtype), what + " vs expected");
        if (op == RedOp::MIN || op == RedOp::MAX) expect(at::equal(x, y), what + ": exact");
        expect_same_bits(gloo, x, what);
      }
    }
  }
  // mean (mpp's sum then divide), AVG and bfloat16 through raw c10d calls
  for (auto n : {std::int64_t{5}, chunk_floats + 77}) {
    ++seed;
    auto m = values(n, me, seed);
    world.all_reduce_mean(m);
    expect_close(m, expected(n, W, seed, RedOp::AVG, at::kFloat), "all_reduce_mean");
    auto a = values(n, me, seed);
    c10d_all_reduce(world, a, RedOp::AVG);
    expect_close(a, expected(n, W, seed, RedOp::AVG, at::kFloat), "c10d AVG");
    expect_same_bits(gloo, a, "c10d AVG");
    for (auto op : {RedOp::SUM, RedOp::MAX, RedOp::AVG}) {
      auto b = values(n, me, seed, at::kBFloat16);
      c10d_all_reduce(world, b, op);
      expect(b.scalar_type() == at::kBFloat16, "bfloat16 stays bfloat16");
      expect_close(b, expected(n, W, seed, op, at::kBFloat16), "c10d bfloat16 " + op_name(op));
      expect_same_bits(gloo, b, "c10d bfloat16");
      auto g = values(n, me, seed, at::kBFloat16);
      if (op != RedOp::AVG) {
        gloo.all_reduce(g, mpp_op(op));
        expect_close(b, g, "bfloat16 vs Gloo " + op_name(op));
      }
    }
  }
  // non-contiguous: a transposed view, through mpp (staged by the wrapper) and raw c10d (staged
  // by the group's worker), one small and one larger than a chunk
  for (auto rows : {std::int64_t{7}, std::int64_t{1100}}) {
    ++seed;
    const std::int64_t cols = rows == 7 ? 13 : 1000;
    auto base = values(rows * cols, me, seed).reshape({rows, cols});
    auto want = expected(rows * cols, W, seed, RedOp::SUM, at::kFloat).reshape({rows, cols}).t();
    auto t1 = base.clone().t();
    expect(!t1.is_contiguous(), "transposed view");
    world.all_reduce(t1);
    expect_close(t1, want, "non-contiguous through mpp");
    auto t2 = base.clone().t();
    c10d_all_reduce(world, t2, RedOp::SUM);
    expect_close(t2, want, "non-contiguous through c10d");
    expect(t2.stride(0) == 1, "the caller's view keeps its strides");
  }
  std::printf("rank %d: shared-memory all-reduce equals Gloo's\n", me);
  return 0;
}

// Several all-reduces outstanding at once complete in submission order with the right values.
MPP_TEST_WORKER("shm_async") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  print_segment(world);
  const int W = world.size(), me = world.rank();
  const std::vector<std::int64_t> sizes{10, chunk_floats + 7, 5, 3 * chunk_floats / 2, 1, 100};
  std::vector<at::Tensor> tensors;
  std::vector<mpp::Request> requests;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    tensors.push_back(values(sizes[i], me, static_cast<int>(i)));
    requests.push_back(world.iall_reduce(tensors.back()));
  }
  requests.back().wait();
  for (std::size_t i = 0; i + 1 < requests.size(); ++i)
    expect(requests[i].ready(), "request " + std::to_string(i) +
                                    " must be complete once a later one is (submission order)");
  mpp::wait_all(requests);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    expect_close(tensors[i], expected(sizes[i], W, static_cast<int>(i), RedOp::SUM, at::kFloat),
                 "async #" + std::to_string(i));
  // a barrier queued behind all-reduces completes after them
  auto big = values(2 * chunk_floats, me, 99);
  auto pending = world.iall_reduce(big);
  world.barrier();
  expect(pending.ready(), "barrier returned before the all-reduce submitted earlier");
  pending.wait();
  expect_close(big, expected(2 * chunk_floats, W, 99, RedOp::SUM, at::kFloat), "before barrier");
  std::printf("rank %d: async all-reduces complete in order\n", me);
  return 0;
}

// What shared memory does not handle goes through Gloo: integer and bool dtypes, bitwise ops,
// p2p, broadcast; and a sub-group of a Shm world is a Shm group too.
MPP_TEST_WORKER("shm_fallback") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  print_segment(world);
  auto& shm = shm_of(world);
  const int W = world.size(), me = world.rank();
  auto ints = at::full({1000}, static_cast<std::int64_t>(me + 1), at::kLong);
  std::vector<at::Tensor> probe{ints};
  expect(!shm.handles(probe, c10d::AllreduceOptions()), "int64 must go through Gloo");
  world.all_reduce(ints);
  expect(at::equal(ints, at::full({1000}, static_cast<std::int64_t>(W * (W + 1) / 2), at::kLong)),
         "int64 sum through Gloo");
  auto bits = at::full({9}, 1 << me, at::kInt);
  world.all_reduce(bits, mpp::ReduceOp::bor);
  expect(at::equal(bits, at::full({9}, (1 << W) - 1, at::kInt)), "bor through Gloo");
  // p2p on a ring, non-blocking both ways (through the rings: tests/comm/shm_mailbox_test.cpp)
  const int next = (me + 1) % W, prev = (me + W - 1) % W;
  auto out = values(300, me, 5);
  auto in = at::zeros({300});
  auto r = world.irecv(in, prev, 3);
  auto s = world.isend(out, next, 3);
  r.wait();
  s.wait();
  expect(at::equal(in, values(300, prev, 5)), "ring p2p on a Shm group");
  auto b = me == 1 ? values(64, 1, 6) : at::zeros({64});
  world.broadcast(b, 1);
  expect(at::equal(b, values(64, 1, 6)), "broadcast on a Shm group");
  world.barrier();
  // a sub-group (every rank but the last) is again a Shm group with its own segment
  std::vector<int> firsts;
  for (int q = 0; q + 1 < W; ++q) firsts.push_back(q);
  auto sub = world.new_group(firsts);
  if (sub.is_member()) {
    expect(sub.backend_name() == "Shm", "sub-group backend");
    expect(shm_of(sub).segment_name() != shm.segment_name(), "a sub-group has its own segment");
    auto x = values(70, me, 8);
    sub.all_reduce(x);
    expect_close(x, expected(70, W - 1, 8, RedOp::SUM, at::kFloat), "sub-group all-reduce");
  }
  world.barrier();
  std::printf("rank %d: fallbacks through Gloo, p2p, broadcast and sub-groups work\n", me);
  return 0;
}

// Rank 1 all-reduces a tensor of another size: both ranks fail with both descriptions.
MPP_TEST_WORKER("shm_mismatch") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  auto x = values(world.rank() == 0 ? 100 : 200, world.rank(), 1);
  try {
    world.all_reduce(x);
  } catch (const mpp::CommError& e) {
    std::printf("mismatch: %s\n", e.what());
    return 0;
  }
  return 1;
}

/// Runs of `n` elements, one per rank, tiling [0, n) in reverse rank order (the last rank owns
/// the first run) with uneven lengths; with 4 ranks rank 1 owns nothing.
std::vector<std::pair<std::int64_t, std::int64_t>> uneven_runs(std::int64_t n, int world) {
  std::vector<std::int64_t> length(static_cast<std::size_t>(world));
  std::int64_t left = n;
  for (int r = world - 1; r > 0; --r) {
    length[static_cast<std::size_t>(r)] =
        (world == 4 && r == 1) ? 0 : left * (r + 1) / (2 * world + 1);
    left -= length[static_cast<std::size_t>(r)];
  }
  length[0] = left;
  std::vector<std::pair<std::int64_t, std::int64_t>> runs(static_cast<std::size_t>(world));
  std::int64_t offset = 0;
  for (int r = world - 1; r >= 0; --r) {
    runs[static_cast<std::size_t>(r)] = {offset, length[static_cast<std::size_t>(r)]};
    offset += length[static_cast<std::size_t>(r)];
  }
  return runs;
}

/// Runs `call()`, which must refuse its arguments before sending anything, saying `part`.
template <class Call>
void expect_refused(const std::string& name, const std::string& part, Call call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    expect(contains(e.what(), part), std::string(e.what()) + " should say: " + part);
    return;
  }
  throw std::runtime_error(name + " accepted bad runs (" + part + ")");
}

/// Runs `call(x, runs)` with rank 0 swapping the first and last owners: every rank must fail
/// naming both calls (`kind` #n) and the owned runs. Returns the message.
template <class Call>
std::string disagreeing_runs_error(const mpp::ProcessGroup& world, const std::string& kind,
                                   Call call) {
  const int W = world.size();
  auto x = at::ones({100});
  auto runs = uneven_runs(100, W);
  if (world.rank() == 0) std::swap(runs[0], runs[static_cast<std::size_t>(W - 1)]);
  try {
    call(x, runs);
  } catch (const mpp::CommError& e) {
    expect(contains(e.what(), "called " + kind + " #"), e.what());
    expect(contains(e.what(), "owned runs"), e.what());
    return e.what();
  }
  throw std::runtime_error(kind + " with disagreeing runs did not fail");
}

// all_gather_runs: every owner's bits land on every rank, through shared memory and through the
// Gloo fallback alike, for several chunks, odd sizes, several dtypes, an empty run; runs that do
// not tile the tensor are refused; ranks passing different runs fail naming both.
MPP_TEST_WORKER("shm_all_gather") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  auto gloo = world.new_group<mpp::Gloo>();
  const int W = world.size(), me = world.rank();
  int seed = 0;
  for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kLong}) {
    for (std::int64_t n : {std::int64_t{W}, std::int64_t{1001}, 2 * chunk_floats + 1000}) {
      ++seed;
      const auto runs = uneven_runs(n, W);
      // this rank's values in its own run, something else everywhere else
      at::Tensor want = at::empty({n}, at::kDouble);
      for (int q = 0; q < W; ++q) {
        const auto [offset, count] = runs[static_cast<std::size_t>(q)];
        want.narrow(0, offset, count)
            .copy_(values(n, q, seed, at::kDouble).narrow(0, offset, count));
      }
      want = want.to(dtype);
      at::Tensor mine = at::full({n}, -7.0 - me, at::kDouble).to(dtype);
      const auto [offset, count] = runs[static_cast<std::size_t>(me)];
      mine.narrow(0, offset, count).copy_(want.narrow(0, offset, count));
      at::Tensor over_gloo = mine.clone();
      const std::string what = std::string(c10::toString(dtype)) + "[" + std::to_string(n) +
                               "] on rank " + std::to_string(me);
      auto pending = world.iall_gather_runs(mine, runs);
      pending.wait();
      gloo.all_gather_runs(over_gloo, runs);
      expect(at::equal(mine, want), what + ": Shm result differs from the owners' values");
      expect(at::equal(over_gloo, want), what + ": Gloo result differs from the owners' values");
    }
  }
  // refused before anything is sent, with what is wrong
  auto t = at::zeros({10});
  auto refused = [&](std::vector<std::pair<std::int64_t, std::int64_t>> runs, at::Tensor x,
                     const std::string& part) {
    expect_refused("all_gather_runs", part, [&] { world.all_gather_runs(x, runs); });
  };
  std::vector<std::pair<std::int64_t, std::int64_t>> gap(static_cast<std::size_t>(W), {10, 0});
  gap[0] = {1, 9};
  refused(gap, t, "element 0 is owned by no rank");
  refused({{0, 10}}, t, "one run per rank of the group (" + std::to_string(W) + ")");
  refused(uneven_runs(10, W), at::zeros({2, 5}), "flat contiguous tensor");
  refused(uneven_runs(10, W), at::zeros({10}, at::kComplexFloat).conj(), "lazy conjugate");
  // ranks that disagree on who owns what fail together, naming both calls
  std::printf("rank %d: all_gather_runs agrees with Gloo; mismatch: %s\n", me,
              disagreeing_runs_error(world, "all_gather", [&](auto& x, auto& runs) {
                world.all_gather_runs(x, runs);
              }).c_str());
  return 0;
}

// reduce_scatter_runs: each rank's own run holds the bits an all-reduce gives (through shared
// memory: the same fold in rank order; for a dtype Shm does not reduce, the fallback), the rest of
// its tensor is left as it was; through Gloo it is an all-reduce. Bad runs refused; ranks passing
// different runs fail naming both calls.
MPP_TEST_WORKER("shm_reduce_scatter") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  auto gloo = world.new_group<mpp::Gloo>();
  const int W = world.size(), me = world.rank();
  int seed = 100;
  for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kLong}) {
    for (auto op : {mpp::ReduceOp::sum, mpp::ReduceOp::max}) {
      for (std::int64_t n : {std::int64_t{W}, std::int64_t{1001}, 2 * chunk_floats + 1000}) {
        ++seed;
        const auto runs = uneven_runs(n, W);
        const at::Tensor mine = values(n, me, seed, dtype);
        at::Tensor reduced = mine.clone(), scattered = mine.clone();
        at::Tensor gloo_reduced = mine.clone(), gloo_scattered = mine.clone();
        world.all_reduce(reduced, op);
        auto pending = world.ireduce_scatter_runs(scattered, runs, op);
        pending.wait();
        gloo.all_reduce(gloo_reduced, op);
        gloo.reduce_scatter_runs(gloo_scattered, runs, op);
        const auto [offset, count] = runs[static_cast<std::size_t>(me)];
        const std::string what = std::string(c10::toString(dtype)) + "[" + std::to_string(n) +
                                 "] " + std::string(mpp::reduce_op_name(op)) + " on rank " +
                                 std::to_string(me);
        expect(at::equal(scattered.narrow(0, offset, count), reduced.narrow(0, offset, count)),
               what + ": Shm reduce-scatter differs from the all-reduce in the rank's run");
        expect(at::equal(gloo_scattered.narrow(0, offset, count),
                         gloo_reduced.narrow(0, offset, count)),
               what + ": Gloo reduce-scatter differs from the all-reduce in the rank's run");
        if (dtype != at::kLong) {  // through shared memory: the rest is untouched
          expect(at::equal(scattered.narrow(0, 0, offset), mine.narrow(0, 0, offset)) &&
                     at::equal(scattered.narrow(0, offset + count, n - offset - count),
                               mine.narrow(0, offset + count, n - offset - count)),
                 what + ": Shm reduce-scatter changed elements outside the rank's run");
        }
      }
    }
  }
  auto t = at::zeros({10});
  expect_refused("reduce_scatter_runs", "reduce_scatter_runs needs one run per rank of the group",
                 [&] {
                   world.reduce_scatter_runs(t, {{0, 10}});
                 });
  std::printf("rank %d: reduce_scatter_runs agrees with all_reduce; mismatch: %s\n", me,
              disagreeing_runs_error(world, "reduce_scatter", [&](auto& x, auto& runs) {
                world.reduce_scatter_runs(x, runs);
              }).c_str());
  return 0;
}

// The last rank leaves in the middle of an all-reduce of several chunks; the others must fail
// well before their deadline, naming it.
MPP_TEST_WORKER("shm_dead_peer") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  print_segment(world);
  const int me = world.rank(), last = world.size() - 1;
  auto warm = values(1000, me, 1);
  world.all_reduce(warm);
  // Far more chunks than a rank can copy in ahead of the others (Shm::buffers), and far more
  // than the others reduce in the millisecond before the last rank leaves.
  auto x = values(64 * chunk_floats, me, 2);
  if (me == last) {
    auto started = world.iall_reduce(x);
    std::this_thread::sleep_for(1ms);
    std::fflush(stdout);
    std::_Exit(0);  // no destructor, no wait: as if killed
  }
  const auto start = Clock::now();
  try {
    world.all_reduce(x);
  } catch (const mpp::CommError& e) {
    std::printf("failed elapsed_ms=%lld\n%s\n", ms_since(start), e.what());
    return 0;
  }
  std::printf("no error\n");
  return 1;
}

// Rank 1 stays alive but never joins the all-reduce: rank 0 times out naming it.
MPP_TEST_WORKER("shm_silent_peer") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  print_segment(world);
  if (world.rank() == 1) {
    std::this_thread::sleep_for(9s);
    return 0;
  }
  auto x = values(1000, 0, 1);
  const auto start = Clock::now();
  try {
    world.all_reduce(x);
  } catch (const mpp::CommTimeout& e) {
    std::printf("timeout elapsed_ms=%lld\n%s\n", ms_since(start), e.what());
    return 0;
  }
  std::printf("no timeout\n");
  return 1;
}

// Each rank claims another host: creating the group is refused with the fix.
MPP_TEST_WORKER("shm_two_hosts") {
  const std::string id = std::string("host-") + std::getenv("RANK");
  ::setenv("MPP_SHM_HOST_ID", id.c_str(), 1);
  try {
    auto world = mpp::init_process_group<mpp::Shm>();
  } catch (const mpp::CommError& e) {
    std::printf("refused: %s\n", e.what());
    return 0;
  }
  return 1;
}

namespace {

template <class Comm>
torch::nn::Sequential train_ddp(const auto& group, const mpp::models::MlpConfig& cfg,
                                std::size_t bucket_bytes) {
  auto seeded = cfg;
  seeded.seed = cfg.seed + static_cast<std::uint64_t>(group.rank());  // the broadcast fixes it
  auto model = mpp::models::make_full_mlp(seeded);
  mpp::DDP<Comm> ddp(*model, group, {.bucket_bytes = bucket_bytes});
  torch::optim::SGD opt(model->parameters(), 0.05);
  constexpr std::int64_t global_batch = 16;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    const auto full = mpp::models::make_regression_batch(cfg, global_batch, step);
    const auto rows = global_batch / group.size();
    const auto in = full.inputs.narrow(0, group.rank() * rows, rows);
    const auto target = full.targets.narrow(0, group.rank() * rows, rows);
    torch::mse_loss(model->forward(in), target).backward();
    opt.step();
  }
  return model;
}

}  // namespace

// DDP<Async<Shm>> and DDP<Blocking<Shm>> train the parameters DDP<Async<Gloo>> trains, replicas
// bit-identical; a model larger than a chunk, and buckets from one tensor to everything.
MPP_TEST_WORKER("shm_ddp") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group();
  auto shm = world.new_group<mpp::Shm>();
  print_segment(shm);
  struct Case {
    mpp::models::MlpConfig cfg;
    std::size_t bucket;
  };
  const std::vector<Case> cases{
      {{.hidden = 24, .layers = 5, .seed = 100}, 1},
      {{.hidden = 24, .layers = 5, .seed = 100}, 1000},
      {{.hidden = 1024, .layers = 3, .seed = 7}, mpp::default_bucket_bytes}};
  for (const auto& c : cases) {
    const std::string what =
        "hidden " + std::to_string(c.cfg.hidden) + " bucket " + std::to_string(c.bucket);
    auto reference = train_ddp<mpp::Async<mpp::Gloo>>(world, c.cfg, c.bucket);
    auto got = train_ddp<mpp::Async<mpp::Shm>>(shm, c.cfg, c.bucket);
    const auto g = got->named_parameters();
    const auto w = reference->named_parameters();
    for (std::size_t i = 0; i < g.size(); ++i)
      if (!at::allclose(g[i].value(), w[i].value(), 1e-5, 1e-6))
        throw std::runtime_error(
            what + ": parameter '" + g[i].key() + "' differs from DDP<Async<Gloo>> by " +
            std::to_string((g[i].value() - w[i].value()).abs().max().item<double>()));
    const auto report = mpp::compare_replicas(*got, shm);
    expect(static_cast<bool>(report), what + ": replicas differ: " + report.first_difference);
  }
  auto blocking = train_ddp<mpp::Blocking<mpp::Shm>>(shm, cases[1].cfg, 1000);
  auto reference = train_ddp<mpp::Async<mpp::Gloo>>(world, cases[1].cfg, 1000);
  for (std::size_t i = 0; i < blocking->parameters().size(); ++i)
    expect(at::allclose(blocking->parameters()[i], reference->parameters()[i], 1e-5, 1e-6),
           "DDP<Blocking<Shm>>");
  // A Shm policy given the Gloo world does not compile (tests/comm/compile_fail); a handle whose
  // type does not say its backend is refused with the fix where it becomes a Group<Shm>.
  try {
    auto model = mpp::models::make_full_mlp(cases[0].cfg);
    const mpp::ProcessGroup& erased = world;
    mpp::DDP<mpp::Async<mpp::Shm>> wrong(*model, mpp::group_cast<mpp::Shm>(erased));
    return 1;
  } catch (const mpp::InvalidArgument& e) {
    expect(contains(e.what(), "init_process_group<Shm>()"), e.what());
  }
  std::printf("rank %d: DDP over Shm equals DDP over Gloo\n", world.rank());
  return 0;
}

TEST_CASE(
    "Shm all-reduce equals the Gloo result for every dtype and op and size - replicas "
    "bit-identical") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "shm_values", bounded(240));
    CHECK_MESSAGE(world.ok(), world.report());
    check_no_segment_left(world);
  }
}

TEST_CASE(
    "Shm all_gather_runs gives every rank every owner's run, bit for bit, as the Gloo fallback "
    "does - bad runs refused, disagreeing ranks named") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "shm_all_gather", bounded(180));
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE(
    "Shm reduce_scatter_runs gives each rank the all-reduce's bits in its own run and leaves the "
    "rest - as the Gloo fallback's all-reduce - bad runs refused, disagreeing ranks named") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "shm_reduce_scatter", bounded(180));
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE("Shm: outstanding all-reduces complete in submission order - barriers after them") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "shm_async", bounded(120));
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE(
    "Shm: other dtypes and ops go through Gloo; p2p, broadcast and sub-groups work on a Shm "
    "group") {
  auto world = mpp::test::run_world(3, "shm_fallback", bounded(120));
  CHECK_MESSAGE(world.ok(), world.report());
  check_no_segment_left(world);
}

TEST_CASE("Shm: ranks calling different all-reduces fail with both descriptions") {
  auto world = mpp::test::run_world(2, "shm_mismatch", bounded(60));
  REQUIRE_MESSAGE(world.ok(), world.report());
  for (int r = 0; r < 2; ++r) {
    CAPTURE(world.output(r));
    CHECK(contains(world.output(r), "rank 1 called all_reduce #1 of Float[200] sum"));
    CHECK(contains(world.output(r), "rank 0 called all_reduce #1 of Float[100] sum"));
  }
}

TEST_CASE("Shm: a rank that exits mid-collective is named by the others well before the deadline") {
  auto options = bounded(90, {{"MPP_TIMEOUT_S", "30"}});
  options.stop_all_on_failure = false;
  auto world = mpp::test::run_world(3, "shm_dead_peer", options);
  CHECK_MESSAGE(world.timed_out() == false, world.report());
  for (int r = 0; r < 2; ++r) {
    const auto& out = world.output(r);
    CAPTURE(out);
    CHECK(world.exit_code(r) == 0);
    CHECK(contains(out, "over shared memory: rank 2 (process "));
    CHECK(contains(out, "exited before it could"));
    const auto elapsed = number_after(out, "elapsed_ms=");
    REQUIRE(elapsed >= 0);
    CHECK(elapsed < 10'000);
  }
  check_no_segment_left(world);
}

TEST_CASE("Shm: a silent peer makes the all-reduce time out at the deadline and is named") {
  auto options = bounded(60, {{"MPP_TIMEOUT_S", "2"}});
  options.stop_all_on_failure = false;
  auto world = mpp::test::run_world(2, "shm_silent_peer", options);
  REQUIRE_MESSAGE(world.ok(), world.report());
  const auto& out = world.output(0);
  CAPTURE(out);
  CHECK(contains(out, "over shared memory timed out"));
  CHECK(contains(out, "rank(s) [1]"));
  const auto elapsed = number_after(out, "elapsed_ms=");
  REQUIRE(elapsed >= 0);
  CHECK(elapsed >= 1'500);
  CHECK(elapsed < 7'000);
  check_no_segment_left(world);
}

TEST_CASE("Shm: ranks on different hosts are refused at creation with the fix") {
  auto world = mpp::test::run_world(2, "shm_two_hosts", bounded(60));
  REQUIRE_MESSAGE(world.ok(), world.report());
  for (int r = 0; r < 2; ++r) {
    CAPTURE(world.output(r));
    CHECK(contains(world.output(r), "needs every rank of the group on one host"));
    CHECK(contains(world.output(r), "'host-1'"));
    CHECK(contains(world.output(r), "use Gloo across hosts"));
  }
}

TEST_CASE(
    "DDP<Async<Shm>> trains the parameters DDP<Async<Gloo>> trains - replicas bit-identical") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "shm_ddp", bounded(240));
    CHECK_MESSAGE(world.ok(), world.report());
    check_no_segment_left(world);
  }
}

}  // namespace shm_group_test
