#pragma once
// The definitions of store.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/store.hpp"

namespace mpp {

RendezvousStore::RendezvousStore(std::string host, int port, std::chrono::milliseconds timeout,
                                 std::string session)
    : c10d::Store(timeout), host_(std::move(host)), port_(port), session_(std::move(session)) {
  std::lock_guard<std::mutex> lock(mutex_);
  connect(detail::store_wire::Clock::now() + timeout, /*retry=*/true);
}

c10::intrusive_ptr<RendezvousStore> RendezvousStore::serve(const std::string& address, int port,
                                                           std::chrono::milliseconds timeout,
                                                           const std::string& session) {
  auto server = std::make_shared<StoreServer>(address, port, session);
  auto store = c10::make_intrusive<RendezvousStore>(address, server->port(), timeout, session);
  store->server_ = std::move(server);
  return store;
}

RendezvousStore::~RendezvousStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();  // after the client closed: the server's thread then stops
}

void RendezvousStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  using namespace detail::store_wire;
  std::string body(1, static_cast<char>(StoreOp::set));
  put_str(body, key);
  put_bytes(body, value.data(), value.size());
  request(body, "set('" + key + "')", timeout_);
}

std::vector<uint8_t> RendezvousStore::get(const std::string& key) {
  using namespace detail::store_wire;
  std::string body(1, static_cast<char>(StoreOp::get));
  put_str(body, key);
  const auto reply = request(body, "get('" + key + "')", timeout_);
  Reader r{reply};
  return bytes(r, "get");
}

int64_t RendezvousStore::add(const std::string& key, int64_t value) {
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

std::vector<uint8_t> RendezvousStore::compareSet(const std::string& key,
                                                 const std::vector<uint8_t>& current,
                                                 const std::vector<uint8_t>& desired) {
  using namespace detail::store_wire;
  std::string body(1, static_cast<char>(StoreOp::compare_set));
  put_str(body, key);
  put_bytes(body, current.data(), current.size());
  put_bytes(body, desired.data(), desired.size());
  auto reply = request(body, "compareSet('" + key + "')", timeout_);
  Reader r{reply};
  return bytes(r, "compareSet");
}

bool RendezvousStore::deleteKey(const std::string& key) {
  using namespace detail::store_wire;
  std::string body(1, static_cast<char>(StoreOp::erase));
  put_str(body, key);
  return flag(request(body, "deleteKey('" + key + "')", timeout_), "deleteKey");
}

bool RendezvousStore::check(const std::vector<std::string>& keys) {
  using namespace detail::store_wire;
  std::string body(1, static_cast<char>(StoreOp::check));
  put_u32(body, static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) put_str(body, k);
  return flag(request(body, "check", timeout_), "check");
}

int64_t RendezvousStore::getNumKeys() {
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

void RendezvousStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
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

StoreError RendezvousStore::malformed(const char* op) const {
  return StoreError(StoreError::Kind::not_a_store,
                    "mpp: the rendezvous store at " + where() + " sent a malformed reply to " + op);
}

std::vector<uint8_t> RendezvousStore::bytes(detail::store_wire::Reader& r, const char* op) const {
  try {
    auto s = r.str();
    return std::vector<uint8_t>(s.begin(), s.end());
  } catch (const detail::store_wire::Reader::Malformed&) {
    throw malformed(op);
  }
}

bool RendezvousStore::flag(const std::string& reply, const char* op) const {
  if (reply.size() != 1) throw malformed(op);
  return reply[0] != 0;
}

void RendezvousStore::drop() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

RendezvousStore::Greeting RendezvousStore::greet(Clock::time_point deadline, std::string& reason) {
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

void RendezvousStore::connect(Clock::time_point deadline, bool retry) {
  std::string reason = "no attempt";
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    if (try_connect(deadline, reason)) {
      const Greeting greeting = greet(deadline, reason);
      if (greeting == Greeting::ok) return;
      drop();
      if (greeting == Greeting::not_a_store)
        throw StoreError(StoreError::Kind::not_a_store, "mpp: something answers on " + where() +
                                                            " but not as mpp's rendezvous store (" +
                                                            reason + ")");
    }
    if (!retry || Clock::now() + pause >= deadline)
      throw StoreError(StoreError::Kind::unreachable,
                       "mpp: cannot connect to the rendezvous store at " + where() + ": " + reason);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

bool RendezvousStore::try_connect(Clock::time_point deadline, std::string& reason) {
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
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
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

std::string RendezvousStore::exchange(const std::string& body, Clock::time_point deadline,
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

std::string RendezvousStore::request(const std::string& body, const std::string& what,
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

}  // namespace mpp
