// A wrong split backward for scripts/check-lab's own test: 1F1B's solution (with non-blocking
// messages), whose backward computes the input's and the weights' gradients in one pass, handed
// in as the split backward. It computes the same losses and parameters, so only the moment each
// input gradient leaves can tell: the check must fail, saying that micro-batch 0's input
// gradient was sent after its weight gradients were computed.

// The solution's headers first, so that the rename below touches only its main.
#include <torch/nn/functional/loss.h>
#include <algorithm>
#include <vector>

#include "harness.hpp"

#define main one_f_one_b_async_solution_main
#include "solutions/one_f_one_b_async.cpp"
#undef main

int main(int argc, char** argv) {
  return lab::check_pipeline(argc, argv, "split_backward", lab::PipelineReference::zero_bubble_h1,
                             train_step);
}
