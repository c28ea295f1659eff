#pragma once
// How many cores the ranks of a group share: the CPUs any of them may run on (each rank's
// affinity mask, united over the group by one all-reduce; a rank's own mask is not it, since
// mpprun binds each rank to a core of its own when they fit). What the cost model's Costs::cores
// asks for when ranks outnumber cores (trace/core_time_while_shared.hpp times computes for it).
//
//   const int cores = mpp::shared_cores(world);  // every rank calls it; 2 on a 2-core host
#include <ATen/ops/zeros.h>

#include <sched.h>

#include <cstdint>

#include "mpp/launch/cpu_binding.hpp"

namespace mpp {

/// The number of CPUs the ranks of `group` may run on together, for ranks on one host (CPU
/// indices of different hosts would be counted as one). Collective: every rank of the group calls
/// it, and every rank gets the same number.
template <class Group>
int shared_cores(const Group& group) {
  at::Tensor used = at::zeros({CPU_SETSIZE}, at::kFloat);
  for (const int cpu : launch::allowed_cpus()) used[cpu] = 1.0f;
  group.all_reduce(used);
  return static_cast<int>(used.gt(0).sum().template item<std::int64_t>());
}

}  // namespace mpp
