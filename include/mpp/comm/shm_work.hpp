#pragma once
// The Work objects of the Shm backend: ShmWork, completed by the group's worker thread (all-reduce,
// all_gather_runs, reduce_scatter_runs and what is queued behind them), and ShmMailWork, a send,
// receive or broadcast through the rings of the mailbox.
#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mpp/comm/error.hpp"
#include "mpp/comm/shm_mailbox.hpp"
#include "mpp/comm/shm_reduce.hpp"
#include "mpp/config.hpp"
#include "mpp/error.hpp"

namespace mpp {

/// The Work of a Shm all-reduce or all-gather (or of a barrier queued behind them): completed by
/// the group's worker thread. Its wait() names what the worker waits for when the caller's deadline
/// passes.
class ShmWork : public c10d::Work {
 public:
  /// Made by ShmProcessGroup: work `number` in the group's submission order; `progress` is where
  /// the worker reports what it waits for.
  ShmWork(int rank, c10d::OpType type, std::uint64_t number,
          std::shared_ptr<detail::shm::Progress> progress)
      : c10d::Work(rank, type), number_(number), progress_(std::move(progress)) {}

  /// Waits until the worker has completed it and rethrows the worker's error; past `timeout` throws
  /// std::runtime_error naming what the worker waits for.
  MPP_DECL bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;

  /// Its place in the group's submission order (1 for the first collective; a barrier carries the
  /// number of the collective queued before it).
  std::uint64_t number() const { return number_; }

 private:
  friend class ShmProcessGroup;
  void complete(std::exception_ptr error) { finish(std::move(error)); }

  std::uint64_t number_;
  std::shared_ptr<detail::shm::Progress> progress_;
  // what to run
  bool barrier_ = false;
  c10d::BarrierOptions barrier_options_;
  at::Tensor data_;    // contiguous: the caller's tensor, or a staging copy of it
  at::Tensor target_;  // the caller's tensor when data_ is a staging copy
  detail::shm::RedOp op_ = detail::shm::RedOp::SUM;
  detail::shm::Kind kind_ = detail::shm::Kind::all_reduce;
  std::vector<std::pair<std::int64_t, std::int64_t>> runs_;  // every rank's run (all-gather,
                                                             // reduce-scatter)
};

/// The Work of Shm sends and receives (a broadcast is several): waiting makes progress on the
/// group's rings (shm_mailbox.hpp). A receive into a non-contiguous tensor lands in a contiguous
/// one and is copied over when the wait returns.
class ShmMailWork : public c10d::Work {
 public:
  /// Made by ShmProcessGroup: the sends and receives `ops` posted on `mailbox`. A wait without a
  /// timeout is bounded by `default_timeout`; `target`, when defined, is the caller's
  /// non-contiguous tensor the first receive is copied into.
  ShmMailWork(int rank, c10d::OpType type, std::shared_ptr<detail::shm::Mailbox> mailbox,
              std::vector<std::shared_ptr<detail::shm::MailOp>> ops,
              std::chrono::milliseconds default_timeout, at::Tensor target = {})
      : c10d::Work(rank, type),
        mailbox_(std::move(mailbox)),
        ops_(std::move(ops)),
        default_timeout_(default_timeout),
        target_(std::move(target)) {}

  /// Non-blocking: whether every send and receive is done (moves the rings along).
  bool isCompleted() override { return done_ || mailbox_->test(ops_); }

  /// Without a timeout (c10d's kNoTimeout), the group's deadline applies.
  MPP_DECL bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;

 private:
  std::shared_ptr<detail::shm::Mailbox> mailbox_;
  std::vector<std::shared_ptr<detail::shm::MailOp>> ops_;
  std::chrono::milliseconds default_timeout_;
  at::Tensor target_;
  bool done_ = false;
};

}  // namespace mpp

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/shm_work.ipp"
#endif
