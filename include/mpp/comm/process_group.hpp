#pragma once
// The process group: the ranks of a job (or of a sub-group of it) and the operations between
// them. Create the job's group once per process with init_process_group(); it reads the
// launcher's variables (see env.hpp), meets the other ranks through the rendezvous store served
// by rank 0 (store.hpp: on 127.0.0.1 when every rank shares this host, otherwise on the address
// that reaches the peers; under torchrun, its agent's store), then connects a Gloo group: over
// loopback when every rank shares this host, otherwise over the interface that reaches
// MASTER_ADDR. A group is returned only once every member has connected it, so a rank that
// exits right after init (or drops a new group) cannot break a slower member's connection.
//
//   auto world = mpp::init_process_group();          // deadline: CommOptions::init_timeout
//   if (world.rank() == 0) world.send(x, 1, /*tag=*/0);
//   else                   world.recv(x, 0, 0);
//   world.all_reduce(grad);                           // sum over the ranks
//
// init_process_group<Shm>() (or world.new_group<Shm>(ranks)) gives a group of ranks of this host
// whose sends, receives, broadcasts and all-reduces of float tensors go through shared memory
// (shm_group.hpp): a few microseconds per message instead of Gloo's tens.
//
// Ranks passed to p2p calls are ranks *of this group* (they equal global ranks for the world).
// Every wait has a deadline (CommOptions::timeout); on expiry CommTimeout names the operation
// and the peer. Tensors may have any CPU dtype and any strides.
// A ProcessGroup is a cheap handle: copies share the same connections.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/view_as_real.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mpp/comm/backend.hpp"
#include "mpp/comm/env.hpp"
#include "mpp/comm/error.hpp"
#include "mpp/comm/policy.hpp"
#include "mpp/comm/reduce_op.hpp"
#include "mpp/comm/request.hpp"
#include "mpp/comm/shm_group.hpp"
#include "mpp/comm/store.hpp"
#include "mpp/comm/topology.hpp"

namespace mpp {

namespace detail {

using MakeGroupFn = c10::intrusive_ptr<c10d::ProcessGroup> (*)(
    const c10::intrusive_ptr<c10d::Store>&, int, int,
    const std::shared_ptr<::gloo::transport::Device>&, std::chrono::milliseconds);

struct GroupState {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;  // null on ranks that are not members
  c10::intrusive_ptr<c10d::Store> store;      // the job's rendezvous store, shared by all groups
  std::shared_ptr<::gloo::transport::Device> device;
  MakeGroupFn make = nullptr;
  std::string_view backend;
  std::string prefix;             // store prefix of this group's keys
  std::vector<int> global_ranks;  // global rank of each rank of this group
  int rank = -1;                  // this process's rank in the group; -1 if not a member
  int global_rank = -1;
  int store_host = -1;  // global rank whose process serves the store; -1: served elsewhere
  CommOptions options;
  int children = 0;  // sub-groups created from this one (same sequence on every member)
};

/// Position of `value` in `values`, or -1.
inline int index_of(const std::vector<int>& values, int value) {
  const auto at = std::find(values.begin(), values.end(), value);
  return at == values.end() ? -1 : static_cast<int>(at - values.begin());
}

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

/// After a collective failed on this rank: reports in through the store, gives the other members
/// a short grace to do the same (they fail the same collective: closed connection or the same
/// deadline), and names those that never do -- killed, crashed or stuck ranks cannot report.
inline std::string find_silent_ranks(const GroupState& g) {
  using namespace std::chrono;
  const std::string base = g.prefix + "/census/";
  try {
    g.store->set(base + std::to_string(g.rank), std::vector<uint8_t>{1});
    const auto until = steady_clock::now() + std::min<milliseconds>(seconds(2), g.options.timeout);
    std::vector<int> silent;
    for (std::size_t r = 0; r < g.global_ranks.size(); ++r) {
      const std::string key = base + std::to_string(r);
      bool present = g.store->check({key});
      while (!present && steady_clock::now() < until) {
        std::this_thread::sleep_for(milliseconds(20));
        present = g.store->check({key});
      }
      if (!present) silent.push_back(g.global_ranks[r]);
    }
    if (silent.empty()) return "";
    return "; rank(s) " + rank_list(silent) +
           " did not report after the failure: they exited, crashed or are stuck (a rank still "
           "blocked in this collective is listed too; look at their logs)";
  } catch (const std::exception&) {
    if (g.global_rank == 0) return "";
    return "; the rendezvous store on rank 0 is unreachable: rank 0 exited or crashed";
  }
}

inline c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::product:
      return c10d::ReduceOp::PRODUCT;
    case ReduceOp::min:
      return c10d::ReduceOp::MIN;
    case ReduceOp::max:
      return c10d::ReduceOp::MAX;
    case ReduceOp::band:
      return c10d::ReduceOp::BAND;
    case ReduceOp::bor:
      return c10d::ReduceOp::BOR;
    case ReduceOp::bxor:
      return c10d::ReduceOp::BXOR;
  }
  return c10d::ReduceOp::SUM;
}

/// How a reduction of `dtype` travels through Gloo, whose kernels cover float16/32/64 and
/// 8/32/64-bit integers: other dtypes are reduced in a wider or reinterpreted one.
struct WirePlan {
  at::ScalarType dtype;
  ReduceOp op;
  bool complex_as_real = false;
};

inline WirePlan reduce_wire_plan(at::ScalarType dtype, ReduceOp op) {
  const bool bitwise = op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/true);
  if (bitwise && !integral)
    throw std::invalid_argument("mpp: all_reduce(" + std::string(reduce_op_name(op)) +
                                ") needs an integer or bool tensor (got " + c10::toString(dtype) +
                                "); use sum/product/min/max");
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      return {dtype, op};
    case at::kBFloat16:
      return {at::kFloat, op};  // reduce in float32, round once when copying back
    case at::kShort:
      return {at::kInt, op};
    case at::kBool:  // as bytes: sum = logical or, product = logical and
      return {at::kByte, op == ReduceOp::sum       ? ReduceOp::max
                         : op == ReduceOp::product ? ReduceOp::min
                                                   : op};
    case at::kComplexFloat:
    case at::kComplexDouble:
      if (op != ReduceOp::sum)
        throw std::invalid_argument(
            "mpp: all_reduce(" + std::string(reduce_op_name(op)) + ") of " + c10::toString(dtype) +
            " has no meaning elementwise on (re, im); only sum is supported");
      return {dtype == at::kComplexFloat ? at::kFloat : at::kDouble, op, true};
    default:
      throw std::invalid_argument(std::string("mpp: all_reduce of ") + c10::toString(dtype) +
                                  " is not supported; convert the tensor to a numeric dtype first");
  }
}

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
    pg = g.make(store, rank, size, g.device, g.options.timeout);
  } catch (const std::exception& e) {
    throw CommError(std::string(operation), -1,
                    "mpp: rank " + std::to_string(rank) + " could not connect the " +
                        std::string(g.backend) + " group " + rank_list(g.global_ranks) + ": " +
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

/// The ranks of a job, or of a sub-group of it, and the operations between them: a cheap handle,
/// whose copies share one connection. Create the job's group with init_process_group(), sub-groups
/// with new_group() or split().
class ProcessGroup {
 public:
  /// A handle to no group (what a rank outside a sub-group gets).
  ProcessGroup() = default;
  /// A handle to a connected group; init_process_group() and new_group() build them.
  explicit ProcessGroup(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}

  // ---- who is in the group -------------------------------------------------------------------
  /// False for an empty handle, on which every other call throws std::logic_error, and on ranks
  /// outside a sub-group, where only global_rank(), global_rank_of(), global_ranks(), options()
  /// and backend_name() answer and the rest throws std::logic_error.
  bool is_member() const { return state_ && state_->rank >= 0; }
  /// This rank in the group, in [0, size()).
  int rank() const { return member().rank; }
  /// Number of ranks in the group.
  int size() const { return static_cast<int>(member().global_ranks.size()); }
  /// This process's rank in the whole job.
  int global_rank() const { return state().global_rank; }
  /// The global rank of rank `r` of this group.
  int global_rank_of(int r) const { return state().global_ranks.at(static_cast<std::size_t>(r)); }
  /// The global rank of every rank of the group, in group order.
  const std::vector<int>& global_ranks() const { return state().global_ranks; }
  /// The deadlines and network interface the group was created with.
  const CommOptions& options() const { return state().options; }
  /// The backend tag's name: "Gloo", "Shm", ...
  std::string_view backend_name() const { return state().backend; }

  // ---- topology of a chain of stages ---------------------------------------------------------
  /// This rank's place in the chain of the group's ranks.
  Topology topology() const { return {rank(), size()}; }
  /// The rank of the next stage; -1 on the last stage.
  int next_rank() const { return topology().next_rank(); }
  /// The rank of the previous stage; -1 on the first stage.
  int prev_rank() const { return topology().prev_rank(); }
  /// Whether this rank runs the first stage (rank 0).
  bool is_first() const { return topology().is_first(); }
  /// Whether this rank runs the last stage (rank size() - 1).
  bool is_last() const { return topology().is_last(); }

  // ---- point to point ------------------------------------------------------------------------
  /// Starts sending `tensor` to `dst`; the returned handle must be waited (or is waited when it
  /// dies). The tensor's values are captured now (non-contiguous inputs are copied) but, for a
  /// contiguous tensor, Gloo reads it in place: do not modify it until the send completes.
  [[nodiscard]] Request isend(const at::Tensor& tensor, int dst, int tag = 0) const {
    return post_send("isend", tensor, dst, tag);
  }
  /// Starts receiving into `tensor` (its shape and dtype must match what `src` sends).
  [[nodiscard]] Request irecv(const at::Tensor& tensor, int src, int tag = 0) const {
    return post_recv("irecv", tensor, src, tag);
  }
  /// Blocking send: returns once `dst` has received (Gloo's send completes only then; Shm's once
  /// the message is in the ring to `dst`).
  void send(const at::Tensor& tensor, int dst, int tag = 0) const {
    post_send("send", tensor, dst, tag).wait();
  }
  /// Blocking receive into `tensor` from `src`'s send with the same `tag` (same shape and dtype).
  void recv(const at::Tensor& tensor, int src, int tag = 0) const {
    post_recv("recv", tensor, src, tag).wait();
  }

  // ---- collectives (every rank of the group calls them in the same order) ---------------------
  /// Starts reducing `tensor` in place over the group with `op`; every rank of the group calls it.
  /// Read `tensor` only after the Request was waited.
  [[nodiscard]] Request iall_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::sum) const {
    return post_all_reduce("all_reduce", tensor, op, false);
  }
  /// Blocking iall_reduce(): returns once `tensor` holds the reduction.
  void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::sum) const {
    post_all_reduce("all_reduce", tensor, op, false).wait();
  }
  /// Average over the ranks (floating-point and complex tensors).
  [[nodiscard]] Request iall_reduce_mean(const at::Tensor& tensor) const {
    return post_all_reduce("all_reduce_mean", tensor, ReduceOp::sum, true);
  }
  /// Blocking iall_reduce_mean(); throws std::invalid_argument for integer and bool tensors.
  void all_reduce_mean(const at::Tensor& tensor) const {
    post_all_reduce("all_reduce_mean", tensor, ReduceOp::sum, true).wait();
  }
  /// Copies `root`'s tensor into every rank's tensor (same shape and dtype everywhere).
  [[nodiscard]] Request ibroadcast(const at::Tensor& tensor, int root) const {
    return post_broadcast(tensor, root);
  }
  /// Blocking ibroadcast(); throws std::invalid_argument when `root` is not a rank of the group.
  void broadcast(const at::Tensor& tensor, int root) const { post_broadcast(tensor, root).wait(); }
  /// Every rank owns one run of the flat tensor `flat`: `runs[r]` = {offset, numel} of rank r,
  /// the same list on every rank, the runs tiling `flat` in any order (a rank may own nothing:
  /// numel 0). When the request completes, every rank's `flat` holds every owner's run, bit for
  /// bit: how ZeRO hands updated parameter shards around. Over Shm the owner copies its run into
  /// shared memory and the others copy it out; over other backends it is an all-reduce (sum) in
  /// which every rank contributes zeros outside its own run (x + 0 = x).
  [[nodiscard]] Request iall_gather_runs(
      const at::Tensor& flat,
      const std::vector<std::pair<std::int64_t, std::int64_t>>& runs) const {
    return post_all_gather_runs(flat, runs);
  }
  /// Blocking iall_gather_runs(); throws std::invalid_argument when the runs do not tile `flat`.
  void all_gather_runs(const at::Tensor& flat,
                       const std::vector<std::pair<std::int64_t, std::int64_t>>& runs) const {
    post_all_gather_runs(flat, runs).wait();
  }
  /// Every rank owns one run of `flat`, as in all_gather_runs. When the request completes, each
  /// rank's own run holds the reduction (`op`) of every rank's `flat` over that run, the bits an
  /// all-reduce gives: what ZeRO needs of the gradients, each rank the sum of the shard it
  /// steps. Outside its run a rank's `flat` is unspecified: over Shm it is left as it was (each
  /// rank reads only its own run of the others' tensors, half an all-reduce's traffic on 2 ranks);
  /// over other backends, and for dtypes Shm does not reduce, this is an all-reduce.
  [[nodiscard]] Request ireduce_scatter_runs(
      const at::Tensor& flat, const std::vector<std::pair<std::int64_t, std::int64_t>>& runs,
      ReduceOp op = ReduceOp::sum) const {
    return post_reduce_scatter_runs(flat, runs, op);
  }
  /// Blocking ireduce_scatter_runs(); throws std::invalid_argument when the runs do not tile
  /// `flat`.
  void reduce_scatter_runs(const at::Tensor& flat,
                           const std::vector<std::pair<std::int64_t, std::int64_t>>& runs,
                           ReduceOp op = ReduceOp::sum) const {
    post_reduce_scatter_runs(flat, runs, op).wait();
  }
  /// Returns once every rank of the group has called it (deadline: options().timeout).
  void barrier() const {
    auto& s = member();
    auto info = op_info("barrier", -1, -1, at::Tensor(), /*collective=*/true);
    c10d::BarrierOptions opts;
    opts.timeout = s.options.timeout;
    Request(call(info, [&] { return s.pg->barrier(opts); }), info).wait();
  }

  // ---- sub-groups ----------------------------------------------------------------------------
  /// A group of some ranks of this one, numbered in the order given (rank i of the new group is
  /// ranks[i] of this group). Every rank of *this* group must call new_group with the same list,
  /// in the same order relative to other new_group calls; ranks not in the list get a handle
  /// with is_member() == false.
  ProcessGroup new_group(std::vector<int> ranks) const {
    return make_sub_group(std::move(ranks), member().make, member().backend);
  }

  /// The same over another backend, e.g. a Shm group of the ranks of a Gloo world:
  /// `world.new_group<mpp::Shm>({0, 1})`.
  template <comm_backend Backend>
  ProcessGroup new_group(std::vector<int> ranks) const {
    return make_sub_group(std::move(ranks), &backend_traits<Backend>::make, Backend::name);
  }

  /// Every rank of this group, in its order, over another backend: `world.new_group<mpp::Shm>()`.
  template <comm_backend Backend>
  ProcessGroup new_group() const {
    std::vector<int> all(static_cast<std::size_t>(size()));
    std::iota(all.begin(), all.end(), 0);
    return new_group<Backend>(std::move(all));
  }

 private:
  ProcessGroup make_sub_group(std::vector<int> ranks, detail::MakeGroupFn make,
                              std::string_view backend) const {
    auto& s = member();
    if (ranks.empty()) throw std::invalid_argument("mpp: new_group needs at least one rank");
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size())
        throw std::invalid_argument("mpp: new_group rank " + std::to_string(ranks[i]) +
                                    " is outside this group of " + std::to_string(size()) +
                                    " ranks");
      if (std::count(ranks.begin(), ranks.end(), ranks[i]) > 1)
        throw std::invalid_argument("mpp: new_group lists rank " + std::to_string(ranks[i]) +
                                    " twice " + detail::rank_list(ranks));
    }
    auto child = std::make_shared<detail::GroupState>();
    child->store = s.store;
    child->device = s.device;
    child->make = make;
    child->backend = backend;
    child->options = s.options;
    child->global_rank = s.global_rank;
    child->store_host = s.store_host;
    child->prefix = s.prefix + "/" + std::to_string(state_->children++);
    for (int r : ranks) child->global_ranks.push_back(s.global_ranks[static_cast<std::size_t>(r)]);
    auto me = std::find(ranks.begin(), ranks.end(), s.rank);
    if (me == ranks.end()) return ProcessGroup(child);
    child->rank = static_cast<int>(me - ranks.begin());

    // Agree on the membership before connecting, so that ranks that were given different
    // lists fail with a message instead of a timeout inside Gloo.
    const std::string view =
        detail::rank_list(child->global_ranks) + " over " + std::string(backend);
    const auto deadline = std::chrono::steady_clock::now() + s.options.init_timeout;
    s.store->set(child->prefix + "/members/" + std::to_string(child->rank),
                 std::vector<uint8_t>(view.begin(), view.end()));
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < ranks.size(); ++i)
      keys.push_back(child->prefix + "/members/" + std::to_string(i));
    detail::wait_for_keys(
        *s.store, "new_group", keys, deadline,
        [&](const std::vector<int>& missing) {
          std::vector<int> who;
          for (int i : missing) who.push_back(child->global_ranks[static_cast<std::size_t>(i)]);
          return CommTimeout("new_group", who.front(), s.options.init_timeout,
                             "mpp: new_group " + view + " on global rank " +
                                 std::to_string(s.global_rank) + ": global rank(s) " +
                                 detail::rank_list(who) + " did not join within " +
                                 std::to_string(s.options.init_timeout.count()) +
                                 " ms; every rank of the parent group must call new_group with the "
                                 "same ranks, in the same order");
        },
        detail::HostVerdict{child->prefix + "/members/gave_up",
                            detail::index_of(child->global_ranks, child->store_host), child->rank});
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto bytes = s.store->get(keys[i]);
      std::string other(bytes.begin(), bytes.end());
      if (other != view)
        throw CommError("new_group", child->global_ranks[i],
                        "mpp: new_group: global rank " + std::to_string(s.global_rank) +
                            " was given " + view + " but global rank " +
                            std::to_string(child->global_ranks[i]) + " was given " + other +
                            "; call new_group with the same list on every rank, in the same order");
    }
    child->pg = detail::connect_group(*child, child->rank, static_cast<int>(ranks.size()), deadline,
                                      "new_group");
    return ProcessGroup(child);
  }

 public:
  /// Cuts this group into disjoint groups (e.g. the rows or the columns of a 2-D mesh) and
  /// returns the one this rank belongs to. Same rules as new_group: every rank calls it with
  /// the same lists.
  ProcessGroup split(const std::vector<std::vector<int>>& groups) const {
    ProcessGroup mine;
    for (const auto& ranks : groups) {
      ProcessGroup g = new_group(ranks);
      if (g.is_member()) {
        if (mine.is_member())
          throw std::invalid_argument("mpp: split: rank " + std::to_string(rank()) +
                                      " appears in two groups; the groups must be disjoint");
        mine = g;
      }
    }
    return mine;
  }

  /// The underlying c10d group, for calls the library does not wrap (and the benchmarks' raw
  /// baseline). Waits on its Work objects are not bounded by mpp's deadlines.
  c10d::ProcessGroup& c10d_group() const { return *member().pg; }

 private:
  const detail::GroupState& state() const {
    if (!state_)
      throw std::logic_error(
          "mpp: this ProcessGroup handle is empty; create one with "
          "mpp::init_process_group()");
    return *state_;
  }
  const detail::GroupState& member() const {
    const auto& s = state();
    if (s.rank < 0)
      throw std::logic_error("mpp: global rank " + std::to_string(s.global_rank) +
                             " is not a member of the group " + detail::rank_list(s.global_ranks) +
                             "; only its members may use it (check is_member())");
    return s;
  }

  detail::OpInfo op_info(std::string_view op, int peer, int tag, const at::Tensor& tensor,
                         bool collective = false, std::string_view reduction = {},
                         int root = -1) const {
    const auto& s = member();
    detail::OpInfo info;
    info.operation = op;
    info.peer = peer;
    info.peer_global = peer >= 0 ? s.global_ranks[static_cast<std::size_t>(peer)] : -1;
    info.tag = tag;
    info.rank = s.rank;
    info.deadline = s.options.timeout;
    info.tensor = tensor;
    info.collective = collective;
    info.reduction = reduction;
    info.root = root;
    if (collective) {
      info.group = std::shared_ptr<const std::vector<int>>(state_, &state_->global_ranks);
      info.world = s.prefix == "mpp/0";
      if (peer < 0)
        info.find_silent = [state = state_] { return detail::find_silent_ranks(*state); };
    }
    return info;
  }

  template <class Start>
  static c10::intrusive_ptr<c10d::Work> call(const detail::OpInfo& info, Start&& start) {
    try {
      return start();
    } catch (const std::exception& e) {
      detail::throw_failure(info, detail::error_text(e), std::chrono::steady_clock::duration{0});
    }
  }

  void check_peer(std::string_view op, int peer, int tag) const {
    if (peer < 0 || peer >= size() || peer == rank())
      throw std::invalid_argument("mpp: " + std::string(op) + " peer rank " + std::to_string(peer) +
                                  " must be another rank of this group of " +
                                  std::to_string(size()) + " (this is rank " +
                                  std::to_string(rank()) + ")");
    if (tag < 0)
      throw std::invalid_argument("mpp: " + std::string(op) + " tag " + std::to_string(tag) +
                                  " must be >= 0");
  }

  static void check_tensor(std::string_view op, const at::Tensor& t) {
    if (!t.defined())
      throw std::invalid_argument("mpp: " + std::string(op) + " got an undefined tensor");
    if (t.is_sparse())
      throw std::invalid_argument("mpp: " + std::string(op) +
                                  " needs a dense tensor; call .to_dense() first");
  }

  Request post_send(std::string_view op, const at::Tensor& tensor, int dst, int tag) const {
    check_tensor(op, tensor);
    check_peer(op, dst, tag);
    auto info = op_info(op, dst, tag, tensor);
    if (tensor.numel() == 0) return {};
    const bool in_place = tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg();
    at::Tensor wire = in_place ? tensor : tensor.resolve_conj().resolve_neg().contiguous();
    return Request(call(info,
                        [&] {
                          std::vector<at::Tensor> v{wire};
                          return member().pg->send(v, dst, tag);
                        }),
                   std::move(info), wire);
  }

  Request post_recv(std::string_view op, const at::Tensor& tensor, int src, int tag) const {
    check_tensor(op, tensor);
    check_peer(op, src, tag);
    auto info = op_info(op, src, tag, tensor);
    if (tensor.numel() == 0) return {};
    const bool in_place = tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg();
    at::Tensor wire = in_place ? tensor : at::empty_like(tensor, at::MemoryFormat::Contiguous);
    return Request(call(info,
                        [&] {
                          std::vector<at::Tensor> v{wire};
                          return member().pg->recv(v, src, tag);
                        }),
                   std::move(info), wire, in_place ? at::Tensor() : tensor);
  }

  Request post_all_reduce(std::string_view op_name, const at::Tensor& tensor, ReduceOp op,
                          bool mean) const {
    check_tensor(op_name, tensor);
    const auto& s = member();
    if (mean &&
        !(at::isFloatingType(tensor.scalar_type()) || at::isComplexType(tensor.scalar_type())))
      throw std::invalid_argument(std::string("mpp: all_reduce_mean needs a floating-point tensor "
                                              "(got ") +
                                  c10::toString(tensor.scalar_type()) +
                                  "); use all_reduce(sum) and divide as your integers require");
    auto info = op_info(op_name, -1, -1, tensor, true, reduce_op_name(op));
    const detail::WirePlan plan = detail::reduce_wire_plan(tensor.scalar_type(), op);
    const bool in_place = plan.dtype == tensor.scalar_type() || plan.complex_as_real;
    const bool layout_ok = tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg();
    // `staging` holds the result in the tensor's own dtype (or the wire dtype); Gloo works on
    // `wire`, which shares its storage (complex numbers travel as (re, im) pairs).
    at::Tensor staging;
    if (in_place && layout_ok)
      staging = tensor;
    else if (in_place)
      staging = tensor.resolve_conj().resolve_neg().contiguous();
    else
      staging = tensor.to(plan.dtype).contiguous();
    at::Tensor wire = plan.complex_as_real ? at::view_as_real(staging) : staging;
    at::Tensor target = staging.is_same(tensor) ? at::Tensor() : tensor;
    c10d::AllreduceOptions opts;
    opts.reduceOp = detail::to_c10d(plan.op);
    opts.timeout = s.options.timeout;
    auto work = call(info, [&] {
      std::vector<at::Tensor> v{wire};
      return s.pg->allreduce(v, opts);
    });
    return Request(std::move(work), std::move(info), staging, target,
                   mean ? static_cast<double>(size()) : 0.0);
  }

  Request post_all_gather_runs(
      const at::Tensor& flat,
      const std::vector<std::pair<std::int64_t, std::int64_t>>& runs) const {
    check_tensor("all_gather_runs", flat);
    const auto& s = member();
    if (auto* shm = dynamic_cast<ShmProcessGroup*>(s.pg.get())) {
      auto info = op_info("all_gather_runs", -1, -1, flat, true);
      // Checks its arguments (std::invalid_argument) and queues the work; nothing else can fail.
      auto work = shm->all_gather_runs(flat, runs);
      return Request(std::move(work), std::move(info), flat);
    }
    detail::check_owned_runs(flat, runs, size());
    const auto [mine, count] = runs[static_cast<std::size_t>(rank())];
    {
      at::NoGradGuard no_grad;
      flat.narrow(0, 0, mine).zero_();
      flat.narrow(0, mine + count, flat.numel() - mine - count).zero_();
    }
    return post_all_reduce("all_gather_runs", flat, ReduceOp::sum, false);
  }

  Request post_reduce_scatter_runs(const at::Tensor& flat,
                                   const std::vector<std::pair<std::int64_t, std::int64_t>>& runs,
                                   ReduceOp op) const {
    check_tensor("reduce_scatter_runs", flat);
    const auto& s = member();
    if (auto* shm = dynamic_cast<ShmProcessGroup*>(s.pg.get())) {
      c10d::AllreduceOptions opts;
      opts.reduceOp = detail::to_c10d(op);
      if (shm->handles({flat}, opts)) {
        auto info = op_info("reduce_scatter_runs", -1, -1, flat, true, reduce_op_name(op));
        // Checks the runs (std::invalid_argument) and queues the work.
        auto work = shm->reduce_scatter_runs(flat, runs, opts.reduceOp);
        return Request(std::move(work), std::move(info), flat);
      }
    }
    detail::check_owned_runs(flat, runs, size(), "reduce_scatter_runs");
    return post_all_reduce("reduce_scatter_runs", flat, op, false);
  }

  Request post_broadcast(const at::Tensor& tensor, int root) const {
    check_tensor("broadcast", tensor);
    const auto& s = member();
    if (root < 0 || root >= size())
      throw std::invalid_argument("mpp: broadcast root " + std::to_string(root) +
                                  " is outside this group of " + std::to_string(size()) + " ranks");
    auto info = op_info("broadcast", root == rank() ? -1 : root, -1, tensor, true, {}, root);
    if (tensor.numel() == 0) return {};
    // Broadcast moves bytes: any dtype travels as uint8 through a contiguous buffer.
    const bool in_place = tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg();
    at::Tensor wire = in_place ? tensor : tensor.resolve_conj().resolve_neg().contiguous();
    at::Tensor bytes = wire.reshape({-1}).view(at::kByte);
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = s.options.timeout;
    auto work = call(info, [&] {
      std::vector<at::Tensor> v{bytes};
      return s.pg->broadcast(v, opts);
    });
    return Request(std::move(work), std::move(info), wire, in_place ? at::Tensor() : tensor);
  }

  std::shared_ptr<detail::GroupState> state_;
};

/// Joins the job described by `env` and connects a `Backend` group over all its ranks.
/// Throws CommTimeout if some rank has not arrived within options.init_timeout, naming it.
template <comm_backend Backend = Gloo>
ProcessGroup init_process_group(const Environment& env, CommOptions options) {
  using Traits = backend_traits<Backend>;
  const auto deadline = std::chrono::steady_clock::now() + options.init_timeout;
  auto state = std::make_shared<detail::GroupState>();
  state->options = options;
  state->backend = Backend::name;
  state->make = &Traits::make;
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
    state->device = Traits::device(env, options);
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError("init", -1,
                    "mpp: cannot open a " + std::string(Backend::name) +
                        " device: " + detail::error_text(e) +
                        "; set MPP_SOCKET_IFNAME to a network interface of this host");
  }
  state->pg = detail::connect_group(*state, env.rank, env.world_size, deadline, "init");
  return ProcessGroup(state);
}

/// Joins the job described by this process's environment (torchrun, SLURM or Open MPI).
template <comm_backend Backend = Gloo>
ProcessGroup init_process_group(CommOptions options = CommOptions::from_env()) {
  return init_process_group<Backend>(environment(), std::move(options));
}

/// Throws unless `group` runs the backend comm policy C names; `user` is what was given the
/// group, for the message ("DDP<Async<Gloo>>").
template <comm_policy C>
void require_backend(const ProcessGroup& group, const std::string& user) {
  if (group.backend_name() != C::backend::name)
    throw std::invalid_argument("mpp: " + user + " was given a " +
                                std::string(group.backend_name()) +
                                " process group; create it with init_process_group<" +
                                std::string(C::backend::name) + ">()");
}

}  // namespace mpp
