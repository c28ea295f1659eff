#pragma once
// Splitting a batch into micro-batches, and weighing their losses.
//
// A batch of B samples is cut into M chunks along dimension 0; when M does not divide B the first
// B mod M chunks get one sample more. Each chunk's loss is multiplied by size/B, so that for a
// loss that is a mean over samples the sum of the weighted chunk losses — and the accumulated
// gradient — equals the full batch's mean, exactly as the monolith computes it.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpp/error.hpp"

namespace mpp {

/// A batch that cannot be cut into the schedule's micro-batches (or a tensor that does not match
/// the plan).
struct MicroBatchError : InvalidArgument {
  /// Takes the message, as std::invalid_argument does.
  using InvalidArgument::InvalidArgument;
};

/// How a batch is cut into micro-batches along dimension 0.
struct MicroBatchPlan {
  /// Samples in the batch (B).
  std::int64_t batch = 0;
  /// Samples of each micro-batch; the first B mod M have one more.
  std::vector<std::int64_t> sizes;
  /// First sample of each micro-batch in the batch.
  std::vector<std::int64_t> offsets;

  /// Number of micro-batches (M).
  int count() const { return static_cast<int>(sizes.size()); }
  /// Whether every micro-batch has the same size (M divides B).
  bool even() const {
    return sizes.empty() || batch % static_cast<std::int64_t>(sizes.size()) == 0;
  }
  /// The factor a chunk's mean loss is multiplied by: its share of the batch.
  double weight(int micro_batch) const {
    return static_cast<double>(sizes[static_cast<std::size_t>(micro_batch)]) /
           static_cast<double>(batch);
  }
};

// [quote:plan]
/// `who` names the schedule in messages ("GPipe<8>"); `need_equal` rejects uneven splits.
inline MicroBatchPlan plan_micro_batches(std::int64_t batch, int micro_batches,
                                         const std::string& who, bool need_equal = false) {
  if (micro_batches < 1)
    throw MicroBatchError("mpp: " + who + " needs at least one micro-batch (got " +
                          std::to_string(micro_batches) + ")");
  if (batch < micro_batches)
    throw MicroBatchError("mpp: " + who + " splits each batch into " +
                          std::to_string(micro_batches) + " micro-batches but the batch has only " +
                          std::to_string(batch) + " samples; use a batch of at least " +
                          std::to_string(micro_batches) + " samples or fewer micro-batches");
  if (need_equal && batch % micro_batches != 0)
    throw MicroBatchError("mpp: " + who + " needs equal micro-batches but a batch of " +
                          std::to_string(batch) + " samples does not split into " +
                          std::to_string(micro_batches) + "; use a batch that is a multiple of " +
                          std::to_string(micro_batches));
  MicroBatchPlan plan;
  plan.batch = batch;
  std::int64_t offset = 0;
  for (int i = 0; i < micro_batches; ++i) {
    const std::int64_t size = batch / micro_batches + (i < batch % micro_batches ? 1 : 0);
    plan.sizes.push_back(size);
    plan.offsets.push_back(offset);
    offset += size;
  }
  return plan;
}
// [/quote:plan]

/// Views (no copies) of `batch`'s chunks along dimension 0.
inline std::vector<at::Tensor> split_micro_batches(const at::Tensor& batch,
                                                   const MicroBatchPlan& plan) {
  if (batch.dim() < 1 || batch.size(0) != plan.batch)
    throw MicroBatchError("mpp: the tensor to split has " +
                          (batch.dim() < 1 ? std::string("no batch dimension")
                                           : std::to_string(batch.size(0)) + " samples") +
                          " but the plan is for " + std::to_string(plan.batch) +
                          "; pass inputs and targets with the same batch size along dimension 0");
  std::vector<at::Tensor> chunks;
  chunks.reserve(plan.sizes.size());
  for (std::size_t i = 0; i < plan.sizes.size(); ++i)
    chunks.push_back(batch.narrow(0, plan.offsets[i], plan.sizes[i]));
  return chunks;
}

}  // namespace mpp
