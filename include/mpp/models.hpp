#pragma once
/// \namespace mpp::models
/// The course's models: the 16-layer MLP and the tiny transformer, with its config and corpus.
#include "mpp/models/char_corpus.hpp"
#include "mpp/models/mlp.hpp"
#include "mpp/models/tiny_transformer.hpp"
#include "mpp/models/transformer_config.hpp"
