#pragma once
// Where each rank started by one launcher sits in the job, and the variables that tell it so.
// The names and their meaning are torchrun's, so that a binary launched by mpprun also runs
// under `torchrun --no_python` (and, through the comm layer, under srun and mpirun).
// Standard library and POSIX only: no LibTorch.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mpp/config.hpp"
#include "mpp/error.hpp"

namespace mpp::launch {

/// Every launcher error says what was wrong and how to launch correctly.
class LaunchError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

/// Environment variables as (name, value) pairs, in order.
using EnvList = std::vector<std::pair<std::string, std::string>>;

/// The shape of the job as torchrun describes it: `nnodes` hosts, `nproc_per_node` ranks each.
struct WorldLayout {
  int nproc_per_node = 1;  ///< Ranks on each node (>= 1).
  int nnodes = 1;          ///< Nodes (>= 1).
  int node_rank = 0;       ///< This node's index, 0 .. nnodes - 1.
  /// Where rank 0's rendezvous store listens (node 0's address).
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  ///< 0: pick a free port (only on a single node)

  /// All ranks of the job: nproc_per_node * nnodes.
  [[nodiscard]] int world_size() const { return nproc_per_node * nnodes; }
  /// The job-wide rank of local rank `local_rank` on this node.
  [[nodiscard]] MPP_DECL int global_rank(int local_rank) const;
};

/// Throws LaunchError naming the rule and the fix when the layout cannot describe a job.
MPP_DECL void validate(const WorldLayout& layout);

/// A TCP port that was free a moment ago on every interface. Like torchrun, there is a window in
/// which another process may take it; the rendezvous then fails loudly at bind time.
MPP_DECL int free_port();

/// The torchrun variables for one local rank; `layout.master_port` must already be resolved.
MPP_DECL EnvList rank_environment(const WorldLayout& layout, int local_rank, int restart_count = 0,
                                  int max_restarts = 0);

}  // namespace mpp::launch

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/launch/impl/environment.ipp"
#endif
