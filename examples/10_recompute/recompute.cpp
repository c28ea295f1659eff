// Lab 10 — gradient checkpointing (Recompute): trade compute for memory.
//
// A stage's backward needs the activations its forward produced inside the stage; with M
// micro-batches in flight that is M copies of every layer's output. Recompute<Partition> keeps
// only each stage's input: the forward runs without building the autograd graph, and right
// before a micro-batch's backward the stage runs its forward again, this time keeping the graph.
// Memory per micro-batch drops to one activation per stage; the time paid is one extra forward
// per micro-batch (about a third more compute when T_B = 2 T_F).
//
//   mpprun --nproc-per-node 2 ./recompute [--hidden 128] [--batch 32] [--steps 20] [--timeline]
//   [--trace recompute.json] [--svg recompute.svg] [--transport gloo]
#include "../common/pipeline_lab.hpp"

int main(int argc, char** argv) {
  return lab::main(
      argc, argv, "lab 10", "Lab 10: gradient checkpointing, memory for compute",
      [](const auto& world, const auto& o, auto ranks, auto transport) {
        constexpr int P = decltype(ranks)::value;
        constexpr int M = lab::micro_batches;
        // [quote:pair]
        using Comm = mpp::Async<typename decltype(transport)::backend>;
        lab::compare<mpp::Pipeline<mpp::Uniform<P>, mpp::OneFOneB<M>, Comm>,
                     mpp::Pipeline<mpp::Recompute<mpp::Uniform<P>>, mpp::OneFOneB<M>, Comm>>(
            world, o,
            {"Recompute against keeping every activation (1F1B, M = 8):", "OneFOneB<8>",
             "Recompute + OneFOneB<8>"});
        // [/quote:pair]
      });
}
