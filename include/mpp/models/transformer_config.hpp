#pragma once
// The tiny transformer's hyper-parameters, read from `config/config.json`.
//
// The file has three sections, each optional, each key optional (the defaults below):
//   { "model":    { "num_hidden_layers": 2, "hidden_size": 64, ... },
//     "training": { "learning_rate": 3e-3, "batch_size": 32, ... },
//     "data":     { "train_characters": 120000, ... } }
// Anything the program would silently misread is refused with the key's name and the fix:
// unknown keys (with the closest known key), wrong JSON types, out-of-range values and
// combinations the model cannot run (hidden_size not divisible by num_attention_heads, a
// sequence longer than the position table, a vocabulary smaller than the corpus alphabet).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mpp/error.hpp"

namespace mpp::models {

/// Thrown for every problem in a config file; the message names the key and the fix.
struct ConfigError : RuntimeError {
  using RuntimeError::RuntimeError;
};

/// The architecture: everything a checkpoint must agree with.
struct TransformerConfig {
  int num_hidden_layers = 2;                  ///< Transformer blocks.
  std::int64_t hidden_size = 64;              ///< Model width; a multiple of num_attention_heads.
  std::int64_t num_attention_heads = 4;       ///< Heads per block.
  std::int64_t intermediate_size = 256;       ///< Width of each block's MLP.
  std::int64_t vocab_size = 32;               ///< Token ids; at least corpus_alphabet_size.
  std::int64_t max_position_embeddings = 64;  ///< Longest sequence the position table holds.
  double dropout = 0.0;                       ///< Dropout probability, 0 .. 1.
  double layer_norm_eps = 1e-5;               ///< LayerNorm's epsilon.
  double initializer_range = 0.02;            ///< Standard deviation of the initial weights.
  std::uint64_t seed = 1234;                  ///< weight init (per part, see tiny_transformer.hpp)

  /// Width of one head: hidden_size / num_attention_heads.
  std::int64_t head_dim() const { return hidden_size / num_attention_heads; }
  /// Every field equal.
  bool operator==(const TransformerConfig&) const = default;
};

/// The hand-written loop's knobs.
struct TrainingConfig {
  double learning_rate = 3e-3;        ///< AdamW's learning rate.
  double weight_decay = 0.01;         ///< AdamW's decoupled weight decay.
  double grad_clip = 1.0;             ///< max global gradient norm, 0 turns clipping off
  std::int64_t batch_size = 32;       ///< global batch: DDP splits it across ranks
  std::int64_t sequence_length = 64;  ///< Tokens per example; at most max_position_embeddings.
  int epochs = 2;                     ///< Passes over the training text.
  std::uint64_t seed = 1234;          ///< data order (sampler) and dropout
  int eval_every = 25;  ///< steps between validation passes (and one at every epoch end)
  int log_every = 5;    ///< steps between train.log lines
  /// Every field equal.
  bool operator==(const TrainingConfig&) const = default;
};

/// The generated corpus (see char_corpus.hpp).
struct DataConfig {
  std::int64_t train_characters = 600000;      ///< Length of the training text.
  std::int64_t validation_characters = 12000;  ///< Length of the held-out text that follows it.
  std::uint64_t seed = 7;                      ///< Seeds the corpus generator.
  /// Every field equal.
  bool operator==(const DataConfig&) const = default;
};

/// A whole `config/config.json`: from parse_config(), parse_config_text() or load_config().
struct TinyTransformerConfig {
  TransformerConfig model;  ///< The "model" section.
  TrainingConfig training;  ///< The "training" section.
  DataConfig data;          ///< The "data" section.
  /// Every section equal.
  bool operator==(const TinyTransformerConfig&) const = default;
};

namespace detail {

inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0u : 1u)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

inline std::string json_kind(const nlohmann::json& value) {
  if (value.is_boolean()) return "a boolean";
  if (value.is_number_integer()) return "an integer";
  if (value.is_number_float()) return "a number with a fraction";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "null";
}

/// Reads one section, refusing unknown keys and wrong types. `origin` names the file.
class SectionReader {
 public:
  SectionReader(const nlohmann::json& root, std::string section, std::string origin)
      : section_(std::move(section)), origin_(std::move(origin)) {
    if (!root.contains(section_)) return;
    node_ = &root.at(section_);
    if (!node_->is_object())
      fail(section_, "must be an object of settings (got " + json_kind(*node_) + ")",
           "write it as \"" + section_ + "\": { ... }");
  }

  template <class T>
  void read(const char* key, T& target, T min, T max) {
    known_.emplace_back(key);
    if (node_ == nullptr || !node_->contains(key)) return;
    const nlohmann::json& value = node_->at(key);
    const std::string name = section_ + "." + key;
    if constexpr (std::is_same_v<T, bool>) {
      if (!value.is_boolean())
        fail(name, "must be true or false (got " + json_kind(value) + " " + value.dump() + ")",
             "write true or false without quotes");
      target = value.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!value.is_number_integer())
        fail(name, "must be an integer (got " + json_kind(value) + " " + value.dump() + ")",
             "write a whole number without quotes, e.g. " + std::to_string(target));
      // long double holds every 64-bit integer exactly: no wrap-around of negatives or seeds.
      const long double v = value.is_number_unsigned()
                                ? static_cast<long double>(value.get<std::uint64_t>())
                                : static_cast<long double>(value.get<std::int64_t>());
      if (v < static_cast<long double>(min) || v > static_cast<long double>(max))
        fail(name, "is out of range (got " + value.dump() + ")",
             "use a value in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
      target = value.get<T>();
    } else {
      if (!value.is_number())
        fail(name, "must be a number (got " + json_kind(value) + " " + value.dump() + ")",
             "write a number without quotes, e.g. " + short_number(target));
      const double v = value.get<double>();
      if (!(v >= min && v <= max))
        fail(name, "is out of range (got " + value.dump() + ")",
             "use a value in [" + short_number(min) + ", " + short_number(max) + "]");
      target = static_cast<T>(v);
    }
  }

  /// Call after every read(): anything left is a key this program does not know.
  void refuse_unknown_keys() const {
    if (node_ == nullptr) return;
    for (const auto& [key, value] : node_->items()) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      std::string closest;
      std::size_t best = std::numeric_limits<std::size_t>::max();
      for (const auto& k : known_) {
        const std::size_t d = edit_distance(key, k);
        if (d < best) best = d, closest = k;
      }
      std::string fix = best <= 3 ? "did you mean \"" + closest + "\"? " : std::string{};
      fix += "known keys in \"" + section_ + "\":";
      for (const auto& k : known_) fix += " " + k;
      fail(section_ + "." + key, "is not a known setting", fix);
    }
  }

  [[noreturn]] void fail(const std::string& name, const std::string& problem,
                         const std::string& fix) const {
    throw ConfigError("mpp: " + origin_ + ": " + name + " " + problem + "; " + fix);
  }

 private:
  template <class T>
  static std::string short_number(T v) {
    std::ostringstream out;
    out << v;
    return out.str();
  }

  std::string section_;
  std::string origin_;
  const nlohmann::json* node_ = nullptr;
  std::vector<std::string> known_;
};

}  // namespace detail

/// Smallest vocabulary the generated corpus needs (its alphabet, see char_corpus.hpp).
inline constexpr std::int64_t corpus_alphabet_size = 29;

/// Parses and validates a whole config. `origin` names the source in error messages.
inline TinyTransformerConfig parse_config(const nlohmann::json& root,
                                          const std::string& origin = "config.json") {
  if (!root.is_object())
    throw ConfigError("mpp: " + origin + " must hold a JSON object with \"model\", \"training\" " +
                      "and \"data\" sections (got " + detail::json_kind(root) + ")");
  for (const auto& [key, value] : root.items())
    if (key != "model" && key != "training" && key != "data")
      throw ConfigError("mpp: " + origin + ": top-level key \"" + key +
                        "\" is not a known section; use \"model\", \"training\" or \"data\"");

  TinyTransformerConfig cfg;
  constexpr std::int64_t big = std::int64_t{1} << 40;
  constexpr std::uint64_t any_seed = std::numeric_limits<std::uint64_t>::max();

  detail::SectionReader model(root, "model", origin);
  auto& m = cfg.model;
  model.read("num_hidden_layers", m.num_hidden_layers, 1, 1024);
  model.read("hidden_size", m.hidden_size, std::int64_t{1}, big);
  model.read("num_attention_heads", m.num_attention_heads, std::int64_t{1}, big);
  model.read("intermediate_size", m.intermediate_size, std::int64_t{1}, big);
  model.read("vocab_size", m.vocab_size, std::int64_t{1}, big);
  model.read("max_position_embeddings", m.max_position_embeddings, std::int64_t{1}, big);
  model.read("dropout", m.dropout, 0.0, 0.99);
  model.read("layer_norm_eps", m.layer_norm_eps, 1e-12, 1.0);
  model.read("initializer_range", m.initializer_range, 1e-6, 10.0);
  model.read("seed", m.seed, std::uint64_t{0}, any_seed);
  model.refuse_unknown_keys();

  detail::SectionReader training(root, "training", origin);
  auto& t = cfg.training;
  training.read("learning_rate", t.learning_rate, 1e-9, 10.0);
  training.read("weight_decay", t.weight_decay, 0.0, 10.0);
  training.read("grad_clip", t.grad_clip, 0.0, 1e6);
  training.read("batch_size", t.batch_size, std::int64_t{1}, big);
  training.read("sequence_length", t.sequence_length, std::int64_t{1}, big);
  training.read("epochs", t.epochs, 1, 1000000);
  training.read("seed", t.seed, std::uint64_t{0}, any_seed);
  training.read("eval_every", t.eval_every, 1, 1000000000);
  training.read("log_every", t.log_every, 1, 1000000000);
  training.refuse_unknown_keys();

  detail::SectionReader data(root, "data", origin);
  auto& d = cfg.data;
  data.read("train_characters", d.train_characters, std::int64_t{1}, big);
  data.read("validation_characters", d.validation_characters, std::int64_t{1}, big);
  data.read("seed", d.seed, std::uint64_t{0}, any_seed);
  data.refuse_unknown_keys();

  // Combinations: each message says which keys disagree and how to reconcile them.
  if (m.hidden_size % m.num_attention_heads != 0)
    model.fail(
        "model.hidden_size",
        "(" + std::to_string(m.hidden_size) + ") is not divisible by model.num_attention_heads (" +
            std::to_string(m.num_attention_heads) + ")",
        "every head gets hidden_size / num_attention_heads channels; pick e.g. hidden_size " +
            std::to_string((m.hidden_size / m.num_attention_heads + 1) * m.num_attention_heads) +
            " or a head count that divides " + std::to_string(m.hidden_size));
  if (t.sequence_length > m.max_position_embeddings)
    training.fail("training.sequence_length",
                  "(" + std::to_string(t.sequence_length) +
                      ") exceeds model.max_position_embeddings (" +
                      std::to_string(m.max_position_embeddings) + ")",
                  "the position table has one row per position; shorten the sequence or raise "
                  "model.max_position_embeddings");
  if (m.vocab_size < corpus_alphabet_size)
    model.fail("model.vocab_size",
               "(" + std::to_string(m.vocab_size) + ") is smaller than the corpus alphabet (" +
                   std::to_string(corpus_alphabet_size) + " characters)",
               "raise model.vocab_size to at least " + std::to_string(corpus_alphabet_size));
  const std::int64_t windows = (d.train_characters - 1) / t.sequence_length;
  if (windows < t.batch_size)
    data.fail(
        "data.train_characters",
        "(" + std::to_string(d.train_characters) + ") gives only " + std::to_string(windows) +
            " training sequences of training.sequence_length " + std::to_string(t.sequence_length) +
            ", fewer than one batch of " + std::to_string(t.batch_size),
        "raise data.train_characters to at least " +
            std::to_string(t.batch_size * t.sequence_length + 1) + " or lower training.batch_size");
  if ((d.validation_characters - 1) / t.sequence_length < 1)
    data.fail(
        "data.validation_characters",
        "(" + std::to_string(d.validation_characters) +
            ") holds no full sequence of training.sequence_length " +
            std::to_string(t.sequence_length),
        "raise data.validation_characters to at least " + std::to_string(t.sequence_length + 1));
  return cfg;
}

/// parse_config() of JSON text; throws ConfigError naming `origin` when the text is not JSON
/// or the config is refused.
inline TinyTransformerConfig parse_config_text(const std::string& text,
                                               const std::string& origin = "config.json") {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError("mpp: " + origin + " is not valid JSON (" + e.what() +
                      "); fix the syntax (no trailing commas, no comments)");
  }
  return parse_config(root, origin);
}

/// parse_config() of the file at `path`; throws ConfigError when it cannot be opened, parsed
/// or accepted.
inline TinyTransformerConfig load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw ConfigError("mpp: cannot open config file '" + path +
                      "'; pass --config <path> or run from the repository root");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config_text(text.str(), path);
}

/// The config as JSON, every key spelled out (what a checkpoint records).
inline nlohmann::json to_json(const TinyTransformerConfig& cfg) {
  const auto& m = cfg.model;
  const auto& t = cfg.training;
  const auto& d = cfg.data;
  return {
      {"model",
       {{"num_hidden_layers", m.num_hidden_layers},
        {"hidden_size", m.hidden_size},
        {"num_attention_heads", m.num_attention_heads},
        {"intermediate_size", m.intermediate_size},
        {"vocab_size", m.vocab_size},
        {"max_position_embeddings", m.max_position_embeddings},
        {"dropout", m.dropout},
        {"layer_norm_eps", m.layer_norm_eps},
        {"initializer_range", m.initializer_range},
        {"seed", m.seed}}},
      {"training",
       {{"learning_rate", t.learning_rate},
        {"weight_decay", t.weight_decay},
        {"grad_clip", t.grad_clip},
        {"batch_size", t.batch_size},
        {"sequence_length", t.sequence_length},
        {"epochs", t.epochs},
        {"seed", t.seed},
        {"eval_every", t.eval_every},
        {"log_every", t.log_every}}},
      {"data",
       {{"train_characters", d.train_characters},
        {"validation_characters", d.validation_characters},
        {"seed", d.seed}}},
  };
}

}  // namespace mpp::models
