// TinyTransformer: config validation, the model's shapes and causality, stage-built parts equal
// to the whole model, the corpus, and a short run whose loss falls well below the baseline.
#include <doctest/doctest.h>

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <set>
#include <string>

#include "mpp/data_parallel/sampler.hpp"
#include "mpp/models/char_corpus.hpp"
#include "mpp/models/tiny_transformer.hpp"
#include "mpp/models/transformer_config.hpp"
#include "mpp/partition/model.hpp"

using namespace mpp::models;

namespace {

/// The message parse_config_text throws for `text` (empty when it does not throw).
std::string config_error(const std::string& text) {
  try {
    parse_config_text(text, "test.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return {};
}

TransformerConfig tiny_model() {
  TransformerConfig m;
  m.num_hidden_layers = 3;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.intermediate_size = 64;
  m.max_position_embeddings = 16;
  return m;
}

}  // namespace

TEST_CASE(
    "models: the repository's config/config.json parses and matches the documented defaults") {
  const auto cfg = load_config(MPP_REPO_CONFIG);
  CHECK(cfg == TinyTransformerConfig{});
  CHECK(parse_config_text("{}") == TinyTransformerConfig{});
  // to_json spells out every key and reads back to the same config.
  CHECK(parse_config(to_json(cfg)) == cfg);
}

TEST_CASE("models: config errors name the key and the fix") {
  SUBCASE("unknown key, with the closest known one") {
    const auto msg = config_error(R"({"model": {"hiden_size": 64}})");
    CHECK(msg.find("test.json: model.hiden_size is not a known setting") != std::string::npos);
    CHECK(msg.find("did you mean \"hidden_size\"") != std::string::npos);
  }
  SUBCASE("unknown section") {
    CHECK(config_error(R"({"optimizer": {}})").find("\"optimizer\" is not a known section") !=
          std::string::npos);
  }
  SUBCASE("wrong types") {
    CHECK(config_error(R"({"model": {"hidden_size": "64"}})")
              .find("model.hidden_size must be an integer (got a string \"64\")") !=
          std::string::npos);
    CHECK(config_error(R"({"model": {"num_hidden_layers": 2.5}})")
              .find("model.num_hidden_layers must be an integer") != std::string::npos);
    CHECK(config_error(R"({"training": {"learning_rate": "fast"}})")
              .find("training.learning_rate must be a number") != std::string::npos);
    CHECK(config_error(R"({"model": 3})").find("model must be an object") != std::string::npos);
    CHECK(config_error(R"([1, 2])").find("must hold a JSON object") != std::string::npos);
  }
  SUBCASE("out of range") {
    CHECK(config_error(R"({"model": {"dropout": 1.5}})").find("model.dropout is out of range") !=
          std::string::npos);
    CHECK(config_error(R"({"training": {"learning_rate": -0.1}})")
              .find("training.learning_rate is out of range") != std::string::npos);
    CHECK(config_error(R"({"training": {"batch_size": 0}})")
              .find("training.batch_size is out of range") != std::string::npos);
    CHECK(config_error(R"({"training": {"batch_size": -4}})")
              .find("training.batch_size is out of range") != std::string::npos);
  }
  SUBCASE("impossible combinations") {
    const auto heads = config_error(R"({"model": {"hidden_size": 60, "num_attention_heads": 8}})");
    CHECK(heads.find("model.hidden_size (60) is not divisible by model.num_attention_heads (8)") !=
          std::string::npos);
    CHECK(heads.find("pick e.g. hidden_size 64") != std::string::npos);
    CHECK(config_error(R"({"training": {"sequence_length": 128}})")
              .find("training.sequence_length (128) exceeds model.max_position_embeddings (64)") !=
          std::string::npos);
    CHECK(config_error(R"({"model": {"vocab_size": 20}})")
              .find("raise model.vocab_size to at least 29") != std::string::npos);
    CHECK(config_error(R"({"data": {"train_characters": 1000}})")
              .find("data.train_characters (1000) gives only 15 training sequences") !=
          std::string::npos);
  }
  SUBCASE("syntax") {
    CHECK(config_error(R"({"model": {"hidden_size": 64,}})").find("is not valid JSON") !=
          std::string::npos);
  }
  SUBCASE("missing file") {
    CHECK_THROWS_WITH_AS(load_config("/nonexistent/config.json"),
                         doctest::Contains("cannot open config file '/nonexistent/config.json'"),
                         ConfigError);
  }
  CHECK(config_error(R"({"model": {"num_hidden_layers": 4}, "training": {"epochs": 1}})").empty());
}

TEST_CASE("models: TinyTransformer maps tokens to logits and never looks ahead") {
  const auto cfg = tiny_model();
  TinyTransformer model(cfg);
  model->eval();
  auto tokens = torch::randint(0, cfg.vocab_size, {2, 10}, torch::kLong);
  auto logits = model->forward(tokens);
  CHECK(logits.sizes() == torch::IntArrayRef{2, 10, cfg.vocab_size});
  // Changing token 6 leaves the logits of positions 0..5 unchanged and changes position 6.
  auto changed = tokens.clone();
  changed[0][6] = (changed[0][6].item<std::int64_t>() + 1) % cfg.vocab_size;
  auto logits2 = model->forward(changed);
  using torch::indexing::Slice;
  CHECK(torch::equal(logits.index({0, Slice(0, 6)}), logits2.index({0, Slice(0, 6)})));
  CHECK_FALSE(torch::allclose(logits.index({0, 6}), logits2.index({0, 6})));
  CHECK_THROWS_WITH_AS(model->forward(torch::zeros({1, 17}, torch::kLong)),
                       doctest::Contains("exceeds model.max_position_embeddings (16)"),
                       std::invalid_argument);
}

TEST_CASE(
    "models: stages built from part ranges hold the whole model's weights and compose to it") {
  const auto cfg = tiny_model();  // parts: embed, 3 blocks, head = 5
  REQUIRE(num_parts(cfg) == 5);
  TinyTransformer whole(cfg);
  TinyTransformer first(cfg, 0, 2), middle(cfg, 2, 4), last(cfg, 4, 5);
  CHECK(first->has_embedding());
  CHECK_FALSE(first->has_head());
  CHECK(last->has_head());
  CHECK(part_name(cfg, 0) == "embed");
  CHECK(part_name(cfg, 2) == "blocks.1");
  CHECK(part_name(cfg, 4) == "head");

  const auto whole_params = whole->named_parameters();
  std::size_t stage_params = 0;
  for (auto* stage : {&first, &middle, &last}) {
    for (const auto& item : (*stage)->named_parameters()) {
      const auto* in_whole = whole_params.find(item.key());
      REQUIRE_MESSAGE(in_whole != nullptr, item.key());
      CHECK_MESSAGE(torch::equal(*in_whole, item.value()), item.key());
      ++stage_params;
    }
  }
  CHECK(stage_params == whole_params.size());
  CHECK(middle->named_parameters().find("blocks.2.attn.qkv.weight") != nullptr);

  whole->eval(), first->eval(), middle->eval(), last->eval();
  auto tokens = torch::randint(0, cfg.vocab_size, {3, 12}, torch::kLong);
  auto staged = last->forward(middle->forward(first->forward(tokens)));
  CHECK(torch::allclose(staged, whole->forward(tokens), 1e-6, 1e-6));
  // As a plain Sequential, the same parts give the same output.
  auto seq = make_transformer_parts(cfg, 0, num_parts(cfg));
  seq->eval();
  CHECK(torch::allclose(seq->forward(tokens), whole->forward(tokens), 1e-6, 1e-6));

  // The partition policies see the same parts through TinyTransformerLayers.
  static_assert(mpp::layered_model<TinyTransformerLayers>);
  const TinyTransformerLayers layers{cfg, 12};
  CHECK(layers.num_layers() == 5);
  std::int64_t counted = 0;
  for (int part = 0; part < layers.num_layers(); ++part) {
    std::int64_t built = 0;
    for (const auto& p : TinyTransformer(cfg, part, part + 1)->parameters()) built += p.numel();
    CHECK_MESSAGE(layers.layer_parameters(part) == built, part_name(cfg, part));
    counted += built;
  }
  CHECK(counted == static_cast<std::int64_t>([&] {
          std::int64_t n = 0;
          for (const auto& p : whole->parameters()) n += p.numel();
          return n;
        }()));
  CHECK(layers.input_shape(0) == std::vector<std::int64_t>{12});
  CHECK(layers.input_shape(3) == std::vector<std::int64_t>{12, cfg.hidden_size});
  auto embed = layers.build(0, 1), stage = layers.build(1, 3), rest = layers.build(3, 5);
  embed->eval(), stage->eval(), rest->eval();
  // Stage 0 takes the ids as floats (the pipeline's one dtype) or as int64.
  CHECK(torch::allclose(rest->forward(stage->forward(embed->forward(tokens.to(torch::kFloat)))),
                        whole->forward(tokens), 1e-6, 1e-6));
  CHECK(torch::allclose(rest->forward(stage->forward(embed->forward(tokens))),
                        whole->forward(tokens), 1e-6, 1e-6));
  CHECK_THROWS_WITH_AS(embed->forward(torch::full({1, 4}, 2.5)),
                       doctest::Contains("must be whole numbers"), std::invalid_argument);
  for (const auto& item : stage->named_parameters()) {
    const auto global = global_parameter_name(item.key());
    REQUIRE_MESSAGE(whole_params.find(global) != nullptr, global);
    CHECK(torch::equal(whole_params[global], item.value()));
  }
  CHECK(global_parameter_name("block12.fc.bias") == "blocks.12.fc.bias");
  CHECK(global_parameter_name("head.ln.weight") == "head.ln.weight");

  CHECK_THROWS_WITH_AS(TinyTransformer(cfg, 3, 6), doctest::Contains("outside the model's 5 parts"),
                       std::invalid_argument);
  // A different seed gives different weights: the init really depends on it.
  auto other_cfg = cfg;
  other_cfg.seed += 1;
  TinyTransformer other(other_cfg);
  CHECK_FALSE(torch::equal(other->named_parameters()["blocks.0.fc.weight"],
                           whole_params["blocks.0.fc.weight"]));
}

TEST_CASE(
    "models: the generated corpus is deterministic, in the alphabet, and split into windows") {
  const auto a = generate_corpus(2000, 7), b = generate_corpus(2000, 7),
             c = generate_corpus(2000, 8);
  CHECK(a.size() == 2000);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(CharTokenizer::decode(CharTokenizer::encode(a)) == a);
  CHECK(a.find("the ") != std::string::npos);

  DataConfig data;
  data.train_characters = 1001;
  data.validation_characters = 201;
  const auto corpus = make_char_corpus(data, 10);
  CHECK(corpus.train.size() == 100);
  CHECK(corpus.validation.size() == 20);
  CHECK(corpus.train_text + corpus.validation_text == generate_corpus(1202, data.seed));
  const auto batch = corpus.train.batch({3, 0});
  CHECK(batch.inputs.sizes() == torch::IntArrayRef{2, 10});
  CHECK(CharTokenizer::decode({batch.inputs[1].data_ptr<std::int64_t>(),
                               batch.inputs[1].data_ptr<std::int64_t>() + 10}) ==
        corpus.train_text.substr(0, 10));
  CHECK(CharTokenizer::decode({batch.targets[0].data_ptr<std::int64_t>(),
                               batch.targets[0].data_ptr<std::int64_t>() + 10}) ==
        corpus.train_text.substr(31, 10));
}

TEST_CASE("models: a short run drives the loss well below the uniform baseline") {
  torch::manual_seed(0);
  auto cfg = parse_config_text(R"({
    "model": {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
              "intermediate_size": 64, "max_position_embeddings": 32},
    "training": {"batch_size": 16, "sequence_length": 32, "learning_rate": 0.01},
    "data": {"train_characters": 20000, "validation_characters": 2000}})");
  const auto corpus = make_char_corpus(cfg.data, cfg.training.sequence_length);
  TinyTransformer model(cfg.model);
  torch::optim::AdamW optimizer(model->parameters(),
                                torch::optim::AdamWOptions(cfg.training.learning_rate));
  auto validation = [&] {
    torch::NoGradGuard no_grad;
    model->eval();
    auto b = corpus.validation.range(0, corpus.validation.size());
    const double loss = language_model_loss(model->forward(b.inputs), b.targets).item<double>();
    model->train();
    return loss;
  };
  const double baseline = std::log(static_cast<double>(cfg.model.vocab_size));
  const double before = validation();
  CHECK(before == doctest::Approx(baseline).epsilon(0.05));  // an untrained model is near uniform
  const auto order = mpp::DistributedSampler(static_cast<std::size_t>(corpus.train.size()), 1, 0,
                                             {true, 1, mpp::Remainder::drop})
                         .indices();
  const std::int64_t batches = corpus.train.size() / 16;
  for (int step = 0; step < 60; ++step) {
    const auto first = order.begin() + (step % batches) * 16;
    std::vector<std::int64_t> idx(first, first + 16);
    auto b = corpus.train.batch(idx);
    auto loss = language_model_loss(model->forward(b.inputs), b.targets);
    optimizer.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
  }
  const double after = validation();
  MESSAGE("validation loss " << before << " -> " << after << " after 60 steps (baseline "
                             << baseline << ")");
  CHECK(after < 0.7 * baseline);
  const auto sample =
      CharTokenizer::decode(greedy_generate(model, CharTokenizer::encode("the "), 20));
  CHECK(sample.size() == 24);
}
