#pragma once
// The models the pipeline benchmarks train: the course's, and two compute-bound ones; all 16
// layers, split into M = 8 micro-batches.
#include <cstdint>

#include "mpp/models/mlp.hpp"
#include "support/policies.hpp"

namespace mpp::bench {

/// A model, its batch and how many steps a benchmark of it times.
struct Config {
  const char* name;
  std::int64_t hidden;
  std::int64_t batch;
  int iterations;
  int paired_blocks;  ///< blocks of four steps for the paired overhead
};

// With 512 samples the micro-batches have 64 rows, enough for a GEMM to run near its full speed:
// there pipelining pays on compute (the matrix runs only Async x Uniform there, a step takes
// ~0.5 s).
inline constexpr Config course{"course_h128_b32", 128, 32, 100, 400};
inline constexpr Config compute_bound{"compute_h1024_b128", 1024, 128, 10, 40};
inline constexpr Config compute_large{"compute_h1024_b512", 1024, 512, 4, 8};
inline constexpr int micro_batches = 8;
inline constexpr int warmup_steps = 3;

/// The MLP of `c`, seeded the same on every rank.
inline mpp::models::MlpConfig model_of(const Config& c) {
  return {.hidden = c.hidden, .layers = mpp::test::partition_layers, .seed = 1};
}

}  // namespace mpp::bench
