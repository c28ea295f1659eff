#pragma once
// The communication layer: environment, process groups, p2p and collectives, comm policies.
#include "mpp/comm/backend.hpp"
#include "mpp/comm/communicator.hpp"
#include "mpp/comm/env.hpp"
#include "mpp/comm/error.hpp"
#include "mpp/comm/policy.hpp"
#include "mpp/comm/process_group.hpp"
#include "mpp/comm/reduce_op.hpp"
#include "mpp/comm/request.hpp"
#include "mpp/comm/topology.hpp"
