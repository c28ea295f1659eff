// What a rank forked from a test case resets before its worker runs (support/worker.hpp,
// fork_resets): LibTorch's default generator, to the seed a new process starts with, whatever
// the test case drew from it before it started the world.
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "worker.hpp"

namespace {

const mpp::test::ForkReset default_generator{[] {
  auto generator = at::detail::getDefaultCPUGenerator();
  const std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(c10::default_rng_seed_val);
}};

}  // namespace
