#pragma once
// The process group: the ranks of a job (or of a sub-group of it) and the operations between
// them. init_process_group() (init.hpp) creates the job's group once per process; it returns a
// Group<Backend> (group.hpp), the handle whose type names its backend, which derives from this
// one. Code that works over any backend takes a `const ProcessGroup&`.
//
//   auto world = mpp::init_process_group();          // deadline: CommOptions::init_timeout
//   if (world.rank() == 0) world.send(x, 1, /*tag=*/0);
//   else                   world.recv(x, 0, 0);
//   world.all_reduce(grad);                           // sum over the ranks
//
// Ranks passed to p2p calls are ranks *of this group* (they equal global ranks for the world).
// Every wait has a deadline (CommOptions::timeout); on expiry CommTimeout names the operation
// and the peer. Tensors may have any CPU dtype and any strides.
// A ProcessGroup is a cheap handle: copies share the same connections.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/view_as_real.h>

#include <chrono>
#include <concepts>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mpp/comm/backend.hpp"
#include "mpp/comm/error.hpp"
#include "mpp/comm/group_state.hpp"
#include "mpp/comm/owned_runs.hpp"
#include "mpp/comm/reduce_op.hpp"
#include "mpp/comm/reduce_wire.hpp"
#include "mpp/comm/rendezvous.hpp"
#include "mpp/comm/request.hpp"
#include "mpp/comm/topology.hpp"
#include "mpp/error.hpp"

namespace mpp {

template <comm_backend Backend>
class Group;

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
  std::string_view backend_name() const { return state().backend.name; }

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
    return make_sub_group(std::move(ranks), member().backend);
  }

  /// The same over backend `Backend`, e.g. a Shm group of the ranks of a Gloo world:
  /// `world.new_group<mpp::Shm>({0, 1})`.
  template <comm_backend Backend>
  Group<Backend> new_group(std::vector<int> ranks) const;

  /// Every rank of this group, in its order, over backend `Backend`:
  /// `world.new_group<mpp::Shm>()`.
  template <comm_backend Backend>
  Group<Backend> new_group() const;

 private:
  ProcessGroup make_sub_group(std::vector<int> ranks, const detail::BackendOps& backend) const {
    auto& s = member();
    if (ranks.empty()) throw InvalidArgument("mpp: new_group needs at least one rank");
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size())
        throw InvalidArgument("mpp: new_group rank " + std::to_string(ranks[i]) +
                              " is outside this group of " + std::to_string(size()) + " ranks");
      if (std::count(ranks.begin(), ranks.end(), ranks[i]) > 1)
        throw InvalidArgument("mpp: new_group lists rank " + std::to_string(ranks[i]) + " twice " +
                              detail::rank_list(ranks));
    }
    auto child = std::make_shared<detail::GroupState>();
    child->store = s.store;
    child->device = s.device;
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
        detail::rank_list(child->global_ranks) + " over " + std::string(backend.name);
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
          throw InvalidArgument("mpp: split: rank " + std::to_string(rank()) +
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
      throw LogicError(
          "mpp: this ProcessGroup handle is empty; create one with "
          "mpp::init_process_group()");
    return *state_;
  }
  const detail::GroupState& member() const {
    const auto& s = state();
    if (s.rank < 0)
      throw LogicError("mpp: global rank " + std::to_string(s.global_rank) +
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
      throw InvalidArgument("mpp: " + std::string(op) + " peer rank " + std::to_string(peer) +
                            " must be another rank of this group of " + std::to_string(size()) +
                            " (this is rank " + std::to_string(rank()) + ")");
    if (tag < 0)
      throw InvalidArgument("mpp: " + std::string(op) + " tag " + std::to_string(tag) +
                            " must be >= 0");
  }

  static void check_tensor(std::string_view op, const at::Tensor& t) {
    if (!t.defined()) throw InvalidArgument("mpp: " + std::string(op) + " got an undefined tensor");
    if (t.is_sparse())
      throw InvalidArgument("mpp: " + std::string(op) +
                            " needs a dense tensor; call .to_dense() first");
  }

  Request post_send(std::string_view op, const at::Tensor& tensor, int dst, int tag) const {
    check_tensor(op, tensor);
    check_peer(op, dst, tag);
    auto info = op_info(op, dst, tag, tensor);
    if (tensor.numel() == 0) return {};
    const bool in_place = tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg();
    at::Tensor wire = in_place ? tensor : tensor.resolve_conj().resolve_neg().contiguous();
    const auto& s = member();
    if (s.backend.sends_need_transport_threads &&
        s.options.transport_threads == TransportThreads::batch)
      detail::let_transport_threads_run();
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
      throw InvalidArgument(std::string("mpp: all_reduce_mean needs a floating-point tensor "
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
    if (s.backend.all_gather_runs != nullptr) {
      auto info = op_info("all_gather_runs", -1, -1, flat, true);
      // Checks its arguments (std::invalid_argument) and queues the work; nothing else can fail.
      auto work = s.backend.all_gather_runs(*s.pg, flat, runs);
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
    if (s.backend.reduce_scatter_runs != nullptr) {
      auto info = op_info("reduce_scatter_runs", -1, -1, flat, true, reduce_op_name(op));
      // Checks the runs (std::invalid_argument) and queues the work; no work when the backend
      // does not reduce this dtype or op itself.
      if (auto work = s.backend.reduce_scatter_runs(*s.pg, flat, runs, detail::to_c10d(op)))
        return Request(std::move(work), std::move(info), flat);
    }
    detail::check_owned_runs(flat, runs, size(), "reduce_scatter_runs");
    return post_all_reduce("reduce_scatter_runs", flat, op, false);
  }

  Request post_broadcast(const at::Tensor& tensor, int root) const {
    check_tensor("broadcast", tensor);
    const auto& s = member();
    if (root < 0 || root >= size())
      throw InvalidArgument("mpp: broadcast root " + std::to_string(root) +
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

namespace detail {
/// Marks the constructor of Group<B> that trusts its caller to know the backend.
struct KnownBackend {};
}  // namespace detail

/// A process group whose type names its backend: what init_process_group<Backend>() and
/// new_group<Backend>() return, and what every comm policy that names a backend takes
/// (Communicator<C>, Pipeline, DDP, NaiveDP, ShardedOptimizer), so that a policy over one backend
/// given a group of another is a compile error. It is a ProcessGroup, for code that works over
/// any backend; a ProcessGroup whose type does not say its backend becomes a Group through
/// group_cast<Backend>(), which checks at run time.
template <comm_backend Backend>
class Group : public ProcessGroup {
 public:
  /// The backend tag (Gloo, Shm, ...).
  using backend = Backend;

  /// A handle to no group (what a rank outside a sub-group gets).
  Group() = default;
  /// `group`, known to run `Backend`: the library's own creating functions and group_cast call it.
  Group(detail::KnownBackend, ProcessGroup group) : ProcessGroup(std::move(group)) {}

  using ProcessGroup::new_group;
  /// A group of some ranks of this one over the same backend; see ProcessGroup::new_group.
  Group new_group(std::vector<int> ranks) const {
    return Group(detail::KnownBackend{}, ProcessGroup::new_group(std::move(ranks)));
  }
  /// The group of `groups` this rank belongs to, over the same backend; see ProcessGroup::split.
  Group split(const std::vector<std::vector<int>>& groups) const {
    return Group(detail::KnownBackend{}, ProcessGroup::split(groups));
  }

  /// The backend's own c10d group (backend_traits<Backend>::group_type: ShmProcessGroup for Shm,
  /// c10d::ProcessGroupGloo for Gloo), for what the library does not wrap. Its waits are not
  /// bounded by mpp's deadlines.
  auto& backend_group() const requires requires { typename backend_traits<Backend>::group_type; }
  { return static_cast<typename backend_traits<Backend>::group_type&>(c10d_group()); }
};

namespace detail {
template <class...>
inline constexpr bool always_false = false;
}  // namespace detail

/// What a type that takes a Group<Backend> does with a group of another type: stops the build
/// with the fix. Its constructor for any other group calls this.
template <comm_backend Backend, class Given>
constexpr void reject_group() {
  static_assert(detail::always_false<Given>,
                "mpp: this comm policy's backend is not the group's; give it a Group of the "
                "policy's backend: mpp::init_process_group<Backend>() or "
                "world.new_group<Backend>(ranks), or, for a ProcessGroup whose type does not say "
                "its backend, mpp::group_cast<Backend>(group), which checks at run time");
}

/// A group type other than Group<Backend>: what reject_group() turns into a compile error.
template <class Given, class Backend>
concept other_group = std::derived_from<std::remove_cvref_t<Given>, ProcessGroup> &&
    !std::same_as<std::remove_cvref_t<Given>, Group<Backend>>;

template <comm_backend Backend>
Group<Backend> ProcessGroup::new_group(std::vector<int> ranks) const {
  return Group<Backend>(detail::KnownBackend{},
                        make_sub_group(std::move(ranks), detail::backend_ops<Backend>()));
}

template <comm_backend Backend>
Group<Backend> ProcessGroup::new_group() const {
  std::vector<int> all(static_cast<std::size_t>(size()));
  std::iota(all.begin(), all.end(), 0);
  return new_group<Backend>(std::move(all));
}

/// `group` as a Group<Backend>, for a handle whose type does not say its backend (one kept as a
/// ProcessGroup). Throws mpp::InvalidArgument when the group runs another backend.
template <comm_backend Backend>
Group<Backend> group_cast(const ProcessGroup& group) {
  if (group.backend_name() != Backend::name)
    throw InvalidArgument("mpp: group_cast<" + std::string(Backend::name) + ">: the group runs " +
                          std::string(group.backend_name()) +
                          "; create it with init_process_group<" + std::string(Backend::name) +
                          ">() or world.new_group<" + std::string(Backend::name) + ">(ranks)");
  return Group<Backend>(detail::KnownBackend{}, group);
}

}  // namespace mpp
