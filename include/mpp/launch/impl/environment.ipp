#pragma once
// The definitions of environment.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/launch/environment.hpp"

namespace mpp::launch {

[[nodiscard]] int WorldLayout::global_rank(int local_rank) const {
  return node_rank * nproc_per_node + local_rank;
}

MPP_DECL void validate(const WorldLayout& layout) {
  auto fail = [](const std::string& what) { throw LaunchError("mpp launch: " + what); };
  if (layout.nproc_per_node < 1)
    fail("--nproc-per-node must be at least 1 (got " + std::to_string(layout.nproc_per_node) + ")");
  if (layout.nnodes < 1)
    fail("--nnodes must be at least 1 (got " + std::to_string(layout.nnodes) + ")");
  if (layout.node_rank < 0 || layout.node_rank >= layout.nnodes)
    fail("--node-rank must be in [0, nnodes) (got " + std::to_string(layout.node_rank) + " with " +
         std::to_string(layout.nnodes) + " nodes)");
  if (layout.master_port < 0 || layout.master_port > 65535)
    fail("--master-port must be in [1, 65535] (got " + std::to_string(layout.master_port) + ")");
  if (layout.nnodes > 1 && layout.master_port == 0)
    fail(
        "--master-port is required with --nnodes > 1: every node must use the same port; "
        "pick one that is free on the master host");
  if (layout.nnodes > 1 && layout.master_addr.empty())
    fail("--master-addr is required with --nnodes > 1: give the address of node 0");
  if (layout.master_addr.empty()) fail("--master-addr must not be empty");
}

MPP_DECL int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw LaunchError(std::string("mpp launch: socket() failed while looking for a free port: ") +
                      std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok)
    throw LaunchError(std::string("mpp launch: no free TCP port found (") + std::strerror(saved) +
                      "); pass --master-port explicitly");
  return ntohs(address.sin_port);
}

MPP_DECL EnvList rank_environment(const WorldLayout& layout, int local_rank, int restart_count,
                                  int max_restarts) {
  const auto str = [](int value) { return std::to_string(value); };
  return {
      {"RANK", str(layout.global_rank(local_rank))},
      {"WORLD_SIZE", str(layout.world_size())},
      {"LOCAL_RANK", str(local_rank)},
      {"LOCAL_WORLD_SIZE", str(layout.nproc_per_node)},
      {"GROUP_RANK", str(layout.node_rank)},
      {"NODE_RANK", str(layout.node_rank)},
      {"GROUP_WORLD_SIZE", str(layout.nnodes)},
      {"ROLE_RANK", str(layout.global_rank(local_rank))},
      {"ROLE_WORLD_SIZE", str(layout.world_size())},
      {"MASTER_ADDR", layout.master_addr},
      {"MASTER_PORT", str(layout.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", str(restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", str(max_restarts)},
  };
}

}  // namespace mpp::launch
