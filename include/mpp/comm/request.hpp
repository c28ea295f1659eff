#pragma once
// A pending communication: the handle isend/irecv/iall_reduce/ibroadcast return.
//
// Rules:
//  * wait() blocks until the operation completes or its deadline passes; on failure it throws
//    CommTimeout / CommError naming the operation and the peer rank.
//  * A Request destroyed while still pending waits in its destructor, so a forgotten handle
//    can neither leave a send half-done nor let its buffers die under Gloo. A destructor cannot
//    throw: if that implicit wait fails, the error is printed and the process terminates. Call
//    wait() yourself to handle errors. During stack unwinding (another error is already on its
//    way) the pending operation is abandoned instead of waited.
//  * Tensors that Gloo cannot use in place (non-contiguous, or a dtype Gloo cannot reduce) go
//    through a contiguous staging tensor; wait() copies the result back into the caller's tensor.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpp/comm/error.hpp"

namespace mpp {

namespace detail {

inline std::string describe_tensor(const at::Tensor& t) {
  std::ostringstream out;
  out << c10::toString(t.scalar_type()) << t.sizes();
  return out.str();
}

/// What a pending operation is, for error messages. Only cheap fields are filled per call; the
/// text is composed when an error is raised, so the fast path builds no strings.
struct OpInfo {
  std::string_view operation;  // "send", "recv", "all_reduce", ... (string literals)
  int peer = -1;               // group rank of the peer; -1 for collectives
  int peer_global = -1;        // the same peer's global rank (differs inside sub-groups)
  int tag = -1;
  int rank = -1;  // this rank in the group
  std::chrono::milliseconds deadline{0};
  at::Tensor tensor;           // the caller's tensor (for its dtype and shape)
  std::string_view reduction;  // collectives: "sum", "max", ...
  int root = -1;               // broadcast: the root's group rank
  bool collective = false;
  std::shared_ptr<const std::vector<int>> group;  // global ranks of the group
  bool world = true;                              // the group is the whole job
  // Collectives only: after a failure, asks the group which members are still there; returns
  // "; rank(s) [..] did not report ..." (empty when everyone answered). Runs on the error path.
  std::function<std::string()> find_silent;

  std::string subject() const {
    std::string s;
    if (!reduction.empty()) s += std::string(reduction) + " of ";
    if (tensor.defined()) s += describe_tensor(tensor);
    if (root >= 0) s += " from rank " + std::to_string(root);
    if (collective && group) {
      if (!s.empty()) s += " ";
      if (world) {
        s += "over the world of " + std::to_string(group->size());
      } else {
        s += "over the group [";
        for (std::size_t i = 0; i < group->size(); ++i)
          s += (i ? ", " : "") + std::to_string((*group)[i]);
        s += "]";
      }
    }
    return s;
  }
};

inline std::string error_text(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e))
    return c10_error->what_without_backtrace();
  return e.what();
}

inline bool looks_like_timeout(const std::string& text) {
  return text.find("imed out") != std::string::npos || text.find("imeout") != std::string::npos;
}

inline std::string op_heading(const OpInfo& info) {
  std::string s = "mpp: " + std::string(info.operation);
  if (info.peer >= 0) {
    s += (info.operation.substr(0, 4) == "recv" || info.operation == "irecv") ? " from rank "
                                                                              : " to rank ";
    s += std::to_string(info.peer);
    if (info.peer_global >= 0 && info.peer_global != info.peer)
      s += " (global rank " + std::to_string(info.peer_global) + ")";
  }
  s += " [";
  if (info.tag >= 0) s += "tag " + std::to_string(info.tag) + ", ";
  s += info.subject() + "] on rank " + std::to_string(info.rank);
  return s;
}

[[noreturn]] inline void throw_failure(const OpInfo& info, const std::string& cause,
                                       std::chrono::steady_clock::duration elapsed) {
  const bool timed_out =
      looks_like_timeout(cause) || elapsed >= info.deadline - std::chrono::milliseconds(50);
  // A collective's error knows no peer: the census names who did not fail with this rank.
  const std::string silent = info.peer < 0 && info.find_silent ? info.find_silent() : "";
  if (timed_out) {
    std::string who = info.peer >= 0 ? "rank " + std::to_string(info.peer) +
                                           " may be stuck, dead, "
                                           "or waiting on another tag"
                                     : "some rank of the group has not joined this collective "
                                       "(stuck, dead, or calling collectives in another order)";
    throw CommTimeout(std::string(info.operation), info.peer, info.deadline,
                      op_heading(info) + " did not complete within " +
                          std::to_string(info.deadline.count()) + " ms; " + who +
                          " (raise the deadline with CommOptions::timeout or MPP_TIMEOUT_S if the "
                          "peer is just slow)" +
                          silent + " [c10d: " + cause + "]");
  }
  std::string hint = cause.find("closed by peer") != std::string::npos ||
                             cause.find("Connection reset") != std::string::npos
                         ? "; the peer process exited or crashed - look at its log"
                         : "";
  throw CommError(std::string(info.operation), info.peer,
                  op_heading(info) + " failed: " + cause + hint + silent);
}

}  // namespace detail

/// A pending communication, as isend(), irecv(), iall_reduce(), ... return it: wait() it, or its
/// destructor does. Move-only.
class Request {
 public:
  /// An already-completed request (what a blocking policy returns).
  Request() = default;

  /// Wraps c10d's `work`; made by ProcessGroup. `staging` is the buffer c10d reads or writes (kept
  /// alive until completion); wait() divides it by `divisor` unless that is 0, then copies it into
  /// `target` when that is defined.
  Request(c10::intrusive_ptr<c10d::Work> work, detail::OpInfo info, at::Tensor staging = {},
          at::Tensor target = {}, double divisor = 0.0)
      : work_(std::move(work)),
        info_(std::move(info)),
        staging_(std::move(staging)),
        target_(std::move(target)),
        divisor_(divisor),
        exceptions_at_start_(std::uncaught_exceptions()) {}

  /// Takes over `other`'s operation; `other` is left completed.
  Request(Request&& other) noexcept
      : work_(std::exchange(other.work_, {})),
        info_(std::move(other.info_)),
        staging_(std::move(other.staging_)),
        target_(std::move(other.target_)),
        divisor_(other.divisor_),
        exceptions_at_start_(other.exceptions_at_start_) {}

  /// Waits for the request being replaced first (so no operation is silently dropped).
  Request& operator=(Request&& other) {
    if (this != &other) {
      wait();
      work_ = std::exchange(other.work_, {});
      info_ = std::move(other.info_);
      staging_ = std::move(other.staging_);
      target_ = std::move(other.target_);
      divisor_ = other.divisor_;
      exceptions_at_start_ = other.exceptions_at_start_;
    }
    return *this;
  }

  /// Not copyable: one handle per operation.
  Request(const Request&) = delete;
  /// Not copyable: one handle per operation.
  Request& operator=(const Request&) = delete;

  /// Waits while pending; if that wait fails, prints the error and terminates the process. During
  /// stack unwinding the operation is abandoned instead.
  ~Request() {
    if (!work_) return;
    if (std::uncaught_exceptions() > exceptions_at_start_) return;  // unwinding: abandon
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "%s\nmpp: a pending Request was destroyed without wait() and its operation "
                   "failed; terminating (call wait() to handle the error)\n",
                   e.what());
      std::fflush(stderr);
      std::terminate();
    }
  }

  /// True until wait() has returned (or the request was created completed).
  bool pending() const noexcept { return static_cast<bool>(work_); }

  /// Non-blocking: has the operation finished (successfully or not)? Call wait() to collect it.
  bool ready() const { return !work_ || work_->isCompleted(); }

  /// Blocks until done or the deadline passes; throws CommTimeout / CommError on failure.
  void wait() {
    if (!work_) return;
    auto work = std::exchange(work_, {});
    const auto start = std::chrono::steady_clock::now();
    try {
      work->wait(info_.deadline);
    } catch (const std::exception& e) {
      detail::throw_failure(info_, detail::error_text(e), std::chrono::steady_clock::now() - start);
    }
    if (divisor_ != 0.0) staging_.div_(divisor_);
    if (target_.defined()) target_.copy_(staging_);
    staging_ = at::Tensor();
    target_ = at::Tensor();
  }

  /// What the operation is (name, peer, tag, tensor), as its error messages describe it.
  const detail::OpInfo& info() const noexcept { return info_; }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  detail::OpInfo info_;
  at::Tensor staging_;  // the buffer Gloo reads or writes (kept alive until completion)
  at::Tensor target_;   // caller's tensor to copy the result into, when staging differs from it
  double divisor_ = 0.0;
  int exceptions_at_start_ = 0;
};

/// Waits for every request of a range, in order; the first failure is rethrown after the others
/// have been waited or abandoned.
template <class Range>
void wait_all(Range& requests) {
  std::exception_ptr first;
  for (Request& r : requests) {
    try {
      r.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace mpp
