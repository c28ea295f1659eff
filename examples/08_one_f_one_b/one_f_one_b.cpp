// Lab 08 — 1F1B: the same bubble as GPipe, with activation memory bounded by the stages.
//
// GPipe runs all M forwards before the first backward, so every rank holds the activations of
// all M micro-batches at the peak. 1F1B (PipeDream-Flush) starts the backward of micro-batch 0 as
// soon as the last stage has its forward: after a warm-up of P - r forwards, rank r alternates
// one forward and one backward, so it never holds more than P - r micro-batches. The fill and the
// drain are the same length as GPipe's, hence the same bubble, (P - 1) / (M + P - 1).
//
// Why blocking sends can deadlock here: in the steady state two neighbours both have something to
// send to each other (an activation forward, a gradient backward). If both call a blocking send
// first, each waits for the other to receive. The schedule library lowers the table for the comm
// policy's semantics — for Blocking<Gloo> it pairs each send with the neighbour's receive — and
// the verifier proves the result deadlock-free at compile time.
//
//   mpprun --nproc-per-node 2 ./one_f_one_b [--hidden 128] [--batch 32] [--steps 20] [--timeline]
//   [--trace 1f1b.json] [--svg 1f1b.svg] [--transport gloo]
#include "../common/pipeline_lab.hpp"

namespace {

constexpr int M = lab::micro_batches;
using lab::Options;
using lab::train;

template <int P, class Backend>
void run(const mpp::Group<Backend>& world, const Options& o) {
  // [quote:pair]
  using Comm = mpp::Async<Backend>;
  const auto gpipe = train<mpp::Pipeline<mpp::Uniform<P>, mpp::GPipe<M>, Comm>>(world, o);
  const auto one_f_one_b = train<mpp::Pipeline<mpp::Uniform<P>, mpp::OneFOneB<M>, Comm>>(world, o);
  // [/quote:pair]
  if (!one_f_one_b.report) return;
  const auto& g = *gpipe.report;
  const auto& f = *one_f_one_b.report;
  std::printf("Same bubble, less memory (rank 0 holds the most):\n");
  std::printf(
      "  GPipe<%d>:    bubble %.1f%%, rank 0 peak activations %s (%d micro-batches in flight)\n", M,
      100.0 * g.figures.bubble,
      mpp::trace::format_bytes(g.figures.peak_activation_bytes[0]).c_str(),
      g.figures.peak_in_flight[0]);
  std::printf(
      "  OneFOneB<%d>: bubble %.1f%%, rank 0 peak activations %s (%d micro-batches in flight)\n", M,
      100.0 * f.figures.bubble,
      mpp::trace::format_bytes(f.figures.peak_activation_bytes[0]).c_str(),
      f.figures.peak_in_flight[0]);
  if (o.timeline)
    std::printf("\n1F1B, last step, measured (microseconds):\n%s", f.timeline().c_str());
  if (!o.trace.empty() && f.write_chrome_trace(o.trace))
    std::printf("Chrome trace of the last 1F1B step written to %s (open it in ui.perfetto.dev)\n",
                o.trace.c_str());
  if (!o.svg.empty()) lab::write_svg(f, o, "OneFOneB<8>");
}

}  // namespace

int main(int argc, char** argv) {
  return lab::main(argc, argv, "lab 08",
                   "Lab 08: 1F1B, the same bubble as GPipe with less activation memory",
                   [](const auto& world, const auto& o, auto ranks, auto transport) {
                     run<decltype(ranks)::value, typename decltype(transport)::backend>(world, o);
                   });
}
