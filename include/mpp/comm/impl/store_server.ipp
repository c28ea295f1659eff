#pragma once
// The definitions of store_server.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/store_server.hpp"

namespace mpp {

StoreServer::StoreServer(const std::string& address, int port, std::string session)
    : session_(std::move(session)) {
  using namespace detail::store_wire;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0)
    throw StoreError(StoreError::Kind::cannot_serve,
                     "cannot resolve the store's address '" + address + "': " + ::gai_strerror(rc));
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

StoreServer::~StoreServer() {
  const char byte = 0;
  [[maybe_unused]] auto n = ::write(wake_[1], &byte, 1);
  if (thread_.joinable()) thread_.join();
  for (auto& c : connections_) ::close(c.fd);
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void StoreServer::run() {
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

void StoreServer::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a connection that died before it was taken
    detail::store_wire::set_nodelay(fd);
    connections_.push_back(Connection{});
    connections_.back().fd = fd;
  }
}

void StoreServer::receive(Connection& c) {
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

void StoreServer::reject(Connection& c) {
  c.discarding = true;
  c.in.clear();
  c.waiting_op = 0;
  c.waiting_keys.clear();
}

void StoreServer::handle_frames(Connection& c) {
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

void StoreServer::handle(Connection& c, detail::store_wire::Reader& r) {
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
        if (std::string_view(reinterpret_cast<const char*>(it->second.data()), it->second.size()) ==
            expected)
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

void StoreServer::answer_if_ready(Connection& c) {
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

void StoreServer::wake_waiters() {
  for (auto& other : connections_) {
    if (other.closing || other.waiting_op == 0) continue;
    answer_if_ready(other);
    if (other.waiting_op == 0) flush(other);
  }
}

void StoreServer::handle_queued() {
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

void StoreServer::flush(Connection& c) {
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

}  // namespace mpp
