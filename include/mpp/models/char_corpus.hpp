#pragma once
// A corpus that needs no download: short English-like sentences from a tiny grammar, written out
// character by character. It has structure at every range a small model can pick up: spelling
// inside words (fully predictable after a letter or two), word order (determiner, adjective,
// noun, verb, ...), and agreement across several words ("the two foxes chase", "a fox chases"),
// which needs attention to look back past the adjective. Its entropy is well below the uniform
// baseline ln(vocab), so a learning model is visible within a few hundred steps.
//
// The generator is a seeded splitmix64 stream with integer reductions only, so the text is the
// same on every platform and every rank.
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mpp/error.hpp"
#include "mpp/models/transformer_config.hpp"

namespace mpp::models {

/// Character-level tokenizer over the corpus alphabet: newline, space, '.', 'a'..'z'.
/// Token ids are positions in the alphabet; ids >= alphabet size (vocab padding) decode to '?'.
class CharTokenizer {
 public:
  /// The corpus_alphabet_size characters; a token id is a position in it.
  static constexpr std::string_view alphabet = "\n .abcdefghijklmnopqrstuvwxyz";
  static_assert(alphabet.size() == corpus_alphabet_size);

  /// The id of `c`; throws std::invalid_argument for a character outside the alphabet.
  static std::int64_t encode(char c) {
    const auto pos = alphabet.find(c);
    if (pos == std::string_view::npos)
      throw InvalidArgument(std::string("mpp: character '") + c +
                            "' is not in the corpus alphabet (newline, space, '.', a-z); "
                            "use lower-case letters");
    return static_cast<std::int64_t>(pos);
  }
  /// The ids of `text`, one per character; throws like encode(char).
  static std::vector<std::int64_t> encode(std::string_view text) {
    std::vector<std::int64_t> ids;
    ids.reserve(text.size());
    for (char c : text) ids.push_back(encode(c));
    return ids;
  }
  /// The text of `ids`; an id outside the alphabet becomes '?'.
  static std::string decode(const std::vector<std::int64_t>& ids) {
    std::string text;
    text.reserve(ids.size());
    for (auto id : ids)
      text.push_back(id >= 0 && id < static_cast<std::int64_t>(alphabet.size())
                         ? alphabet[static_cast<std::size_t>(id)]
                         : '?');
    return text;
  }
};

namespace detail {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n) (the modulo bias is below 2^-50 for these n).
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  template <class Array>
  auto pick(const Array& words) {
    return words[below(words.size())];
  }

 private:
  std::uint64_t state_;
};

struct Noun {
  std::string_view singular;
  std::string_view plural;
};

inline void append_noun_phrase(std::string& out, SplitMix64& rng, bool plural) {
  static constexpr std::array<std::string_view, 4> singular_det{"the", "a", "one", "my"};
  static constexpr std::array<std::string_view, 4> plural_det{"the", "some", "two", "my"};
  static constexpr std::array<std::string_view, 8> adjectives{"small", "big",   "red",   "old",
                                                              "happy", "quiet", "green", "lazy"};
  static constexpr std::array<Noun, 8> nouns{{{"cat", "cats"},
                                              {"dog", "dogs"},
                                              {"bird", "birds"},
                                              {"fox", "foxes"},
                                              {"child", "children"},
                                              {"robot", "robots"},
                                              {"mouse", "mice"},
                                              {"teacher", "teachers"}}};
  out += plural ? rng.pick(plural_det) : rng.pick(singular_det);
  out += ' ';
  if (rng.below(2) == 0) {
    out += rng.pick(adjectives);
    out += ' ';
  }
  const Noun noun = rng.pick(nouns);
  out += plural ? noun.plural : noun.singular;
}

inline void append_sentence(std::string& out, SplitMix64& rng) {
  static constexpr std::array<Noun, 6> verbs{{{"sees", "see"},
                                              {"likes", "like"},
                                              {"finds", "find"},
                                              {"follows", "follow"},
                                              {"chases", "chase"},
                                              {"helps", "help"}}};
  static constexpr std::array<std::string_view, 5> places{"river", "house", "tree", "garden",
                                                          "road"};
  const bool plural_subject = rng.below(2) == 0;
  append_noun_phrase(out, rng, plural_subject);
  out += ' ';
  const Noun verb = rng.pick(verbs);
  out += plural_subject ? verb.plural : verb.singular;  // agrees with the subject, words back
  out += ' ';
  append_noun_phrase(out, rng, rng.below(2) == 0);
  if (rng.below(3) == 0) {
    out += " near the ";
    out += rng.pick(places);
  }
  out += '.';
}

}  // namespace detail

/// `characters` characters of generated text (sentences, five to a line), the same for a seed.
inline std::string generate_corpus(std::int64_t characters, std::uint64_t seed) {
  if (characters < 1) throw InvalidArgument("mpp: generate_corpus needs at least one character");
  detail::SplitMix64 rng(seed);
  std::string text;
  text.reserve(static_cast<std::size_t>(characters) + 128);
  int sentence = 0;
  while (static_cast<std::int64_t>(text.size()) < characters) {
    detail::append_sentence(text, rng);
    text += (++sentence % 5 == 0) ? '\n' : ' ';
  }
  text.resize(static_cast<std::size_t>(characters));
  return text;
}

/// A token stream cut into next-token examples: example i is tokens [i*T, i*T + T) as input and
/// the same window shifted by one as target (consecutive windows share one boundary token).
class TokenWindows {
 public:
  /// Windows of `sequence_length` (T >= 1) tokens over `text`; throws std::invalid_argument for
  /// T < 1 or a character outside the alphabet.
  TokenWindows(const std::string& text, std::int64_t sequence_length)
      : tokens_(torch::tensor(CharTokenizer::encode(text), torch::kLong)),
        sequence_length_(sequence_length) {
    if (sequence_length < 1) throw InvalidArgument("mpp: TokenWindows needs sequence_length >= 1");
  }

  /// The number of examples: (tokens - 1) / T.
  std::int64_t size() const { return (tokens_.numel() - 1) / sequence_length_; }
  /// T.
  std::int64_t sequence_length() const { return sequence_length_; }

  /// Inputs and next-token targets of B examples.
  struct Batch {
    torch::Tensor inputs;   ///< [B, T] int64
    torch::Tensor targets;  ///< [B, T] int64
  };

  /// The examples at `indices` (any order, repeats allowed), stacked into one batch.
  Batch batch(const std::vector<std::int64_t>& indices) const {
    if (indices.empty()) throw InvalidArgument("mpp: TokenWindows::batch needs indices");
    auto starts = torch::tensor(indices, torch::kLong);
    if (starts.min().item<std::int64_t>() < 0 || starts.max().item<std::int64_t>() >= size())
      throw OutOfRange("mpp: window index outside [0, " + std::to_string(size()) + ")");
    auto offsets = torch::arange(sequence_length_ + 1, torch::kLong);
    auto rows = tokens_.index({(starts * sequence_length_).unsqueeze(1) + offsets.unsqueeze(0)});
    using torch::indexing::Slice;
    return {rows.index({Slice(), Slice(0, sequence_length_)}),
            rows.index({Slice(), Slice(1, None)})};
  }

  /// Consecutive examples [begin, end): for validation passes.
  Batch range(std::int64_t begin, std::int64_t end) const {
    std::vector<std::int64_t> indices;
    for (auto i = begin; i < end; ++i) indices.push_back(i);
    return batch(indices);
  }

 private:
  static constexpr auto None = torch::indexing::None;
  torch::Tensor tokens_;
  std::int64_t sequence_length_;
};

/// The training and held-out splits of one config: two disjoint stretches of one generated
/// text (the validation text follows the training text), so validation sentences are unseen.
struct CharCorpus {
  std::string train_text;       ///< The training stretch of the text.
  std::string validation_text;  ///< The held-out stretch that follows it.
  TokenWindows train;           ///< train_text as examples.
  TokenWindows validation;      ///< validation_text as examples.
};

/// The corpus of `data` (its sizes in characters and its seed) cut into windows of
/// `sequence_length` tokens; the same on every rank.
inline CharCorpus make_char_corpus(const DataConfig& data, std::int64_t sequence_length) {
  const std::string all =
      generate_corpus(data.train_characters + data.validation_characters, data.seed);
  std::string train_text = all.substr(0, static_cast<std::size_t>(data.train_characters));
  std::string validation_text = all.substr(static_cast<std::size_t>(data.train_characters));
  TokenWindows train(train_text, sequence_length);
  TokenWindows validation(validation_text, sequence_length);
  return {std::move(train_text), std::move(validation_text), std::move(train),
          std::move(validation)};
}

}  // namespace mpp::models
