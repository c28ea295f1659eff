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
// The choice is made at compile time (`if constexpr`); there is no virtual call of our own.
#include <vector>

#include "mpp/comm/policy.hpp"
#include "mpp/comm/process_group.hpp"

namespace mpp {

/// Requests of one step that must all complete before the step ends.
class PendingRequests {
 public:
  void add(Request r) {
    if (r.pending()) requests_.push_back(std::move(r));
  }
  std::size_t size() const { return requests_.size(); }
  /// Waits for all of them (the first error is rethrown after the others were waited).
  void wait_all() {
    mpp::wait_all(requests_);
    requests_.clear();
  }

 private:
  std::vector<Request> requests_;
};

template <comm_policy C>
class Communicator {
 public:
  using policy = C;
  using backend = typename C::backend;
  static constexpr bool blocking = C::semantics == CommSemantics::rendezvous;

  explicit Communicator(ProcessGroup group) : group_(std::move(group)) {
    require_backend<C>(group_, "Communicator<" + comm_display_name<C>() + ">");
  }

  const ProcessGroup& group() const { return group_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  int next_rank() const { return group_.next_rank(); }
  int prev_rank() const { return group_.prev_rank(); }
  bool is_first() const { return group_.is_first(); }
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

  void all_reduce(const at::Tensor& t, ReduceOp op = ReduceOp::sum) const {
    group_.all_reduce(t, op);
  }
  void all_reduce_mean(const at::Tensor& t) const { group_.all_reduce_mean(t); }
  void broadcast(const at::Tensor& t, int root) const { group_.broadcast(t, root); }
  void barrier() const { group_.barrier(); }

 private:
  ProcessGroup group_;
};

}  // namespace mpp
