// Nothing hangs: a missing rank, a silent peer, a dead peer and a forgotten request each end
// within their deadline with a message that names the operation and the peer.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "mpp/comm.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

// In a namespace of its own: the directory's files compile as one unit (tests/CMakeLists.txt).
namespace failure_test {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Parses "<name>=<n>" printed by a worker; -1 if absent.
long long printed(const std::string& output, const std::string& name) {
  auto at = output.find(name + "=");
  return at == std::string::npos ? -1 : std::stoll(output.substr(at + name.size() + 1));
}

long long elapsed_printed(const std::string& output) { return printed(output, "elapsed_ms"); }

/// Wall-clock milliseconds: the one clock that the ranks of one host share.
long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

mpp::test::WorldOptions with_deadlines(const char* init_s, const char* op_s) {
  mpp::test::WorldOptions o;
  o.timeout = 60s;
  o.env = {{"MPP_INIT_TIMEOUT_S", init_s}, {"MPP_TIMEOUT_S", op_s}};
  return o;
}

/// Runs `op`, expecting a CommError; prints what a test checks: kind, operation, peer, time.
template <class Op>
int expect_comm_error(Op op) {
  const auto start = Clock::now();
  const auto started = wall_ms();
  try {
    op();
  } catch (const mpp::CommTimeout& e) {
    std::printf("timeout op=%s peer=%d elapsed_ms=%lld started_ms=%lld ended_ms=%lld\n%s\n",
                e.operation().c_str(), e.peer(), ms_since(start), started, wall_ms(), e.what());
    return 0;
  } catch (const mpp::CommError& e) {
    std::printf("error op=%s peer=%d elapsed_ms=%lld started_ms=%lld ended_ms=%lld\n%s\n",
                e.operation().c_str(), e.peer(), ms_since(start), started, wall_ms(), e.what());
    return 0;
  }
  std::printf("no error\n");
  return 1;
}

}  // namespace

// Launched as 2 ranks of a WORLD_SIZE=3 job: rank 2 never comes.
MPP_TEST_WORKER("comm_init_missing") {
  torch::set_num_threads(1);
  return expect_comm_error([] { mpp::init_process_group(); });
}

// As comm_init_missing, but rank 1 starts its init a second after rank 0: rank 0's deadline
// passes first, and rank 1 must still report the missing rank, not a lost store.
MPP_TEST_WORKER("comm_init_missing_late") {
  torch::set_num_threads(1);
  if (std::getenv("RANK") == std::string("1")) std::this_thread::sleep_for(1s);
  return expect_comm_error([] { mpp::init_process_group(); });
}

// Rank 0 never starts its store: rank 1 cannot reach it.
MPP_TEST_WORKER("comm_init_no_rank0") {
  if (std::getenv("RANK") == std::string("0")) return 0;
  torch::set_num_threads(1);
  return expect_comm_error([] { mpp::init_process_group(); });
}

MPP_TEST_WORKER("comm_init_env_error") {
  try {
    mpp::init_process_group();
  } catch (const mpp::EnvironmentError& e) {
    std::printf("variable=%s\n%s\n", e.variable().c_str(), e.what());
    return 0;
  }
  return 1;
}

// Rank 0 waits on a recv (then on a barrier) that rank 1 never joins; rank 1 stays alive, silent.
MPP_TEST_WORKER("comm_silent_peer") {
  torch::set_num_threads(1);
  auto world = mpp::init_process_group();
  if (world.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(argv[argc - 1])));
    return 0;
  }
  auto x = at::zeros({16});
  if (std::string(argv[argc - 2]) == "recv") return expect_comm_error([&] { world.recv(x, 1, 7); });
  return expect_comm_error([&] { world.barrier(); });
}

// Rank 1 exits right after init; rank 0's recv must fail fast (not at its deadline).
MPP_TEST_WORKER("comm_dead_peer") {
  torch::set_num_threads(1);
  auto world = mpp::init_process_group();
  if (world.rank() == 1) return 0;
  auto x = at::zeros({16});
  return expect_comm_error([&] { world.recv(x, 1, 0); });
}

// A Request that is dropped without wait() is waited by its destructor.
MPP_TEST_WORKER("comm_dropped_request") {
  torch::set_num_threads(1);
  auto world = mpp::init_process_group();
  if (world.rank() == 0) {
    {
      auto dropped = world.isend(at::full({1000}, 5.0), 1, 3);
    }  // waits here until rank 1 has received
    auto y = at::zeros({4});
    world.recv(y, 1, 4);
    if (!at::equal(y, at::full({4}, 9.0))) return 1;
  } else {
    std::this_thread::sleep_for(300ms);
    auto x = at::zeros({1000});
    world.recv(x, 0, 3);
    if (!at::equal(x, at::full({1000}, 5.0))) return 1;
    world.send(at::full({4}, 9.0), 0, 4);
  }
  return 0;
}

// A dropped receive that can never complete: the destructor's wait fails, and since a
// destructor cannot throw, the process stops with the message.
MPP_TEST_WORKER("comm_dropped_request_fails") {
  torch::set_num_threads(1);
  auto world = mpp::init_process_group();
  if (world.rank() == 1) {
    std::this_thread::sleep_for(4s);
    return 0;
  }
  {
    auto x = at::zeros({4});
    auto never = world.irecv(x, 1, 5);
  }
  return 0;  // not reached
}

TEST_CASE("comm: init with a missing rank fails within its deadline and names the rank") {
  auto options = with_deadlines("2", "30");
  options.env.emplace_back("WORLD_SIZE", "3");
  const auto start = Clock::now();
  auto world = mpp::test::run_world(2, "comm_init_missing", options);
  CHECK_MESSAGE(world.ok(), world.report());
  CHECK(ms_since(start) < 20'000);
  for (int r = 0; r < 2; ++r) {
    CAPTURE(world.output(r));
    CHECK(contains(world.output(r), "timeout op=init peer=2"));
    CHECK(contains(world.output(r), "rank(s) [2] of WORLD_SIZE=3 never reached the rendezvous"));
    CHECK(contains(world.output(r), "mpprun --nproc-per-node 3"));
    const auto elapsed = elapsed_printed(world.output(r));
    CHECK(elapsed < 6'000);
  }
  // The ranks started at slightly different times; each reports at its own deadline or at
  // rank 0's (rank 0 serves the store and tells the others when it gives up), never before.
  const auto host_started = printed(world.output(0), "started_ms");
  CHECK(elapsed_printed(world.output(0)) >= 1'900);
  const auto started = printed(world.output(1), "started_ms");
  CHECK(printed(world.output(1), "ended_ms") >= std::min(started, host_started) + 1'900);
}

TEST_CASE("comm: a rank that starts its init late still names the missing rank") {
  auto options = with_deadlines("2", "30");
  options.env.emplace_back("WORLD_SIZE", "3");
  auto world = mpp::test::run_world(2, "comm_init_missing_late", options);
  CHECK_MESSAGE(world.ok(), world.report());
  for (int r = 0; r < 2; ++r) {
    CAPTURE(world.output(r));
    CHECK(contains(world.output(r), "timeout op=init peer=2"));
    CHECK(contains(world.output(r), "rank(s) [2] of WORLD_SIZE=3 never reached the rendezvous"));
  }
  // Rank 1 hears of it when rank 0 gives up, a second before its own deadline.
  CHECK(printed(world.output(1), "ended_ms") >= printed(world.output(0), "started_ms") + 1'900);
  CHECK(elapsed_printed(world.output(1)) < 1'900);
}

TEST_CASE("comm: init without rank 0 fails within its deadline") {
  auto world = mpp::test::run_world(2, "comm_init_no_rank0", with_deadlines("2", "30"));
  CHECK_MESSAGE(world.ok(), world.report());
  CAPTURE(world.output(1));
  CHECK(contains(world.output(1), "timeout op=init peer=0"));
  CHECK(contains(world.output(1), "could not reach the rendezvous store of rank 0"));
  CHECK(elapsed_printed(world.output(1)) < 8'000);
}

TEST_CASE("comm: init outside a launcher names the missing variable") {
  auto options = with_deadlines("2", "2");
  options.env.emplace_back("RANK", "");  // the launcher's own variables cannot be unset
  auto world = mpp::test::run_world(1, "comm_init_env_error", options);
  CHECK_MESSAGE(world.ok(), world.report());
  CHECK(contains(world.output(0), "variable=RANK"));
  CHECK(contains(world.output(0), "mpprun --nproc-per-node"));
}

TEST_CASE("comm: rank 0 cannot serve the store on a taken port") {
  // Hold a port open so that rank 0's store cannot listen on it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  auto options = with_deadlines("3", "3");
  options.master_port = ntohs(addr.sin_port);
  auto world = mpp::test::run_world(2, "comm_init_missing", options);
  ::close(fd);
  CAPTURE(world.report());
  CHECK(contains(world.output(0), "error op=init"));
  CHECK(contains(world.output(0), "could not serve the rendezvous store on port"));
  // Rank 1 reached the port holder, which never answers like a store: bounded all the same.
  CHECK(contains(world.output(1), "timeout op=init peer=0"));
  CHECK(contains(world.output(1), "got no answer from the rendezvous store"));
  CHECK(elapsed_printed(world.output(1)) < 8'000);
}

TEST_CASE("comm: a wait on a silent peer times out naming the peer and the operation") {
  auto options = with_deadlines("30", "1.5");
  options.args = {"recv", "4000"};
  {
    const auto world = mpp::test::run_world(2, "comm_silent_peer", options);
    CHECK_MESSAGE(world.ok(), world.report());
    const auto& out = world.output(0);
    CAPTURE(out);  // read when a check below fails: `out` must outlive them
    CHECK(contains(out, "timeout op=recv peer=1"));
    CHECK(contains(
        out, "mpp: recv from rank 1 [tag 7, Float[16]] on rank 0 did not complete within 1500 ms"));
    CHECK(elapsed_printed(out) >= 1'400);
    CHECK(elapsed_printed(out) < 3'500);
  }
  // A failed collective also waits up to min(2 s, deadline) for the others to report in before it
  // names the silent ones: 1.5 + 1.5 s here. The bound leaves room for a sanitizer's slowdown
  // (4.4 s under ThreadSanitizer) and stays below the peer's wake-up at 8 s, so a wait that lasted
  // until the peer came back fails.
  options.args = {"barrier", "8000"};
  const auto world = mpp::test::run_world(2, "comm_silent_peer", options);
  CHECK_MESSAGE(world.ok(), world.report());
  const auto& out = world.output(0);
  CAPTURE(out);
  CHECK(contains(out, "timeout op=barrier peer=-1"));
  CHECK(contains(out, "has not joined this collective"));
  CHECK(elapsed_printed(out) >= 2'900);
  CHECK(elapsed_printed(out) < 6'500);
}

TEST_CASE("comm: a dead peer is reported at once, not at the deadline") {
  auto options = with_deadlines("30", "20");
  options.stop_all_on_failure = false;
  auto world = mpp::test::run_world(2, "comm_dead_peer", options);
  CHECK_MESSAGE(world.ok(), world.report());
  const auto& out = world.output(0);
  CAPTURE(out);
  CHECK(contains(out, "op=recv peer=1"));
  CHECK(contains(out, "recv from rank 1"));
  CHECK(elapsed_printed(out) < 10'000);
}

TEST_CASE("comm: a dropped request is waited by its destructor") {
  auto world = mpp::test::run_world(2, "comm_dropped_request", with_deadlines("30", "30"));
  CHECK_MESSAGE(world.ok(), world.report());

  world = mpp::test::run_world(2, "comm_dropped_request_fails", with_deadlines("30", "1"));
  CAPTURE(world.report());
  CHECK_FALSE(world.ok());
  CHECK(world.exit_code(0) != 0);
  CHECK(contains(world.output(0), "recv from rank 1 [tag 5"));
  CHECK(contains(world.output(0), "destroyed without wait()"));
}

// The rendezvous store stays usable long after the init and op deadlines have passed (sub-groups
// are created through it at any time).
MPP_TEST_WORKER("comm_store_idle") {
  torch::set_num_threads(1);
  auto world = mpp::init_process_group();
  std::this_thread::sleep_for(6s);  // longer than every deadline (store timeout = max of them)
  auto pair = world.new_group({1, 0});
  auto x = at::full({2}, 1.0 + world.rank());
  pair.all_reduce(x);
  return at::equal(x, at::full({2}, 3.0)) ? 0 : 1;
}

TEST_CASE("comm: the store outlives the deadlines") {
  auto world = mpp::test::run_world(2, "comm_store_idle", with_deadlines("5", "1"));
  CHECK_MESSAGE(world.ok(), world.report());
}

// ---- a rank that leaves right after connecting ------------------------------------------------
// A member that is slow to finish connecting (here: rank 1 completes its side of the group 1.5 s
// after Gloo's part is done) must not be left behind: no member may return from init (or from
// new_group) before every member has connected, or a fast member that then exits, or drops the
// group, breaks the slow one's connection ("Connection closed by peer"). Rank 0 leaves as soon
// as it has the group; it must have returned only after rank 1 had connected.
namespace {

struct SlowToConnect {
  static constexpr std::string_view name = "SlowToConnect";
};

long long epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Parses "<label><n>" from a rank's output; -1 if absent.
long long printed_after(const std::string& output, const std::string& label) {
  auto at = output.find(label);
  return at == std::string::npos ? -1 : std::stoll(output.substr(at + label.size()));
}

}  // namespace

}  // namespace failure_test

// A backend's traits are specialised in mpp's namespace, outside the file's own.
template <>
struct mpp::backend_traits<failure_test::SlowToConnect> {
  static std::shared_ptr<::gloo::transport::Device> device(const Environment& env,
                                                           const CommOptions& options) {
    return backend_traits<Gloo>::device(env, options);
  }
  static c10::intrusive_ptr<c10d::ProcessGroup> make(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const std::shared_ptr<::gloo::transport::Device>& device, std::chrono::milliseconds timeout) {
    auto pg = backend_traits<Gloo>::make(store, rank, size, device, timeout);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      std::printf("connected at %lld\n", failure_test::epoch_ms());
      std::fflush(stdout);
    }
    return pg;
  }
};

namespace failure_test {

// "init": rank 0 exits as soon as init returns. "new_group": every rank connects the world, then
// rank 0 drops a new group of everyone as soon as it has it, and exits.
MPP_TEST_WORKER("comm_early_exit") {
  torch::set_num_threads(1);
  const std::string where = argv[argc - 1];
  auto world = mpp::init_process_group<SlowToConnect>();
  if (where == "init") {
    if (world.rank() == 0) std::printf("returned at %lld\n", epoch_ms());
    return 0;  // rank 0 leaves at once
  }
  std::vector<int> everyone;
  for (int r = 0; r < world.size(); ++r) everyone.push_back(r);
  auto group = world.new_group(everyone);
  if (world.rank() == 0) std::printf("returned at %lld\n", epoch_ms());
  return 0;  // rank 0 drops the group and leaves at once
}

TEST_CASE("comm: no rank returns from init or new_group before every rank has connected") {
  for (const char* where : {"init", "new_group"}) {
    CAPTURE(where);
    auto options = with_deadlines("30", "30");
    options.stop_all_on_failure = false;
    options.args = {where};
    auto world = mpp::test::run_world(3, "comm_early_exit", options);
    CHECK_MESSAGE(world.ok(), world.report());
    const auto& slow = world.output(1);
    // new_group: the last "connected" line is the new group's
    const auto last = slow.rfind("connected at ");
    const auto connected =
        last == std::string::npos ? -1 : printed_after(slow.substr(last), "connected at ");
    const auto returned = printed_after(world.output(0), "returned at ");
    CAPTURE(world.report());
    REQUIRE(connected > 0);
    REQUIRE(returned > 0);
    CHECK(returned >= connected);
  }
}

}  // namespace failure_test
