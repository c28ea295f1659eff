#pragma once
// The Shm backend's reduction kernels and bookkeeping: what kind of collective a chunk belongs to,
// which part of every rank's run a chunk holds, and the elementwise reduction of one chunk from
// every rank's slot, in rank order (so every rank gets the same bits).
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "mpp/comm/shm_segment.hpp"
#include "mpp/config.hpp"
#include "mpp/error.hpp"

namespace mpp::detail::shm {

using RedOp = c10d::ReduceOp::RedOpType;

/// What the worker runs.
enum class Kind { all_reduce, all_gather, reduce_scatter };

inline const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::all_gather:
      return "all_gather";
    case Kind::reduce_scatter:
      return "reduce_scatter";
    default:
      return "all_reduce";
  }
}

MPP_DECL std::string op_text(RedOp op);

MPP_DECL std::string tag_text(const ChunkTag& t);

/// A hash of the runs, compared across ranks (FNV-1a).
MPP_DECL std::uint64_t runs_hash(const std::vector<std::pair<std::int64_t, std::int64_t>>& runs);

/// A flat tensor of `numel` elements seen chunk by chunk, with every rank's run ({offset, numel}
/// per rank): what all_gather_runs and reduce_scatter_runs both work with.
struct RunsByChunk {
  const std::vector<std::pair<std::int64_t, std::int64_t>>& runs;
  std::int64_t numel;
  std::int64_t per_chunk;
  std::int64_t lo(std::size_t c) const { return static_cast<std::int64_t>(c) * per_chunk; }
  std::int64_t hi(std::size_t c) const { return std::min(lo(c) + per_chunk, numel); }
  /// Rank q's run inside chunk c as [begin, end) elements of the tensor (empty: begin >= end).
  std::pair<std::int64_t, std::int64_t> part(int q, std::size_t c) const {
    const auto [offset, count] = runs[static_cast<std::size_t>(q)];
    return {std::max(lo(c), offset), std::min(hi(c), offset + count)};
  }
};

// ---- reductions -----------------------------------------------------------------------------

template <class T, class F>
void combine(T* out, const T* a, const T* b, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <class T>
void fold(T* out, const std::vector<const T*>& in, std::size_t n, RedOp op) {
  auto apply = [&](auto f) {
    combine(out, in[0], in[1], n, f);
    for (std::size_t q = 2; q < in.size(); ++q) combine(out, out, in[q], n, f);
  };
  switch (op) {
    case RedOp::SUM:
    case RedOp::AVG:
      apply([](T a, T b) { return a + b; });
      break;
    case RedOp::PRODUCT:
      apply([](T a, T b) { return a * b; });
      break;
    case RedOp::MIN:
      apply([](T a, T b) { return b < a ? b : a; });
      break;
    case RedOp::MAX:
      apply([](T a, T b) { return a < b ? b : a; });
      break;
    default:
      throw LogicError("mpp: Shm reduction of an unsupported op");
  }
  if (op == RedOp::AVG) {
    const T ranks = static_cast<T>(in.size());
    for (std::size_t i = 0; i < n; ++i) out[i] = out[i] / ranks;
  }
}

/// Reduces `n` elements of every rank's slot (in rank order) into `out`. bfloat16 is widened to
/// float32 and rounded once at the end, as Gloo's path in mpp does.
MPP_DECL void reduce_chunk(at::ScalarType dtype, RedOp op, void* out,
                           const std::vector<const char*>& in, std::size_t n,
                           std::vector<float>& scratch);

/// What the worker is blocked on, for the message of a caller whose wait runs out first.
struct Progress {
  std::mutex mutex;
  std::uint64_t running = 0;  // the collective being executed (0: none)
  const char* running_kind = "all_reduce";
  std::string waiting;  // set while the worker sleeps on peers

  MPP_DECL std::string describe(std::uint64_t number);
};

}  // namespace mpp::detail::shm

#ifndef MPP_SEPARATE_COMPILATION
#include "mpp/comm/impl/shm_reduce.ipp"
#endif
