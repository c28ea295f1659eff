#pragma once
// Schedule search over chunk counts: given the costs measured with each number of chunks per rank
// (one chunk per rank, two in a V ...), the search of mpp/schedule/search.hpp for each, at the
// same activation memory, and the shortest of them. A rank's layers cut into V chunks do not cost
// 1/V each: every action has a fixed part (launching kernels, the messages a chunk boundary adds),
// so a V table that the costs of one chunk would predict shorter can run longer. Only costs
// measured with each chunk count tell, and only they are compared here.
//
// The same memory: a chunk holds 1/V of its rank's layers, so V chunk activations hold what one
// activation of a whole rank's layers holds. The spec's cap is counted in chunk activations of
// its own placement's chunk count V; for V' chunks per rank it becomes cap * V' / V (rounded
// down, at least 1): 1F1B's P activations of one chunk are ZB-V's 2P of two.
#include <span>

#include "mpp/schedule/search.hpp"

namespace mpp {

/// One chunk count the search may choose, with the costs measured with it.
struct ChunkCountCosts {
  int chunks_per_rank = 1;  ///< V; the costs are per stage of P * V stages
  Costs costs{};            ///< measured with V chunks per rank
  /// One cost unit in microseconds (costs measured in different runs have different units), or 0
  /// when every option's costs are in one unit.
  double unit_us = 0.0;
  /// With `unit_us`: the time from the last action to the end of the step in microseconds, which
  /// a step time adds to the makespan (measured with each chunk count, it differs a little).
  double step_end_us = 0.0;
};

/// What the search over chunk counts found: the result of the shortest option, and which.
struct ChunkCountResult {
  SearchResult best{};      ///< the search's result for the chosen option
  int option = -1;          ///< index of the option whose table `best` is; -1: none found
  int chunks_per_rank = 0;  ///< its V
  int max_in_flight = 0;    ///< the cap it was searched under, in its own chunk activations
  FixedText error{};        ///< non-empty when the options are refused or none finds a table

  /// True when an option found a sound table within its cap.
  constexpr bool ok() const { return error.empty() && option >= 0 && best.ok(); }
};

/// The cap of `spec` (chunk activations of its placement's V) for `chunks` chunks per rank: the
/// same bytes (see the file comment). 0 stays 0 (no cap).
constexpr int cap_for_chunks(const SearchSpec& spec, int chunks) {
  if (spec.max_in_flight == 0) return 0;
  const int v = spec.placement.ranks == 0 ? 1 : spec.placement.chunks_per_rank;
  const int cap = spec.max_in_flight * chunks / v;
  return cap < 1 ? 1 : cap;
}

/// Searches `spec` once per option, with that option's costs and chunk count (the spec's own
/// placement where the chunk count is its own; else looped, or free when the spec's placement is
/// free and the option has more than one chunk), under the cap for its chunk count, and keeps in
/// `out` the shortest table: predicted makespan times its unit. Of equally short ones the first
/// option's. Keep `out` off the stack at run time (it holds a table per option searched).
constexpr void search_chunk_counts_into(ChunkCountResult& out, const SearchSpec& spec,
                                        std::span<const ChunkCountCosts> options) {
  out = ChunkCountResult{};
  if (options.empty()) {
    out.error << "mpp: the search over chunk counts needs the costs of at least one chunk count";
    return;
  }
  const bool units = options.front().unit_us > 0.0;
  for (std::size_t k = 0; k < options.size(); ++k) {
    const int v = options[k].chunks_per_rank;
    if (v < 1 || v > max_chunks_per_rank) {
      out.error << "mpp: a chunk count of the search must be 1 to " << max_chunks_per_rank
                << ", not " << v;
      return;
    }
    for (std::size_t j = 0; j < k; ++j)
      if (options[j].chunks_per_rank == v) {
        out.error << "mpp: the search was given the costs of " << v
                  << " chunk(s) per rank twice; give each chunk count once";
        return;
      }
    if ((options[k].unit_us > 0.0) != units) {
      out.error << "mpp: the costs of some chunk counts give their unit (unit_us) and others do "
                   "not; give it for all (measured costs carry it) or for none (one unit)";
      return;
    }
  }
  const int own_v = spec.placement.ranks == 0 ? 1 : spec.placement.chunks_per_rank;
  double best_time = 0.0;
  detail::with_state<SearchResult>([&](SearchResult& found) {
    for (std::size_t k = 0; k < options.size(); ++k) {
      const ChunkCountCosts& option = options[k];
      SearchSpec each = spec;
      each.costs = option.costs;
      each.max_in_flight = cap_for_chunks(spec, option.chunks_per_rank);
      if (option.chunks_per_rank != own_v || spec.placement.ranks == 0) {
        each.placement = interleaved_placement(spec.ranks, option.chunks_per_rank);
        each.free_placement = spec.free_placement && option.chunks_per_rank > 1;
      }
      search_into(found, each);
      if (!found.ok()) continue;
      const double time = units ? found.figures.makespan * option.unit_us + option.step_end_us
                                : static_cast<double>(found.figures.makespan);
      if (out.option < 0 || time < best_time) {
        best_time = time;
        out.best = found;
        out.option = static_cast<int>(k);
        out.chunks_per_rank = option.chunks_per_rank;
        out.max_in_flight = each.max_in_flight;
      }
    }
    if (out.option < 0) out.error << found.error.view();
    return 0;
  });
}

}  // namespace mpp
