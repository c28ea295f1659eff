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
#include "mpp/config.hpp"
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
  MPP_DECL RendezvousStore(std::string host, int port, std::chrono::milliseconds timeout,
                           std::string session = {});

  /// Serves a store on `address`:`port` in this process (port 0: a free one) and connects to it.
  MPP_DECL static c10::intrusive_ptr<RendezvousStore> serve(const std::string& address, int port,
                                                            std::chrono::milliseconds timeout,
                                                            const std::string& session = {});

  /// Closes the connection, then, when this process serves the store, stops the server.
  MPP_DECL ~RendezvousStore() override;

  /// The port the store listens on (useful after serve(address, 0)).
  int port() const noexcept { return port_; }
  /// The store's host, as given.
  const std::string& host() const noexcept { return host_; }
  /// Whether this process serves the store.
  bool serving() const noexcept { return static_cast<bool>(server_); }

  /// Sets `key` to `value`. Every call throws StoreError on failure, or timed_out past the store's
  /// timeout.
  MPP_DECL void set(const std::string& key, const std::vector<uint8_t>& value) override;

  /// The value of `key`, waiting until it is set (at most the store's timeout).
  MPP_DECL std::vector<uint8_t> get(const std::string& key) override;

  /// Adds `value` to the integer `key` holds (0 when absent) and returns the sum. A key that holds
  /// something else gets no answer: the call ends in StoreError (timed_out) at the timeout.
  MPP_DECL int64_t add(const std::string& key, int64_t value) override;

  /// Sets `key` to `desired` if it holds `current` (or is absent and `current` is empty); returns
  /// the value it holds afterwards (`current` when absent and `current` is not empty).
  MPP_DECL std::vector<uint8_t> compareSet(const std::string& key,
                                           const std::vector<uint8_t>& current,
                                           const std::vector<uint8_t>& desired) override;

  /// Removes `key`; false if it was absent.
  MPP_DECL bool deleteKey(const std::string& key) override;

  /// Whether every key of `keys` is set, without waiting.
  MPP_DECL bool check(const std::vector<std::string>& keys) override;

  /// Number of keys in the store.
  MPP_DECL int64_t getNumKeys() override;

  /// Waits until every key of `keys` is set, at most the store's timeout.
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  /// Waits until every key of `keys` is set, at most `timeout` (c10d::Store::kNoTimeout: no bound).
  MPP_DECL void wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) override;

 private:
  using Clock = detail::store_wire::Clock;

  std::string where() const { return host_ + ":" + std::to_string(port_); }

  MPP_DECL StoreError malformed(const char* op) const;

  MPP_DECL std::vector<uint8_t> bytes(detail::store_wire::Reader& r, const char* op) const;

  MPP_DECL bool flag(const std::string& reply, const char* op) const;

  MPP_DECL void drop();

  enum class Greeting { ok, retry, not_a_store };

  /// Sends the greeting on a fresh connection. A server of another session, or one that hangs
  /// up, is being replaced (retry); anything else that is not this store's answer is not a store.
  MPP_DECL Greeting greet(Clock::time_point deadline, std::string& reason);

  /// Opens the connection and exchanges the greeting. With `retry`, refused or unreachable
  /// attempts, and servers of another session, are retried until the deadline (the server may
  /// still be starting, or replacing the one of an earlier attempt).
  MPP_DECL void connect(Clock::time_point deadline, bool retry);

  MPP_DECL bool try_connect(Clock::time_point deadline, std::string& reason);

  /// Sends one request and returns the reply's body; bounded by `deadline`.
  MPP_DECL std::string exchange(const std::string& body, Clock::time_point deadline,
                                const std::string& what);

  /// One request under the lock. A connection lost earlier is reopened once (no retry loop:
  /// a store that is gone must fail fast). After a timeout the connection is dropped, so that
  /// the late reply cannot be read as the answer to a later request.
  MPP_DECL std::string request(const std::string& body, const std::string& what,
                               std::chrono::milliseconds timeout);

  std::string host_;
  int port_;
  std::string session_;
  int fd_ = -1;
  std::mutex mutex_;
  std::shared_ptr<StoreServer> server_;
};

}  // namespace mpp

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/store.ipp"
#endif
