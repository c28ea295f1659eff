#pragma once
// What a process group handle points to: the c10d group, the job's store, the backend that made
// it (found through its backend_traits when the group was created), and the ranks. Shared by every
// copy of the handle and by the requests that report on its failures.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "mpp/comm/backend.hpp"
#include "mpp/comm/policy.hpp"

namespace mpp {

namespace detail {

/// {offset, numel} of every rank's run of a flat tensor (all_gather_runs, reduce_scatter_runs).
using Runs = std::vector<std::pair<std::int64_t, std::int64_t>>;

/// How a backend connects a group (backend_traits<B>::make).
using MakeGroupFn = c10::intrusive_ptr<c10d::ProcessGroup> (*)(
    const c10::intrusive_ptr<c10d::Store>&, int, int,
    const std::shared_ptr<::gloo::transport::Device>&, std::chrono::milliseconds);
/// A backend's own all_gather_runs (backend_traits<B>::all_gather_runs).
using GatherRunsFn = c10::intrusive_ptr<c10d::Work> (*)(c10d::ProcessGroup&, const at::Tensor&,
                                                        const Runs&);
/// A backend's own reduce_scatter_runs (backend_traits<B>::reduce_scatter_runs); returns no work
/// for tensors it does not reduce itself.
using ReduceScatterRunsFn = c10::intrusive_ptr<c10d::Work> (*)(c10d::ProcessGroup&,
                                                               const at::Tensor&, const Runs&,
                                                               c10d::ReduceOp);

/// What a group needs of its backend, read off backend_traits<B> where B is known (the functions
/// creating groups), so that a handle whose type does not name B still reaches B's own
/// collectives. A capability B lacks stays null and the group takes the generic path.
struct BackendOps {
  std::string_view name;  ///< the backend tag's display name
  MakeGroupFn make = nullptr;
  GatherRunsFn all_gather_runs = nullptr;
  ReduceScatterRunsFn reduce_scatter_runs = nullptr;
  /// A send is written by the transport's own threads once the receiver is ready
  /// (backend_traits<B>::sends_need_transport_threads), so under TransportThreads::batch a send
  /// first lets them run.
  bool sends_need_transport_threads = false;
};

/// BackendOps of backend B, from its backend_traits.
template <comm_backend B>
BackendOps backend_ops() {
  using Traits = backend_traits<B>;
  BackendOps ops;
  ops.name = B::name;
  ops.make = &Traits::make;
  if constexpr (requires { &Traits::all_gather_runs; })
    ops.all_gather_runs = &Traits::all_gather_runs;
  if constexpr (requires { &Traits::reduce_scatter_runs; })
    ops.reduce_scatter_runs = &Traits::reduce_scatter_runs;
  if constexpr (requires { Traits::sends_need_transport_threads; })
    ops.sends_need_transport_threads = Traits::sends_need_transport_threads;
  return ops;
}

/// The state behind a ProcessGroup handle.
struct GroupState {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;  // null on ranks that are not members
  c10::intrusive_ptr<c10d::Store> store;      // the job's rendezvous store, shared by all groups
  std::shared_ptr<::gloo::transport::Device> device;
  BackendOps backend;
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

}  // namespace detail

}  // namespace mpp
