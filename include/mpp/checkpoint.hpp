#pragma once
/// \namespace mpp::checkpoint
/// Checkpoints loaded whole or refused, readable by torch.load; sharded across ranks.
#include "mpp/checkpoint/checkpoint.hpp"
#include "mpp/checkpoint/sharded.hpp"
#include "mpp/checkpoint/sharded_optimizer.hpp"
