// Point-to-point over shared memory (Shm groups, shm_mailbox.hpp) between real processes, on 2
// and 4 ranks: every dtype, contiguous or strided, from one element to several times a ring,
// arrives with the bits Gloo delivers; messages of one (peer, tag) in order, of different tags in
// any order; sends complete before their receive is posted while the ring has room; a message
// larger than the ring waits for its receiver; a mismatched receive, a dead sender and a silent
// one are named; a killed job leaves nothing in /dev/shm, and a later job removes what a job
// killed during its start-up left.
#include <doctest/doctest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "shm_support.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

// In a namespace of its own: the directory's files compile as one unit (tests/CMakeLists.txt).
namespace shm_mailbox_test {

namespace {

using namespace std::chrono_literals;
using namespace mpp::test::shm;

constexpr std::int64_t ring = static_cast<std::int64_t>(mpp::Shm::ring_bytes);

/// Distinct bits for every (dtype, sender, element): bytes from the element index and the
/// sender, reinterpreted (floats keep finite values by masking the exponent's top bit).
at::Tensor pattern(at::ScalarType dtype, std::int64_t numel, int sender, int seed) {
  const auto element = static_cast<std::int64_t>(c10::elementSize(dtype));
  // Byte i is (131 i + 71 sender + 29 seed) mod 251: one period of 251 bytes, repeated (a 64 MiB
  // tensor's pattern computed in 64-bit integers took most of the test's time).
  const std::int64_t n = numel * element;
  const auto period =
      ((at::arange(251, at::kLong) * 131 + sender * 71 + seed * 29) % 251).to(at::kByte);
  auto bytes = period.repeat({(n + 250) / 251}).narrow(0, 0, n).contiguous();
  if (dtype == at::kBool) return bytes.remainder(2).to(at::kBool);
  if (at::isFloatingType(dtype) || at::isComplexType(dtype)) {
    // clear the top bit of every element's most significant byte: no NaN or infinity
    auto view =
        bytes.view({numel * element / (element > 8 ? 4 : element), element > 8 ? 4 : element});
    view.select(1, view.size(1) - 1).bitwise_and_(0x3f);
  }
  return bytes.view(dtype);
}

const std::vector<at::ScalarType> dtypes{at::kFloat, at::kDouble, at::kBFloat16,    at::kHalf,
                                         at::kByte,  at::kChar,   at::kShort,       at::kInt,
                                         at::kLong,  at::kBool,   at::kComplexFloat};

/// Sizes in bytes around the ring's capacity (a message's header takes 64 of it).
std::vector<std::int64_t> byte_sizes() {
  return {16, 64, 4096, ring - 128, ring - 64, ring, ring + 16, 3 * ring + 4096};
}

}  // namespace

// Each rank sends to the next and receives from the previous one on a ring, over Shm and over
// Gloo, with the same tensors: the bits must be the same, and the sender's.
MPP_TEST_WORKER("mail_values") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  auto gloo = world.new_group<mpp::Gloo>();
  const int W = world.size(), me = world.rank();
  const int next = (me + 1) % W, prev = (me + W - 1) % W;
  int seed = 0;
  for (auto dtype : dtypes) {
    const auto element = static_cast<std::int64_t>(c10::elementSize(dtype));
    for (auto bytes : byte_sizes()) {
      const std::int64_t numel = std::max<std::int64_t>(1, bytes / element);
      ++seed;
      const std::string what = std::string(c10::toString(dtype)) + "[" + std::to_string(numel) +
                               "] from rank " + std::to_string(prev);
      auto out = pattern(dtype, numel, me, seed);
      auto over_shm = at::zeros({numel}, dtype);
      auto over_gloo = at::zeros({numel}, dtype);
      {
        auto r = world.irecv(over_shm, prev, seed);
        auto s = world.isend(out, next, seed);
        r.wait();
        s.wait();
      }
      {
        auto r = gloo.irecv(over_gloo, prev, seed);
        auto s = gloo.isend(out, next, seed);
        r.wait();
        s.wait();
      }
      expect(at::equal(over_shm.view(at::kByte), over_gloo.view(at::kByte)),
             what + ": Shm != Gloo");
      expect(at::equal(over_shm.view(at::kByte), pattern(dtype, numel, prev, seed).view(at::kByte)),
             what + ": not the sender's bits");
    }
  }
  // Strided on both ends: a transposed, sliced view sent into a column of a larger tensor.
  for (auto rows : {std::int64_t{5}, std::int64_t{700}}) {
    ++seed;
    const std::int64_t cols = rows == 5 ? 3 : 1100;
    auto base = pattern(at::kFloat, rows * cols * 2, me, seed).view({cols * 2, rows});
    auto strided_out = base.t().narrow(1, 0, cols);  // rows x cols, not contiguous
    expect(!strided_out.is_contiguous(), "strided source");
    auto shm_in = at::zeros({rows, cols * 2}).narrow(1, 1, cols);
    auto gloo_in = at::zeros({rows, cols * 2}).narrow(1, 1, cols);
    expect(!shm_in.is_contiguous(), "strided destination");
    {
      auto r = world.irecv(shm_in, prev, seed);
      world.send(strided_out, next, seed);
      r.wait();
    }
    {
      auto r = gloo.irecv(gloo_in, prev, seed);
      gloo.send(strided_out, next, seed);
      r.wait();
    }
    auto want = pattern(at::kFloat, rows * cols * 2, prev, seed)
                    .view({cols * 2, rows})
                    .t()
                    .narrow(1, 0, cols);
    expect(at::equal(shm_in, gloo_in) && at::equal(shm_in, want), "strided p2p");
  }
  // 64 MiB, blocking both ends in the deadlock-free order (even ranks send first).
  {
    const std::int64_t numel = (64 << 20) / 4;
    auto out = pattern(at::kFloat, numel, me, 99);
    auto in = at::empty({numel});
    if (W == 2) {
      if (me == 0) {
        world.send(out, 1, 1);
        world.recv(in, 1, 1);
      } else {
        world.recv(in, 0, 1);
        world.send(out, 0, 1);
      }
    } else {
      auto r = world.irecv(in, prev, 1);
      world.send(out, next, 1);
      r.wait();
    }
    expect(at::equal(in, pattern(at::kFloat, numel, prev, 99)), "64 MiB message");
  }
  // Broadcast through the rings: every dtype of the list, from each root.
  for (int root = 0; root < W; ++root) {
    for (auto dtype : {at::kFloat, at::kLong, at::kBool}) {
      ++seed;
      auto t = me == root ? pattern(dtype, 1000, root, seed) : at::zeros({1000}, dtype);
      world.broadcast(t, root);
      expect(at::equal(t, pattern(dtype, 1000, root, seed)),
             "broadcast from " + std::to_string(root));
    }
  }
  std::printf("rank %d: Shm point-to-point equals Gloo's\n", me);
  return 0;
}

// Matching: one tag's messages in order, different tags in any order; a send completes before
// its receive is posted while the ring has room, and a message larger than the ring waits for
// the receiver; a receive of the wrong size is refused naming both.
MPP_TEST_WORKER("mail_matching") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  auto gloo = world.new_group<mpp::Gloo>();
  const int me = world.rank();
  auto go = at::zeros({1});
  if (me == 0) {
    // Eager: 100 blocking sends while rank 1 has posted nothing (it waits for `go` over Gloo).
    for (int i = 0; i < 100; ++i) world.send(at::full({10}, static_cast<float>(i)), 1, i % 3);
    // Two messages of tag 7 (order), then tags 8, 9 that rank 1 receives in reverse.
    world.send(at::full({4}, 1.0f), 1, 7);
    world.send(at::full({4}, 2.0f), 1, 7);
    world.send(at::full({4}, 8.0f), 1, 8);
    world.send(at::full({4}, 9.0f), 1, 9);
    gloo.send(go, 1, 0);
    // Larger than the ring: completes only once rank 1 drains the ring, which a rank does only
    // inside its own Shm calls. So the send starts when rank 1 has made its last Shm call before
    // the receive (it says so over Gloo), and must not return before rank 1 posts the receive
    // after a sleep. Both ranks read one clock (steady_clock is the host's CLOCK_MONOTONIC): the
    // check compares two instants, not a duration that load can stretch or shrink.
    gloo.recv(go, 1, 2);
    world.send(at::ones({ring}), 1, 10);  // 4 x ring bytes
    const auto returned = now_ns();
    // Wrong size: rank 1 posts 5 elements for 4.
    world.send(at::ones({4}), 1, 11);
    world.send(at::full({3}, 3.0f), 1, 12);
    auto posted = at::zeros({1}, at::kLong);
    gloo.recv(posted, 1, 1);
    const auto early_us = (posted.item<std::int64_t>() - returned) / 1000;
    expect(early_us <= 0, "a send 4x the ring returned " + std::to_string(early_us) +
                              " us before its receiver posted the receive");
  } else {
    gloo.recv(go, 0, 0);
    for (int i = 0; i < 100; ++i) {
      auto x = at::zeros({10});
      world.recv(x, 0, i % 3);
      expect(at::equal(x, at::full({10}, static_cast<float>(i))),
             "eager message " + std::to_string(i));
    }
    auto nine = at::zeros({4}), eight = at::zeros({4}), first = at::zeros({4}),
         second = at::zeros({4});
    world.recv(nine, 0, 9);
    world.recv(eight, 0, 8);
    world.recv(first, 0, 7);
    world.recv(second, 0, 7);
    expect(at::equal(nine, at::full({4}, 9.0f)) && at::equal(eight, at::full({4}, 8.0f)),
           "tags received out of order");
    expect(at::equal(first, at::full({4}, 1.0f)) && at::equal(second, at::full({4}, 2.0f)),
           "one tag's messages in order");
    gloo.send(go, 0, 2);
    std::this_thread::sleep_for(100ms);
    auto big = at::zeros({ring});
    const auto posted = now_ns();
    world.recv(big, 0, 10);
    expect(at::equal(big, at::ones({ring})), "message larger than the ring");
    auto wrong = at::zeros({5});
    try {
      world.recv(wrong, 0, 11);
      std::printf("no error for a mismatched receive\n");
      return 1;
    } catch (const mpp::CommError& e) {
      std::printf("mismatch: %s\n", e.what());
      expect(contains(e.what(), "Float with 4 elements (16 bytes)"), e.what());
      expect(contains(e.what(), "same dtype and size"), e.what());
    }
    auto after = at::zeros({3});
    world.recv(after, 0, 12);
    expect(at::equal(after, at::full({3}, 3.0f)), "the message after a refused one");
    gloo.send(at::full({1}, posted, at::kLong), 0, 1);
  }
  std::printf("rank %d: matching and buffering as over Gloo\n", me);
  return 0;
}

// Rank 1 writes part of a message larger than the ring, then dies (no destructor: as if
// killed). Rank 0 must name it well before its deadline.
MPP_TEST_WORKER("mail_dead_sender") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  auto gloo = world.new_group<mpp::Gloo>();
  auto go = at::zeros({1});
  if (world.rank() == 1) {
    auto send = world.isend(at::ones({4 * ring}), 0, 5);  // fills the ring and returns
    gloo.send(go, 0, 0);
    std::this_thread::sleep_for(100ms);
    if (std::getenv("MAIL_SIGKILL") != nullptr) ::raise(SIGKILL);
    std::fflush(stdout);
    std::_Exit(0);
  }
  gloo.recv(go, 1, 0);
  const auto start = Clock::now();
  auto x = at::zeros({4 * ring});
  try {
    world.recv(x, 1, 5);
  } catch (const mpp::CommError& e) {
    std::printf("failed elapsed_ms=%lld\n%s\n", ms_since(start), e.what());
    return 0;
  }
  std::printf("no error\n");
  return 1;
}

// Rank 1 stays alive and sends tag 4 where rank 0 waits for tag 5: rank 0 times out at its
// deadline naming the peer, the tag, the operation and the message nobody claimed.
MPP_TEST_WORKER("mail_silent_peer") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  if (world.rank() == 1) {
    world.send(at::ones({6}), 0, 4);
    std::this_thread::sleep_for(6s);
    return 0;
  }
  auto x = at::zeros({6});
  const auto start = Clock::now();
  try {
    world.recv(x, 1, 5);
  } catch (const mpp::CommTimeout& e) {
    std::printf("timeout elapsed_ms=%lld\n%s\n", ms_since(start), e.what());
    return 0;
  }
  std::printf("no timeout\n");
  return 1;
}

// Prints the segment's name (for the leftover check) then keeps sending until killed.
MPP_TEST_WORKER("mail_killed") {
  at::set_num_threads(1);
  auto world = mpp::init_process_group<mpp::Shm>();
  print_segment(world);
  auto x = at::ones({1000});
  for (int i = 0; i < 50; ++i) {
    if (world.rank() == 0) {
      world.send(x, 1, 0);
      world.recv(x, 1, 0);
    } else {
      world.recv(x, 0, 0);
      world.send(x, 0, 0);
    }
  }
  if (world.rank() == 1) ::raise(SIGKILL);
  world.recv(x, 1, 0);  // never comes: the launcher stops this rank when rank 1 dies
  return 1;
}

TEST_CASE(
    "Shm p2p equals Gloo bit for bit for every dtype, strided tensors, sizes across the ring's "
    "capacity up to 64 MiB, and broadcasts") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto world = mpp::test::run_world(ranks, "mail_values", bounded(240));
    CHECK_MESSAGE(world.ok(), world.report());
  }
}

TEST_CASE(
    "Shm p2p: one tag in order, tags in any order, eager sends, a message larger than the ring "
    "waits for its receiver, a mismatched receive is refused") {
  auto world = mpp::test::run_world(2, "mail_matching", bounded(120));
  CHECK_MESSAGE(world.ok(), world.report());
}

TEST_CASE("Shm p2p: a sender that dies mid-message is named well before the deadline") {
  for (const char* how : {"exit", "sigkill"}) {
    CAPTURE(how);
    auto options = bounded(90, {{"MPP_TIMEOUT_S", "30"}});
    if (std::string(how) == "sigkill") options.env.emplace_back("MAIL_SIGKILL", "1");
    options.stop_all_on_failure = false;
    auto world = mpp::test::run_world(2, "mail_dead_sender", options);
    CHECK_FALSE(world.timed_out());
    const auto& out = world.output(0);
    CAPTURE(out);
    CHECK(world.exit_code(0) == 0);
    CHECK(contains(out, "recv from rank 1 [tag 5"));
    CHECK(contains(out, "rank 1 (process "));
    CHECK(contains(out, "exited before it finished sending it"));
    const auto elapsed = number_after(out, "elapsed_ms=");
    REQUIRE(elapsed >= 0);
    CHECK(elapsed < 5'000);
  }
}

TEST_CASE("Shm p2p: a silent peer times out at the deadline naming the peer, tag and operation") {
  auto options = bounded(60, {{"MPP_TIMEOUT_S", "2"}});
  options.stop_all_on_failure = false;
  auto world = mpp::test::run_world(2, "mail_silent_peer", options);
  REQUIRE_MESSAGE(world.ok(), world.report());
  const auto& out = world.output(0);
  CAPTURE(out);
  CHECK(contains(out, "recv from rank 1 [tag 5"));
  CHECK(contains(out, "did not complete within 2000 ms"));
  CHECK(contains(out, "sent nothing that matches it"));
  CHECK(contains(out, "no receive has claimed: tag 4 (Float, 24 bytes)"));
  const auto elapsed = number_after(out, "elapsed_ms=");
  REQUIRE(elapsed >= 0);
  CHECK(elapsed >= 1'500);
  CHECK(elapsed < 7'000);
}

TEST_CASE(
    "Shm: a job killed by SIGKILL leaves no segment, and a later group removes the segments of "
    "jobs killed during their start-up") {
  // What a job killed between creating its segment and unlinking it leaves: a segment named
  // after a process that no longer exists. A live process's segment is left alone.
  const pid_t child = ::fork();
  if (child == 0) std::_Exit(0);
  ::waitpid(child, nullptr, 0);
  const std::string stale = "/mpp-shm-" + std::to_string(child) + "-leftover";
  const std::string live = "/mpp-shm-" + std::to_string(::getpid()) + "-live";
  for (const auto& name : {stale, live}) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  }
  REQUIRE(std::filesystem::exists("/dev/shm" + stale));

  auto world = mpp::test::run_world(2, "mail_killed", bounded(60));
  CHECK_FALSE(world.ok());
  CHECK_FALSE(world.timed_out());
  check_no_segment_left(world);
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + stale));
  CHECK(std::filesystem::exists("/dev/shm" + live));
  ::shm_unlink(live.c_str());
}

}  // namespace shm_mailbox_test
