// Lab 09 — interleaved 1F1B: more, smaller stages per rank.
//
// Cut the model into P x V pieces instead of P and give each rank V of them, round robin (rank r
// holds pieces r, P + r, 2P + r, ...). A micro-batch now visits every rank V times, each visit V
// times shorter, so the pipeline fills and drains V times faster: the bubble relative to the
// ideal compute time drops from (P - 1) / M to (P - 1) / (V M). The price is V times as many
// messages (each one smaller), which on a fast link is nearly free and on a slow one is not, and M
// must be a multiple of P. Partitions say how many pieces: Uniform<P> cuts P x V of them here.
//
//   mpprun --nproc-per-node 2 ./interleaved [--hidden 128] [--batch 32] [--steps 20] [--timeline]
//   [--trace interleaved.json] [--svg interleaved.svg] [--transport gloo]
#include "../common/pipeline_lab.hpp"

int main(int argc, char** argv) {
  return lab::main(argc, argv, "lab 09",
                   "Lab 09: interleaved 1F1B, V chunks per rank shrink the bubble",
                   [](const auto& world, const auto& o, auto ranks, auto transport) {
                     constexpr int P = decltype(ranks)::value;
                     constexpr int M = lab::micro_batches;
                     // [quote:pair]
                     using Comm = mpp::Async<typename decltype(transport)::backend>;
                     lab::compare<mpp::Pipeline<mpp::Uniform<P>, mpp::OneFOneB<M>, Comm>,
                                  mpp::Pipeline<mpp::Uniform<P>, mpp::Interleaved1F1B<M, 2>, Comm>>(
                         world, o,
                         {"Interleaved 1F1B (V = 2) against plain 1F1B:", "OneFOneB<8>",
                          "Interleaved1F1B<8,2>"});
                     // [/quote:pair]
                   });
}
