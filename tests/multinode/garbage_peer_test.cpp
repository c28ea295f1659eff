// A peer that sends garbage between pipeline stages must produce an error on the receiver, not
// a crash and not a silent reinterpretation of bytes. Gloo alone checks nothing (a receive
// larger than posted aborts the process, a smaller one is half-filled), so the pipeline sends a
// fixed-size shape header first and the receiver checks it before posting the activations'
// receive. Here rank 0 plays a broken or foreign stage 0 and writes the header link by hand;
// rank 1 runs a real 2-stage pipeline and must exit with a PipelineError naming what it got.
#include <doctest/doctest.h>

#include <ATen/ops/full.h>
#include <ATen/ops/randn.h>
#include <torch/nn/functional/loss.h>

#include <string>

#include "mpp/comm/init.hpp"
#include "mpp/partition/uniform.hpp"
#include "mpp/pipeline/pipeline.hpp"
#include "mpp/schedule/policies.hpp"
#include "support/worker.hpp"
#include "support/world.hpp"

namespace {

using TwoStages = mpp::Pipeline<mpp::Uniform<2>, mpp::GPipe<2>, mpp::Async<mpp::Gloo>>;
constexpr std::int64_t hidden = 16;

at::Tensor forged_header(const std::string& kind) {
  if (kind == "magic") return at::full({mpp::detail::ShapeHeader::slots}, 0x0BADC0DE, at::kLong);
  mpp::detail::ShapeHeader h;
  h.sender_stage = 0;
  h.batch = 8;
  h.micro_batches = 2;
  h.spec = kind == "dtype" ? mpp::ActivationSpec{c10::kDouble, {hidden}}
                           : mpp::ActivationSpec{c10::kFloat, {2 * hidden}};  // "shape"
  return h.encode();
}

int garbage_peer(const std::string& kind) {
  auto world = mpp::init_process_group();
  if (world.rank() == 0) {
    // Only the header: the receiver must refuse before it posts the activations' receive.
    world.send(forged_header(kind), 1, mpp::detail::header_tag(0));
    return 0;
  }
  TwoStages pipe(world, mpp::MlpModel{{hidden, 4, 42}});
  auto mse = [](const at::Tensor& out, const at::Tensor& y) {
    return torch::nn::functional::mse_loss(out, y);
  };
  pipe.train_step(at::Tensor(), at::randn({8, hidden}), mse);
  return 0;  // reaching this means the garbage was accepted: the test sees exit code 0 and fails
}

}  // namespace

MPP_TEST_WORKER("multinode_garbage_magic") { return garbage_peer("magic"); }
MPP_TEST_WORKER("multinode_garbage_dtype") { return garbage_peer("dtype"); }
MPP_TEST_WORKER("multinode_garbage_shape") { return garbage_peer("shape"); }

TEST_CASE(
    "multinode: a peer sending a garbage header, a wrong dtype or a wrong shape gets an error, not "
    "a crash") {
  struct Case {
    const char* kind;
    const char* expect;  // in the receiver's error
  };
  for (const Case c : {Case{"magic", "received something else"}, Case{"dtype", "Double"},
                       Case{"shape", "[*, 32]"}}) {
    CAPTURE(c.kind);
    mpp::test::WorldOptions options;
    options.timeout = std::chrono::seconds(60);
    options.stop_all_on_failure = false;  // rank 0 ends at once; rank 1's own error is the point
    options.env = {{"MPP_TIMEOUT_S", "20"}};
    auto world = mpp::test::run_world(2, std::string("multinode_garbage_") + c.kind, options);
    INFO(world.report());
    REQUIRE_FALSE(world.timed_out());
    CHECK(world.exit_code(0) == 0);
    // An orderly error exit (code 1 from the worker's catch), not a signal such as SIGABRT.
    CHECK(world.rank(1).status.exited);
    CHECK(world.exit_code(1) == 1);
    CHECK(world.error_output(1).find("mpp: ") != std::string::npos);
    CHECK(world.error_output(1).find(c.expect) != std::string::npos);
  }
}
