// Lab 10 — gradient checkpointing (Recompute): trade compute for memory.
//
// A stage's backward needs the activations its forward produced inside the stage; with M
// micro-batches in flight that is M copies of every layer's output. Recompute<Partition> keeps
// only each stage's input: the forward runs without building the autograd graph, and right
// before a micro-batch's backward the stage runs its forward again, this time keeping the graph.
// Memory per micro-batch drops to one activation per stage; the time paid is one extra forward
// per micro-batch (about a third more compute when T_B = 2 T_F). Recompute<Partition, S> keeps
// the input of each of S segments of the stage instead, and rebuilds one segment's graph at a
// time: more checkpoints per micro-batch in flight, a smaller graph alive during a backward.
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
        // [quote:segments]
        using TwoSegments = mpp::Recompute<mpp::Uniform<P>, 2>;
        using FourSegments = mpp::Recompute<mpp::Uniform<P>, 4>;
        const auto two = lab::train<mpp::Pipeline<TwoSegments, mpp::OneFOneB<M>, Comm>>(world, o);
        const auto four = lab::train<mpp::Pipeline<FourSegments, mpp::OneFOneB<M>, Comm>>(world, o);
        // [/quote:segments]
        if (!two.report) return;
        std::printf(
            "Recompute in segments (1F1B, M = 8): checkpoints kept against graph rebuilt\n");
        lab::print_row("2 segments per stage", two);
        lab::print_row("4 segments per stage", four);
      });
}
