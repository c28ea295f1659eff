#pragma once
// The job's ranks over each transport the benchmarks compare: the world over Gloo, and the same
// ranks over Shm (shared memory; every rank of a benchmark runs on this host). Every rank creates
// them once, in the same order, before registering its benchmarks.
#include <type_traits>

#include "mpp/comm.hpp"

namespace mpp::bench {

class Transports {
 public:
  Transports() : gloo_(mpp::init_process_group()), shm_(gloo_.new_group<mpp::Shm>()) {}

  /// The group a comm backend runs on: `transports.group<typename Comm::backend>()`.
  template <class Backend>
  const mpp::Group<Backend>& group() const {
    if constexpr (std::is_same_v<Backend, mpp::Shm>)
      return shm_;
    else
      return gloo_;
  }
  const mpp::Group<mpp::Gloo>& gloo() const { return gloo_; }

 private:
  mpp::Group<mpp::Gloo> gloo_;
  mpp::Group<mpp::Shm> shm_;
};

}  // namespace mpp::bench
