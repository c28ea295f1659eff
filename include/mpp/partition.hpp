#pragma once
// Partition policies: which layers each pipeline stage owns, and building only the local ones.
#include "mpp/partition/by_params.hpp"
#include "mpp/partition/concepts.hpp"
#include "mpp/partition/errors.hpp"
#include "mpp/partition/explicit.hpp"
#include "mpp/partition/layer_range.hpp"
#include "mpp/partition/model.hpp"
#include "mpp/partition/recompute.hpp"
#include "mpp/partition/uniform.hpp"
