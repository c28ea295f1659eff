#pragma once
// The rendezvous store: a small key-value service through which the ranks of a job meet (they
// publish their addresses, Gloo pairs its connections, sub-groups agree on their members).
// Rank 0 serves it on a thread of its own process; every rank (rank 0 included) is a client.
//
// Why not c10d::TCPStore: in LibTorch 1.13 its server listens on every interface of the host,
// and no option narrows that. This store listens on exactly one address: 127.0.0.1 when every
// rank shares the host, otherwise the address of the interface that reaches the peers.
//
// Like PyTorch's store it is NOT authenticated: any process that can reach the port can read and
// write keys. On one host only local processes can; across hosts run on a trusted network.
// Malformed input (garbage, absurd lengths, a client that hangs up mid-request) ends that one
// connection -- nothing is answered on it any more -- and nothing else.
//
// The wire format is in store_wire.hpp, the server in store_server.hpp; this header is the client,
// a c10d::Store that Gloo and the rest of mpp use.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mpp/comm/store_error.hpp"
#include "mpp/comm/store_server.hpp"
#include "mpp/comm/store_wire.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// A client of the store (and, when made by serve(), also its owner). Usable by c10d's
/// ProcessGroupGloo, and by several threads (calls are serialised).
class RendezvousStore final : public c10d::Store {
 public:
  /// Connects to the store at host:port, retrying until `timeout` passes (the server may not be
  /// up yet). `timeout` is also the default bound of get() and wait(). Throws StoreError:
  /// unreachable (nothing accepted in time) or not_a_store (something accepted but did not
  /// answer like this store).
  /// `session` names what the client belongs to (e.g. the attempt of a restarted job): a server
  /// of another session is treated as not there yet.
  RendezvousStore(std::string host, int port, std::chrono::milliseconds timeout,
                  std::string session = {})
      : c10d::Store(timeout), host_(std::move(host)), port_(port), session_(std::move(session)) {
    std::lock_guard<std::mutex> lock(mutex_);
    connect(detail::store_wire::Clock::now() + timeout, /*retry=*/true);
  }

  /// Serves a store on `address`:`port` in this process (port 0: a free one) and connects to it.
  static c10::intrusive_ptr<RendezvousStore> serve(const std::string& address, int port,
                                                   std::chrono::milliseconds timeout,
                                                   const std::string& session = {}) {
    auto server = std::make_shared<StoreServer>(address, port, session);
    auto store = c10::make_intrusive<RendezvousStore>(address, server->port(), timeout, session);
    store->server_ = std::move(server);
    return store;
  }

  /// Closes the connection, then, when this process serves the store, stops the server.
  ~RendezvousStore() override {
    if (fd_ >= 0) ::close(fd_);
    server_.reset();  // after the client closed: the server's thread then stops
  }

  /// The port the store listens on (useful after serve(address, 0)).
  int port() const noexcept { return port_; }
  /// The store's host, as given.
  const std::string& host() const noexcept { return host_; }
  /// Whether this process serves the store.
  bool serving() const noexcept { return static_cast<bool>(server_); }

  /// Sets `key` to `value`. Every call throws StoreError on failure, or timed_out past the store's
  /// timeout.
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    using namespace detail::store_wire;
    std::string body(1, static_cast<char>(StoreOp::set));
    put_str(body, key);
    put_bytes(body, value.data(), value.size());
    request(body, "set('" + key + "')", timeout_);
  }

  /// The value of `key`, waiting until it is set (at most the store's timeout).
  std::vector<uint8_t> get(const std::string& key) override {
    using namespace detail::store_wire;
    std::string body(1, static_cast<char>(StoreOp::get));
    put_str(body, key);
    const auto reply = request(body, "get('" + key + "')", timeout_);
    Reader r{reply};
    return bytes(r, "get");
  }

  /// Adds `value` to the integer `key` holds (0 when absent) and returns the sum. A key that holds
  /// something else gets no answer: the call ends in StoreError (timed_out) at the timeout.
  int64_t add(const std::string& key, int64_t value) override {
    using namespace detail::store_wire;
    std::string body(1, static_cast<char>(StoreOp::add));
    put_str(body, key);
    put_i64(body, value);
    auto reply = request(body, "add('" + key + "')", timeout_);
    Reader r{reply};
    try {
      return r.i64();
    } catch (const Reader::Malformed&) {
      throw malformed("add");
    }
  }

  /// Sets `key` to `desired` if it holds `current` (or is absent and `current` is empty); returns
  /// the value it holds afterwards (`current` when absent and `current` is not empty).
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& current,
                                  const std::vector<uint8_t>& desired) override {
    using namespace detail::store_wire;
    std::string body(1, static_cast<char>(StoreOp::compare_set));
    put_str(body, key);
    put_bytes(body, current.data(), current.size());
    put_bytes(body, desired.data(), desired.size());
    auto reply = request(body, "compareSet('" + key + "')", timeout_);
    Reader r{reply};
    return bytes(r, "compareSet");
  }

  /// Removes `key`; false if it was absent.
  bool deleteKey(const std::string& key) override {
    using namespace detail::store_wire;
    std::string body(1, static_cast<char>(StoreOp::erase));
    put_str(body, key);
    return flag(request(body, "deleteKey('" + key + "')", timeout_), "deleteKey");
  }

  /// Whether every key of `keys` is set, without waiting.
  bool check(const std::vector<std::string>& keys) override {
    using namespace detail::store_wire;
    std::string body(1, static_cast<char>(StoreOp::check));
    put_u32(body, static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) put_str(body, k);
    return flag(request(body, "check", timeout_), "check");
  }

  /// Number of keys in the store.
  int64_t getNumKeys() override {
    using namespace detail::store_wire;
    std::string body(1, static_cast<char>(StoreOp::num_keys));
    auto reply = request(body, "getNumKeys", timeout_);
    Reader r{reply};
    try {
      return r.i64();
    } catch (const Reader::Malformed&) {
      throw malformed("getNumKeys");
    }
  }

  /// Waits until every key of `keys` is set, at most the store's timeout.
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  /// Waits until every key of `keys` is set, at most `timeout` (c10d::Store::kNoTimeout: no bound).
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    using namespace detail::store_wire;
    std::string body(1, static_cast<char>(StoreOp::wait));
    put_u32(body, static_cast<std::uint32_t>(keys.size()));
    std::string what = "wait(";
    for (std::size_t i = 0; i < keys.size(); ++i) {
      put_str(body, keys[i]);
      what += (i ? ", '" : "'") + keys[i] + "'";
    }
    request(body, what + ")", timeout);
  }

 private:
  using Clock = detail::store_wire::Clock;

  std::string where() const { return host_ + ":" + std::to_string(port_); }

  StoreError malformed(const char* op) const {
    return StoreError(StoreError::Kind::not_a_store, "mpp: the rendezvous store at " + where() +
                                                         " sent a malformed reply to " + op);
  }

  std::vector<uint8_t> bytes(detail::store_wire::Reader& r, const char* op) const {
    try {
      auto s = r.str();
      return std::vector<uint8_t>(s.begin(), s.end());
    } catch (const detail::store_wire::Reader::Malformed&) {
      throw malformed(op);
    }
  }

  bool flag(const std::string& reply, const char* op) const {
    if (reply.size() != 1) throw malformed(op);
    return reply[0] != 0;
  }

  void drop() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  enum class Greeting { ok, retry, not_a_store };

  /// Sends the greeting on a fresh connection. A server of another session, or one that hangs
  /// up, is being replaced (retry); anything else that is not this store's answer is not a store.
  Greeting greet(Clock::time_point deadline, std::string& reason) {
    using namespace detail::store_wire;
    std::string body(1, static_cast<char>(StoreOp::hello));
    put_str(body, magic);
    put_str(body, session_);
    std::string reply;
    try {
      reply = exchange(body, deadline, "hello");
    } catch (const StoreError& e) {
      reason = e.what();
      return e.kind() == StoreError::Kind::lost ? Greeting::retry : Greeting::not_a_store;
    }
    Reader r{reply};
    std::string_view answer;
    try {
      answer = r.str();
    } catch (const Reader::Malformed&) {
      reason = "a different program or version?";
      return Greeting::not_a_store;
    }
    const std::string other = std::string(magic) + " session ";
    if (answer == magic && r.data.empty()) return Greeting::ok;
    if (answer.substr(0, other.size()) == other) {
      reason = "it serves another session ('" + std::string(answer.substr(other.size())) +
               "'; this one is '" + session_ + "'), e.g. an earlier attempt of a restarted job";
      return Greeting::retry;
    }
    reason = "a different program or version?";
    return Greeting::not_a_store;
  }

  /// Opens the connection and exchanges the greeting. With `retry`, refused or unreachable
  /// attempts, and servers of another session, are retried until the deadline (the server may
  /// still be starting, or replacing the one of an earlier attempt).
  void connect(Clock::time_point deadline, bool retry) {
    std::string reason = "no attempt";
    auto pause = std::chrono::milliseconds(10);
    for (;;) {
      if (try_connect(deadline, reason)) {
        const Greeting greeting = greet(deadline, reason);
        if (greeting == Greeting::ok) return;
        drop();
        if (greeting == Greeting::not_a_store)
          throw StoreError(StoreError::Kind::not_a_store,
                           "mpp: something answers on " + where() +
                               " but not as mpp's rendezvous store (" + reason + ")");
      }
      if (!retry || Clock::now() + pause >= deadline)
        throw StoreError(
            StoreError::Kind::unreachable,
            "mpp: cannot connect to the rendezvous store at " + where() + ": " + reason);
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
  }

  bool try_connect(Clock::time_point deadline, std::string& reason) {
    using namespace detail::store_wire;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (int rc = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found);
        rc != 0) {
      reason = std::string("cannot resolve '") + host_ + "': " + ::gai_strerror(rc);
      return false;
    }
    for (addrinfo* a = found; a && fd_ < 0; a = a->ai_next) {
      int fd =
          ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) {
        reason = errno_text(errno);
        continue;
      }
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        rc = ::poll(&p, 1, std::max(1, ms_until(deadline)));
        int err = 0;
        socklen_t len = sizeof(err);
        if (rc == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
          rc = 0;
        } else {
          errno = rc == 0 ? ETIMEDOUT : err;
          rc = -1;
        }
      }
      if (rc != 0) {
        reason = errno_text(errno);
        ::close(fd);
        continue;
      }
      set_nodelay(fd);
      fd_ = fd;
    }
    ::freeaddrinfo(found);
    return fd_ >= 0;
  }

  /// Sends one request and returns the reply's body; bounded by `deadline`.
  std::string exchange(const std::string& body, Clock::time_point deadline,
                       const std::string& what) {
    using namespace detail::store_wire;
    const std::string out = frame(body);
    std::size_t sent = 0;
    while (sent < out.size()) {
      const ssize_t n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd_, POLLOUT, 0};
        if (::poll(&p, 1, std::max(1, ms_until(deadline))) == 0 && Clock::now() >= deadline)
          throw StoreError(StoreError::Kind::timed_out, what + " timed out while sending");
        continue;
      }
      throw StoreError(StoreError::Kind::lost, what + ": " + errno_text(errno));
    }
    std::string in;
    std::size_t need = 4;
    bool have_length = false;
    char buffer[64 * 1024];
    for (;;) {
      if (in.size() >= need) {
        if (have_length) return in.substr(4, need - 4);
        const std::uint32_t length = get_u32(in.data());
        if (length > max_frame)
          throw StoreError(StoreError::Kind::not_a_store,
                           what + ": reply of " + std::to_string(length) + " bytes");
        need = 4u + length;
        have_length = true;
        continue;
      }
      const ssize_t n = ::recv(fd_, buffer, std::min(sizeof(buffer), need - in.size()), 0);
      if (n > 0) {
        in.append(buffer, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0)
        throw StoreError(StoreError::Kind::lost, what + ": the store closed the connection");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        throw StoreError(StoreError::Kind::lost, what + ": " + errno_text(errno));
      pollfd p{fd_, POLLIN, 0};
      const int left = ms_until(deadline);
      if (left == 0 || ::poll(&p, 1, left) == 0) {
        if (Clock::now() >= deadline)
          throw StoreError(StoreError::Kind::timed_out, what + " timed out");
      }
    }
  }

  /// One request under the lock. A connection lost earlier is reopened once (no retry loop:
  /// a store that is gone must fail fast). After a timeout the connection is dropped, so that
  /// the late reply cannot be read as the answer to a later request.
  std::string request(const std::string& body, const std::string& what,
                      std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto deadline =
        timeout == c10d::Store::kNoTimeout ? Clock::time_point::max() : Clock::now() + timeout;
    if (fd_ < 0) connect(std::min(deadline, Clock::now() + timeout_), /*retry=*/false);
    try {
      return exchange(body, deadline, what);
    } catch (const StoreError& e) {
      drop();
      if (e.kind() == StoreError::Kind::timed_out)
        throw StoreError(StoreError::Kind::timed_out, "mpp: rendezvous store at " + where() + ": " +
                                                          e.what() + " after " +
                                                          std::to_string(timeout.count()) + " ms");
      if (e.kind() == StoreError::Kind::lost)
        throw StoreError(StoreError::Kind::lost,
                         "mpp: lost the rendezvous store at " + where() + " (" + e.what() +
                             "); the process serving it (rank 0) exited or crashed");
      throw StoreError(e.kind(), "mpp: rendezvous store at " + where() + ": " + e.what());
    }
  }

  std::string host_;
  int port_;
  std::string session_;
  int fd_ = -1;
  std::mutex mutex_;
  std::shared_ptr<StoreServer> server_;
};

}  // namespace mpp
