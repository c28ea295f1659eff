// A wrong naive pipeline for scripts/check-lab's own test: the micro-batch lab's solution, which
// cuts the batch into 4 and weights each micro-batch's loss by its share, handed in as the
// stop-and-wait pipeline. Its numbers are right; the check must fail, saying that each rank ran
// 4 forwards where the naive pipeline runs the whole batch once.

// The solution's headers first, so that the rename below touches only its main.
#include <torch/nn/functional/loss.h>

#include "harness.hpp"

#define main micro_batches_solution_main
#include "solutions/micro_batches.cpp"
#undef main

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "naive_pipeline", lab::PipelineReference::naive,
                             train_step);
}
