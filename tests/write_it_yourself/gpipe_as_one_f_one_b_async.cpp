// A wrong asynchronous 1F1B for scripts/check-lab's own test: GPipe's solution handed in as the
// 1F1B-async lab. It computes the same losses and parameters (every schedule does), so only the
// order can tell: the check must fail, saying that rank 0 held all 4 micro-batches where 1F1B
// holds at most P - r.

// The solution's headers first, so that the rename below touches only its main.
#include <torch/nn/functional/loss.h>
#include <vector>

#include "harness.hpp"

#define main gpipe_solution_main
#include "solutions/gpipe.cpp"
#undef main

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "one_f_one_b_async",
                             lab::PipelineReference::one_f_one_b_async, train_step);
}
