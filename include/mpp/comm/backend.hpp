#pragma once
// Backend traits: how a backend tag (Gloo, Nccl) becomes a c10d process group. The rest of the
// comm layer talks to c10d::ProcessGroup, so a backend only has to say how to build one and
// which device its tensors live on. NCCL is compiled only with MPP_WITH_NCCL.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "mpp/comm/env.hpp"
#include "mpp/comm/error.hpp"
#include "mpp/comm/policy.hpp"
#include "mpp/comm/transport_threads.hpp"

#ifdef MPP_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace mpp {

namespace detail {

inline bool is_loopback_address(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

/// The local address this host uses to reach `host` (the kernel's route choice): connect() on a
/// UDP socket sends nothing but fixes the source address, which getsockname() then reports.
inline std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    throw CommError("init", 0,
                    "mpp: cannot resolve MASTER_ADDR='" + host + "': " + ::gai_strerror(rc) +
                        "; set MASTER_ADDR to a host name or address every rank can reach");
  std::string result;
  for (addrinfo* a = found; a && result.empty(); a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* addr =
          local.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (::inet_ntop(local.ss_family, addr, text, sizeof(text))) result = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (result.empty())
    throw CommError("init", 0,
                    "mpp: no network route from this host to MASTER_ADDR='" + host +
                        "'; check the address or name the interface with MPP_SOCKET_IFNAME");
  return result;
}

}  // namespace detail

/// Options shared by init and every operation of the groups it creates.
struct CommOptions {
  /// Deadline for joining the job (rendezvous + connecting to every peer).
  std::chrono::milliseconds init_timeout{std::chrono::seconds(60)};
  /// Deadline for every wait on a send, recv or collective.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// Network interface for Gloo across hosts (e.g. "eth0"); empty = the one that reaches
  /// MASTER_ADDR. Ignored when every rank is on one host (loopback is used).
  std::string interface;
  /// How the transport's own threads are scheduled (see TransportThreads).
  TransportThreads transport_threads = TransportThreads::batch;

  /// Defaults overridden by MPP_INIT_TIMEOUT_S, MPP_TIMEOUT_S, MPP_SOCKET_IFNAME (or Gloo's own
  /// GLOO_SOCKET_IFNAME) and MPP_TRANSPORT_THREADS.
  static CommOptions from_env() {
    CommOptions o;
    auto seconds = [](const char* name, std::chrono::milliseconds fallback) {
      const char* text = std::getenv(name);
      if (!text || !*text) return fallback;
      char* end = nullptr;
      double value = std::strtod(text, &end);
      if (end == text || *end != '\0' || !(value > 0))
        throw EnvironmentError(name, std::string("mpp: ") + name + "='" + text +
                                         "' is not a positive number of seconds");
      return std::chrono::milliseconds(static_cast<long long>(value * 1000));
    };
    o.init_timeout = seconds("MPP_INIT_TIMEOUT_S", o.init_timeout);
    o.timeout = seconds("MPP_TIMEOUT_S", o.timeout);
    for (const char* name : {"MPP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"})
      if (const char* v = std::getenv(name); v && *v && o.interface.empty()) o.interface = v;
    if (const char* v = std::getenv("MPP_TRANSPORT_THREADS"); v && *v) {
      const std::string text = v;
      bool known = false;
      for (const TransportThreads t : {TransportThreads::batch, TransportThreads::normal})
        if (text == to_string(t)) {
          o.transport_threads = t;
          known = true;
        }
      if (!known)
        throw EnvironmentError(
            "MPP_TRANSPORT_THREADS",
            "mpp: MPP_TRANSPORT_THREADS='" + text + "' is neither '" +
                to_string(TransportThreads::batch) + "' nor '" +
                to_string(TransportThreads::normal) + "'; unset it for the default (" +
                to_string(CommOptions{}.transport_threads) + ") or set it to one of the two");
    }
    return o;
  }
};

/// How backend tag B becomes a c10d process group: its `c10d_name`, the c10d `group_type`, the
/// Gloo `device()` to use and `make()`, which connects the group. Specialised per backend. A
/// backend that does a collective its own way says so here, and every group over it finds it
/// (detail::backend_ops): `all_gather_runs(pg, flat, runs)` and `reduce_scatter_runs(pg, flat,
/// runs, op)`, which returns no work for what it does not reduce itself. Without them a group
/// runs both through all-reduce.
template <comm_backend B>
struct backend_traits;

/// Gloo over TCP: loopback when every rank shares this host, otherwise a network interface.
template <>
struct backend_traits<Gloo> {
  /// The name c10d knows the backend by.
  static constexpr std::string_view c10d_name = "gloo";
  /// The c10d group make() returns (Group<Gloo>::backend_group()).
  using group_type = c10d::ProcessGroupGloo;
  /// Gloo's event loop writes a send once it has read the receiver's "ready to receive" note.
  static constexpr bool sends_need_transport_threads = true;

  /// Loopback when every rank shares this host; otherwise the interface named in the options,
  /// or the address this host uses to reach MASTER_ADDR.
  static std::shared_ptr<::gloo::transport::Device> device(const Environment& env,
                                                           const CommOptions& opts) {
    if (env.single_host() || detail::is_loopback_address(env.master_addr))
      return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
    if (!opts.interface.empty())
      return c10d::ProcessGroupGloo::createDeviceForInterface(opts.interface);
    return c10d::ProcessGroupGloo::createDeviceForHostname(
        detail::local_address_towards(env.master_addr, env.master_port));
  }

  /// Connects a Gloo group of `size` ranks through `store` over `device` (a collective: every rank
  /// calls it); `timeout` bounds its every wait. Two threads of Gloo run its collectives.
  static c10::intrusive_ptr<c10d::ProcessGroup> make(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const std::shared_ptr<::gloo::transport::Device>& device, std::chrono::milliseconds timeout) {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices = {device};
    options->threads = 2;  // collectives run on these; p2p uses the caller's thread
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  }
};

#ifdef MPP_WITH_NCCL
/// NCCL, only when mpp is built with MPP_WITH_NCCL.
template <>
struct backend_traits<Nccl> {
  /// The name c10d knows the backend by.
  static constexpr std::string_view c10d_name = "nccl";
  /// The c10d group make() returns (Group<Nccl>::backend_group()).
  using group_type = c10d::ProcessGroupNCCL;
  /// No Gloo device: NCCL picks its own transport.
  static std::shared_ptr<::gloo::transport::Device> device(const Environment&, const CommOptions&) {
    return nullptr;
  }
  /// Connects an NCCL group of `size` ranks through `store`, with `timeout` as NCCL's timeout; the
  /// device argument is unused.
  static c10::intrusive_ptr<c10d::ProcessGroup> make(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const std::shared_ptr<::gloo::transport::Device>&, std::chrono::milliseconds timeout) {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  }
};
#endif

}  // namespace mpp
