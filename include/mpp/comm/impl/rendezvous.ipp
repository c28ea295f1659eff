#pragma once
// The definitions of rendezvous.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/rendezvous.hpp"

namespace mpp::detail {

MPP_DECL void store_barrier(const GroupState& g, std::string_view operation,
                            const std::string& phase,
                            std::chrono::steady_clock::time_point deadline,
                            const std::vector<int>& members) {
  const std::string base = g.prefix + "/" + phase + "/";
  g.store->set(base + std::to_string(g.rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int r : members) keys.push_back(base + std::to_string(r));
  const int host = index_of(g.global_ranks, g.store_host);
  const HostVerdict verdict{base + "gave_up", host < 0 ? -1 : index_of(members, host),
                            index_of(members, g.rank)};
  wait_for_keys(
      *g.store, operation, keys, deadline,
      [&](const std::vector<int>& missing) {
        std::vector<int> who;
        for (int i : missing)
          who.push_back(
              g.global_ranks[static_cast<std::size_t>(members[static_cast<std::size_t>(i)])]);
        return CommTimeout(std::string(operation), who.front(), g.options.init_timeout,
                           "mpp: " + std::string(operation) + " of the group " +
                               rank_list(g.global_ranks) + " on global rank " +
                               std::to_string(g.global_rank) + ": global rank(s) " +
                               rank_list(who) + " did not finish connecting within " +
                               std::to_string(g.options.init_timeout.count()) +
                               " ms; they exited, crashed or are stuck during start-up (look at "
                               "their logs)");
      },
      verdict);
}

MPP_DECL c10::intrusive_ptr<c10d::ProcessGroup> connect_group(
    const GroupState& g, int rank, int size, std::chrono::steady_clock::time_point deadline,
    std::string_view operation) {
  auto store = c10::make_intrusive<c10d::PrefixStore>(g.prefix, g.store);
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  try {
    pg = with_transport_threads(g.options.transport_threads, [&] {
      return g.backend.make(store, rank, size, g.device, g.options.timeout);
    });
  } catch (const std::exception& e) {
    throw CommError(std::string(operation), -1,
                    "mpp: rank " + std::to_string(rank) + " could not connect the " +
                        std::string(g.backend.name) + " group " + rank_list(g.global_ranks) + ": " +
                        error_text(e) +
                        "; a peer may have exited during start-up, or the hosts cannot reach "
                        "each other (set MPP_SOCKET_IFNAME to the interface to use)");
  }
  if (size == 1) return pg;
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  store_barrier(g, operation, "connected", deadline, everyone);
  if (const int host_rank = index_of(g.global_ranks, g.store_host); host_rank >= 0) {
    if (rank == host_rank) {
      std::vector<int> others;
      for (int r = 0; r < size; ++r)
        if (r != host_rank) others.push_back(r);
      store_barrier(g, operation, "left", deadline, others);
    } else {
      g.store->set(g.prefix + "/left/" + std::to_string(rank), std::vector<uint8_t>{1});
    }
  }
  return pg;
}

MPP_DECL std::string launch_text(const Environment& env) {
  return "start all " + std::to_string(env.world_size) +
         " ranks with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, e.g. "
         "`mpprun --nproc-per-node " +
         std::to_string(env.world_size) + " <program>`";
}

MPP_DECL bool torchrun_agent_store() {
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  return agent != nullptr && std::string_view(agent) == "True";
}

MPP_DECL std::string store_bind_address(const Environment& env) {
  if (env.single_host() || is_loopback_address(env.master_addr)) return "127.0.0.1";
  return local_address_towards(env.master_addr, env.master_port);
}

MPP_DECL c10::intrusive_ptr<c10d::Store> rendezvous(
    const Environment& env, const CommOptions& options,
    std::chrono::steady_clock::time_point deadline) {
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  const std::string launch = launch_text(env);
  const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 deadline - std::chrono::steady_clock::now()),
                             std::chrono::milliseconds(1));
  // A restarted job meets on the same port, possibly while the previous attempt's rank 0 still
  // serves there: the attempt (exported by mpprun and torchrun) tells the two stores apart.
  const char* attempt_count = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const std::string session =
      std::string("attempt ") + (attempt_count != nullptr && *attempt_count ? attempt_count : "0");
  c10::intrusive_ptr<c10d::Store> store;
  if (torchrun_agent_store()) {
    // Every rank is a client of the agent's store; keys live under the attempt's prefix (the
    // agent's store outlives restarts), as PyTorch's own workers do.
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(env.master_port);
    store_options.isServer = false;
    store_options.numWorkers = env.world_size;
    store_options.waitWorkers = false;  // we wait ourselves, to name who is missing
    store_options.timeout = options.init_timeout;
    try {
      store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    } catch (const std::exception& e) {
      throw CommTimeout("init", 0, options.init_timeout,
                        "mpp: rank " + std::to_string(env.rank) +
                            " could not reach torchrun's rendezvous store at " + where +
                            " within " + std::to_string(options.init_timeout.count()) +
                            " ms [c10d: " + detail::error_text(e) + "]");
    }
    const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
    store = c10::make_intrusive<c10d::PrefixStore>(
        std::string("/worker/attempt_") + (attempt != nullptr && *attempt ? attempt : "0"), store);
  } else if (env.rank == 0) {
    const std::string bind = store_bind_address(env);
    try {
      store = RendezvousStore::serve(bind, env.master_port, left, session);
    } catch (const StoreError& e) {
      throw CommError(
          "init", -1,
          "mpp: rank 0 could not serve the rendezvous store on port " +
              std::to_string(env.master_port) + " of " + bind + ": " + e.what() +
              (bind == "127.0.0.1" ? "; the port may be taken: choose another MASTER_PORT (mpprun "
                                     "picks a free one)"
                                   : "; the port may be taken (choose another MASTER_PORT), or "
                                     "MASTER_ADDR is not an address of rank 0's host"));
    }
  } else {
    // On one host the store listens on loopback only; reach it there whatever MASTER_ADDR says.
    const bool local = env.single_host() || is_loopback_address(env.master_addr);
    try {
      store = c10::make_intrusive<RendezvousStore>(local ? "127.0.0.1" : env.master_addr,
                                                   env.master_port, left, session);
    } catch (const StoreError& e) {
      if (e.kind() == StoreError::Kind::not_a_store)
        throw CommTimeout("init", 0, options.init_timeout,
                          "mpp: rank " + std::to_string(env.rank) +
                              " got no answer from the rendezvous store at " + where + " within " +
                              std::to_string(options.init_timeout.count()) +
                              " ms; is another program listening on MASTER_PORT? " + launch + " [" +
                              e.what() + "]");
      throw CommTimeout("init", 0, options.init_timeout,
                        "mpp: rank " + std::to_string(env.rank) +
                            " could not reach the rendezvous store of rank 0 at " + where +
                            " within " + std::to_string(options.init_timeout.count()) +
                            " ms (is rank 0 running?); " + launch + " [" + e.what() + "]");
    }
  }
  // The store's own timeout bounded the connection attempt; from here on our deadlines rule.
  store->setTimeout(std::max(options.init_timeout, options.timeout));
  // Everyone announces itself, then waits for everyone: a missing rank is named.
  store->set("mpp/join/" + std::to_string(env.rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back("mpp/join/" + std::to_string(r));
  detail::wait_for_keys(
      *store, "init", keys, deadline,
      [&](const std::vector<int>& missing) {
        return CommTimeout("init", missing.front(), options.init_timeout,
                           "mpp: init on rank " + std::to_string(env.rank) + " timed out after " +
                               std::to_string(options.init_timeout.count()) + " ms: rank(s) " +
                               detail::rank_list(missing) +
                               " of WORLD_SIZE=" + std::to_string(env.world_size) +
                               " never reached the rendezvous at " + where + "; " + launch);
      },
      torchrun_agent_store() ? HostVerdict{} : HostVerdict{"mpp/join/gave_up", 0, env.rank});
  return store;
}

}  // namespace mpp::detail
