#pragma once
// The searched schedules against the built-ins at the same activation memory, on 2 or 4 ranks
// over Shm (search_matrix.cpp); and the measurement their search starts from.
#include <string>

#include "../common/transports.hpp"

namespace mpp::bench {

/// Registers the searched-against-built-ins benchmarks for the world's size. False when the
/// search matrix has no entry for that many ranks (it has 2 and 4).
bool register_search_matrix(const Transports& transports);

/// Measures each model's per-stage costs on the world's ranks over Shm (ZB-H1 for one chunk per
/// rank, ZB-V for two in a V, with the whole backwards of 1F1B and interleaved 1F1B; the four in
/// rotating rounds, as the search matrix times its pipelines, and the medians of their steps) and
/// writes them as costs JSON into `dir`, with the cores the ranks ran on, one file per model, rank
/// count and chunk count: what the searched schedules are found from. On fewer cores than ranks
/// the computes are timed in core time (MPP_TRACE_CORE_TIME).
void write_measured_costs(const Transports& transports, const std::string& dir);

}  // namespace mpp::bench
