#pragma once
// mpp/schedule.hpp — compile-time pipeline schedules and their static verification.
// Standard library only: no LibTorch.

/// \namespace mpp
/// mpp's public API. The launcher, checkpoints, models, traces and utilities have namespaces of
/// their own below it; names in a namespace `detail` are internals.

#include "mpp/schedule/action.hpp"
#include "mpp/schedule/action_format.hpp"
#include "mpp/schedule/builtin.hpp"
#include "mpp/schedule/builtin_schedule.hpp"
#include "mpp/schedule/chunk_count_search.hpp"
#include "mpp/schedule/comm_semantics.hpp"
#include "mpp/schedule/compiled_rows.hpp"
#include "mpp/schedule/concepts.hpp"
#include "mpp/schedule/cost_model.hpp"
#include "mpp/schedule/cpp_export.hpp"
#include "mpp/schedule/custom.hpp"
#include "mpp/schedule/dual_pipe_v.hpp"
#include "mpp/schedule/gpipe.hpp"
#include "mpp/schedule/interleaved_1f1b.hpp"
#include "mpp/schedule/limits.hpp"
#include "mpp/schedule/lowering.hpp"
#include "mpp/schedule/naive.hpp"
#include "mpp/schedule/one_f_one_b.hpp"
#include "mpp/schedule/placement.hpp"
#include "mpp/schedule/plan.hpp"
#include "mpp/schedule/policies.hpp"
#include "mpp/schedule/render.hpp"
#include "mpp/schedule/search.hpp"
#include "mpp/schedule/table.hpp"
#include "mpp/schedule/timed_event.hpp"
#include "mpp/schedule/v_half.hpp"
#include "mpp/schedule/v_min.hpp"
#include "mpp/schedule/v_shape_block.hpp"
#include "mpp/schedule/v_zero_bubble.hpp"
#include "mpp/schedule/verify.hpp"
#include "mpp/schedule/zero_bubble_h1.hpp"
#include "mpp/schedule/zero_bubble_h2.hpp"
#include "mpp/schedule/zero_bubble_v.hpp"
