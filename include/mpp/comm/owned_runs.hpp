#pragma once
// Runs of a flat tensor: every rank of a group owns one {offset, numel} run, the runs tiling the
// tensor (ZeRO's shards). What all_gather_runs and reduce_scatter_runs take, on every backend.
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mpp/error.hpp"

namespace mpp {

namespace detail {

/// What all_gather_runs needs, on every backend: a flat contiguous tensor and one run
/// {offset, numel} per rank, the runs tiling the tensor. Throws std::invalid_argument naming
/// the first thing wrong.
inline void check_owned_runs(const at::Tensor& flat,
                             const std::vector<std::pair<std::int64_t, std::int64_t>>& runs,
                             int ranks, const std::string& call = "all_gather_runs") {
  if (!flat.defined() || flat.layout() != at::kStrided || flat.dim() != 1 ||
      !flat.is_contiguous() || flat.is_conj() || flat.is_neg())
    throw InvalidArgument(
        "mpp: " + call + " needs a flat contiguous tensor (got " +
        (flat.defined()
             ? std::to_string(flat.dim()) + " dimensions" +
                   (flat.is_contiguous() ? "" : ", not contiguous") +
                   (flat.is_conj() || flat.is_neg() ? ", a lazy conjugate or negative view" : "")
             : std::string("an undefined tensor")) +
        "); pass tensor.view(-1), or resolve_conj() / resolve_neg() first");
  if (runs.size() != static_cast<std::size_t>(ranks))
    throw InvalidArgument("mpp: " + call + " needs one run per rank of the group (" +
                          std::to_string(ranks) + "), got " + std::to_string(runs.size()));
  auto sorted = runs;
  std::sort(sorted.begin(), sorted.end());
  std::int64_t covered = 0;
  for (const auto& [offset, numel] : sorted) {
    if (numel < 0 || offset != covered)
      throw InvalidArgument(
          "mpp: " + call + ": the runs must tile the tensor of " + std::to_string(flat.numel()) +
          " elements without gaps or overlaps; element " + std::to_string(covered) + " is " +
          (offset > covered ? "owned by no rank" : "owned twice") +
          " (runs are {offset, numel} per rank)");
    covered += numel;
  }
  if (covered != flat.numel())
    throw InvalidArgument("mpp: " + call + ": the runs cover " + std::to_string(covered) +
                          " of the tensor's " + std::to_string(flat.numel()) + " elements");
}

}  // namespace detail

}  // namespace mpp
