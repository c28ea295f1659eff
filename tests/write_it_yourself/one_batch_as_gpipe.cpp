// A wrong GPipe for scripts/check-lab's own test: the naive pipeline's solution, which never cuts
// the batch, handed in as GPipe. Its numbers are right; the check must fail, saying that each rank
// ran one forward where GPipe runs one per micro-batch.

// The solution's headers first, so that the rename below touches only its main.
#include <torch/nn/functional/loss.h>
#include <limits>

#include "harness.hpp"

#define main naive_pipeline_solution_main
#include "solutions/naive_pipeline.cpp"
#undef main

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "gpipe", lab::PipelineReference::gpipe, train_step);
}
