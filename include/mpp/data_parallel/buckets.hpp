#pragma once
// Gradient bucket planning for DDP. Standard library only: the plan is plain data, computed
// once at construction, and can be printed or tested without LibTorch.
//
// Gradients become ready during backward roughly in reverse order of registration (the last
// layer's first), so buckets are filled in that order: bucket 0 holds the last parameters and is
// the first one that can be all-reduced while the rest of the backward pass still runs. A bucket
// holds one dtype (it is one flat buffer) and at most `cap_bytes`, except that a parameter larger
// than the cap gets a bucket of its own.
#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "mpp/error.hpp"

namespace mpp {

/// PyTorch's default bucket cap (bucket_cap_mb = 25).
inline constexpr std::size_t default_bucket_bytes = std::size_t{25} * 1024 * 1024;

/// What the planner needs to know about one parameter.
struct GradSpec {
  /// Number of elements.
  std::size_t elements = 0;
  /// Bytes per element.
  std::size_t element_bytes = 4;
  int dtype = 0;  ///< any key that tells dtypes apart (e.g. c10::ScalarType cast to int)
  /// elements x element_bytes.
  constexpr std::size_t bytes() const { return elements * element_bytes; }
};

/// Parameters whose gradients share one flat buffer, all of one dtype.
struct Bucket {
  int dtype = 0;                     ///< the dtype key (GradSpec::dtype) of all its parameters
  std::vector<std::size_t> params;   ///< parameter indices, in the order their gradients fill it
  std::vector<std::size_t> offsets;  ///< element offset of each parameter in the flat buffer
  std::size_t elements = 0;          ///< elements of all its parameters
  std::size_t bytes = 0;             ///< bytes of all its parameters (over the cap only if one is)
};

/// Every parameter's bucket, as plan_buckets() cuts them.
struct BucketPlan {
  std::vector<Bucket> buckets;         ///< in launch order
  std::vector<std::size_t> bucket_of;  ///< parameter index -> bucket index
  std::vector<std::size_t> slot_of;    ///< parameter index -> position inside its bucket
};

/// Buckets in reverse registration order, each capped at `cap_bytes` (at least one parameter).
inline BucketPlan plan_buckets(std::span<const GradSpec> params, std::size_t cap_bytes) {
  if (cap_bytes == 0)
    throw InvalidArgument(
        "mpp: DDP bucket cap must be at least 1 byte (got 0); "
        "use e.g. mpp::default_bucket_bytes (25 MiB)");
  BucketPlan plan;
  plan.bucket_of.assign(params.size(), 0);
  plan.slot_of.assign(params.size(), 0);
  std::vector<Bucket> open;  // at most one open bucket per dtype
  auto close = [&](std::size_t i) {
    plan.buckets.push_back(std::move(open[i]));
    open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (std::size_t k = params.size(); k-- > 0;) {
    const GradSpec& p = params[k];
    std::size_t i = 0;
    while (i < open.size() && open[i].dtype != p.dtype) ++i;
    if (i < open.size() && open[i].bytes + p.bytes() > cap_bytes && !open[i].params.empty()) {
      close(i);
      i = open.size();
    }
    if (i == open.size()) {
      open.emplace_back();
      open.back().dtype = p.dtype;
    }
    Bucket& b = open[i];
    b.params.push_back(k);
    b.offsets.push_back(b.elements);
    b.elements += p.elements;
    b.bytes += p.bytes();
  }
  while (!open.empty()) close(0);
  for (std::size_t b = 0; b < plan.buckets.size(); ++b)
    for (std::size_t s = 0; s < plan.buckets[b].params.size(); ++s) {
      plan.bucket_of[plan.buckets[b].params[s]] = b;
      plan.slot_of[plan.buckets[b].params[s]] = s;
    }
  return plan;
}

}  // namespace mpp
