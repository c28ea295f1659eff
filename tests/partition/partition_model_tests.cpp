// Building only a rank's pieces: same initial weights as the monolith, nothing else allocated.
#include <doctest/doctest.h>

#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "mpp/partition.hpp"

namespace {

int linear_count(const torch::nn::Sequential& seq) {
  int n = 0;
  for (const auto& child : seq->children())
    if (child->as<torch::nn::Linear>() != nullptr) ++n;
  return n;
}

template <class P>
void check_pieces_match_monolith(int chunks_per_rank) {
  const mpp::MlpModel model{{.hidden = 16, .layers = 8, .seed = 7}};
  const auto full = mpp::models::make_full_mlp(model.config);
  const auto full_params = full->parameters();
  const int ranks = P::ranks_for(chunks_per_rank);
  int layers_seen = 0;
  for (int rank = 0; rank < ranks; ++rank) {
    const auto pieces = mpp::build_local_pieces<P>(model, rank, chunks_per_rank);
    REQUIRE(pieces.size() == static_cast<std::size_t>(chunks_per_rank));
    for (const auto& piece : pieces) {
      CHECK(piece.piece == piece.chunk * ranks + rank);
      CHECK(linear_count(piece.module) == piece.layers.size());
      const auto params = piece.module->parameters();
      REQUIRE(params.size() == static_cast<std::size_t>(2 * piece.layers.size()));
      for (std::size_t i = 0; i < params.size(); ++i)
        CHECK(params[i].equal(full_params[static_cast<std::size_t>(2 * piece.layers.begin) + i]));
      layers_seen += piece.layers.size();
    }
  }
  CHECK(layers_seen == model.config.layers);
}

}  // namespace

TEST_CASE("each rank builds only its layers, with the monolith's initial weights") {
  check_pieces_match_monolith<mpp::Uniform<2>>(1);
  check_pieces_match_monolith<mpp::Uniform<4>>(1);
  check_pieces_match_monolith<mpp::Explicit<3, 2, 2, 1>>(1);
  check_pieces_match_monolith<mpp::ByParams<3>>(1);
  check_pieces_match_monolith<mpp::Recompute<mpp::Uniform<2>>>(1);
  check_pieces_match_monolith<mpp::Uniform<2>>(
      2);  // interleaved: chunk c of rank r is piece 2c + r
  check_pieces_match_monolith<mpp::Explicit<2, 2, 2, 2>>(2);
}

TEST_CASE("a rank outside the partition is rejected") {
  const mpp::MlpModel model{{.hidden = 8, .layers = 4}};
  CHECK_THROWS_WITH_AS(
      mpp::build_local_pieces<mpp::Uniform<2>>(model, 2, 1),
      "mpp: rank 2 is not a rank of Uniform<2> (2 ranks); launch 2 ranks per pipeline",
      mpp::PartitionError);
}
