// Lab 09 — zero bubble (ZB-H1, ZB-V): split the backward in two.
//
// A backward computes two things: the gradient w.r.t. the stage's input (I), which the previous
// stage is waiting for, and the gradient w.r.t. the stage's weights (W), which nobody waits for
// until the optimizer step. ZB-H1 runs I as early as 1F1B runs B, and moves the W's into the slots
// where 1F1B idles: the bubble shrinks to about a third of 1F1B's with the same activation memory
// (the W of a micro-batch still needs its activations). ZB-V (`--schedule zb-v`) gives each rank
// two half-stages placed in a V (rank r holds stages r and 2P-1-r) and fills the rest of the
// bubble with the same activation memory. The executor runs I and W as two separate autograd
// passes: I asks only for the input and every layer's output gradient, W then takes each layer's
// weight gradient from its own output gradient.
//
//   mpprun --nproc-per-node 2 ./zero_bubble [--schedule zb-h1|zb-v] [--hidden 128] [--batch 32]
//   [--steps 20] [--timeline] [--trace zb.json] [--svg zb.svg] [--transport gloo]
#include "../common/pipeline_lab.hpp"

int main(int argc, char** argv) {
  std::string schedule = "zb-h1";
  return lab::main(
      argc, argv, "lab 09", "Lab 09: zero bubble, the weight gradients fill the bubble",
      [&](const auto& world, const auto& o, auto ranks, auto transport) {
        constexpr int P = decltype(ranks)::value;
        constexpr int M = lab::micro_batches;
        // [quote:pair]
        using Comm = mpp::Async<typename decltype(transport)::backend>;
        using OneFOneB = mpp::Pipeline<mpp::Uniform<P>, mpp::OneFOneB<M>, Comm>;
        if (schedule == "zb-v")
          lab::compare<OneFOneB, mpp::Pipeline<mpp::Uniform<P>, mpp::ZeroBubbleV<M>, Comm>>(
              world, o, {"ZB-V against 1F1B:", "OneFOneB<8>", "ZeroBubbleV<8>"});
        else
          lab::compare<OneFOneB, mpp::Pipeline<mpp::Uniform<P>, mpp::ZeroBubbleH1<M>, Comm>>(
              world, o, {"ZB-H1 against 1F1B:", "OneFOneB<8>", "ZeroBubbleH1<8>"});
        // [/quote:pair]
      },
      nullptr,
      {{"--schedule",
        &schedule,
        "the zero-bubble schedule to compare with 1F1B",
        {"zb-h1", "zb-v"}}});
}
