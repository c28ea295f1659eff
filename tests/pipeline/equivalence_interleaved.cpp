// Interleaved1F1B<4,2>: every comm policy x partition x Recompute at 2 and 4 stages equals the
// monolith.
#include "equivalence.hpp"

MPP_PIPELINE_EQUIVALENCE("Interleaved1F1B<4,2>", mpp::Interleaved1F1B<4, 2>)
