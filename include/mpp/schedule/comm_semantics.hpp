#pragma once
// How a communication policy's point-to-point operations behave, as far as a schedule cares.
// Lives in schedule/ (standard library only) so that the verifier can reason about comm
// policies without seeing LibTorch; mpp/comm/policy.hpp maps each policy to one of these.

namespace mpp {

/// How a comm policy's sends and receives complete, which decides how a table is lowered and
/// which orders deadlock.
enum class CommSemantics {
  rendezvous,  ///< a send completes only when the peer has received (Gloo's blocking send)
  buffered,    ///< sends are posted and waited later; receives may be posted early (isend/irecv)
};

}  // namespace mpp
