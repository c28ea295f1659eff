#pragma once
// Pipeline<Stages, Schedule, Comm>, micro-batching and the executor, and joining the job
// (init_process_group) to run one.
#include "mpp/comm/init.hpp"
#include "mpp/partition.hpp"
#include "mpp/pipeline/executor.hpp"
#include "mpp/pipeline/gather.hpp"
#include "mpp/pipeline/measure.hpp"
#include "mpp/pipeline/micro_batch.hpp"
#include "mpp/pipeline/pipeline.hpp"
#include "mpp/pipeline/report.hpp"
#include "mpp/pipeline/shape_header.hpp"
#include "mpp/pipeline/with_ranks.hpp"
