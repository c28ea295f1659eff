#pragma once
// How the ranks meet: the job's rendezvous store (served by rank 0, or torchrun's agent), the
// waits on its keys with a deadline that name the ranks that never came, and the connection of a
// backend's group that returns only once every member has connected.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mpp/comm/backend.hpp"
#include "mpp/comm/env.hpp"
#include "mpp/comm/error.hpp"
#include "mpp/comm/group_state.hpp"
#include "mpp/comm/request.hpp"
#include "mpp/comm/store.hpp"
#include "mpp/comm/transport_threads.hpp"

namespace mpp {

namespace detail {

/// The member among the waiters that serves the store, so that its giving up reaches the
/// others: ranks start at different times, so the host's deadline can pass while another
/// waiter still has time left, and once the host exits that waiter would see a lost store.
/// At its deadline the host publishes the members it still misses under `key` and keeps
/// serving until the waiters it saw have read that (at most `linger`); a waiter that reads it
/// reports the same members at once.
struct HostVerdict {
  std::string key;  ///< empty: the store's host is not among the waiters
  int host = -1;    ///< index (among the keys) of the member that serves the store
  int self = -1;    ///< index of this waiter
  std::chrono::milliseconds linger{1000};
};

/// Waits until every key exists, or throws what `on_timeout(missing indices)` returns. Polls
/// with check() rather than Store::wait(): after a timed-out wait, c10d's TCPStore client can
/// still receive the late answer to it, which would corrupt the next request on the socket.
/// The keys still missing are tracked as they arrive, so the report at the deadline needs no
/// further store access (the store's host may be gone by then).
template <class OnTimeout>
void wait_for_keys(c10d::Store& store, std::string_view operation,
                   const std::vector<std::string>& keys,
                   std::chrono::steady_clock::time_point deadline, OnTimeout on_timeout,
                   const HostVerdict& verdict = {}) {
  using Clock = std::chrono::steady_clock;
  const bool exchange = !verdict.key.empty() && verdict.host >= 0 && verdict.self >= 0;
  const bool host = exchange && verdict.self == verdict.host;
  const auto read_key = [&](int i) { return verdict.key + "/read/" + std::to_string(i); };
  std::vector<int> missing;
  for (std::size_t i = 0; i < keys.size(); ++i) missing.push_back(static_cast<int>(i));
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    std::optional<std::vector<int>> host_missed;
    try {
      std::vector<int> still;
      for (int i : missing)
        if (!store.check({keys[static_cast<std::size_t>(i)]})) still.push_back(i);
      missing = std::move(still);
      if (exchange && !host && !missing.empty() && store.check({verdict.key})) {
        const auto bytes = store.get(verdict.key);
        std::vector<int> missed;
        std::string text(bytes.begin(), bytes.end());
        for (std::size_t at = 0; at < text.size();) {
          const auto comma = std::min(text.find(',', at), text.size());
          missed.push_back(std::stoi(text.substr(at, comma - at)));
          at = comma + 1;
        }
        store.set(read_key(verdict.self), std::vector<uint8_t>{1});
        host_missed = std::move(missed);
      }
    } catch (const std::exception& e) {
      // Near the deadline, the host may simply have given up first and exited: same report.
      if (Clock::now() >= deadline - std::chrono::milliseconds(500)) throw on_timeout(missing);
      throw CommError(std::string(operation), 0,
                      "mpp: " + std::string(operation) +
                          ": lost the rendezvous store (hosted by rank 0) while waiting for " +
                          std::to_string(missing.size()) + " rank(s): " + error_text(e) +
                          "; look at the log of rank 0, which served it");
    }
    if (host_missed) throw on_timeout(*host_missed);
    if (missing.empty()) return;
    if (Clock::now() >= deadline) {
      if (host) {
        std::string text;
        for (int i : missing) text += (text.empty() ? "" : ",") + std::to_string(i);
        std::vector<int> readers;
        for (int i = 0; i < static_cast<int>(keys.size()); ++i)
          if (i != verdict.host && std::find(missing.begin(), missing.end(), i) == missing.end())
            readers.push_back(i);
        try {
          store.set(verdict.key, std::vector<uint8_t>(text.begin(), text.end()));
          const auto until = Clock::now() + verdict.linger;
          while (!readers.empty() && Clock::now() < until) {
            std::erase_if(readers, [&](int i) { return store.check({read_key(i)}); });
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        } catch (const std::exception&) {
          // The verdict is a courtesy to the others; this rank's own report stands.
        }
      }
      throw on_timeout(missing);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

/// Returns once every member of `g` has set `<prefix>/<phase>/<rank>`; past `deadline` throws a
/// CommTimeout naming the members that did not.
inline void store_barrier(const GroupState& g, std::string_view operation, const std::string& phase,
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

/// Connects the backend's group, then waits until every member has connected too: Gloo lets a
/// fast member finish while a slower one still completes its side of their connection, and if
/// the fast one then exited (or dropped the group) the slow one would fail with "Connection
/// closed by peer". The member that serves the store leaves last, once the others have seen the
/// barrier complete, since they read it from the store.
inline c10::intrusive_ptr<c10d::ProcessGroup> connect_group(
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

inline std::string launch_text(const Environment& env) {
  return "start all " + std::to_string(env.world_size) +
         " ranks with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, e.g. "
         "`mpprun --nproc-per-node " +
         std::to_string(env.world_size) + " <program>`";
}

/// Under torchrun the agent already serves a TCPStore on MASTER_PORT and says so.
inline bool torchrun_agent_store() {
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  return agent != nullptr && std::string_view(agent) == "True";
}

/// Where rank 0's store listens: loopback when every rank shares this host (nothing else needs
/// to reach it), otherwise the one local address that reaches the peers -- MASTER_ADDR's.
inline std::string store_bind_address(const Environment& env) {
  if (env.single_host() || is_loopback_address(env.master_addr)) return "127.0.0.1";
  return local_address_towards(env.master_addr, env.master_port);
}

/// Connects to (rank 0: serves) the job's rendezvous store, then waits until every rank has
/// announced itself there, so that a missing rank is named instead of surfacing as a Gloo
/// timeout.
inline c10::intrusive_ptr<c10d::Store> rendezvous(const Environment& env,
                                                  const CommOptions& options,
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

/// Runs `fn` on its own thread and waits at most `limit`; past it the thread is abandoned
/// (detached, still blocked) and `on_timeout()` is thrown.
template <class Fn, class OnTimeout>
auto run_with_deadline(Fn fn, std::chrono::milliseconds limit, OnTimeout on_timeout) {
  using Result = decltype(fn());
  auto task = std::make_shared<std::packaged_task<Result()>>(std::move(fn));
  auto result = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (result.wait_for(limit) != std::future_status::ready) throw on_timeout();
  return result.get();
}

}  // namespace detail

}  // namespace mpp
