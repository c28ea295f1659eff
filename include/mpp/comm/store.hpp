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
// Protocol, every integer little-endian:
//   frame    = u32 length, then `length` bytes: u8 opcode, then the fields of the opcode
//   string   = u32 length, then the bytes            int64 = 8 bytes
//   requests : hello(magic, session) set(key, value) get(key) add(key, int64)
//              compare_set(key, old, new)
//              check(n, keys...) wait(n, keys...) delete(key) num_keys()
//   replies  : the same framing; hello echoes the magic, get/compare_set return a value,
//              add/num_keys an int64, check/delete one byte, set/wait an empty frame.
// The first frame of a connection must be `hello` with the magic and the session the client
// belongs to (e.g. the attempt of a restarted job); a server of another session answers with its
// own session and no more, so that a rank never meets the still-running store of an earlier
// attempt (the client retries until that one is gone and the new one serves). get and wait are
// answered only
// once their keys exist (the client bounds its own wait and drops the connection on expiry, so a
// late answer can never be mistaken for the reply to a later request).
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

namespace mpp {

/// A failure of the rendezvous store, with what kind it is so that callers can word their own
/// message (init says "rank 0 is not running", a collective's census says "rank 0 is gone").
class StoreError : public std::runtime_error {
 public:
  /// What failed.
  enum class Kind {
    unreachable,  ///< nothing accepted the connection before the deadline
    not_a_store,  ///< something accepted but did not answer like this store (another program?)
    timed_out,    ///< the keys did not appear in time
    lost,         ///< the connection broke (the serving process exited or crashed)
    cannot_serve  ///< the server could not listen on its address and port
  };
  /// `message` is what what() returns.
  StoreError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  /// What failed, for the caller's own wording.
  Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
};

namespace detail::store_wire {

enum StoreOp : std::uint8_t {
  hello = 1,
  set = 2,
  get = 3,
  add = 4,
  compare_set = 5,
  check = 6,
  wait = 7,
  erase = 8,
  num_keys = 9
};

inline constexpr std::string_view magic = "mpp-store/1";
/// Largest frame accepted (values are addresses and small records; this bounds what one
/// connection can make the server buffer).
inline constexpr std::uint32_t max_frame = 64u << 20;

using Clock = std::chrono::steady_clock;

inline void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_i64(std::string& out, std::int64_t value) {
  const auto v = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_bytes(std::string& out, const void* data, std::size_t n) {
  put_u32(out, static_cast<std::uint32_t>(n));
  out.append(static_cast<const char*>(data), n);
}
inline void put_str(std::string& out, std::string_view s) { put_bytes(out, s.data(), s.size()); }
inline std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

/// Reads the fields of one frame; any overrun means the peer sent garbage.
struct Reader {
  std::string_view data;
  struct Malformed {};

  std::string_view take(std::size_t n) {
    if (data.size() < n) throw Malformed{};
    auto s = data.substr(0, n);
    data.remove_prefix(n);
    return s;
  }
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::uint32_t u32() { return get_u32(take(4).data()); }
  std::int64_t i64() {
    auto s = take(8);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
    return static_cast<std::int64_t>(v);
  }
  std::string_view str() { return take(u32()); }
};

/// Wraps a frame body with its length prefix.
inline std::string frame(const std::string& body) {
  std::string out;
  out.reserve(body.size() + 4);
  put_u32(out, static_cast<std::uint32_t>(body.size()));
  out += body;
  return out;
}

inline std::string errno_text(int err) { return std::strerror(err); }

inline void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }
inline void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

inline int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, 60'000));
}

}  // namespace detail::store_wire

/// The server: a key-value map served on one address by a thread. Owned by the rank that hosts
/// the store (through the RendezvousStore that serve() returns).
class StoreServer {
 public:
  /// Listens on `address`:`port` (port 0: a free one, see port()). Throws StoreError
  /// (cannot_serve) naming the address and the system's reason.
  StoreServer(const std::string& address, int port, std::string session = {})
      : session_(std::move(session)) {
    using namespace detail::store_wire;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    if (int rc = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found);
        rc != 0)
      throw StoreError(StoreError::Kind::cannot_serve, "cannot resolve the store's address '" +
                                                           address + "': " + ::gai_strerror(rc));
    std::string reason = "no usable address";
    for (addrinfo* a = found; a && listen_fd_ < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        reason = errno_text(errno);
        continue;
      }
      int one = 1;
      // A restarted job meets again on the same port at once (no TIME_WAIT delay).
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
        reason = errno_text(errno);
        ::close(fd);
        continue;
      }
      listen_fd_ = fd;
    }
    ::freeaddrinfo(found);
    if (listen_fd_ < 0)
      throw StoreError(StoreError::Kind::cannot_serve,
                       "cannot listen on " + address + ":" + std::to_string(port) + ": " + reason);
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    address_ = address;
    set_nonblocking(listen_fd_);
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      ::close(listen_fd_);
      throw StoreError(StoreError::Kind::cannot_serve,
                       "cannot create the store's wake-up pipe: " + errno_text(errno));
    }
    thread_ = std::thread([this] { run(); });
  }

  /// Not copyable: it owns the socket and the serving thread.
  StoreServer(const StoreServer&) = delete;
  /// Not copyable: it owns the socket and the serving thread.
  StoreServer& operator=(const StoreServer&) = delete;

  /// Stops the serving thread and closes every connection.
  ~StoreServer() {
    const char byte = 0;
    [[maybe_unused]] auto n = ::write(wake_[1], &byte, 1);
    if (thread_.joinable()) thread_.join();
    for (auto& c : connections_) ::close(c.fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  /// The port it listens on (the one chosen when constructed with port 0).
  int port() const noexcept { return port_; }
  /// The address it listens on, as given.
  const std::string& address() const noexcept { return address_; }

 private:
  struct Connection {
    int fd = -1;
    std::string in;   // received, not yet handled
    std::string out;  // reply bytes not yet sent
    bool greeted = false;
    bool closing = false;
    // Sent something that is not this protocol: what it still sends is read and dropped until it
    // hangs up (closing at once, with its bytes unread, would reset the connection under it).
    bool discarding = false;
    std::size_t discarded = 0;
    // A get/wait that waits for keys to appear (at most one per connection: a client sends its
    // next request only after the reply).
    std::uint8_t waiting_op = 0;
    std::vector<std::string> waiting_keys;
  };

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (auto& c : connections_)
        fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;  // destructor: stop
      if (fds[1].revents & POLLIN) accept_all();
      std::size_t i = 2;
      for (auto& c : connections_) {
        if (i >= fds.size()) break;  // accepted during this round: polled next time
        const short ev = fds[i++].revents;
        if (ev & (POLLIN | POLLHUP | POLLERR)) receive(c);
        if (!c.closing && (ev & POLLOUT)) flush(c);
      }
      handle_queued();
      connections_.remove_if([](const Connection& c) {
        if (c.closing) ::close(c.fd);
        return c.closing;
      });
    }
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that died before it was taken
      detail::store_wire::set_nodelay(fd);
      connections_.push_back(Connection{});
      connections_.back().fd = fd;
    }
  }

  void receive(Connection& c) {
    char buffer[64 * 1024];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), 0);
      if (n > 0 && c.discarding) {
        c.discarded += static_cast<std::size_t>(n);
        if (c.discarded > detail::store_wire::max_frame) c.closing = true;
        if (c.closing) return;
        continue;
      }
      if (n > 0) {
        c.in.append(buffer, static_cast<std::size_t>(n));
        if (c.in.size() > detail::store_wire::max_frame + 4u) {
          c.closing = true;  // more than one frame's worth while a request waits: not a client
          return;
        }
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        c.closing = true;  // the client hung up (or reset): forget it and its wait
        return;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    }
    handle_frames(c);
    flush(c);
  }

  static void reject(Connection& c) {
    c.discarding = true;
    c.in.clear();
    c.waiting_op = 0;
    c.waiting_keys.clear();
  }

  void handle_frames(Connection& c) {
    using namespace detail::store_wire;
    while (!c.closing && !c.discarding && c.waiting_op == 0 && c.in.size() >= 4) {
      const std::uint32_t length = get_u32(c.in.data());
      constexpr std::uint32_t max_hello = 1024;
      if (length == 0 || length > max_frame || (!c.greeted && length > max_hello)) {
        reject(c);
        return;
      }
      if (c.in.size() < 4u + length) return;
      Reader r{std::string_view(c.in).substr(4, length)};
      try {
        handle(c, r);
      } catch (const Reader::Malformed&) {
        reject(c);
        return;
      }
      c.in.erase(0, 4u + length);
    }
  }

  static std::string to_string(std::string_view s) { return std::string(s); }

  void handle(Connection& c, detail::store_wire::Reader& r) {
    using namespace detail::store_wire;
    const std::uint8_t op = r.u8();
    if (!c.greeted) {
      if (op != hello || r.str() != magic) throw Reader::Malformed{};
      const auto session = r.str();
      if (!r.data.empty()) throw Reader::Malformed{};
      std::string body;
      if (session != session_) {
        put_str(body, std::string(magic) + " session " + session_);
        c.out += frame(body);
        flush(c);
        reject(c);
        return;
      }
      c.greeted = true;
      put_str(body, magic);
      c.out += frame(body);
      return;
    }
    std::string body;
    switch (op) {
      case set: {
        auto key = to_string(r.str());
        auto value = r.str();
        map_[key].assign(value.begin(), value.end());
        break;
      }
      case get:
      case wait: {
        std::vector<std::string> keys;
        if (op == get) {
          keys.push_back(to_string(r.str()));
        } else {
          const std::uint32_t n = r.u32();
          if (n > r.data.size() / 4) throw Reader::Malformed{};
          for (std::uint32_t k = 0; k < n; ++k) keys.push_back(to_string(r.str()));
        }
        if (!r.data.empty()) throw Reader::Malformed{};
        c.waiting_op = op;
        c.waiting_keys = std::move(keys);
        answer_if_ready(c);
        return;
      }
      case add: {
        auto key = to_string(r.str());
        const std::int64_t delta = r.i64();
        auto& slot = map_[key];
        std::int64_t value = 0;
        if (!slot.empty()) {
          try {
            value = std::stoll(std::string(slot.begin(), slot.end()));
          } catch (const std::exception&) {
            throw Reader::Malformed{};  // add on a key that does not hold a number
          }
        }
        value += delta;
        const std::string text = std::to_string(value);
        slot.assign(text.begin(), text.end());
        put_i64(body, value);
        break;
      }
      case compare_set: {
        // c10d's semantics: set `new` if the key holds `old` (or is absent and `old` is empty);
        // reply with the value the key holds afterwards (`old` when absent and `old` non-empty).
        auto key = to_string(r.str());
        auto expected = r.str();
        auto desired = r.str();
        auto it = map_.find(key);
        if (it == map_.end()) {
          if (expected.empty()) {
            map_[key].assign(desired.begin(), desired.end());
            put_str(body, desired);
          } else {
            put_str(body, expected);
          }
        } else {
          if (std::string_view(reinterpret_cast<const char*>(it->second.data()),
                               it->second.size()) == expected)
            it->second.assign(desired.begin(), desired.end());
          put_bytes(body, it->second.data(), it->second.size());
        }
        break;
      }
      case check: {
        const std::uint32_t n = r.u32();
        if (n > r.data.size() / 4) throw Reader::Malformed{};
        bool all = true;
        for (std::uint32_t k = 0; k < n; ++k) all = map_.count(to_string(r.str())) > 0 && all;
        body.push_back(all ? 1 : 0);
        break;
      }
      case erase:
        body.push_back(map_.erase(to_string(r.str())) > 0 ? 1 : 0);
        break;
      case num_keys:
        put_i64(body, static_cast<std::int64_t>(map_.size()));
        break;
      default:
        throw Reader::Malformed{};
    }
    if (!r.data.empty()) throw Reader::Malformed{};
    c.out += frame(body);
    if (op == set || op == add || op == compare_set) wake_waiters();
  }

  void answer_if_ready(Connection& c) {
    using namespace detail::store_wire;
    for (const auto& k : c.waiting_keys)
      if (!map_.count(k)) return;
    std::string body;
    if (c.waiting_op == get) {
      const auto& v = map_[c.waiting_keys.front()];
      put_bytes(body, v.data(), v.size());
    }
    c.out += frame(body);
    c.waiting_op = 0;
    c.waiting_keys.clear();
  }

  void wake_waiters() {
    for (auto& other : connections_) {
      if (other.closing || other.waiting_op == 0) continue;
      answer_if_ready(other);
      if (other.waiting_op == 0) flush(other);
    }
  }

  /// Requests queued behind a wait that has since been answered (a client that does not wait
  /// for its replies): handled until nothing moves.
  void handle_queued() {
    for (bool progress = true; progress;) {
      progress = false;
      for (auto& c : connections_) {
        if (c.closing || c.discarding || c.waiting_op != 0 || c.in.size() < 4) continue;
        const std::size_t before = c.in.size();
        handle_frames(c);
        flush(c);
        progress = progress || c.in.size() != before;
      }
    }
  }

  static void flush(Connection& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out.erase(0, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      c.closing = true;
      return;
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::string address_;
  std::string session_;
  int wake_[2] = {-1, -1};
  std::list<Connection> connections_;  // a list: wake_waiters() touches others while one is handled
  std::unordered_map<std::string, std::vector<std::uint8_t>> map_;
  std::thread thread_;
};

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
