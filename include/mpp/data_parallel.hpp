#pragma once
// Data parallelism: replicas, naive DP, DDP, the sharded optimizer, the distributed sampler,
// the DP x PP mesh, and joining the job (init_process_group) to run them.
#include "mpp/comm/init.hpp"
#include "mpp/data_parallel/bucketed_gradients.hpp"
#include "mpp/data_parallel/buckets.hpp"
#include "mpp/data_parallel/ddp.hpp"
#include "mpp/data_parallel/hybrid.hpp"
#include "mpp/data_parallel/mesh.hpp"
#include "mpp/data_parallel/naive_dp.hpp"
#include "mpp/data_parallel/replicas.hpp"
#include "mpp/data_parallel/sampler.hpp"
#include "mpp/data_parallel/sharded_optimizer.hpp"
