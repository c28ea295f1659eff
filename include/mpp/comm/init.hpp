#pragma once
// Joining the job: init_process_group() reads the launcher's variables (see env.hpp), meets the
// other ranks through the rendezvous store served by rank 0 (rendezvous.hpp: on 127.0.0.1 when
// every rank shares this host, otherwise on the address that reaches the peers; under torchrun,
// its agent's store), then connects a group of the backend named by its template argument: Gloo
// over loopback when every rank shares this host, otherwise over the interface that reaches
// MASTER_ADDR; Shm through shared memory between the ranks of one host (shm_group.hpp: a few
// microseconds per message instead of Gloo's tens). A group is returned only once every member
// has connected it, so a rank that exits right after init cannot break a slower member's
// connection.
//
//   auto world = mpp::init_process_group();            // a Group<Gloo>
//   auto local = mpp::init_process_group<mpp::Shm>();  // a Group<Shm>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "mpp/comm/backend.hpp"
#include "mpp/comm/env.hpp"
#include "mpp/comm/error.hpp"
#include "mpp/comm/group_state.hpp"
#include "mpp/comm/process_group.hpp"
#include "mpp/comm/rendezvous.hpp"
#include "mpp/comm/shm_group.hpp"
#include "mpp/comm/transport_threads.hpp"

namespace mpp {

/// Joins the job described by `env` and connects a `Backend` group over all its ranks.
/// Throws CommTimeout if some rank has not arrived within options.init_timeout, naming it.
template <comm_backend Backend = Gloo>
Group<Backend> init_process_group(const Environment& env, CommOptions options) {
  using Traits = backend_traits<Backend>;
  const auto deadline = std::chrono::steady_clock::now() + options.init_timeout;
  auto state = std::make_shared<detail::GroupState>();
  state->options = options;
  state->backend = detail::backend_ops<Backend>();
  state->prefix = "mpp/0";
  state->rank = env.rank;
  state->global_rank = env.rank;
  state->store_host = env.world_size > 1 && !detail::torchrun_agent_store() ? 0 : -1;
  for (int r = 0; r < env.world_size; ++r) state->global_ranks.push_back(r);

  if (env.world_size == 1) {
    state->store = c10::make_intrusive<c10d::HashStore>();
  } else {
    // c10d's client can block without a bound (e.g. when something that is not a store answers
    // on MASTER_PORT), so the rendezvous runs on its own thread under a hard deadline.
    state->store = detail::run_with_deadline(
        [env, options, deadline] { return detail::rendezvous(env, options, deadline); },
        options.init_timeout + std::chrono::seconds(2),
        [&] {
          return CommTimeout("init", 0, options.init_timeout,
                             "mpp: rank " + std::to_string(env.rank) +
                                 " got no answer from the rendezvous store at " + env.master_addr +
                                 ":" + std::to_string(env.master_port) + " within " +
                                 std::to_string(options.init_timeout.count()) +
                                 " ms; is another program listening on MASTER_PORT? " +
                                 detail::launch_text(env));
        });
  }
  try {
    state->device = detail::with_transport_threads(options.transport_threads,
                                                   [&] { return Traits::device(env, options); });
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError("init", -1,
                    "mpp: cannot open a " + std::string(Backend::name) +
                        " device: " + detail::error_text(e) +
                        "; set MPP_SOCKET_IFNAME to a network interface of this host");
  }
  state->pg = detail::connect_group(*state, env.rank, env.world_size, deadline, "init");
  return Group<Backend>(detail::KnownBackend{}, ProcessGroup(state));
}

/// Joins the job described by this process's environment (torchrun, SLURM or Open MPI).
template <comm_backend Backend = Gloo>
Group<Backend> init_process_group(CommOptions options = CommOptions::from_env()) {
  return init_process_group<Backend>(environment(), std::move(options));
}

}  // namespace mpp
