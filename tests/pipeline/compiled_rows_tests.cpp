// A Pipeline runs the rows the compiler proved: constructing it and training generate and verify
// nothing at run time. Shown with a user's own schedule type (meeting mpp::schedule, outside the
// library's list) that counts the calls of its table() made while the program runs.
#include <doctest/doctest.h>

#include <torch/nn/functional/loss.h>

#include <cstdio>
#include <string>
#include <type_traits>

#include "mpp/comm.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/partition.hpp"
#include "mpp/pipeline.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

namespace {

int runtime_table_calls = 0;

/// 1F1B with 4 micro-batches, under a name of its own; counts run-time calls of table().
struct CountingOneFOneB {
  static constexpr int micro_batches = 4;
  static constexpr int chunks_per_rank = 1;
  static constexpr std::string_view name = "CountingOneFOneB";
  static constexpr mpp::ScheduleTable table(int ranks) {
    if (!std::is_constant_evaluated()) ++runtime_table_calls;
    return mpp::OneFOneB<4>::table(ranks);
  }
};
static_assert(mpp::schedule<CountingOneFOneB>);

using Pipe = mpp::Pipeline<mpp::Uniform<2>, CountingOneFOneB, mpp::Async<mpp::Gloo>>;
// The proof is data: each rank's row, exactly as long as it is, known to the compiler.
static_assert(Pipe::rows::row(0).size() + Pipe::rows::row(1).size() == Pipe::rows::actions.size());
static_assert(Pipe::predicted().ok && Pipe::predicted().ranks == 2);
static_assert(!Pipe::rows::split_backward);
static_assert(mpp::Pipeline<mpp::Uniform<2>, mpp::ZeroBubbleH1<4>,
                            mpp::Async<mpp::Gloo>>::rows::split_backward);

// ranks is P, the group's size; stages is P * V, the model pieces (docs/design.md, one vocabulary).
static_assert(Pipe::ranks == 2 && Pipe::stages == 2);
using InterleavedPipe =
    mpp::Pipeline<mpp::Uniform<2>, mpp::Interleaved1F1B<8, 2>, mpp::Async<mpp::Gloo>>;
static_assert(InterleavedPipe::ranks == 2 && InterleavedPipe::stages == 4);
static_assert(InterleavedPipe::predicted().ranks == InterleavedPipe::ranks);
using ExplicitVPipe =
    mpp::Pipeline<mpp::Explicit<4, 4, 4, 4>, mpp::ZeroBubbleV<4>, mpp::Async<mpp::Gloo>>;
static_assert(ExplicitVPipe::ranks == 2 && ExplicitVPipe::stages == 4 &&
              mpp::Explicit<4, 4, 4, 4>::pieces == ExplicitVPipe::stages);

// The row the executor runs carries where each chunk sits, answered by the compiler. Under the V
// on 2 ranks, rank 0 holds stages 0 and 3 (the batch comes in, the loss is computed there) and
// rank 1 holds stages 1 and 2, handing stage 1's output to stage 2 in memory.
namespace v_rows {
using mpp::LinkKind;
constexpr mpp::RankRow rank0 = ExplicitVPipe::rows::rank_row(0);
constexpr mpp::RankRow rank1 = ExplicitVPipe::rows::rank_row(1);
static_assert(rank0.ranks == 2 && rank0.stages == 4 && rank0.micro_batches == 4);
static_assert(rank0.holds_first_stage() && rank0.holds_last_stage() && rank0.last_stage_rank == 0);
static_assert(!rank1.holds_first_stage() && !rank1.holds_last_stage());
static_assert(rank0.chunk(0).stage == 0 && rank0.chunk(0).is_first() &&
              rank0.chunk(0).after == mpp::StageLink{LinkKind::message, 1, 1, 0});
static_assert(rank0.chunk(1).stage == 3 && rank0.chunk(1).is_last() &&
              rank0.chunk(1).before == mpp::StageLink{LinkKind::message, 2, 1, 1});
static_assert(rank1.chunk(0).stage == 1 &&
              rank1.chunk(0).after == mpp::StageLink{LinkKind::same_rank, 2, 1, 1});
static_assert(rank1.chunk(1).stage == 2 &&
              rank1.chunk(1).before == mpp::StageLink{LinkKind::same_rank, 1, 1, 0});
// Interleaved on 2 ranks: every neighbour is on the other rank.
constexpr mpp::RankRow looped1 = InterleavedPipe::rows::rank_row(1);
static_assert(looped1.chunk(0).stage == 1 && looped1.chunk(1).stage == 3 &&
              looped1.chunk(0).after == mpp::StageLink{LinkKind::message, 2, 0, 1} &&
              looped1.chunk(1).is_last() && looped1.last_stage_rank == 1);
static_assert(looped1.actions.data() == InterleavedPipe::rows::row(1).data());
}  // namespace v_rows

TEST_CASE(
    "display names: a policy's knobs without spaces, the pipeline's three parts after \", \"") {
  using Named = mpp::Pipeline<mpp::Recompute<mpp::Uniform<2>, 2>, mpp::Interleaved1F1B<8, 2>,
                              mpp::Async<mpp::Gloo>>;
  CHECK(Named::name() == "Pipeline<Recompute<Uniform<2>,2>, Interleaved1F1B<8,2>, Async<Gloo>>");
  CHECK(ExplicitVPipe::name() == "Pipeline<Explicit<4,4,4,4>, ZeroBubbleV<4>, Async<Gloo>>");
}

MPP_TEST_WORKER("compiled-rows/no-runtime-generation") {
  auto world = mpp::init_process_group();
  const mpp::models::MlpConfig config{.hidden = 16, .layers = 4, .seed = 3};
  Pipe pipe(world, mpp::MlpModel{config});
  const auto batch = mpp::models::make_regression_batch(config, 8, 0);
  for (int step = 0; step < 2; ++step)
    pipe.train_step(pipe.is_first() ? batch.inputs : at::Tensor(),
                    pipe.is_last() ? batch.targets : at::Tensor(),
                    [](const at::Tensor& out, const at::Tensor& target) {
                      return torch::nn::functional::mse_loss(out, target);
                    });
  // Not a copy: the executor runs the compiler's constant data itself.
  const auto row = Pipe::rows::row(world.rank());
  const bool same_row = pipe.actions().data() == row.data() && pipe.actions().size() == row.size();
  std::printf("training: %d run-time table() calls; executor row is the compiled row: %s\n",
              runtime_table_calls, same_row ? "yes" : "no");
  // The analysis path does generate (and so shows that the counter counts).
  const auto plan = Pipe::plan();
  std::printf("after plan(): %d\n", runtime_table_calls);
  return plan->figures.ok ? 0 : 1;
}

}  // namespace

TEST_CASE("a Pipeline of a compile-time schedule generates and verifies nothing at run time") {
  auto world = mpp::test::run_world(2, "compiled-rows/no-runtime-generation");
  REQUIRE_MESSAGE(world.ok(), world.report());
  for (int r = 0; r < 2; ++r) {
    CHECK_MESSAGE(world.output(r).find("training: 0 run-time table() calls; executor row is the "
                                       "compiled row: yes\n") != std::string::npos,
                  world.output(r));
    CHECK(world.output(r).find("after plan(): 1\n") != std::string::npos);
  }
}
