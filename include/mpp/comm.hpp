#pragma once
// The communication layer: environment, joining the job, process groups (typed by backend), p2p
// and collectives, comm policies, the Shm backend.
#include "mpp/comm/backend.hpp"
#include "mpp/comm/communicator.hpp"
#include "mpp/comm/env.hpp"
#include "mpp/comm/error.hpp"
#include "mpp/comm/init.hpp"
#include "mpp/comm/policy.hpp"
#include "mpp/comm/process_group.hpp"
#include "mpp/comm/reduce_op.hpp"
#include "mpp/comm/request.hpp"
#include "mpp/comm/shm_group.hpp"
#include "mpp/comm/topology.hpp"
