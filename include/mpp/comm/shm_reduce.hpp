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

inline std::string op_text(RedOp op) {
  switch (op) {
    case RedOp::SUM:
      return "sum";
    case RedOp::AVG:
      return "avg";
    case RedOp::PRODUCT:
      return "product";
    case RedOp::MIN:
      return "min";
    case RedOp::MAX:
      return "max";
    default:
      return "op " + std::to_string(static_cast<int>(op));
  }
}

inline std::string tag_text(const ChunkTag& t) {
  std::string text =
      std::string(kind_name(static_cast<Kind>(t.kind))) + " #" + std::to_string(t.op) + " of " +
      c10::toString(static_cast<at::ScalarType>(t.dtype)) + "[" + std::to_string(t.numel) + "]";
  if (t.reduce >= 0) text += " " + op_text(static_cast<RedOp>(t.reduce));
  if (static_cast<Kind>(t.kind) != Kind::all_reduce)
    text += " (owned runs " + std::to_string(t.runs) + ")";
  return text;
}

/// A hash of the runs, compared across ranks (FNV-1a).
inline std::uint64_t runs_hash(const std::vector<std::pair<std::int64_t, std::int64_t>>& runs) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](std::int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<std::uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  for (const auto& [offset, numel] : runs) {
    mix(offset);
    mix(numel);
  }
  return h;
}

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
inline void reduce_chunk(at::ScalarType dtype, RedOp op, void* out,
                         const std::vector<const char*>& in, std::size_t n,
                         std::vector<float>& scratch) {
  if (n == 0) return;
  switch (dtype) {
    case at::kFloat: {
      std::vector<const float*> p;
      for (auto* s : in) p.push_back(reinterpret_cast<const float*>(s));
      fold(static_cast<float*>(out), p, n, op);
      return;
    }
    case at::kDouble: {
      std::vector<const double*> p;
      for (auto* s : in) p.push_back(reinterpret_cast<const double*>(s));
      fold(static_cast<double*>(out), p, n, op);
      return;
    }
    case at::kBFloat16: {
      scratch.resize(n * in.size());
      std::vector<const float*> p;
      for (std::size_t q = 0; q < in.size(); ++q) {
        const auto* src = reinterpret_cast<const c10::BFloat16*>(in[q]);
        float* wide = scratch.data() + q * n;
        for (std::size_t i = 0; i < n; ++i) wide[i] = static_cast<float>(src[i]);
        p.push_back(wide);
      }
      float* acc = scratch.data();  // overwrites rank 0's widened copy, element by element
      fold(acc, p, n, op);
      auto* dst = static_cast<c10::BFloat16*>(out);
      for (std::size_t i = 0; i < n; ++i) dst[i] = c10::BFloat16(acc[i]);
      return;
    }
    default:
      throw LogicError("mpp: Shm reduction of an unsupported dtype");
  }
}

/// What the worker is blocked on, for the message of a caller whose wait runs out first.
struct Progress {
  std::mutex mutex;
  std::uint64_t running = 0;  // the collective being executed (0: none)
  const char* running_kind = "all_reduce";
  std::string waiting;  // set while the worker sleeps on peers

  std::string describe(std::uint64_t number) {
    std::lock_guard<std::mutex> lock(mutex);
    std::string s;
    if (running != 0 && running < number)
      s = "it has not started: " + std::string(running_kind) + " #" + std::to_string(running) +
          " before it is still running";
    else
      s = "it is running";
    if (!waiting.empty()) s += " (" + waiting + ")";
    return s;
  }
};

}  // namespace mpp::detail::shm
