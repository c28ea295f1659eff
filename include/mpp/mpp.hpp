#pragma once
// Everything mpp offers users, in one include: schedules and their verifier, partitions, the
// communication layer, pipelines, data parallelism, checkpoints, traces and the course's models.
// The launcher (mpp/launch/) is the mpprun tool's and is not included. Each part can also be
// included alone (mpp/schedule.hpp needs no LibTorch); a translation unit that includes this
// header costs the compile time of <torch/torch.h>'s narrower parts that mpp uses.
#include "mpp/checkpoint.hpp"
#include "mpp/comm.hpp"
#include "mpp/data_parallel.hpp"
#include "mpp/error.hpp"
#include "mpp/models.hpp"
#include "mpp/partition.hpp"
#include "mpp/pipeline.hpp"
#include "mpp/schedule.hpp"
#include "mpp/trace.hpp"
