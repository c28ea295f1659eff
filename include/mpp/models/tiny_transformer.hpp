#pragma once
// A decoder-only transformer small enough to train on one core: token + position embeddings,
// N blocks of (LayerNorm, causal multi-head self-attention, LayerNorm, MLP) with residuals,
// a final LayerNorm and the LM head.
//
// The model is a chain of parts so that a pipeline stage can own a contiguous range of them:
//   part 0           "embed"       tokens [B, T] (int64)  -> hidden [B, T, H]
//   part 1 .. N      "blocks.<i>"  hidden [B, T, H]       -> hidden [B, T, H]
//   part N + 1       "head"        hidden [B, T, H]       -> logits [B, T, V]
// Every part is initialised from its own generator seeded by (model.seed, part index), so a
// stage that builds only parts [begin, end) holds exactly the weights the whole model would,
// and parameter names are the same in both ("blocks.3.attn.qkv.weight"), so checkpoints of a
// stage are a subset of the whole model's.
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/utils.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpp/error.hpp"
#include "mpp/models/mlp.hpp"  // detail::layer_seed: the same per-layer seeding as the MLP
#include "mpp/models/transformer_config.hpp"

namespace mpp::models {

/// Number of parts of the chain: embedding, one per block, head.
inline int num_parts(const TransformerConfig& cfg) { return cfg.num_hidden_layers + 2; }

/// The name a part's parameters are prefixed with, in the whole model and in any stage.
inline std::string part_name(const TransformerConfig& cfg, int part) {
  if (part == 0) return "embed";
  if (part == num_parts(cfg) - 1) return "head";
  return "blocks." + std::to_string(part - 1);
}

namespace detail {

inline void init_normal(torch::Tensor& w, double std, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  w.normal_(0.0, std, gen);
}

}  // namespace detail

/// Part 0: token and position embeddings, summed, then dropout.
class EmbeddingPartImpl : public torch::nn::Module {
 public:
  /// Initialised from the generator of part 0.
  explicit EmbeddingPartImpl(const TransformerConfig& cfg)
      : token(register_module("token", torch::nn::Embedding(cfg.vocab_size, cfg.hidden_size))),
        position(register_module(
            "position", torch::nn::Embedding(cfg.max_position_embeddings, cfg.hidden_size))),
        dropout_(cfg.dropout),
        max_positions_(cfg.max_position_embeddings) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(detail::layer_seed(cfg.seed, 0));
    detail::init_normal(token->weight, cfg.initializer_range, gen);
    detail::init_normal(position->weight, cfg.initializer_range, gen);
  }

  /// Hidden states [B, T, H] of int64 `tokens` [B, T]; throws std::invalid_argument for another
  /// dtype or shape, or T > max_position_embeddings.
  torch::Tensor forward(const torch::Tensor& tokens) {
    if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong)
      throw InvalidArgument(
          "mpp: TinyTransformer's embedding takes int64 tokens [batch, time] "
          "(got " +
          std::string(tokens.toString()) + " of dim " + std::to_string(tokens.dim()) + ")");
    const auto time = tokens.size(1);
    if (time > max_positions_)
      throw InvalidArgument("mpp: sequence of " + std::to_string(time) +
                            " tokens exceeds model.max_position_embeddings (" +
                            std::to_string(max_positions_) + "); crop the input");
    auto positions = torch::arange(time, tokens.options());
    auto x = token->forward(tokens) + position->forward(positions).unsqueeze(0);
    return torch::nn::functional::dropout(
        x, torch::nn::functional::DropoutFuncOptions().p(dropout_).training(is_training()));
  }

  torch::nn::Embedding token;     ///< Token embedding [vocab_size, H].
  torch::nn::Embedding position;  ///< Position embedding [max_position_embeddings, H].

 private:
  double dropout_;
  std::int64_t max_positions_;
};
/// The module holder of EmbeddingPartImpl (a shared pointer to it, as torch::nn modules are used).
TORCH_MODULE(EmbeddingPart);

/// Causal multi-head self-attention: one fused q/k/v projection, scaled dot products with the
/// future masked out, and an output projection.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  /// Weights drawn from `gen` (the block's generator); the output projection with
  /// `residual_std`.
  CausalSelfAttentionImpl(const TransformerConfig& cfg, at::Generator& gen, double residual_std)
      : qkv(register_module("qkv", torch::nn::Linear(cfg.hidden_size, 3 * cfg.hidden_size))),
        proj(register_module("proj", torch::nn::Linear(cfg.hidden_size, cfg.hidden_size))),
        heads_(cfg.num_attention_heads),
        dropout_(cfg.dropout) {
    detail::init_normal(qkv->weight, cfg.initializer_range, gen);
    detail::init_normal(proj->weight, residual_std, gen);
    torch::NoGradGuard no_grad;
    qkv->bias.zero_();
    proj->bias.zero_();
  }

  /// Attention output [B, T, H] of `x` [B, T, H]; position t sees positions <= t only.
  torch::Tensor forward(const torch::Tensor& x) {
    namespace F = torch::nn::functional;
    const auto batch = x.size(0), time = x.size(1), hidden = x.size(2);
    const auto head_dim = hidden / heads_;
    // [B, T, 3H] -> three [B, heads, T, head_dim]
    auto parts = qkv->forward(x).view({batch, time, 3, heads_, head_dim}).permute({2, 0, 3, 1, 4});
    auto q = parts[0], k = parts[1], v = parts[2];
    auto scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
    auto future = torch::ones({time, time}, x.options().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    auto weights = F::dropout(torch::softmax(scores, -1),
                              F::DropoutFuncOptions().p(dropout_).training(is_training()));
    auto y = weights.matmul(v).transpose(1, 2).reshape({batch, time, hidden});
    return F::dropout(proj->forward(y),
                      F::DropoutFuncOptions().p(dropout_).training(is_training()));
  }

  torch::nn::Linear qkv;   ///< Fused query, key and value projection, H -> 3H.
  torch::nn::Linear proj;  ///< Output projection, H -> H.

 private:
  std::int64_t heads_;
  double dropout_;
};
/// The module holder of CausalSelfAttentionImpl (a shared pointer to it, as torch::nn modules are
/// used).
TORCH_MODULE(CausalSelfAttention);

/// Parts 1..N: x + attn(ln1(x)), then x + mlp(ln2(x)) (pre-LayerNorm, as GPT-2).
class TransformerBlockImpl : public torch::nn::Module {
 public:
  /// Block `part` (1 .. N), initialised from that part's generator; throws std::out_of_range
  /// outside.
  TransformerBlockImpl(const TransformerConfig& cfg, int part) : dropout_(cfg.dropout) {
    if (part < 1 || part > cfg.num_hidden_layers)
      throw OutOfRange("mpp: transformer block part " + std::to_string(part) + " outside [1, " +
                       std::to_string(cfg.num_hidden_layers) + "]");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(detail::layer_seed(cfg.seed, part));
    // Residual projections scaled by 1/sqrt(2N) keep the residual stream's variance flat in depth.
    const double residual_std = cfg.initializer_range / std::sqrt(2.0 * cfg.num_hidden_layers);
    const auto ln_options = torch::nn::LayerNormOptions({cfg.hidden_size}).eps(cfg.layer_norm_eps);
    ln1 = register_module("ln1", torch::nn::LayerNorm(ln_options));
    attn = register_module("attn", CausalSelfAttention(cfg, gen, residual_std));
    ln2 = register_module("ln2", torch::nn::LayerNorm(ln_options));
    fc = register_module("fc", torch::nn::Linear(cfg.hidden_size, cfg.intermediate_size));
    fc_out = register_module("fc_out", torch::nn::Linear(cfg.intermediate_size, cfg.hidden_size));
    detail::init_normal(fc->weight, cfg.initializer_range, gen);
    detail::init_normal(fc_out->weight, residual_std, gen);
    torch::NoGradGuard no_grad;
    fc->bias.zero_();
    fc_out->bias.zero_();
  }

  /// [B, T, H] -> [B, T, H].
  torch::Tensor forward(torch::Tensor x) {
    namespace F = torch::nn::functional;
    x = x + attn->forward(ln1->forward(x));
    auto h = fc_out->forward(torch::gelu(fc->forward(ln2->forward(x))));
    return x + F::dropout(h, F::DropoutFuncOptions().p(dropout_).training(is_training()));
  }

  torch::nn::LayerNorm ln1{nullptr};  ///< Before attention.
  CausalSelfAttention attn{nullptr};  ///< The attention.
  torch::nn::LayerNorm ln2{nullptr};  ///< Before the MLP.
  torch::nn::Linear fc{nullptr};      ///< MLP input, H -> intermediate_size (GELU after it).
  torch::nn::Linear fc_out{nullptr};  ///< MLP output, intermediate_size -> H.

 private:
  double dropout_;
};
/// The module holder of TransformerBlockImpl (a shared pointer to it, as torch::nn modules are
/// used).
TORCH_MODULE(TransformerBlock);

/// Part N + 1: final LayerNorm and the projection to vocabulary logits (untied from the token
/// embedding so that the first and last pipeline stages share no parameter).
class LmHeadImpl : public torch::nn::Module {
 public:
  /// Initialised from the generator of the last part.
  explicit LmHeadImpl(const TransformerConfig& cfg)
      : ln(register_module(
            "ln", torch::nn::LayerNorm(
                      torch::nn::LayerNormOptions({cfg.hidden_size}).eps(cfg.layer_norm_eps)))),
        lm_head(register_module(
            "lm_head",
            torch::nn::Linear(
                torch::nn::LinearOptions(cfg.hidden_size, cfg.vocab_size).bias(false)))) {
    auto gen =
        at::make_generator<at::CPUGeneratorImpl>(detail::layer_seed(cfg.seed, num_parts(cfg) - 1));
    detail::init_normal(lm_head->weight, cfg.initializer_range, gen);
  }

  /// Logits [B, T, V] of hidden states [B, T, H].
  torch::Tensor forward(const torch::Tensor& x) { return lm_head->forward(ln->forward(x)); }

  torch::nn::LayerNorm ln;    ///< The final LayerNorm.
  torch::nn::Linear lm_head;  ///< H -> vocab_size, no bias.
};
/// The module holder of LmHeadImpl (a shared pointer to it, as torch::nn modules are used).
TORCH_MODULE(LmHead);

namespace detail {
/// Holds blocks under their global index ("blocks.3"), also when a stage owns only some.
struct BlockListImpl : torch::nn::Module {};
TORCH_MODULE(BlockList);
}  // namespace detail

/// Parts [begin, end) of the model (the whole model by default). A pipeline stage builds its
/// own range; its forward takes tokens when it owns the embedding (else hidden states) and
/// returns logits when it owns the head (else hidden states).
class TinyTransformerImpl : public torch::nn::Module {
 public:
  /// Parts [begin_part, end_part) of 0 .. num_parts(cfg); throws std::invalid_argument for an
  /// empty or out-of-range range.
  TinyTransformerImpl(const TransformerConfig& cfg, int begin_part, int end_part)
      : cfg_(cfg), begin_(begin_part), end_(end_part) {
    if (begin_part < 0 || end_part > num_parts(cfg) || begin_part >= end_part)
      throw InvalidArgument("mpp: TinyTransformer part range [" + std::to_string(begin_part) +
                            ", " + std::to_string(end_part) + ") is empty or outside the model's " +
                            std::to_string(num_parts(cfg)) + " parts (embedding, " +
                            std::to_string(cfg.num_hidden_layers) + " blocks, head)");
    for (int part = begin_part; part < end_part; ++part) {
      if (part == 0) {
        chain_->push_back("embed", register_module("embed", EmbeddingPart(cfg)));
      } else if (part == num_parts(cfg) - 1) {
        chain_->push_back("head", register_module("head", LmHead(cfg)));
      } else {
        if (!blocks_) blocks_ = register_module("blocks", detail::BlockList());
        const std::string index = std::to_string(part - 1);
        chain_->push_back("block" + index,
                          blocks_->register_module(index, TransformerBlock(cfg, part)));
      }
    }
  }
  /// The whole model.
  explicit TinyTransformerImpl(const TransformerConfig& cfg)
      : TinyTransformerImpl(cfg, 0, num_parts(cfg)) {}

  /// Runs the owned parts in order (see the class comment for what goes in and out).
  torch::Tensor forward(torch::Tensor x) { return chain_->forward(x); }

  /// The owned parts in order, as one Sequential (shares the modules, not copies).
  torch::nn::Sequential as_sequential() const { return chain_; }

  /// The architecture.
  const TransformerConfig& config() const { return cfg_; }
  /// First owned part.
  int begin_part() const { return begin_; }
  /// One past the last owned part.
  int end_part() const { return end_; }
  /// Owns part 0: forward takes int64 tokens.
  bool has_embedding() const { return begin_ == 0; }
  /// Owns the last part: forward returns logits.
  bool has_head() const { return end_ == num_parts(cfg_); }

 private:
  TransformerConfig cfg_;
  int begin_;
  int end_;
  detail::BlockList blocks_{nullptr};
  torch::nn::Sequential chain_;  // not registered: the parts are registered by name above
};
/// The module holder of TinyTransformerImpl (a shared pointer to it, as torch::nn modules are
/// used).
TORCH_MODULE(TinyTransformer);

/// Parts [begin, end) as a Sequential, for code that drives stages as plain Sequentials.
inline torch::nn::Sequential make_transformer_parts(const TransformerConfig& cfg, int begin,
                                                    int end) {
  return TinyTransformer(cfg, begin, end)->as_sequential();
}

/// Parameters of part `part` (what a ByParams partition balances), without building it.
inline std::int64_t part_parameters(const TransformerConfig& cfg, int part) {
  const auto h = cfg.hidden_size, v = cfg.vocab_size, i = cfg.intermediate_size;
  if (part == 0) return (v + cfg.max_position_embeddings) * h;
  if (part == num_parts(cfg) - 1) return 2 * h + h * v;
  return (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h) + 4 * h;
}

/// Token ids carried as floats back to int64. A pipeline moves one dtype between its stages and
/// checks stage 0's input against it too, so there the ids travel as float (exact below 2^24).
class TokenIdsImpl : public torch::nn::Module {
 public:
  /// `x` as int64 ids; an integer tensor passes through. Throws std::invalid_argument for a
  /// float that is not a whole number in [0, 2^24).
  torch::Tensor forward(const torch::Tensor& x) {
    if (!x.is_floating_point()) return x;
    auto ids = x.round();
    if (!torch::equal(ids, x) ||
        (x.numel() > 0 && (x.min().item<double>() < 0 || x.max().item<double>() >= (1 << 24))))
      throw InvalidArgument(
          "mpp: token ids given as floats must be whole numbers in "
          "[0, 2^24); pass the token tensor converted with .to(kFloat)");
    return ids.to(torch::kLong);
  }
};
/// The module holder of TokenIdsImpl (a shared pointer to it, as torch::nn modules are used).
TORCH_MODULE(TokenIds);

/// The model as a sequence of layers for the partition policies (mpp::layered_model): layer k is
/// part k, so a pipeline stage owning layers [begin, end) builds exactly those parts. Between
/// stages travel hidden states [T, H] per sample in float; stage 0 reads token ids [T], as
/// floats (a TokenIds module in front of the embedding turns them back into int64).
struct TinyTransformerLayers {
  TransformerConfig config;           ///< The architecture.
  std::int64_t sequence_length = 64;  ///< T, tokens per example.

  /// num_parts(config): embedding, blocks, head.
  int num_layers() const { return num_parts(config); }
  /// part_parameters() of part `layer`.
  std::int64_t layer_parameters(int layer) const { return part_parameters(config, layer); }
  /// Per sample: {T} (token ids) for layer 0, {T, H} for the others.
  std::vector<std::int64_t> input_shape(int layer) const {
    if (layer == 0) return {sequence_length};
    return {sequence_length, config.hidden_size};
  }
  /// float32, also for stage 0's token ids (see TokenIds).
  c10::ScalarType dtype() const { return c10::kFloat; }
  /// Parts [begin, end), with a TokenIds module in front when `begin` is 0.
  torch::nn::Sequential build(int begin, int end) const {
    auto parts = make_transformer_parts(config, begin, end);
    if (begin != 0) return parts;
    torch::nn::Sequential seq;
    seq->push_back("token_ids", TokenIds());
    const auto names = parts->named_children().keys();
    std::size_t i = 0;
    for (auto it = parts->begin(); it != parts->end(); ++it, ++i) seq->push_back(names[i], *it);
    return seq;
  }
};

/// The whole model's name of a parameter of a Sequential made by make_transformer_parts() or
/// TinyTransformerLayers::build() ("block3.attn.qkv.weight" -> "blocks.3.attn.qkv.weight"), so
/// that stage checkpoints use the names of the whole model.
inline std::string global_parameter_name(const std::string& stage_name) {
  if (stage_name.rfind("block", 0) == 0 && stage_name.size() > 5 &&
      std::isdigit(static_cast<unsigned char>(stage_name[5])))
    return "blocks." + stage_name.substr(5);
  return stage_name;
}

/// Mean next-token cross-entropy of logits [B, T, V] against targets [B, T].
inline torch::Tensor language_model_loss(const torch::Tensor& logits,
                                         const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

/// Greedy decoding: appends `new_tokens` argmax tokens to `prompt` (1-D int64), looking at most
/// max_position_embeddings tokens back. Needs the whole model (embedding and head).
inline std::vector<std::int64_t> greedy_generate(TinyTransformer& model,
                                                 std::vector<std::int64_t> prompt, int new_tokens) {
  if (!model->has_embedding() || !model->has_head())
    throw InvalidArgument(
        "mpp: greedy_generate needs the whole TinyTransformer (embedding "
        "and head); gather the stages first");
  if (prompt.empty()) throw InvalidArgument("mpp: greedy_generate needs a non-empty prompt");
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard no_grad;
  const auto window = static_cast<std::size_t>(model->config().max_position_embeddings);
  for (int i = 0; i < new_tokens; ++i) {
    const std::size_t start = prompt.size() > window ? prompt.size() - window : 0;
    std::vector<std::int64_t> context(prompt.begin() + static_cast<std::ptrdiff_t>(start),
                                      prompt.end());
    auto input = torch::tensor(context, torch::kLong).unsqueeze(0);
    auto logits = model->forward(input);
    prompt.push_back(logits[0][-1].argmax().item<std::int64_t>());
  }
  model->train(was_training);
  return prompt;
}

}  // namespace mpp::models
