// Write it yourself, collectives (docs/collectives.md) — a ring all-reduce from send and recv.
//
// Every rank holds a buffer of n elements; every rank must end with the sum over the ranks. Put
// the ranks on a ring, each sending only to the next, and cut the buffer into P chunks. First a
// reduce-scatter: P - 1 steps, after which each rank holds the whole sum of one chunk. Then an
// all-gather: P - 1 more steps, after which every rank holds every chunk of the sum. Each
// lab::unfinished(...) says what must hold there; replace it with code that makes it hold, then
// check it:
//
//   scripts/check-lab ring_allreduce [--ranks 4]
//
// It sums 3 buffers on 2 ranks and compares them with the library's all_reduce, and checks the
// traffic of a ring: each rank sends 2(P - 1) messages of n/P elements. The harness is in
// harness.hpp; one answer is in solutions/ring_allreduce.cpp.
#include "harness.hpp"

namespace {

void ring_all_reduce(const lab::World& world, const at::Tensor& buffer) {
  const int ranks = world.size();
  const int rank = world.rank();
  [[maybe_unused]] const int next = (rank + 1) % ranks;
  [[maybe_unused]] const int prev = (rank + ranks - 1) % ranks;
  // Views of the buffer: writing into a chunk writes into the buffer.
  const auto chunks = buffer.chunk(ranks);
  const at::Tensor incoming = at::empty_like(chunks[0]);

  lab::unfinished(
      "the reduce-scatter: in each of P - 1 steps, send one chunk to `next` and add the chunk "
      "that arrives from `prev` into your own copy of it, so that after the last step this rank "
      "holds the sum over all ranks of one chunk. Which chunk to send at each step is the whole "
      "puzzle (docs/collectives.md draws P = 3). A blocking send completes only once received: "
      "if every rank sends first and waits, no one receives");
  lab::unfinished(
      "the all-gather: in P - 1 more steps, pass the finished chunks round the ring, copying (not "
      "adding) each one that arrives into place, until every chunk of the buffer holds the sum");
}

}  // namespace

// The check; leave it as it is.
int main(int argc, char** argv) {
  return lab::check_all_reduce(argc, argv, "ring_allreduce", ring_all_reduce);
}
