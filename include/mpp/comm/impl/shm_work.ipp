#pragma once
// The definitions of shm_work.hpp's functions that are not templates: included by the header
// (inline) unless MPP_SEPARATE_COMPILATION is defined, else compiled once by mpp/impl/src.hpp.
#include "mpp/comm/shm_work.hpp"

namespace mpp {

bool ShmWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == ::kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    lock.unlock();
    throw RuntimeError("mpp: " + std::string(barrier_ ? "barrier after " : "") +
                       detail::shm::kind_name(kind_) + " #" + std::to_string(number_) +
                       " over shared memory timed out after " +
                       detail::shm::duration_text(timeout) + ": " + progress_->describe(number_));
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

bool ShmMailWork::wait(std::chrono::milliseconds timeout) {
  if (done_) return true;
  mailbox_->wait(ops_, timeout == ::kNoTimeout ? default_timeout_ : timeout);
  done_ = true;
  if (target_.defined()) target_.copy_(ops_.front()->tensor);
  target_ = at::Tensor();
  return true;
}

}  // namespace mpp
