#pragma once
// Which CPU each rank of one node runs on. Ranks that exchange small messages wait for each
// other in microseconds; when the scheduler queues two of them on one CPU (a woken process often
// lands beside its waker), each message waits for the other rank's time slice instead. Binding
// rank r to the r-th CPU the launcher may use (as mpirun and srun do by default) keeps them apart.
// Standard library and POSIX only: no LibTorch.
#include <sched.h>

#include <vector>
#include "mpp/config.hpp"

namespace mpp::launch {

/// The CPUs this process may run on, in increasing order.
MPP_DECL std::vector<int> allowed_cpus();

/// One CPU per local rank (`result[r]` for rank r) when `ranks` fit on the allowed CPUs, one
/// each; empty when they do not (more ranks than CPUs): then the scheduler places them.
MPP_DECL std::vector<int> cpu_binding(int ranks);

}  // namespace mpp::launch

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/launch/impl/cpu_binding.ipp"
#endif
