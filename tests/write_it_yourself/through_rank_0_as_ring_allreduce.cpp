// A wrong ring all-reduce for scripts/check-lab's own test: every rank sends its whole buffer to
// rank 0, which adds them and sends the sum back. The sums are right; rank 0's link carries
// 2(P - 1) whole buffers, and a ring's rank sends 2(P - 1)/P of one, so the check must fail on the
// traffic.
#include <ATen/ops/empty_like.h>

#include "harness.hpp"

namespace {

void all_reduce_through_rank_0(const lab::World& world, const at::Tensor& buffer) {
  if (world.rank() == 0) {
    const at::Tensor incoming = at::empty_like(buffer);
    for (int r = 1; r < world.size(); ++r) {
      world.recv(incoming, r, 0);
      buffer.add_(incoming);
    }
    for (int r = 1; r < world.size(); ++r) world.send(buffer, r, 1);
  } else {
    world.send(buffer, 0, 0);
    world.recv(buffer, 0, 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return lab::check_all_reduce(argc, argv, "ring_allreduce", all_reduce_through_rank_0);
}
