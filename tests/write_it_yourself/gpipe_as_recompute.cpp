// A wrong recompute for scripts/check-lab's own test: GPipe's solution handed in as GPipe with
// recomputation. It computes the same losses and parameters (recomputing changes no number), so
// only what the stage keeps can tell: the check must fail, saying that the stage kept the graph
// of micro-batch 0 between its forward and its backward.

// The solution's headers first, so that the rename below touches only its main.
#include <torch/nn/functional/loss.h>
#include <vector>

#include "harness.hpp"

#define main gpipe_solution_main
#include "solutions/gpipe.cpp"
#undef main

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "recompute", lab::PipelineReference::gpipe_recompute,
                             train_step);
}
