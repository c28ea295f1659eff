// Micro-batching: chunk sizes, the errors, and the weighting that makes uneven splits exact.
#include <doctest/doctest.h>

#include <torch/nn/functional/loss.h>

#include "mpp/models/mlp.hpp"
#include "mpp/pipeline/micro_batch.hpp"

TEST_CASE("a batch splits into M chunks, the remainder over the first ones") {
  const auto plan = mpp::plan_micro_batches(10, 4, "GPipe<4>");
  CHECK(plan.sizes == std::vector<std::int64_t>{3, 3, 2, 2});
  CHECK(plan.offsets == std::vector<std::int64_t>{0, 3, 6, 8});
  CHECK_FALSE(plan.even());
  CHECK(plan.weight(0) == doctest::Approx(0.3));
  CHECK(mpp::plan_micro_batches(8, 4, "GPipe<4>").even());

  const auto x = torch::arange(20).reshape({10, 2});
  const auto chunks = mpp::split_micro_batches(x, plan);
  REQUIRE(chunks.size() == 4);
  CHECK(chunks[2].size(0) == 2);
  CHECK(chunks[2][0][0].item<std::int64_t>() == 12);
  CHECK(torch::cat(chunks).equal(x));
}

TEST_CASE("micro-batching errors name the rule and the fix") {
  CHECK_THROWS_WITH_AS(
      mpp::plan_micro_batches(5, 8, "GPipe<8>"),
      "mpp: GPipe<8> splits each batch into 8 micro-batches but the batch has only 5 samples; "
      "use a batch of at least 8 samples or fewer micro-batches",
      mpp::MicroBatchError);
  CHECK_THROWS_WITH_AS(
      mpp::plan_micro_batches(10, 4, "Interleaved1F1B<4,2>", true),
      "mpp: Interleaved1F1B<4,2> needs equal micro-batches but a batch of 10 samples does not "
      "split into 4; use a batch that is a multiple of 4",
      mpp::MicroBatchError);
  const auto plan = mpp::plan_micro_batches(10, 4, "GPipe<4>");
  CHECK_THROWS_WITH_AS(mpp::split_micro_batches(torch::zeros({9, 2}), plan),
                       doctest::Contains("has 9 samples but the plan is for 10"),
                       mpp::MicroBatchError);
}

TEST_CASE("size-weighted chunk losses equal the full-batch mean, value and gradient") {
  const mpp::models::MlpConfig cfg{.hidden = 8, .layers = 3, .seed = 3};
  const auto batch = mpp::models::make_regression_batch(cfg, 11, 0);
  auto whole = mpp::models::make_full_mlp(cfg);
  auto chunked = mpp::models::make_full_mlp(cfg);

  const auto full_loss =
      torch::nn::functional::mse_loss(whole->forward(batch.inputs), batch.targets);
  full_loss.backward();

  const auto plan = mpp::plan_micro_batches(11, 4, "GPipe<4>");
  const auto xs = mpp::split_micro_batches(batch.inputs, plan);
  const auto ys = mpp::split_micro_batches(batch.targets, plan);
  double total = 0.0;
  for (int i = 0; i < plan.count(); ++i) {
    auto loss = torch::nn::functional::mse_loss(chunked->forward(xs[i]), ys[i]) * plan.weight(i);
    loss.backward();
    total += loss.item<double>();
  }
  CHECK(total == doctest::Approx(full_loss.item<double>()).epsilon(1e-6));
  const auto a = whole->parameters();
  const auto b = chunked->parameters();
  for (std::size_t i = 0; i < a.size(); ++i)
    CHECK(torch::allclose(a[i].grad(), b[i].grad(), 1e-5, 1e-7));

  // Unweighted (plain mean of chunk means) would be wrong for this uneven split: the test can fail.
  double unweighted = 0.0;
  for (int i = 0; i < plan.count(); ++i)
    unweighted += torch::nn::functional::mse_loss(chunked->forward(xs[i]), ys[i]).item<double>() /
                  plan.count();
  CHECK(unweighted != doctest::Approx(full_loss.item<double>()).epsilon(1e-6));
}
