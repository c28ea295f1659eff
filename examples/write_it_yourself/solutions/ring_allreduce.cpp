// Write it yourself, collectives — a ring all-reduce from send and recv, solved.
//
// The ranks sit on a ring, each sending only to the next. The buffer is cut into P chunks. In the
// reduce-scatter, P - 1 steps, each rank sends one chunk to the next rank and adds the chunk it
// receives into its own: afterwards rank r holds the whole sum of chunk r + 1. In the all-gather,
// P - 1 more steps, the finished chunks go round once more, copied. Each rank sends 2(P - 1)
// messages of n/P elements: 2(P - 1)/P · n in all, however many ranks there are.
//
//   scripts/check-lab ring_allreduce [your_file.cpp] [--ranks 4]
#include "harness.hpp"

namespace {

void ring_all_reduce(const lab::World& world, const at::Tensor& buffer) {
  const int ranks = world.size();
  const int rank = world.rank();
  const int next = (rank + 1) % ranks;
  const int prev = (rank + ranks - 1) % ranks;
  // Views of the buffer: writing into a chunk writes into the buffer.
  const auto chunks = buffer.chunk(ranks);
  const at::Tensor incoming = at::empty_like(chunks[0]);

  // Reduce-scatter: at step k, rank r sends chunk r - k and adds what arrives into chunk r - k - 1.
  for (int step = 0; step < ranks - 1; ++step) {
    const int send_chunk = (rank - step + ranks) % ranks;
    const int add_chunk = (rank - step - 1 + ranks) % ranks;
    // Start the send before receiving: if every rank blocked in send, no one would receive.
    auto sending = world.isend(chunks[send_chunk], next, step);
    world.recv(incoming, prev, step);
    sending.wait();
    chunks[add_chunk].add_(incoming);
  }
  // All-gather: rank r holds the sum of chunk r + 1; at step k it sends chunk r + 1 - k and
  // receives chunk r - k, finished, in place.
  for (int step = 0; step < ranks - 1; ++step) {
    const int send_chunk = (rank + 1 - step + ranks) % ranks;
    const int receive_chunk = (rank - step + ranks) % ranks;
    auto sending = world.isend(chunks[send_chunk], next, ranks + step);
    world.recv(chunks[receive_chunk], prev, ranks + step);
    sending.wait();
  }
}

}  // namespace

int main(int argc, char** argv) {
  return lab::check_all_reduce(argc, argv, "ring_allreduce", ring_all_reduce);
}
