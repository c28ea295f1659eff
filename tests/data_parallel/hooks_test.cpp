// The DDP bucket engine in one process: hooks fire during backward, buckets launch in plan order
// while backward still runs, results land in every .grad, state resets each step.
#include <doctest/doctest.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <vector>

#include "mpp/data_parallel/bucketed_gradients.hpp"
#include "mpp/models/mlp.hpp"

namespace {

struct Launch {
  std::size_t bucket;
  std::size_t hooks_seen;  // gradients accumulated so far in this backward
};

// Reduction over a world of one: the sum is the buffer itself; records what happened when.
struct RecordingLauncher {
  std::shared_ptr<std::vector<Launch>> launches = std::make_shared<std::vector<Launch>>();
  std::shared_ptr<std::vector<std::size_t>> waits = std::make_shared<std::vector<std::size_t>>();
  std::shared_ptr<std::size_t> hooks = std::make_shared<std::size_t>(0);
  void launch(std::size_t bucket, at::Tensor&) { launches->push_back({bucket, *hooks}); }
  void wait(std::size_t bucket) { waits->push_back(bucket); }
};
static_assert(mpp::bucket_launcher<RecordingLauncher>);

std::vector<mpp::NamedTensor> named(torch::nn::Module& m) {
  std::vector<mpp::NamedTensor> out;
  for (const auto& item : m.named_parameters()) out.push_back({item.key(), item.value()});
  return out;
}

torch::Tensor loss_of(torch::nn::Sequential& model, const mpp::models::Batch& b) {
  return torch::mse_loss(model->forward(b.inputs), b.targets);
}

}  // namespace

TEST_CASE("DDP hooks: buckets launch in order during backward and every .grad gets the result") {
  const mpp::models::MlpConfig cfg{.hidden = 16, .layers = 6, .seed = 1};
  auto model = mpp::models::make_full_mlp(cfg);
  auto reference = mpp::models::make_full_mlp(cfg);
  const auto batch = mpp::models::make_regression_batch(cfg, 8, 0);

  RecordingLauncher rec;
  // one Linear layer (weight + bias) per bucket
  const std::size_t layer_bytes = (16 * 16 + 16) * 4;
  mpp::detail::BucketedGradients<RecordingLauncher> engine(named(*model), layer_bytes, 2.0, rec);
  REQUIRE(engine.plan().buckets.size() == 6);
  // count hook firings with a second hook of our own on the same accumulators
  struct Count final : torch::autograd::FunctionPostHook {
    std::shared_ptr<std::size_t> n;
    explicit Count(std::shared_ptr<std::size_t> n) : n(std::move(n)) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& o,
                                              const torch::autograd::variable_list&) override {
      ++*n;
      return o;
    }
  };
  std::vector<std::shared_ptr<torch::autograd::Node>> keep;
  for (auto& p : model->parameters()) {
    keep.push_back(torch::autograd::impl::grad_accumulator(p));
    keep.back()->add_post_hook(std::make_unique<Count>(rec.hooks));
  }

  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    rec.launches->clear();
    rec.waits->clear();
    *rec.hooks = 0;
    for (auto& p : model->parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();
    for (auto& p : reference->parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();
    loss_of(model, batch).backward();
    loss_of(reference, batch).backward();

    REQUIRE(rec.launches->size() == 6);
    for (std::size_t b = 0; b < 6; ++b) CHECK((*rec.launches)[b].bucket == b);
    // the first bucket (last layer) went out while most gradients were still to come
    CHECK((*rec.launches)[0].hooks_seen < 12);
    CHECK(*rec.waits == std::vector<std::size_t>{0, 1, 2, 3, 4, 5});
    CHECK(engine.launched() == 0);  // reset for the next step
    const auto mine = model->parameters();
    const auto ref = reference->parameters();
    for (std::size_t i = 0; i < mine.size(); ++i) {
      CHECK(torch::allclose(mine[i].grad(), ref[i].grad() / 2.0));
      CHECK(engine.grad_in_bucket(i));  // the result lives in the bucket from the first step on
    }
  }
}

TEST_CASE("DDP hooks: optimizer zero_grad keeps .grad in the buckets, no_sync launches nothing") {
  const mpp::models::MlpConfig cfg{.hidden = 8, .layers = 3, .seed = 2};
  auto model = mpp::models::make_full_mlp(cfg);
  RecordingLauncher rec;
  mpp::detail::BucketedGradients<RecordingLauncher> engine(named(*model), mpp::default_bucket_bytes,
                                                           1.0, rec);
  REQUIRE(engine.plan().buckets.size() == 1);
  torch::optim::SGD opt(model->parameters(), 0.1);
  const auto batch = mpp::models::make_regression_batch(cfg, 4, 0);

  opt.zero_grad();
  loss_of(model, batch).backward();
  opt.step();
  opt.zero_grad();  // detach_() + zero_() on an alias made by set_(): must be legal
  for (std::size_t i = 0; i < model->parameters().size(); ++i) CHECK(engine.grad_in_bucket(i));
  CHECK(engine.bucket_buffer(0).abs().sum().item<float>() == 0.0f);

  engine.set_sync(false);
  rec.launches->clear();
  loss_of(model, batch).backward();
  loss_of(model, batch).backward();
  CHECK(rec.launches->empty());
  const auto twice = engine.bucket_buffer(0).clone();
  engine.set_sync(true);
  loss_of(model, batch).backward();
  CHECK(rec.launches->size() == 1);
  CHECK(torch::allclose(engine.bucket_buffer(0), twice * 1.5));  // three accumulated passes
}

TEST_CASE("DDP hooks: a parameter without a gradient is reported by name") {
  struct TwoHeads : torch::nn::Module {
    torch::nn::Linear used{nullptr}, unused{nullptr};
    TwoHeads() {
      used = register_module("used", torch::nn::Linear(4, 4));
      unused = register_module("unused", torch::nn::Linear(4, 4));
    }
  };
  auto net = std::make_shared<TwoHeads>();
  RecordingLauncher rec;
  mpp::detail::BucketedGradients<RecordingLauncher> engine(named(*net), 64, 1.0, rec);
  auto loss = net->used->forward(torch::ones({2, 4})).sum();
  CHECK_THROWS_WITH(loss.backward(), doctest::Contains("'unused.weight', 'unused.bias'"));
  // the buckets that did launch were waited, and the next step starts clean
  CHECK(rec.waits->size() == rec.launches->size());
  CHECK(engine.launched() == 0);
}
