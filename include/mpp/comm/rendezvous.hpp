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
#include "mpp/config.hpp"

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
MPP_DECL void store_barrier(const GroupState& g, std::string_view operation,
                            const std::string& phase,
                            std::chrono::steady_clock::time_point deadline,
                            const std::vector<int>& members);

/// Connects the backend's group, then waits until every member has connected too: Gloo lets a
/// fast member finish while a slower one still completes its side of their connection, and if
/// the fast one then exited (or dropped the group) the slow one would fail with "Connection
/// closed by peer". The member that serves the store leaves last, once the others have seen the
/// barrier complete, since they read it from the store.
MPP_DECL c10::intrusive_ptr<c10d::ProcessGroup> connect_group(
    const GroupState& g, int rank, int size, std::chrono::steady_clock::time_point deadline,
    std::string_view operation);

MPP_DECL std::string launch_text(const Environment& env);

/// Under torchrun the agent already serves a TCPStore on MASTER_PORT and says so.
MPP_DECL bool torchrun_agent_store();

/// Where rank 0's store listens: loopback when every rank shares this host (nothing else needs
/// to reach it), otherwise the one local address that reaches the peers -- MASTER_ADDR's.
MPP_DECL std::string store_bind_address(const Environment& env);

/// Connects to (rank 0: serves) the job's rendezvous store, then waits until every rank has
/// announced itself there, so that a missing rank is named instead of surfacing as a Gloo
/// timeout.
MPP_DECL c10::intrusive_ptr<c10d::Store> rendezvous(const Environment& env,
                                                    const CommOptions& options,
                                                    std::chrono::steady_clock::time_point deadline);

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

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/rendezvous.ipp"
#endif
