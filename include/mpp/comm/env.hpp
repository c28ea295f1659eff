#pragma once
// Where a rank learns who it is: the variables its launcher exported. Three launchers are
// understood, in this order of precedence (the first whose rank variable is present wins, so
// torchrun started by srun still reads torchrun's per-process values):
//   torchrun / mpprun : RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK or NODE_RANK
//   Open MPI (mpirun) : OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   SLURM (srun)      : SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//   SLURM_TASKS_PER_NODE
// and, for every launcher, MASTER_ADDR / MASTER_PORT: where rank 0 hosts the rendezvous store.
// Torch-free on purpose: parsing is plain text and is tested without processes.
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mpp/comm/error.hpp"
#include "mpp/config.hpp"

namespace mpp {

/// The launcher whose variables described the job.
enum class Launcher {
  single,    ///< none: the default of Environment{} (parse_environment() requires a launcher)
  torchrun,  ///< torchrun or mpprun: RANK, WORLD_SIZE, LOCAL_RANK, ...
  open_mpi,  ///< Open MPI's mpirun: OMPI_COMM_WORLD_RANK, ...
  slurm      ///< SLURM's srun: SLURM_PROCID, SLURM_NTASKS, ...
};

/// The launcher's name in messages ("torchrun/mpprun", "SLURM", ...).
constexpr std::string_view launcher_name(Launcher l) {
  switch (l) {
    case Launcher::single:
      return "single process";
    case Launcher::torchrun:
      return "torchrun/mpprun";
    case Launcher::open_mpi:
      return "Open MPI";
    case Launcher::slurm:
      return "SLURM";
  }
  return "?";
}

/// One rank's place in the job, as its launcher described it.
struct Environment {
  int rank = 0;                           ///< global rank, in [0, world_size)
  int world_size = 1;                     ///< number of ranks in the job
  int local_rank = 0;                     ///< rank among the processes of this host
  int local_world_size = 1;               ///< processes on this host
  int node_rank = 0;                      ///< which host (node) this is, in [0, nodes)
  std::string master_addr = "127.0.0.1";  ///< host of rank 0, which serves the rendezvous store
  int master_port = 29500;                ///< port of the rendezvous store on master_addr
  Launcher launcher = Launcher::single;   ///< whose variables these values come from

  /// All ranks share this host: the process group can stay on loopback.
  bool single_host() const { return local_world_size == world_size; }
};

namespace detail {

inline constexpr std::string_view launch_hint =
    "start every rank through a launcher, e.g. `mpprun --nproc-per-node 2 <program>` "
    "(or `torchrun --no_python --nproc-per-node 2 <program>`, `srun`, `mpirun`)";

template <class Lookup>
std::optional<std::string> lookup_nonempty(Lookup& get, std::string_view name) {
  std::optional<std::string> value = get(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

MPP_DECL int parse_int(std::string_view name, const std::string& text, int min_value);

template <class Lookup>
std::optional<int> read_int(Lookup& get, std::string_view name, int min_value) {
  auto text = lookup_nonempty(get, name);
  if (!text) return std::nullopt;
  return parse_int(name, *text, min_value);
}

template <class Lookup>
int require_int(Lookup& get, std::string_view name, std::string_view because, int min_value) {
  auto value = read_int(get, name, min_value);
  if (!value)
    throw EnvironmentError(std::string(name), "mpp: " + std::string(name) + " is not set but " +
                                                  std::string(because) + "; " +
                                                  std::string(launch_hint));
  return *value;
}

/// Tasks on node `node` from SLURM's compressed list, e.g. "2(x3),1" = 2,2,2,1.
MPP_DECL std::optional<int> slurm_tasks_on_node(const std::string& list, int node);

MPP_DECL void check_range(std::string_view name, int value, std::string_view bound_name, int bound,
                          std::string_view why);

}  // namespace detail

/// Reads the environment through `get(name) -> std::optional<std::string>` (testable with a map).
/// Throws EnvironmentError naming the variable and how to launch when something is missing or
/// contradictory.
template <class Lookup>
Environment parse_environment(Lookup get) {
  using detail::check_range;
  using detail::lookup_nonempty;
  using detail::read_int;
  using detail::require_int;
  Environment env;

  const bool has_torchrun = lookup_nonempty(get, "RANK") || lookup_nonempty(get, "WORLD_SIZE");
  const bool has_ompi =
      lookup_nonempty(get, "OMPI_COMM_WORLD_RANK") || lookup_nonempty(get, "OMPI_COMM_WORLD_SIZE");
  const bool has_slurm = lookup_nonempty(get, "SLURM_PROCID").has_value();

  std::string rank_var, size_var, local_rank_var, local_size_var;
  if (has_torchrun) {
    env.launcher = Launcher::torchrun;
    rank_var = "RANK", size_var = "WORLD_SIZE";
    local_rank_var = "LOCAL_RANK", local_size_var = "LOCAL_WORLD_SIZE";
  } else if (has_ompi) {
    env.launcher = Launcher::open_mpi;
    rank_var = "OMPI_COMM_WORLD_RANK", size_var = "OMPI_COMM_WORLD_SIZE";
    local_rank_var = "OMPI_COMM_WORLD_LOCAL_RANK", local_size_var = "OMPI_COMM_WORLD_LOCAL_SIZE";
  } else if (has_slurm) {
    env.launcher = Launcher::slurm;
    rank_var = "SLURM_PROCID", size_var = "SLURM_NTASKS";
    local_rank_var = "SLURM_LOCALID", local_size_var = "";
  } else {
    throw EnvironmentError(
        "RANK",
        "mpp: RANK and WORLD_SIZE are not set (nor SLURM_PROCID/SLURM_NTASKS or "
        "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE), so this process does not know its place in "
        "the job; " +
            std::string(detail::launch_hint));
  }
  const std::string from =
      " (read from " + std::string(launcher_name(env.launcher)) + " variables)";

  env.world_size = require_int(get, size_var, rank_var + " is set" + from, 1);
  env.rank = require_int(get, rank_var, size_var + " is set" + from, 0);
  check_range(rank_var, env.rank, size_var, env.world_size,
              "every rank must be below the world size");

  // Local rank and size: default to "everything on this host" when the launcher says nothing.
  auto local_rank = read_int(get, local_rank_var, 0);
  std::optional<int> local_size;
  if (!local_size_var.empty()) {
    local_size = read_int(get, local_size_var, 1);
  } else if (env.launcher == Launcher::slurm) {
    auto node = read_int(get, "SLURM_NODEID", 0);
    for (const char* var : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
      if (auto list = lookup_nonempty(get, var); list && node) {
        local_size = detail::slurm_tasks_on_node(*list, *node);
        if (local_size) break;
      }
    }
    if (!local_size && env.world_size == 1) local_size = 1;
  }
  if (local_size_var.empty()) local_size_var = "SLURM_TASKS_PER_NODE";
  if (!local_size) {
    // Without a per-host count, all ranks are taken to share this host; that is only
    // believable while the local rank agrees with the global one.
    if (local_rank && *local_rank != env.rank)
      throw EnvironmentError(local_size_var,
                             "mpp: " + local_size_var + " is not set but " + local_rank_var + "=" +
                                 std::to_string(*local_rank) + " differs from " + rank_var + "=" +
                                 std::to_string(env.rank) + " (ranks on several hosts); export " +
                                 local_size_var + " or " + std::string(detail::launch_hint));
    local_size = env.world_size;
  }
  env.local_world_size = *local_size;
  env.local_rank = local_rank.value_or(env.rank % env.local_world_size);
  if (env.local_world_size > env.world_size)
    throw EnvironmentError(local_size_var, "mpp: " + local_size_var + "=" +
                                               std::to_string(env.local_world_size) + " exceeds " +
                                               size_var + "=" + std::to_string(env.world_size) +
                                               "; a host cannot hold more ranks than the job; " +
                                               std::string(detail::launch_hint));
  check_range(local_rank_var, env.local_rank, local_size_var, env.local_world_size,
              "the local rank must be below the number of ranks on this host");

  // Node rank.
  std::optional<int> node_rank;
  std::string node_var;
  if (env.launcher == Launcher::slurm) {
    node_rank = read_int(get, "SLURM_NODEID", 0), node_var = "SLURM_NODEID";
  } else {
    auto group_rank = read_int(get, "GROUP_RANK", 0);
    auto plain_node_rank = read_int(get, "NODE_RANK", 0);
    if (group_rank && plain_node_rank && *group_rank != *plain_node_rank)
      throw EnvironmentError("NODE_RANK", "mpp: GROUP_RANK=" + std::to_string(*group_rank) +
                                              " and NODE_RANK=" + std::to_string(*plain_node_rank) +
                                              " disagree about which node this is; unset one of "
                                              "them or " +
                                              std::string(detail::launch_hint));
    node_rank = group_rank ? group_rank : plain_node_rank;
    node_var = group_rank ? "GROUP_RANK" : "NODE_RANK";
  }
  const bool homogeneous = env.world_size % env.local_world_size == 0;
  env.node_rank = node_rank.value_or(homogeneous ? env.rank / env.local_world_size : 0);
  if (node_rank && homogeneous) {
    const int nodes = env.world_size / env.local_world_size;
    check_range(node_var, env.node_rank, "nodes", nodes,
                "there are " + size_var + " / " + local_size_var + " nodes");
    // torchrun and mpprun number ranks node by node and set RANK from the node rank themselves,
    // so a mismatch comes from variables written by hand (or by a launcher numbering otherwise).
    // Two nodes started with the same --node-rank pass here and meet the init deadline instead.
    if (env.launcher != Launcher::slurm && local_rank &&
        env.rank != env.node_rank * env.local_world_size + env.local_rank)
      throw EnvironmentError(
          rank_var, "mpp: " + rank_var + "=" + std::to_string(env.rank) + " contradicts " +
                        node_var + "=" + std::to_string(env.node_rank) + " x " + local_size_var +
                        "=" + std::to_string(env.local_world_size) + " + " + local_rank_var + "=" +
                        std::to_string(env.local_rank) + ", which give RANK=" +
                        std::to_string(env.node_rank * env.local_world_size + env.local_rank) +
                        "; set the variables so that they agree, or " +
                        std::string(detail::launch_hint));
  }

  // Rendezvous address: only needed when there is someone to meet.
  auto addr = lookup_nonempty(get, "MASTER_ADDR");
  auto port = read_int(get, "MASTER_PORT", 1);
  if (env.world_size > 1) {
    if (!addr)
      throw EnvironmentError(
          "MASTER_ADDR",
          "mpp: MASTER_ADDR is not set but " + size_var + "=" + std::to_string(env.world_size) +
              from +
              "; every rank needs the host of rank 0: export MASTER_ADDR=<that host> "
              "(under SLURM: export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" "
              "| "
              "head -n 1)) or " +
              std::string(detail::launch_hint));
    if (!port)
      throw EnvironmentError(
          "MASTER_PORT",
          "mpp: MASTER_PORT is not set but " + size_var + "=" + std::to_string(env.world_size) +
              from + "; export the same free port on every rank (e.g. MASTER_PORT=29500) or " +
              std::string(detail::launch_hint));
  }
  if (addr) env.master_addr = *addr;
  if (port) {
    if (*port > 65535)
      throw EnvironmentError("MASTER_PORT", "mpp: MASTER_PORT=" + std::to_string(*port) +
                                                " is not a TCP port (1..65535)");
    env.master_port = *port;
  }
  return env;
}

/// The environment of this process (std::getenv).
MPP_DECL Environment environment();

}  // namespace mpp

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/env.ipp"
#endif
