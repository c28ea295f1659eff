#pragma once
// The rendezvous store's error, with what kind of failure it was.
#include <string>

#include "mpp/error.hpp"

namespace mpp {

/// A failure of the rendezvous store, with what kind it is so that callers can word their own
/// message (init says "rank 0 is not running", a collective's census says "rank 0 is gone").
class StoreError : public RuntimeError {
 public:
  /// What failed.
  enum class Kind {
    unreachable,  ///< nothing accepted the connection before the deadline
    not_a_store,  ///< something accepted but did not answer like this store (another program?)
    timed_out,    ///< the keys did not appear in time
    lost,         ///< the connection broke (the serving process exited or crashed)
    cannot_serve  ///< the server could not listen on its address and port
  };
  /// `message` is what what() returns.
  StoreError(Kind kind, const std::string& message) : RuntimeError(message), kind_(kind) {}
  /// What failed, for the caller's own wording.
  Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
};

}  // namespace mpp
