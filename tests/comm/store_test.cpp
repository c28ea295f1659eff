// The rendezvous store: every operation c10d and mpp use, its deadlines, where it listens, and
// that garbage on its port closes that connection without harming anyone else.
#include <doctest/doctest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mpp/comm/store.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

// In a namespace of its own: the directory's files compile as one unit (tests/CMakeLists.txt).
namespace store_test {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

/// A raw TCP connection to the store's port, to send it anything.
int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

void send_all(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the store may close a garbage connection while we still write
    sent += static_cast<std::size_t>(n);
  }
}

/// The first IPv4 address of this host that is not loopback ("" if there is none).
std::string non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    found = buf;
  }
  ::freeifaddrs(list);
  return found;
}

}  // namespace

TEST_CASE("store: every operation, served on loopback") {
  auto store = mpp::RendezvousStore::serve("127.0.0.1", 0, 5s);
  REQUIRE(store->serving());
  REQUIRE(store->port() > 0);

  store->set("a", bytes("alpha"));
  CHECK(text(store->get("a")) == "alpha");
  store->set("a", bytes(""));  // empty values are values
  CHECK(store->get("a").empty());
  CHECK(store->check({"a"}));
  CHECK_FALSE(store->check({"a", "b"}));

  CHECK(store->add("n", 5) == 5);
  CHECK(store->add("n", -2) == 3);
  CHECK(text(store->get("n")) == "3");  // counters read as text, as with c10d's TCPStore

  // compareSet: c10d's semantics.
  CHECK(text(store->compareSet("c", bytes(""), bytes("first"))) == "first");
  CHECK(text(store->compareSet("c", bytes("wrong"), bytes("second"))) == "first");
  CHECK(text(store->compareSet("c", bytes("first"), bytes("second"))) == "second");
  CHECK(text(store->compareSet("absent", bytes("x"), bytes("y"))) == "x");
  CHECK_FALSE(store->check({"absent"}));

  CHECK(store->getNumKeys() == 3);
  CHECK(store->deleteKey("c"));
  CHECK_FALSE(store->deleteKey("c"));
  CHECK(store->getNumKeys() == 2);

  // A second client (another thread) sees the same keys; get() waits for a key to appear.
  mpp::RendezvousStore other("127.0.0.1", store->port(), 5s);
  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    other.set("late", bytes("here"));
  });
  const auto start = Clock::now();
  CHECK(text(store->get("late")) == "here");
  CHECK(ms_since(start) >= 150);
  writer.join();
  store->wait({"a", "late"});

  // Large values travel whole.
  std::string big(3 << 20, 'x');
  big[12345] = 'y';
  other.set("big", bytes(big));
  CHECK(text(store->get("big")) == big);
}

TEST_CASE("store: waits are bounded, and a late reply never answers a later request") {
  auto store = mpp::RendezvousStore::serve("127.0.0.1", 0, 5s);
  auto start = Clock::now();
  try {
    store->wait({"never"}, 300ms);
    FAIL("wait on a missing key returned");
  } catch (const mpp::StoreError& e) {
    CHECK(e.kind() == mpp::StoreError::Kind::timed_out);
    CHECK(std::string(e.what()).find("timed out") != std::string::npos);
  }
  CHECK(ms_since(start) >= 280);
  CHECK(ms_since(start) < 2'000);

  store->setTimeout(300ms);
  start = Clock::now();
  CHECK_THROWS_AS(store->get("missing"), mpp::StoreError);
  CHECK(ms_since(start) < 2'000);
  // The keys appear now; the timed-out requests' answers must not be read as the next replies.
  store->set("never", bytes("1"));
  store->set("missing", bytes("2"));
  store->set("k", bytes("value"));
  CHECK(text(store->get("k")) == "value");
  CHECK(store->check({"never", "missing"}));
}

TEST_CASE("store: listens only on the address it is given") {
  auto store = mpp::RendezvousStore::serve("127.0.0.1", 0, 5s);
  const std::string other = non_loopback_ipv4();
  if (other.empty()) {
    MESSAGE("no non-loopback IPv4 address on this host: the negative check is not run");
    return;
  }
  const auto start = Clock::now();
  try {
    mpp::RendezvousStore outside(other, store->port(), 500ms);
    FAIL("the loopback store accepted a connection on " << other);
  } catch (const mpp::StoreError& e) {
    CHECK(e.kind() == mpp::StoreError::Kind::unreachable);
  }
  CHECK(ms_since(start) < 3'000);
  // And a store served on that address is reachable there, not on loopback.
  auto outer = mpp::RendezvousStore::serve(other, 0, 5s);
  mpp::RendezvousStore client(other, outer->port(), 2s);
  client.set("x", bytes("1"));
  CHECK(text(outer->get("x")) == "1");
  CHECK_THROWS_AS(mpp::RendezvousStore("127.0.0.1", outer->port(), 300ms), mpp::StoreError);
}

TEST_CASE("store: garbage on its port closes that connection only") {
  auto store = mpp::RendezvousStore::serve("127.0.0.1", 0, 5s);
  store->set("k", bytes("v"));
  mpp::RendezvousStore client("127.0.0.1", store->port(), 5s);

  std::mt19937 random(7);
  std::string noise(4096, '\0');
  for (auto& c : noise) c = static_cast<char>(random());
  const std::string huge_length(
      "\x00\xff\xff\xff\xff\xff\xff\xff\x3f"
      "abc",
      12);
  std::string hello;  // a valid greeting, then an unknown opcode / a truncated string field
  mpp::detail::store_wire::put_u32(hello, 1 + 4 + mpp::detail::store_wire::magic.size() + 4);
  hello.push_back(1);
  mpp::detail::store_wire::put_str(hello, mpp::detail::store_wire::magic);
  mpp::detail::store_wire::put_str(hello, "");  // the session
  std::string bad_op = hello;
  mpp::detail::store_wire::put_u32(bad_op, 1);
  bad_op.push_back(static_cast<char>(99));
  std::string bad_field = hello;
  mpp::detail::store_wire::put_u32(bad_field, 6);
  bad_field.push_back(2);                                   // set
  mpp::detail::store_wire::put_u32(bad_field, 0x7fffffff);  // key length past the frame
  bad_field.push_back('z');
  std::string over_limit = hello;
  mpp::detail::store_wire::put_u32(over_limit, 0xffffffffu);

  for (const std::string& payload : {noise, huge_length, std::string(65536, '\0'), bad_op,
                                     bad_field, over_limit, hello.substr(0, 7)}) {
    const int fd = raw_connect(store->port());
    send_all(fd, payload);
    // The store closes a connection that sent garbage (a truncated greeting just waits).
    if (payload.size() > 8) {
      char byte;
      ::shutdown(fd, SHUT_WR);
      ssize_t n = 0;
      while ((n = ::recv(fd, &byte, 1, 0)) > 0) {
      }
      CHECK(n <= 0);
    }
    ::close(fd);
  }
  // A client that hangs up in the middle of a wait is forgotten.
  {
    mpp::RendezvousStore quitter("127.0.0.1", store->port(), 5s);
    CHECK_THROWS_AS(quitter.wait({"not-yet"}, 100ms), mpp::StoreError);
  }
  store->set("not-yet", bytes("1"));
  // Everyone else is unharmed.
  CHECK(text(client.get("k")) == "v");
  client.set("after", bytes("garbage"));
  CHECK(text(store->get("after")) == "garbage");
}

TEST_CASE("store: clear errors when nothing or something else answers, or the store goes") {
  // Nothing listens: unreachable, within the deadline.
  int port = 0;
  {
    auto probe = mpp::RendezvousStore::serve("127.0.0.1", 0, 1s);
    port = probe->port();
  }
  auto start = Clock::now();
  try {
    mpp::RendezvousStore nobody("127.0.0.1", port, 400ms);
    FAIL("connected to a closed port");
  } catch (const mpp::StoreError& e) {
    CHECK(e.kind() == mpp::StoreError::Kind::unreachable);
    CHECK(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  }
  CHECK(ms_since(start) >= 300);
  CHECK(ms_since(start) < 2'000);

  // Something that accepts but never answers: not a store, within the deadline.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  start = Clock::now();
  try {
    mpp::RendezvousStore silent("127.0.0.1", ntohs(addr.sin_port), 400ms);
    FAIL("a silent listener was taken for a store");
  } catch (const mpp::StoreError& e) {
    CHECK(e.kind() == mpp::StoreError::Kind::not_a_store);
  }
  CHECK(ms_since(start) < 2'000);
  // And the port it holds cannot be served.
  try {
    mpp::RendezvousStore::serve("127.0.0.1", ntohs(addr.sin_port), 1s);
    FAIL("served on a port that is taken");
  } catch (const mpp::StoreError& e) {
    CHECK(e.kind() == mpp::StoreError::Kind::cannot_serve);
    CHECK(std::string(e.what()).find("in use") != std::string::npos);
  }
  ::close(fd);

  // The serving process goes away: a client fails fast, saying so.
  auto owner = mpp::RendezvousStore::serve("127.0.0.1", 0, 5s);
  mpp::RendezvousStore client("127.0.0.1", owner->port(), 5s);
  client.set("x", bytes("1"));
  owner.reset();
  start = Clock::now();
  try {
    client.get("x");
    FAIL("a store that is gone answered");
  } catch (const mpp::StoreError& e) {
    CHECK((e.kind() == mpp::StoreError::Kind::lost ||
           e.kind() == mpp::StoreError::Kind::unreachable));
  }
  CHECK(ms_since(start) < 1'000);
}

TEST_CASE("store: a client never meets the store of another session (an earlier attempt)") {
  auto old_attempt = mpp::RendezvousStore::serve("127.0.0.1", 0, 5s, "attempt 0");
  const int port = old_attempt->port();
  old_attempt->set("mpp/join/1", bytes("1"));
  // Another session is "not there yet": refused until the deadline, saying why.
  auto start = Clock::now();
  try {
    mpp::RendezvousStore late("127.0.0.1", port, 400ms, "attempt 1");
    FAIL("met the store of another session");
  } catch (const mpp::StoreError& e) {
    CHECK(e.kind() == mpp::StoreError::Kind::unreachable);
    CHECK(std::string(e.what()).find("another session ('attempt 0'") != std::string::npos);
  }
  CHECK(ms_since(start) < 2'000);
  // The old attempt's store goes away and the new one serves on the same port: a client that
  // started connecting while the old one was still there meets the new one.
  std::thread restart([&] {
    std::this_thread::sleep_for(300ms);
    old_attempt.reset();
    auto fresh = mpp::RendezvousStore::serve("127.0.0.1", port, 5s, "attempt 1");
    fresh->set("ready", bytes("1"));
    fresh->wait({"done"}, 5s);
  });
  mpp::RendezvousStore client("127.0.0.1", port, 5s, "attempt 1");
  client.wait({"ready"}, 5s);
  CHECK_FALSE(client.check({"mpp/join/1"}));  // nothing of the old attempt
  client.set("done", bytes("1"));
  restart.join();
}

// Rank 0 serves on MASTER_PORT; every rank counts itself in, elects one leader by compareSet and
// waits for everyone's key, concurrently.
MPP_TEST_WORKER("store_ranks") {
  const int rank = std::atoi(std::getenv("RANK"));
  const int world = std::atoi(std::getenv("WORLD_SIZE"));
  const int port = std::atoi(std::getenv("MASTER_PORT"));
  c10::intrusive_ptr<mpp::RendezvousStore> store =
      rank == 0 ? mpp::RendezvousStore::serve("127.0.0.1", port, 10s)
                : c10::make_intrusive<mpp::RendezvousStore>("127.0.0.1", port, 10s);
  const auto ticket = store->add("count", 1);
  if (ticket < 1 || ticket > world) return 1;
  const auto leader = store->compareSet("leader", {}, bytes(std::to_string(rank)));
  store->set("rank/" + std::to_string(rank), bytes(std::to_string(ticket)));
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("rank/" + std::to_string(r));
  store->wait(keys, 10s);
  std::vector<int> tickets;
  for (const auto& k : keys) tickets.push_back(std::stoi(text(store->get(k))));
  std::sort(tickets.begin(), tickets.end());
  for (int r = 0; r < world; ++r)
    if (tickets[static_cast<std::size_t>(r)] != r + 1) return 2;  // each ticket exactly once
  std::printf("leader=%s count=%s\n", text(leader).c_str(), text(store->get("count")).c_str());
  // The server lives in rank 0: it leaves last.
  store->set("done/" + std::to_string(rank), bytes("1"));
  if (rank == 0) {
    for (int r = 0; r < world; ++r) keys[static_cast<std::size_t>(r)] = "done/" + std::to_string(r);
    store->wait(keys, 10s);
  }
  return 0;
}

TEST_CASE("store: four processes meet through it") {
  mpp::test::WorldOptions options;
  options.timeout = 60s;
  auto world = mpp::test::run_world(4, "store_ranks", options);
  REQUIRE_MESSAGE(world.ok(), world.report());
  const auto first = world.output(0).substr(0, world.output(0).find('\n'));
  CHECK(first.find("count=4") != std::string::npos);
  for (int r = 1; r < 4; ++r)  // one leader, the same for everyone
    CHECK(world.output(r).substr(0, world.output(r).find('\n')) == first);
}

}  // namespace store_test
