#pragma once
// The rendezvous store's server: a key-value map served by a thread of the rank that hosts the
// store, on exactly one address (store.hpp says why), speaking store_wire.hpp's protocol.
// Malformed input (garbage, absurd lengths, a client that hangs up mid-request) ends that one
// connection -- nothing is answered on it any more -- and nothing else.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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
#include "mpp/comm/store_wire.hpp"
#include "mpp/config.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// The server: a key-value map served on one address by a thread. Owned by the rank that hosts
/// the store (through the RendezvousStore that serve() returns).
class StoreServer {
 public:
  /// Listens on `address`:`port` (port 0: a free one, see port()). Throws StoreError
  /// (cannot_serve) naming the address and the system's reason.
  MPP_DECL StoreServer(const std::string& address, int port, std::string session = {});

  /// Not copyable: it owns the socket and the serving thread.
  StoreServer(const StoreServer&) = delete;
  /// Not copyable: it owns the socket and the serving thread.
  StoreServer& operator=(const StoreServer&) = delete;

  /// Stops the serving thread and closes every connection.
  MPP_DECL ~StoreServer();

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

  MPP_DECL void run();

  MPP_DECL void accept_all();

  MPP_DECL void receive(Connection& c);

  MPP_DECL static void reject(Connection& c);

  MPP_DECL void handle_frames(Connection& c);

  static std::string to_string(std::string_view s) { return std::string(s); }

  MPP_DECL void handle(Connection& c, detail::store_wire::Reader& r);

  MPP_DECL void answer_if_ready(Connection& c);

  MPP_DECL void wake_waiters();

  /// Requests queued behind a wait that has since been answered (a client that does not wait
  /// for its replies): handled until nothing moves.
  MPP_DECL void handle_queued();

  MPP_DECL static void flush(Connection& c);

  int listen_fd_ = -1;
  int port_ = 0;
  std::string address_;
  std::string session_;
  int wake_[2] = {-1, -1};
  std::list<Connection> connections_;  // a list: wake_waiters() touches others while one is handled
  std::unordered_map<std::string, std::vector<std::uint8_t>> map_;
  std::thread thread_;
};

}  // namespace mpp

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/store_server.ipp"
#endif
