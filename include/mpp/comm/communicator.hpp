#pragma once
// A comm policy applied to a process group: what a pipeline executor calls for the SEND/RECV
// actions of its table. Both policies have the same members, so an executor is written once:
//
//   template <comm_policy C> void step(const Communicator<C>& comm, ...) {
//     PendingRequests pending;
//     Request r = comm.recv(activation, comm.prev_rank(), tag);   // RECV_F
//     r.wait();                                                   // before using `activation`
//     ...
//     pending.add(comm.send(output, comm.next_rank(), tag));      // SEND_F
//     ...
//     pending.wait_all();                                         // end of the step
//   }
//
//  * Blocking<B>: send/recv complete before they return (the Request is already done). Gloo's
//    send completes only when the peer receives, so the schedule's lowering must order the
//    actions of neighbours so that they never both send first.
//  * Async<B>: send/recv are posted and return pending Requests; receives can be posted ahead
//    of time. The executor waits each one before it uses the buffer and at the end of the step.
// The choice is made at compile time (`if constexpr`); there is no virtual call of our own. The
// group's backend is the policy's by type: Communicator<Async<Shm>> takes a Group<Shm>.
#include <vector>

#include "mpp/comm/policy.hpp"
#include "mpp/comm/process_group.hpp"

namespace mpp {

/// Requests of one step that must all complete before the step ends.
class PendingRequests {
 public:
  /// Keeps `r` while it is pending (a completed request is dropped at once).
  void add(Request r) {
    if (r.pending()) requests_.push_back(std::move(r));
  }
  /// Requests kept and not yet waited.
  std::size_t size() const { return requests_.size(); }
  /// Waits for all of them (the first error is rethrown after the others were waited).
  void wait_all() {
    mpp::wait_all(requests_);
    requests_.clear();
  }

 private:
  std::vector<Request> requests_;
};

/// A process group seen through comm policy C: send() and recv() complete before they return
/// (Blocking) or return pending Requests (Async), so an executor is written once for both.
template <comm_policy C>
class Communicator {
 public:
  /// The comm policy (`Blocking<B>` or `Async<B>`).
  using policy = C;
  /// The policy's backend tag (Gloo, Shm, ...).
  using backend = typename C::backend;
  /// True under rendezvous semantics (`Blocking<B>`): send() and recv() return completed Requests.
  static constexpr bool blocking = C::semantics == CommSemantics::rendezvous;

  /// Wraps `group`, a group of C's backend.
  explicit Communicator(Group<backend> group) : group_(std::move(group)) {}
  /// A group of another backend (or one whose type does not say it) does not compile.
  template <other_group<backend> Given>
  explicit Communicator(Given&&) {
    reject_group<backend, Given>();
  }

  /// The underlying process group.
  const Group<backend>& group() const { return group_; }
  /// This rank in the group, in [0, size()).
  int rank() const { return group_.rank(); }
  /// Number of ranks in the group.
  int size() const { return group_.size(); }
  /// The rank of the next stage; -1 on the last stage.
  int next_rank() const { return group_.next_rank(); }
  /// The rank of the previous stage; -1 on the first stage.
  int prev_rank() const { return group_.prev_rank(); }
  /// Whether this rank runs the first stage (rank 0).
  bool is_first() const { return group_.is_first(); }
  /// Whether this rank runs the last stage (rank size() - 1).
  bool is_last() const { return group_.is_last(); }

  /// Blocking: returns once `dst` has the tensor. Async: returns the pending send.
  [[nodiscard]] Request send(const at::Tensor& tensor, int dst, int tag) const {
    if constexpr (blocking) {
      group_.send(tensor, dst, tag);
      return {};
    } else {
      return group_.isend(tensor, dst, tag);
    }
  }

  /// Blocking: returns once `tensor` holds the data. Async: returns the pending receive.
  [[nodiscard]] Request recv(const at::Tensor& tensor, int src, int tag) const {
    if constexpr (blocking) {
      group_.recv(tensor, src, tag);
      return {};
    } else {
      return group_.irecv(tensor, src, tag);
    }
  }

  /// Blocking: reduces `t` in place over the group with `op` (every rank of the group calls it).
  void all_reduce(const at::Tensor& t, ReduceOp op = ReduceOp::sum) const {
    group_.all_reduce(t, op);
  }
  /// Blocking: averages `t` in place over the group (floating-point or complex tensors).
  void all_reduce_mean(const at::Tensor& t) const { group_.all_reduce_mean(t); }
  /// Blocking: copies `root`'s `t` into every rank's `t`.
  void broadcast(const at::Tensor& t, int root) const { group_.broadcast(t, root); }
  /// Returns once every rank of the group has called it.
  void barrier() const { group_.barrier(); }

 private:
  Group<backend> group_;
};

}  // namespace mpp
