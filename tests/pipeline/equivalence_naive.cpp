// Naive: every comm policy x partition x Recompute at 2 and 4 stages equals the monolith.
#include "equivalence.hpp"

MPP_PIPELINE_EQUIVALENCE("Naive", mpp::Naive)
